"""Jinja filters that stage train.yml's inputs (-e data=PATH, -e model=DIR) on the hosts: the
controller sends each once, to the launch host, which sends it on to the others over the job's
network, all at once, each file as it arrives; a host whose copy matches the controller's
manifest gets nothing (tasks/stage_inputs.yml, files/staging.py). Unit-tested in
tests/unit/test_launch_staging.py.

A staged input is {rel: its path under the work dir (data/<name>, models/<name>), src: the
controller's path, dir: whether it is a directory}; a manifest {file: [size, mtime, sha256]}. A
Hugging Face model is fetched once, by the launch host (which stages it there as it fetches it) or
the controller, and staged like a directory.
"""

import json
import posixpath
import shlex

# rsync's flags, each also in macOS' openrsync (/usr/bin/rsync from macOS 15.4; checked against
# its manual pages of macOS 15 and later): -r, -t (the mtimes, which the quick check and the
# manifests compare), -L (the files symlinks point to: a Hugging Face snapshot is symlinks into its
# blobs), --delete (a file gone from the controller goes from the hosts), --timeout (a stalled
# transfer ends), --partial (an interrupted transfer keeps what arrived of a file, which the next
# launch's rsync completes instead of sending it again). Not -p (the controller's modes:
# files/staging.py makes the copies private), nor --chmod, -s, --out-format or --partial-dir,
# which the first macOS 15 openrsync lacks (hence no ansible.posix.synchronize here: it always
# passes --out-format).
RSYNC_FLAGS = ("-r", "-t", "-L", "--delete", "--timeout=60", "--partial")
# ssh options of every transfer: never a prompt (a password, an unknown host key) but an error.
SSH_OPTIONS = ("-o", "BatchMode=yes")
# The launch host's ssh to the others: the mesh's key and pinned host keys (~/.ssh/config).
MESH_SSH = ("ssh", *SSH_OPTIONS, "-o", "StrictHostKeyChecking=yes")
SHOWN_PROBLEMS = 3
# A file whose size and mtime are the controller's but whose recorded sha256 is not (or was never
# recorded): rsync's quick check would skip it, so its transfer compares checksums (-c, also in
# openrsync), reading that input whole on both ends.
UNVERIFIED = "not verified"
# A file on a host that the controller's copy lacks.
EXTRA = "not on the controller"


def staging_hub_rel(repo):
    """Where a Hugging Face model is staged under the work dir: models/<owner>--<name>, the
    cache's own spelling (a name holds no '--')."""
    return "models/" + repo.replace("/", "--")


def staging_hub_revision(runs, run, repo):
    """The revision to fetch repo at: for a resumed run (run: its name; runs: the supervisor's
    status of the cluster's runs), the commit its job.json records for that repo, so it trains on
    the same weights whatever the hub has now; else "", the default branch as it is now."""
    recorded = next((r.get("hub_model") for r in runs if r["run"] == run), None) or {}
    return recorded["revision"] if recorded.get("repo") == repo else ""


def _file_problems(expected, found):
    present = found["files"]
    recorded = found["manifest"] or {}
    problems = []
    for name, (size, mtime, digest) in sorted(expected.items()):
        now = present.get(name)
        if now is None:
            problems.append(f"{name} missing")
        elif now[0] != size:
            problems.append(f"{name} has {now[0]} bytes, {size} on the controller")
        elif now[1] != mtime:
            problems.append(f"{name} modified at another time than on the controller")
        elif recorded.get(name) != [size, mtime, digest]:
            problems.append(f"{name} {UNVERIFIED}")
    extra = sorted(set(present) - set(expected))
    return problems + [f"{name} {EXTRA}" for name in extra]


def _without(entries, names):
    return {name: entry for name, entry in entries.items() if name not in names}


def staging_stale(manifests, report, skipped=None):
    """{rel: [what differs]} of the inputs whose copy on this host differs from the controller's
    manifest (manifests: {rel: manifest}); report: what files/staging.py report printed there
    (None: it could not tell, so everything is sent). Compares sizes and mtimes, as rsync's quick
    check does, and the sha256 the host recorded after its last transfer: nothing is read.
    skipped: {rel: its files this host is not sent} (a pipeline's other stages' weights),
    neither missing nor extra there."""
    stale = {}
    for rel, expected in manifests.items():
        left = set((skipped or {}).get(rel, ()))
        found = (report or {}).get(rel)
        problems = (_file_problems(_without(expected, left),
                                   {**found, "files": _without(found["files"], left)})
                    if found and found["files"] else ["not there"])
        if problems:
            stale[rel] = problems
    return stale


