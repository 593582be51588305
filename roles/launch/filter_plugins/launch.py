"""Jinja filters that plan and judge a training launch (roles/launch, playbooks/train.yml).

Pure functions over plain data (cluster_hosts entries plus per-host facts), unit-tested in
tests/unit/test_launch_filters.py. The mpirun part of the command comes from the shared mpi.py's
mpirun_argv; these filters add what is specific to running `python -m train`.

A request is one dict under the names users type with -e (the `request` options of
meta/argument_specs.yml). Each option reaches one consumer under its own name: the supervisor's
(files/supervisor.py: its job options, stall_timeout -> --stall-timeout, checked and defaulted
there), the play's own (PLAY_OPTIONS), and every other one python -m train as the flag of the
same name (grad_bucket_bytes -> --grad-bucket-bytes); so a new option needs no code here.
"""

import argparse
import os
import posixpath
import re
import shlex

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

supervisor = load("roles/launch/files/supervisor.py")

BACKENDS = ("mpi", "ring", "jaccl", "jaccl-ring")
# Who fetches a Hugging Face model (tasks/fetch_hub.yml).
MODEL_SOURCES = ("launch_host", "controller")
# Backends mlx.launch starts (with a hosts.json): one rank per slot of the hostfile, no mpirun.
MLX_LAUNCHED = ("ring", "jaccl", "jaccl-ring")
# Options the play itself reads; the supervisor's are its job options (their names and defaults,
# supervisor.py's); every other request option is a `python -m train` flag.
PLAY_OPTIONS = ("run_name", "np", "backend", "network", "mpi_extra_args",
                "mpi_allreduce_rules", "follow_reconnect", "attach", "stop", "status",
                "model_source")
SUPERVISOR_OPTIONS = tuple(supervisor.settle([]))
LAUNCHER_OPTIONS = PLAY_OPTIONS + SUPERVISOR_OPTIONS
# python -m train's flags that train.yml sets itself, and what to do instead: a settings file
# shared with python -m train (-e @run.yml) may hold them, and nothing would read them.
SET_BY_TRAIN_YML = {"out": "train.yml writes the run to runs/<run_name>/: give run_name instead",
                    "heartbeat": "train.yml gives each rank its own for the supervisor: leave it "
                                 "out",
                    "check": "train.yml runs the check itself: leave it out",
                    "config": "give train.yml the file itself: -e @run.yml"}
# A Hugging Face repo id with its owner, as huggingface_hub's validate_repo_id takes it: each part
# starts and ends with a letter or digit, and neither holds '--' nor '..'.
HUB_REPO = re.compile(r"(?!.*(--|\.\.))\w(?:[\w.-]*\w)?/\w(?:[\w.-]*\w)?")
# fullmatch: `$` alone would let a trailing line break through (it breaks command.sh).
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# Characters of any one value: more is a slip (a pasted file), not a path or a command.
VALUE_MAX = 4096
# The play's numbers: (least, most) — far beyond a real run, low enough to catch a slip.
PLAY_NUMBERS = {"follow_reconnect": (0, 86400)}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Environment variable that holds a process's rank under each launcher.
RANK_VARIABLE = "${OMPI_COMM_WORLD_RANK:-$MLX_RANK}"
# Open MPI's all-reduce by message size (train/openmpi-allreduce.rules, installed with the train
# package on every host): its tuned collectives read these parameters from each rank's
# environment (docs/training.md).
OPENMPI_RULES = "openmpi-allreduce.rules"
OPENMPI_RULES_ENV = ("OMPI_MCA_coll_tuned_use_dynamic_rules=1 "
                     "OMPI_MCA_coll_tuned_dynamic_rules_filename=")
TAIL_LINES = 15


# The one "did you mean" of train.yml's extra vars and python -m train's --config keys.
spelling = load("train/spelling.py")


# ---------------------------------------------------------------- request validation


def _given(value):
    return value is not None and value != "" and value != []


def _int(value, minimum, maximum=None):
    """int in [minimum, maximum] from an int or a digit string (extra vars arrive as strings),
    else None."""
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if minimum <= number <= (maximum or number) else None


_shown = supervisor.shown  # a value as every message quotes it


def _bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off", ""):
        return False
    return None


def launch_extra_args(value):
    """mpi_extra_args as a list: a string is split like a shell would."""
    if not _given(value):
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(arg) for arg in value]


def launch_request(spec, values):
    """The request: {option: the value given with -e, else the spec's default, else None}.

    spec: the `request` options of meta/argument_specs.yml; values: the extra vars in that order.
    A bool option given as text ("true", "no") becomes a bool, and so does status given as one
    (else it names a run); a bad value is left for launch_request_errors to name. `data` and a
    `model` directory are the controller's paths: `~` and relative paths are resolved here,
    where the user typed them (zsh leaves the `~` of `-e data=~/x` alone, and Ansible would look
    for a relative path in the role's files/).
    """
    request = {}
    for (name, option), value in zip(spec.items(), values, strict=True):
        value = value if _given(value) else option.get("default")
        if (option.get("type") == "bool" or name == "status") and _bool(value) is not None:
            value = _bool(value)
        if isinstance(value, str) and not value.startswith("-") and (
                name == "data" or name == "model" and _looks_like_path(value)):
            value = os.path.abspath(os.path.expanduser(value))
        request[name] = value
    return request


def _looks_like_path(model):
    """A model given as a path rather than a built-in name or a Hugging Face repo id."""
    return model.startswith(("/", "~", ".")) or os.path.isdir(model)


def launch_hub_repo(model):
    """The Hugging Face repo id the request's model is (fetched once and staged: stage_inputs.yml),
    or None: no model, a built-in, or a path on the controller."""
    if isinstance(model, str) and HUB_REPO.fullmatch(model) and not _looks_like_path(model):
        return model
    return None


def launch_unknown_options(names, spec):
    """Errors for variables that look like a misspelt train.yml option (-e batch-size=64 is a
    variable Ansible keeps and nothing reads; see train/spelling.py) or are a python -m train
    setting train.yml sets itself (SET_BY_TRAIN_YML). Ansible's own variables (ansible_*) are left
    alone; the inventory's and the roles' (role-prefixed, mpi_slots) are too far from any option
    to be taken for one (tests/unit/test_launch_filters.py checks every one).

    names: every variable name the play sees; spec: the `request` options.
    """
    errors = []
    for name in sorted(names):
        if name in spec or name.startswith("ansible_"):
            continue
        if name in SET_BY_TRAIN_YML:
            errors.append(f"{name}: python -m train's, not a train.yml option — "
                          f"{SET_BY_TRAIN_YML[name]}")
        elif meant := spelling.meant(name, spec):
            errors.append(f"{name}: not a train.yml option — did you mean "
                          f"{spelling.either(meant)}? (-e {meant[0]}=...)")
    return errors


def launch_split_value_errors(raw_params):
    """An -e value with spaces that Ansible split: `-e "command=python -m x"` gives command
    `python` and keeps the rest as _raw_params, which nothing reads. raw_params: that variable
    ('' when Ansible made none)."""
    if not _given(raw_params):
        return []
    return [f"_raw_params: Ansible split {_shown(raw_params)} off an -e value with spaces, so "
            "the option before it got only its first word — quote the value inside the -e: "
            "-e \"command='python -m mlx_lm lora --train'\", -e \"run_name='my-run'\" (or give "
            "-e a JSON object: -e '{\"command\": \"python -m ...\"}')"]


def launch_train_check_error(output):
    """python -m train --check's error under the names users type: `argument --batch-size: x`
    becomes `batch_size: x`. output: its stderr, perhaps followed by validate.yml's `exit N`."""
    output = re.sub(r"\nexit \d+\s*$", "", "\n" + output).strip()
    lines = [line for line in output.splitlines() if line.startswith("train: error: ")]
    text = lines[-1][len("train: error: "):] if lines else output
    text = re.sub(r"^argument --([a-z-]+)(/-\w)?:", lambda m: m[1].replace("-", "_") + ":", text)
    return re.sub(r"(?<![\w'])--([a-z]+(-[a-z]+)*)", lambda m: m[1].replace("-", "_"), text)


def launch_trackers_error(probed, host):
    """python -m train --check's refusal of report_to in a host's environment (a tracker's
    package missing there: preflight's probe, None without report_to), naming the host; or ''."""
    if not probed or probed["rc"] == 0:
        return ""
    why = probed.get("stderr") or probed.get("msg") or f"exit {probed['rc']}"
    return f"{host}: {launch_train_check_error(why)}"


def launch_np(value, hosts):
    """Ranks to start: the np the user gave, else every slot of the cluster."""
    total = sum(h["slots"] for h in hosts)
    return _int(value, 1) if _given(value) else total