def staging_rsync_error(probed, host):
    """The message for a host whose `rsync --version` (preflight's probe, a concurrent_commands
    result; None when nothing is staged) failed, or ''."""
    if not probed or probed["rc"] == 0:
        return ""
    why = (probed.get("msg") or probed.get("stderr") or f"exit {probed['rc']}").strip()
    return (f"{host} has no rsync ({why[-200:]}), which -e data and -e model travel with — "
            "install it there (setup.yml --tags python_env does on Linux; macOS ships it), "
            "then run train.yml again")


def staging_stale_lines(stale):
    """One line per input that differs: the first few differences, and how many more."""
    lines = []
    for rel, problems in stale.items():
        more = len(problems) - SHOWN_PROBLEMS
        shown = "; ".join(problems[:SHOWN_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
        lines.append(f"{rel}: {shown}: sending it again")
    return lines


def staging_stale_names(ranked_vars):
    """{host: its staging_stale_lines} of the ranked hosts (their variables) whose copies differ
    (their fact launch_stale), for staging_transfer to show."""
    return {hv["inventory_hostname"]: staging_stale_lines(hv["launch_stale"])
            for hv in ranked_vars if hv["launch_stale"]}


def staging_remote_path(info, rel):
    """Where rel lies on a host (info: its cluster_host_info), as rsync's remote path: relative
    to the login's home when the work dir is under it, so a space in the home needs no quoting
    (the remote shell splits an rsync path; rsync 3.2.4 and later do not)."""
    work_dir = info["work_dir"]
    home = info["home"].rstrip("/") + "/"
    base = work_dir[len(home):] if work_dir.startswith(home) else work_dir
    return posixpath.join(base, rel)


def staging_rsync_argv(src, dest, is_dir, rsh, problems=(), skipped=(), into=""):
    """rsync src (a local path) to dest (host:path), a directory's contents into dest; problems:
    what differs there (staging_stale); skipped: files of the directory not sent, which --delete
    leaves there too (--exclude; /: the directory's own, no pattern in a weight file's name).
    openrsync does the same (kristapsdz/openrsync 8235c68, with Apple's changes: rules.c anchors
    a leading / at the transfer's root, the client sends its rules when --delete is on, and
    flist.c's deletion skips what they exclude). into: the directory on the host that dest goes
    into (under the login's home, where the remote shell starts), which the remote rsync makes
    first, private, as files/staging.py prepare does (--rsync-path, in openrsync since its first
    release): a transfer needs no round over the hosts before it."""
    if is_dir:
        src, dest = src.rstrip("/") + "/", dest.rstrip("/") + "/"
    checksum = ["-c"] if any(p.endswith(UNVERIFIED) for p in problems) else []
    excluded = [f"--exclude=/{name}" for name in skipped]
    made = shlex.quote(into)
    makes = [f"--rsync-path=mkdir -p -- {made} && chmod 700 -- {made} && rsync"] if into else []
    return ["rsync", *RSYNC_FLAGS, *checksum, *excluded, *makes, "-e", rsh, src, dest]


def _host_word(address):
    return f"[{address}]" if ":" in address else address  # an IPv6 literal


def staging_ssh_command(hostvars):
    """The ssh command line rsync runs on the controller to reach a host as Ansible reaches it
    (hostvars: that host's variables): its ansible_user, ansible_port, key and ssh arguments."""
    argv = ["ssh", *SSH_OPTIONS]
    if hostvars.get("ansible_port"):
        argv += ["-p", str(hostvars["ansible_port"])]
    if hostvars.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hostvars["ansible_ssh_private_key_file"])]
    if hostvars.get("ansible_user"):
        argv += ["-l", str(hostvars["ansible_user"])]
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(hostvars.get(name) or "")
    return shlex.join(argv)