def launch_request_errors(request, hosts, topology="bridge"):
    """Every problem with the launcher's options of a train.yml request, one message per variable
    with its fix. The training options are python -m train's to judge (its --check).

    request: the extra vars (None = not given) under the names users pass with -e.
    hosts: cluster_hosts entries; topology: thunderbolt_topology (what the cables allow is
    cable_backend_errors' to say). An empty list means the request can be launched.
    """
    errors = []
    for name, value in request.items():  # first: a huge value is named, never echoed
        if _given(value) and len(str(value)) > VALUE_MAX:
            errors.append(f"{name}: {len(str(value))} characters, more than a value can have "
                          f"({VALUE_MAX}) — give the path, name or command itself")
    request = {name: value for name, value in request.items()
               if not (_given(value) and len(str(value)) > VALUE_MAX)}
    for name, (minimum, maximum) in PLAY_NUMBERS.items():
        value = request.get(name)
        if _given(value) and _int(value, minimum, maximum) is None:
            errors.append(f"{name}: {_shown(value)} is not an integer from {minimum} to "
                          f"{maximum} — e.g. -e {name}={max(minimum, 1)}0")
    for name in ("resume", "elastic"):
        if _given(request.get(name)) and _bool(request[name]) is None:
            errors.append(f"{name}: {_shown(request[name])} is not true or false — e.g. "
                          f"-e {name}=true")
    errors += _supervisor_errors(request)
    runs = [n for n in ("attach", "stop") if _given(request.get(n))]
    status = request.get("status")
    if _given(status) and _bool(status) is None and not RUN_NAME.fullmatch(str(status)):
        errors.append(f"status: {_shown(status)} is not true, false or a run name — e.g. "
                      "-e status=true")
    for name in runs:
        if not RUN_NAME.fullmatch(str(request[name])):
            errors.append(f"{name}: {_shown(request[name])} is not a run name — see "
                          "-e status=true")
    if len(runs) + (_given(status) and _bool(status) is not False) > 1:
        errors.append("attach, stop and status: give one of them at a time — e.g. "
                      "-e stop=<run> alone")
    run_name = request.get("run_name")
    if _given(run_name) and not RUN_NAME.fullmatch(str(run_name)):
        errors.append(
            f"run_name: {_shown(run_name)} is not a plain directory name — use letters, digits, "
            "'.', '_' and '-' (no spaces or line breaks), starting with a letter or digit"
        )
    backend = request.get("backend")
    if _given(backend) and backend not in BACKENDS:
        errors.append(
            f"backend: {_shown(backend)} is not one of {', '.join(BACKENDS)} — e.g. -e backend=ring"
        )
    if backend in ("jaccl", "jaccl-ring") and topology != "cables":
        errors.append(f"backend: {backend} runs over RDMA between Macs cabled point to point, "
                      "with the Thunderbolt Bridge off — set thunderbolt_topology: cables "
                      "(docs/cabling.md) and run setup.yml, or use -e backend=ring or mpi")
    source = request.get("model_source")
    if _given(source) and source not in MODEL_SOURCES:
        errors.append(f"model_source: {_shown(source)} is not one of {', '.join(MODEL_SOURCES)} — "
                      "e.g. -e model_source=controller when the hosts are offline")
    elif source == "controller" and not launch_hub_repo(request.get("model")):
        errors.append("model_source: controller fetches a Hugging Face model (model=owner/name), "
                      f"not {_shown(request.get('model'))} — leave model_source out")
    errors += _np_errors(request, hosts, backend or "mpi")
    if _bool(request.get("elastic")) and backend in MLX_LAUNCHED:
        errors.append("elastic: only the mpi backend can go on without a host — use "
                      "backend=mpi, or drop elastic")
    elif _bool(request.get("elastic")) and request.get("parallel") == "pipeline":
        # Fewer ranks would split the layers anew, and no stage's checkpoint would fit it.
        errors.append("elastic: a pipeline cannot go on without a host (each holds its stages' "
                      "layers) — drop elastic, or use parallel=data")
    extra = request.get("mpi_extra_args")
    if _given(extra):
        if backend in MLX_LAUNCHED:
            errors.append(
                "mpi_extra_args: only the mpi backend runs mpirun — drop it or use backend=mpi"
            )
        elif not isinstance(extra, (str, list)):
            errors.append(f"mpi_extra_args: {_shown(extra)} must be a string or a list of strings")
        else:
            try:
                launch_extra_args(extra)
            except ValueError as e:
                errors.append(f"mpi_extra_args: {_shown(extra)} cannot be split like a shell would "
                              f"({e}) — quote it as you would in a shell, or give a YAML list")
    return errors


def _supervisor_errors(request):
    """The supervisor's judgement of its options (supervisor.settle, its argparse), in the
    words of train.yml: `argument --time-limit: '0' ... e.g. --time-limit=10` becomes
    `time_limit: 0 ... e.g. -e time_limit=10`, the value shown as the user gave it."""
    try:
        supervisor.settle(launch_supervisor_args(request))
    except argparse.ArgumentError as e:
        name = e.argument_name.lstrip("-").replace("-", "_")
        words = str(e).partition(": ")[2].removeprefix(_shown(str(request[name])))
        words = re.sub(r"(?<![\w-])--([a-z]+(?:-[a-z]+)*)=",
                       lambda m: "-e " + m[1].replace("-", "_") + "=", words)
        return [f"{name}: {_shown(request[name])}{words}"]
    return []


def launch_supervisor_settings(request):
    """The supervisor's options of a valid request, those not given with the supervisor's
    defaults (the one statement of them): {option: value}, to combine into the request."""
    settled = supervisor.settle(launch_supervisor_args(request))
    return {name: value for name, value in settled.items()
            if value is not None and not _given(request.get(name))}


def _np_errors(request, hosts, backend):
    slots = ", ".join(f"{h['name']}: {h['slots']}" for h in hosts if h["slots"] > 0)
    total = sum(h["slots"] for h in hosts)
    value = request.get("np")
    if not _given(value):
        return []
    np = _int(value, 1)
    if np is None:
        return [f"np: {_shown(value)} is not a positive integer — e.g. -e np={total}, or leave "
                "it out"]
    if backend in MLX_LAUNCHED and np != total:
        return [
            f"np: the {backend} backend starts one rank per slot of its hostfile ({total}; "
            f"{slots}), not {np} — leave np out, or change mpi_slots and re-run setup.yml"
        ]
    if np > total:
        return [
            f"np: {np} ranks but the cluster has only {total} slots ({slots}) — lower np, or "
            "raise mpi_slots in the inventory and re-run setup.yml"
        ]
    return []


def launch_path_name(path):
    """Last component of a path, also for a directory given with a trailing slash."""
    return posixpath.basename(str(path).rstrip("/"))


def launch_run_name(model, stamp):
    """Default run name: the model's last path component and a timestamp."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", launch_path_name(model or "train"))
    return f"{base.strip('.-') or 'train'}-{stamp}"


def launch_host_errors(probe_results, host, hostfile, hostfile_problems, runs, mlx_launch=None):
    """What keeps the launch host from starting a job, a message each with its fix: the hostfile
    (missing, or not the inventory's), the hosts it cannot ssh to, a job already running, and
    for the ring backend a missing mlx.launch (mlx_launch: its path; None for the mpi backend).

    probe_results: preflight's concurrent_commands results (by name: hostfile, mlx_launch; each
    ssh login has its host as item); hostfile_problems: how the hostfile differs from the
    inventory; runs: the supervisor's status of the cluster's runs.
    """
    probed = {r["item"]: r for r in probe_results if isinstance(r.get("item"), str)}
    errors = []
    if probed["hostfile"]["rc"] != 0:
        why = probed["hostfile"]["stderr"].strip()
        errors.append(f"{hostfile} is missing on {host} ({why}) — run ansible-playbook "
                      "setup.yml (with the same inventory) before train.yml")
    elif hostfile_problems:
        errors.append(f"{hostfile} does not match the inventory ({'; '.join(hostfile_problems)})"
                      " — re-run setup.yml to render it again")
    unreached = [r for r in probe_results if isinstance(r.get("item"), dict) and r["rc"] != 0]
    if unreached:
        listing = "; ".join(f"{r['item']['name']} / {r['item']['mpi_address']} / "
                            f"{r['stderr'].strip()}" for r in unreached)
        errors.append(f"{host} cannot ssh -o BatchMode=yes to {listing} — check the cable and "
                      "that host's bridge0 address, then re-run setup.yml (ssh_mesh)")
    # A lost job (no supervisor) whose launcher runs on still holds the hosts and its run.
    running = [r for r in runs if r["state"] not in ("finished", "stopped", "failed", "lost")
               or r["state"] == "lost" and r.get("launcher_running")]
    if running:
        run = running[0]
        state = (f"lost ({run['reason']}) but its launcher still runs" if run["state"] == "lost"
                 else run["state"])
        errors.append(f"run {run['run']} is {state} on this cluster (step "
                      f"{run.get('last_step') or 0}): one job at a time — follow it with "
                      f"ansible-playbook train.yml -e attach={run['run']}, or stop it with "
                      f"-e stop={run['run']}")
    if mlx_launch and probed["mlx_launch"]["rc"] != 0:
        env = posixpath.dirname(posixpath.dirname(mlx_launch))
        errors.append(f"{mlx_launch} is missing — re-run setup.yml to install mlx in {env}")
    return errors


# ---------------------------------------------------------------- per-host consistency


def launch_consistency_errors(infos, layout, backend="mpi"):
    """Hosts that would run a different Open MPI or train/ package than the others.

    infos: per ranked host {name, openmpi_error (openmpi_probe_error, '' when mpirun ran),
    openmpi_version, openmpi_prefix, train_diff (tree_diff of its train/ against the
    controller's)}; layout: cluster_layout of the ranked hosts.
    """
    errors = []
    if layout["error"]:
        errors.append(layout["error"])
    broken = [i["openmpi_error"] for i in infos if i.get("openmpi_error")]
    if backend == "mpi" and broken:
        errors += broken  # nothing to compare on those hosts
    elif backend == "mpi":
        for key, what in (("openmpi_version", "Open MPI version"),
                          ("openmpi_prefix", "Open MPI prefix")):
            values = {i[key] for i in infos}
            if len(values) > 1:
                listing = ", ".join(f"{i['name']}: {i[key]}" for i in infos)
                errors.append(
                    f"{what} differs between hosts ({listing}) — mpirun starts its daemons from "
                    "one prefix and mixed versions break the wire protocol; install the same "
                    "Open MPI everywhere (re-run setup.yml)"
                )
    errors += _version_errors(infos)
    stale = {i["name"]: i["train_diff"] for i in infos if i["train_diff"]}
    if stale:
        listing = "; ".join(f"{name}: {', '.join(diff[:3])}" for name, diff in stale.items())
        errors.append(
            f"train/ package on {', '.join(stale)} differs from the controller's train/ "
            f"({listing}) — re-run setup.yml to install it on every host"
        )
    return errors


def _version_errors(infos):
    """Hosts whose Python or shared packages (cluster_host_versions) differ from the others'."""
    unreadable = [i["name"] for i in infos if not i.get("versions")]
    if unreadable:
        return [f"the Python environment on {', '.join(unreadable)} could not be read — re-run "
                "setup.yml to create it"]
    errors = []
    names = ["python", *infos[0]["versions"]["packages"]]
    for name in names:
        found = {i["name"]: (i["versions"]["python"] if name == "python"
                             else i["versions"]["packages"].get(name) or "missing")
                 for i in infos}
        values = list(found.values())
        if len(set(values)) > 1:
            usual = max(set(values), key=values.count)
            odd_hosts = [host for host, value in found.items() if value != usual]
            odd = ", ".join(f"{host}: {found[host]}" for host in odd_hosts)
            fix = (f"recreate the environment there with Python {usual}" if name == "python"
                   else "re-run ansible-playbook setup.yml, which puts every host on "
                   "requirements.lock's versions")
            errors.append(
                f"{name} differs between hosts ({odd}; the others: {usual}) — every rank must run "
                f"the same {name}: on {', '.join(odd_hosts)}, {fix}"
            )
    return errors


# ---------------------------------------------------------------- the command


def launch_train_args(request, heartbeat=None, data=None, model=None):
    """`python -m train` flags for the values the user gave (the package has defaults): each
    option that is not the launcher's, under its own name (batch_size -> --batch-size=...).
    `--flag=value` keeps a value that starts with '-' from being read as a flag.

    heartbeat: where each rank reports its step for the supervisor's watchdog ({rank} in it).
    data / model: the per-host path of a controller path copied to every host, if any.
    """
    args = []
    copied = {"data": data, "model": model}
    for name, given in request.items():
        value = copied.get(name) or given
        if name in LAUNCHER_OPTIONS or not _given(value) or value is False:
            continue
        if isinstance(value, list):  # report_to: [wandb, trackio]
            value = ",".join(map(str, value))
        flag = "--" + name.replace("_", "-")
        args.append(flag if value is True else f"{flag}={value}")
    if heartbeat:
        args.append(f"--heartbeat={heartbeat}")
    return args


def launch_supervisor_args(request, elastic=None):
    """`supervisor.py start` flags for the request's options that are the supervisor's, as
    launch_train_args writes train's (time_limit -> --time-limit=...).

    elastic: what --elastic carries when the request asks for elastic (the launcher's argv and
    the global batch, as JSON); left out without it.
    """
    args = []
    for name in SUPERVISOR_OPTIONS:
        value = request.get(name)
        if name == "elastic":
            value = elastic if _bool(value) else None
        if _given(value):
            args.append(f"--{name.replace('_', '-')}={value}")
    return args


def launch_rank_program(layout, run_rel, rules=None):
    """argv every rank runs: cd to this host's work dir, log to run_rel/logs/rank.N.log, exec
    Python with --out the run's absolute path on that host; with rules (launch_openmpi_rules),
    Open MPI's all-reduce follows that file, for python -m train and a --command program alike.

    A /bin/sh wrapper expands $HOME on each host (homes may differ) and picks the rank from
    the launcher's environment; "$@" keeps the train arguments exactly as given. The absolute
    --out lets the supervisor find the job's processes by that path and nothing else; umask 077
    keeps what the job writes (runs/, logs, checkpoints) private to the user on every host.
    On macOS `caffeinate -i -s -w <pid>` keeps the Mac awake (no idle or system sleep, the
    display may sleep) exactly as long as the rank runs; beside it, not in front of it, so the
    launcher still sees the rank's own exit status and signals.
    """
    run = shlex.quote(run_rel)
    script = (
        f"umask 077 && cd {layout['work_dir']} && mkdir -p {run}/logs && "
        "export PYTHONUNBUFFERED=1 && "
        + (f"export {OPENMPI_RULES_ENV}{rules} && " if rules else "")
        + "if command -v caffeinate >/dev/null; then "
        "caffeinate -i -s -w $$ </dev/null >/dev/null 2>&1 & fi && "
        f"exec {layout['python']} -m train --out \"$PWD\"/{run} \"$@\" "
        f">{run}/logs/rank.{RANK_VARIABLE}.log 2>&1"
    )
    return ["/bin/sh", "-c", script, "train"]


def launch_openmpi_rules(request, train_dirs, infos):
    """(the shell word by which each rank finds train's Open MPI rules, errors): None when the
    request turns them off (mpi_allreduce_rules=false) or sets a coll_tuned_* parameter itself
    (mpi_extra_args: then those decide alone).

    train_dirs: where each ranked host's environment imports train from (the probe's
    train_dir, None when it could not tell); infos: their cluster_host_info, in the same order.
    mpirun hands every rank one value, but homes differ (/Users/alice, /Users/bob): the word is
    the path relative to the work dir each rank's program has just entered ("$PWD"/...), or one
    absolute path; hosts where neither is the same get an error naming both fixes.
    """
    extra = launch_extra_args(request.get("mpi_extra_args"))
    if not _bool(request.get("mpi_allreduce_rules")) or any("coll_tuned_" in a for a in extra):
        return None, []
    unknown = [i["name"] for d, i in zip(train_dirs, infos, strict=True) if not d]
    if unknown:
        return None, [f"the train package on {', '.join(unknown)} could not be found — re-run "
                      "setup.yml to install it"]
    paths = [posixpath.join(d, OPENMPI_RULES) for d in train_dirs]
    rels = {posixpath.relpath(p, i["work_dir"]) if p.startswith(i["work_dir"].rstrip("/") + "/")
            else None for p, i in zip(paths, infos, strict=True)}
    if len(rels) == 1 and None not in rels:
        return '"$PWD"/' + shlex.quote(rels.pop()), []
    if len(set(paths)) == 1:
        return shlex.quote(paths[0]), []
    listing = ", ".join(f"{i['name']}: {p}" for p, i in zip(paths, infos, strict=True))
    return None, [f"train's Open MPI rules are at different places on the hosts ({listing}) — "
                  "set cluster_python_env to the same path, or the same path relative to each "
                  "work dir, on every host; or -e mpi_allreduce_rules=false"]


def launch_mpi_options(hosts, infos, np, hostfile, version, libmpi, interface, extra_args=None,
                       exclude=None):
    """Keyword arguments for mpi.py's mpirun_argv.

    interface, exclude: where Open MPI's traffic goes (the job's network: cluster_mpi_interface
    and cluster_mpi_exclude, i.e. the Thunderbolt interface, or over cables the pool or anything
    but it; or the management network's interface); they apply only when ranks talk across
    hosts. --allow-run-as-root only when a host logs in as root; MLX_MPI_LIBNAME travels with -x
    because macOS SIP strips DYLD_* variables through /bin/sh.
    """
    across = len([h for h in hosts if h["slots"] > 0]) > 1
    return {
        "hostfile": hostfile,
        "np": int(np),
        "version": version,
        "interface": interface if across else None,
        "exclude": exclude if across else None,
        "as_root": any(i["user"] == "root" for i in infos),
        "env": {"MLX_MPI_LIBNAME": libmpi},
        "extra_args": launch_extra_args(extra_args),
    }


def launch_mlx_argv(mlx_launch, hostfile, backend="ring"):
    """mlx.launch with its hostfile (hosts.json, or the jaccl one) and the backend; the caller
    appends the rank program."""
    return [str(mlx_launch), "--hostfile", str(hostfile), "--backend", str(backend), "--"]


def launch_shell_command(argv):
    """argv as one shell command, an option and its value per line, for command.sh."""
    groups = []
    for word in map(shlex.quote, map(str, argv)):
        option = groups and groups[-1].startswith("-") and " " not in groups[-1]
        if option and not word.startswith("-"):
            groups[-1] += " " + word
        else:
            groups.append(word)
    return " \\\n  ".join(groups)


def launch_rank_plan(rank_hosts, hosts, infos, launch_host, run_rel):
    """The supervisor's --rank-hosts: [{rank, host, address, mpi_address, run_dir}] — how the
    launch host reaches each rank's host ("local" for itself, else the MPI address the SSH mesh
    knows), the address in the hostfile, and where that rank writes its heartbeat (its host's
    work dir may differ)."""
    address = {h["name"]: h["mpi_address"] for h in hosts}
    work_dir = {i["name"]: i["work_dir"] for i in infos}
    return [
        {"rank": rank, "host": name, "address": "local" if name == launch_host else address[name],
         "mpi_address": address[name], "run_dir": posixpath.join(work_dir[name], run_rel)}
        for rank, name in enumerate(rank_hosts)
    ]


def launch_rank_hosts(hosts, np, order=None):
    """Inventory name of each rank: --map-by slot (and mlx.launch) fill hosts in hostfile order.
    order: the hostfile's host order when it is not the inventory's (over cables, ring and
    jaccl-ring rank the hosts in the ring's order; rank 0 stays the first host)."""
    if order:
        position = {name: i for i, name in enumerate(order)}
        hosts = sorted((h for h in hosts if h["name"] in position),
                       key=lambda h: position[h["name"]])
    names = [h["name"] for h in hosts for _ in range(h["slots"])]
    return names[: int(np)]


def launch_rdma_errors(infos, hostfile, rank_hosts):
    """Hosts that lack an RDMA device MLX's jaccl backends would open (their row of the jaccl
    hostfile's device matrix), one message each with the fix.

    infos: per ranked host {name, rdma_devices: what ibv_devices listed (rdma.py:
    ibv_device_names), or None when it could not run}; hostfile: mlx_hostfile for jaccl or
    jaccl-ring; rank_hosts: the inventory name of each of its ranks."""
    devices = {i["name"]: i.get("rdma_devices") for i in infos}
    errors = []
    for name, entry in zip(rank_hosts, hostfile["hosts"], strict=True):
        needed = []
        for device in entry.get("rdma") or []:
            needed += device if isinstance(device, list) else [device] if device else []
        have = devices.get(name)
        missing = [d for d in needed if d not in (have or [])]
        if missing:
            listed = "ibv_devices could not run" if have is None else \
                f"ibv_devices lists {', '.join(have) or 'none'}"
            backend = hostfile["backend"]
            errors.append(
                f"{name}: no RDMA device {', '.join(missing)} for its cables ({listed}) — "
                f"{backend} needs RDMA over Thunderbolt 5, enabled once per Mac in macOS Recovery "
                f"(check.yml -e doctor_backend={backend} names each host and the step); or use "
                "-e backend=ring"
            )
    return errors


# ---------------------------------------------------------------- the verdict

REASONS = {
    "rank_failed": "a rank failed",
    "stall": "the job stalled (no progress within its phase's timeout, or a rank frozen)",
    "max_restarts": "it kept failing after every automatic restart",
    "summary_unreadable": "rank 0's summary.json is unreadable (cut short: a full disk or a disk "
                          "fault), so the run is not counted as completed",
}


def _tail(text, lines=TAIL_LINES):
    kept = [line for line in ANSI.sub("", text or "").splitlines() if line.strip()]
    return "\n".join("    " + line for line in kept[-lines:])


def launch_verdict(job, rank_logs, rank_hosts, unreachable=(), lost_contact=False):
    """Why the run failed, naming the host and rank, with that rank's last lines; None when it
    finished or stopped as asked.

    job: the supervisor's job.json ({} when it could not be fetched); rank_logs: {rank: text of
    this launch's log}; unreachable: ranked hosts the play lost on the way.
    """
    state = job.get("state")
    if state in ("finished", "stopped"):
        return None
    if state == "lost" and not lost_contact:
        run = job.get("run", "<run>")
        what = (f"its launcher still runs: stop it with -e stop={run}"
                if job.get("launcher_running")
                else f"continue it with -e resume=true -e run_name={run}")
        return (f"Training lost at step {job.get('last_step') or 0}: {job.get('reason')}, so "
                f"nothing watches it any more; what it wrote was fetched; {what}.")
    if lost_contact or state not in ("failed",):
        head = (f"the play lost the launch host and cannot tell how the job ends (last known "
                f"state: {state or 'unknown'}); the job goes on under its supervisor — follow it "
                f"again with -e attach={job.get('run', '<run>')}")
        return f"Training not followed to its end: {head}."
    suspect = job.get("suspect") or "no rank named"
    restarts = job.get("restarts") or []
    parts = [f"Training failed: {REASONS.get(job.get('reason'), job.get('reason'))}; suspect: "
             f"{suspect}; {len(restarts)} automatic restart(s)."]
    if unreachable:
        parts.append(f"Hosts that stopped answering Ansible: {', '.join(unreachable)}.")
    match = re.match(r"rank (\d+) on ", suspect)
    logs = {int(k): v for k, v in (rank_logs or {}).items()}
    rank = int(match.group(1)) if match else None
    if rank is not None and logs.get(rank, "").strip():
        parts.append(f"Last lines of rank {rank} ({rank_hosts[rank]}):\n{_tail(logs[rank])}")
    parts.append("The supervisor's account is in supervisor.log beside the results.")
    return "\n".join(parts)


def launch_summary_lines(summary, run_dir, job=None):
    """A few readable lines from summary.json (and the supervisor's job.json) for the end of the
    play; a stopped run says where it stopped and how to continue it."""
    job = job or {}
    restarts = job.get("restarts") or []
    extra = []
    if restarts:
        lost = sum(r.get("lost_s") or 0 for r in restarts)
        why = ", ".join(f"{r.get('reason')} at step {r.get('from_step')}" for r in restarts)
        extra.append(f"{len(restarts)} automatic restart(s) ({why}), {lost:.0f} s of work redone")
    if job.get("state") == "stopped":
        # Stopped in a restart's back-off or killed past the grace: no checkpoint at last_step.
        saved = job.get("checkpoint_step")
        where = (" with a checkpoint there" if saved is not None and saved == job.get("last_step")
                 else f"; its latest checkpoint is at step {saved}" if saved is not None
                 else "; no checkpoint: a resume starts from step 0")
        return [
            f"stopped at step {job.get('last_step')} of {job.get('steps')} ({job.get('reason')})"
            + where,
            *extra,
            f"continue it: ansible-playbook train.yml -e resume=true -e run_name={job.get('run')}",
            f"results: {run_dir}",
        ]

    def number(key, fmt):
        value = summary.get(key)
        return fmt.format(value) if isinstance(value, (int, float)) else "n/a"

    if "command" in summary:  # -e command: the program's own output says how it went
        return [f"{summary['command']}: exit code 0 on rank 0",
                f"world size {summary.get('world_size', 'n/a')}, "
                f"{number('wall_time_s', '{:.1f}')} s wall time", *extra,
                f"results: {run_dir}"]

    accuracy = summary.get("eval_accuracy")
    lines = [
        f"final loss {number('train_loss', '{:.4f}')}, eval loss {number('eval_loss', '{:.4f}')}"
        + (f", eval accuracy {accuracy:.1%}" if isinstance(accuracy, (int, float)) else ""),
        f"world size {summary.get('world_size', 'n/a')}, steps {summary.get('steps', 'n/a')}, "
        f"{number('samples_per_s', '{:.0f}')} samples/s, "
        f"{number('wall_time_s', '{:.1f}')} s wall time",
        *extra,
        f"results: {run_dir}",
    ]
    return lines


# summary.json's numbers a script most often wants, in result.json.
OUTCOME_NUMBERS = ("world_size", "steps", "train_loss", "eval_loss", "eval_accuracy",
                   "samples_per_s", "wall_time_s")


def launch_outcome(summary, job, run_dir, error=None):
    """The run in one JSON object for scripts (result.json, the play's last line): its state,
    the error that failed it (None when it did not), its main numbers and where its files are."""
    job, summary = job or {}, summary or {}
    return {"run": job.get("run"), "ok": not error, "state": job.get("state"),
            "reason": job.get("reason"), "last_step": job.get("last_step"),
            "restarts": len(job.get("restarts") or []),
            **{key: summary.get(key) for key in OUTCOME_NUMBERS},
            "error": error or None, "results": str(run_dir)}


def _table(header, rows):
    """Lines of a table: header and rows of cells, each column as wide as its widest cell."""
    widths = [max(len(str(cells[i])) for cells in [header, *rows]) for i in range(len(header))]
    return ["  ".join(f"{cell!s:<{width}}" for cell, width in zip(cells, widths, strict=True))
            .rstrip() for cells in [header, *rows]]


def duration(seconds):
    """4 s, 12m 05s, 3h 20m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"


def eta_seconds(job):
    """Seconds the steps left take at the median step time while the job runs, else None."""
    if job["state"] not in ("starting", "running") or not job.get("step_seconds") or (
            not job.get("steps")):
        return None
    return (job["steps"] - (job["last_step"] or 0)) * job["step_seconds"]


def _eta(job):
    eta = eta_seconds(job)
    return "-" if eta is None else duration(eta)


def launch_status_table(runs, run=None):
    """supervisor.py status --json as the terminal shows it: one row per run (state, step/steps,
    ETA, restarts, reason); with run (status --run), that run's row, then one row per rank (host,
    phase, step, seconds since its heartbeat)."""
    if not runs:
        return [f"there is no run {run} — see -e status=true" if run else "no runs yet"]
    lines = _table(["RUN", "STATE", "STEP", "ETA", "RESTARTS", "REASON"], [
        [job["run"], job["state"] + ("" if job["state"] in (*supervisor.TERMINAL, "lost")
                                     else supervisor.phases_text(job.get("phases") or {})),
         f"{job['last_step'] or 0}/{job['steps'] or '?'}", _eta(job), len(job["restarts"]),
         job["reason"] or ""] for job in runs])
    if run:
        lines += [""] + _table(["RANK", "HOST", "PHASE", "STEP", "HEARTBEAT"], [
            [r["rank"], r["host"], r["phase"] or "-", "-" if r["step"] is None else r["step"],
             f"{r['age']:.0f} s ago" if r["age"] is not None
             else "no heartbeat" if r["reached"] else "host unreachable"]
            for r in runs[0]["ranks"]])
    return lines


class FilterModule:
    def filters(self):
        return {
            "launch_outcome": launch_outcome,
            "launch_consistency_errors": launch_consistency_errors,
            "launch_extra_args": launch_extra_args,
            "launch_host_errors": launch_host_errors,
            "launch_mpi_options": launch_mpi_options,
            "launch_np": launch_np,
            "launch_hub_repo": launch_hub_repo,
            "launch_path_name": launch_path_name,
            "launch_rank_hosts": launch_rank_hosts,
            "launch_rank_plan": launch_rank_plan,
            "launch_rdma_errors": launch_rdma_errors,
            "launch_rank_program": launch_rank_program,
            "launch_request": launch_request,
            "launch_request_errors": launch_request_errors,
            "launch_mlx_argv": launch_mlx_argv,
            "launch_trackers_error": launch_trackers_error,
            "launch_run_name": launch_run_name,
            "launch_shell_command": launch_shell_command,
            "launch_status_table": launch_status_table,
            "launch_summary_lines": launch_summary_lines,
            "launch_supervisor_args": launch_supervisor_args,
            "launch_supervisor_settings": launch_supervisor_settings,
            "launch_train_args": launch_train_args,
            "launch_split_value_errors": launch_split_value_errors,
            "launch_train_check_error": launch_train_check_error,
            "launch_unknown_options": launch_unknown_options,
            "launch_verdict": launch_verdict,
        }