def _is_local(hostvars):
    """Whether Ansible runs on the controller itself for that host (make demo's inventory)."""
    return hostvars.get("ansible_connection") == "local"


def _address(hostvars):
    return str(hostvars.get("ansible_host") or hostvars["inventory_hostname"])


def staging_controller_argv(staged, rel, problems, hostvars, info, fetched=None):
    """The controller's rsync of input rel to the launch host (problems: what differs there;
    hostvars, info: its variables and cluster_host_info), over the ssh Ansible uses, or a local
    copy when Ansible runs there. fetched: what the controller's fetch of a Hugging Face model
    found ({revision, path, manifest}): its path is the src of a staged hub model (the launch
    plan knows none before the fetch)."""
    item = next(s for s in staged if s["rel"] == rel)
    if item.get("hub") and fetched:
        item = {**item, "src": fetched["path"]}
    if _is_local(hostvars):  # the launch host: staging_transfer makes the directories
        dest, into = posixpath.join(info["work_dir"], rel), ""
    else:
        path = staging_remote_path(info, rel)
        dest, into = f"{_host_word(_address(hostvars))}:{path}", posixpath.dirname(path)
    return staging_rsync_argv(item["src"], dest, item["dir"], staging_ssh_command(hostvars),
                              problems, into=into)


def staging_controller_commands(staged, stale, hostvars, info, fetched=None):
    """The controller's rsyncs to the launch host of the inputs it lacks (stale: its fact
    launch_stale), one after another (staging_transfer's sends); fetched: as for
    staging_controller_argv. To a launch host Ansible runs on locally, each names the input for
    staging_transfer to make its private directory first (files/staging.py prepare's
    arguments)."""
    local = _is_local(hostvars)
    return [{"item": {"host": hostvars["inventory_hostname"], "rel": rel, "from": "the controller"},
             "argv": staging_controller_argv(staged, rel, problems, hostvars, info, fetched),
             **({"prepare": [info["work_dir"], [rel]]} if local else {})}
            for rel, problems in stale.items()]


def _fanout_addresses(hosts, cables):
    """{host: the address the launch host sends it inputs to}: its MPI address, or over the
    cables topology its end of the first cable from the launch host (cables: the launch host's
    ends, cluster_cable_plan)."""
    cabled = {end["peer"]: end["peer_address"] for end in reversed(cables)}
    return {h["name"]: cabled.get(h["name"], h["mpi_address"]) for h in hosts}


def staging_fanout_commands(staged, ranked_vars, hosts, launch_host, cables=()):
    """The launch host's transfers (files/staging.py relay runs them, in its work dir, once it
    passed on what arrived): an rsync of each input another host lacks (its fact launch_stale)
    from the launch host's copy to that host's MPI address, or over the cables topology to its
    end of the first cable from the launch host (cables: the launch host's ends,
    cluster_cable_plan), over the ssh mesh (its key and pinned host keys, from ~/.ssh/config), all
    at once; whole: whether that host's copy is the controller's once the relay delivered its
    every file (no file there the controller lacks, which only rsync --delete removes).
    ranked_vars: the ranked hosts' variables; hosts: cluster_host_list."""
    addresses = _fanout_addresses(hosts, cables)
    is_dir = {s["rel"]: s["dir"] for s in staged}
    rsh = shlex.join(MESH_SSH)
    commands = []
    for hv in ranked_vars:
        host = hv["inventory_hostname"]
        for rel, problems in hv["launch_stale"].items() if host != launch_host else ():
            path = staging_remote_path(hv["cluster_host_info"], rel)
            dest = f"{_host_word(addresses[host])}:{path}"
            skipped = hv["launch_plan"]["skipped"].get(rel, [])
            commands.append({"item": {"host": host, "rel": rel, "from": launch_host},
                             "argv": staging_rsync_argv(rel, dest, is_dir[rel], rsh, problems,
                                                        skipped, posixpath.dirname(path)),
                             "whole": not any(p.endswith(EXTRA) for p in problems)})
    return commands


def _on_host(hostvars, script, action, arg):
    """The command the controller runs to run files/staging.py (its source `script`) `action`
    on a host (hostvars: its variables) with the host's Python, over the ssh Ansible uses, or
    here when Ansible runs here."""
    info = hostvars["cluster_host_info"]
    argv = [posixpath.join(info["python_env"], "bin", "python"), "-c", script, action,
            info["work_dir"], json.dumps(arg)]
    if _is_local(hostvars):
        return argv
    return [*shlex.split(staging_ssh_command(hostvars)), _address(hostvars), shlex.join(argv)]


def staging_relay_argv(staged, ranked_vars, hosts, hostvars, manifests, commands, script,
                       cables=()):
    """The command the controller runs, while it sends the launch host (hostvars: its variables)
    the inputs it lacks (its launch_stale), for the launch host to pass each file on as it
    arrives (files/staging.py relay, with its source `script`) to the other hosts whose copy of
    that input differs, over the addresses staging_fanout_commands sends to, then to run its
    rsyncs (commands: staging_fanout_commands) of what they did not get whole; [] when there is
    nothing to send on. ranked_vars, hosts, cables: as for staging_fanout_commands; manifests:
    the controller's."""
    launch_host, arriving = hostvars["inventory_hostname"], hostvars["launch_stale"]
    addresses = _fanout_addresses(hosts, cables)
    receivers = [{"host": hv["inventory_hostname"],
                  "argv": [*MESH_SSH, _host_word(addresses[hv["inventory_hostname"]])],
                  "python": posixpath.join(hv["cluster_host_info"]["python_env"], "bin", "python"),
                  "work_dir": hv["cluster_host_info"]["work_dir"],
                  "rels": [rel for rel in hv["launch_stale"] if rel in arriving],
                  "skipped": hv["launch_plan"]["skipped"]}
                 for hv in ranked_vars if hv["inventory_hostname"] != launch_host]
    receivers = [r for r in receivers if r["rels"]]
    if not receivers and not commands:
        return []
    is_dir = {s["rel"]: s["dir"] for s in staged}
    # Not a file there already with the controller's size and mtime but not verified: rsync -c
    # leaves it in place when it is the controller's, and the relay would send it all.
    paths = {rel: {name: posixpath.join(rel, name) if is_dir[rel] else rel
                   for name in manifests[rel] if f"{name} {UNVERIFIED}" not in problems}
             for rel, problems in arriving.items()} if receivers else {}
    spec = {"script": script, "launch_host": launch_host,
            "manifests": {rel: manifests[rel] for rel in paths},
            "paths": paths, "hosts": receivers, "commands": list(commands)}
    return _on_host(hostvars, script, "relay", spec)


def staging_watch_commands(ranked_vars, manifests, script):
    """{host: {argv, totals, record, skipped}} for every ranked host that lacks inputs (its fact
    launch_stale): the command the controller runs to read what arrived there (files/staging.py
    received, its source `script`, with that host's Python, over the ssh Ansible uses) and each
    input's size, for staging_transfer's progress; the one that hashes its copies after the
    transfer and records their manifests (record), and its files not sent (launch_plan.skipped)."""
    watch = {}
    for hv in ranked_vars:
        rels, skipped = list(hv["launch_stale"]), hv["launch_plan"]["skipped"]
        if not rels:
            continue
        watch[hv["inventory_hostname"]] = {
            "argv": _on_host(hv, script, "received", rels),
            "record": _on_host(hv, script, "record", rels), "skipped": skipped,
            "totals": {rel: sum(entry[0] for entry in _without(manifests[rel],
                                                               skipped.get(rel, ())).values())
                       for rel in rels}}
    return watch


class FilterModule:
    def filters(self):
        return {
            "staging_controller_commands": staging_controller_commands,
            "staging_fanout_commands": staging_fanout_commands,
            "staging_relay_argv": staging_relay_argv,
            "staging_watch_commands": staging_watch_commands,
            "staging_hub_rel": staging_hub_rel,
            "staging_hub_revision": staging_hub_revision,
            "staging_stale_names": staging_stale_names,
            "staging_rsync_error": staging_rsync_error,
            "staging_remote_path": staging_remote_path,
            "staging_rsync_argv": staging_rsync_argv,
            "staging_ssh_command": staging_ssh_command,
            "staging_stale": staging_stale,
        }
