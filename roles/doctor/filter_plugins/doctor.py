"""Jinja filters for check.yml (the cluster doctor): classify probe results, build the report.

Every check yields rows {check, target, status, reason, detail}: status is ok, failed, warn or
skipped; reason picks the fix text. Pure functions, unit-tested in tests/unit/test_doctor_*.py.
"""

import errno
import hashlib
import json
import os

# Check id -> title, in the order the report lists them.
CHECKS = {
    "inventory": "inventory valid",
    "reach": "Ansible reaches host",
    "hostfile": "hostfile matches inventory",
    "hosts_json": "hosts.json matches inventory",
    "openmpi": "Open MPI installed",
    "openmpi_same": "Open MPI same version+path",
    "mpirun_local": "mpirun -np 1 hostname",
    "mpirun_all": "mpirun across hostfile",
    "ssh": "ssh over MPI address",
    "tb_iface": "Thunderbolt interface",
    "ping": "ping over Thunderbolt",
    "tb_loop": "bridge0 loop risk",
    "python_env": "Python env identical",
    "train_pkg": "train/ identical",
    "mlx_import": "mlx imports",
    "mac_firewall": "firewall lets MPI in",
    "mac_wired": "GPU wired memory limit",
    "mac_sleep": "sleep settings",
    "mlx_mpi": "MLX MPI group",
    "link": "link latency/bandwidth",
    "doctor": "check.yml itself",
}

# (check, reason) or check -> the concrete fix. {target} and {detail} are filled in per row.
FIXES = {
    "inventory": "Fix the inventory fields named above, then re-run check.yml.",
    "reach": "Ansible cannot log in to {target}: is it on, is Remote Login (sshd) enabled, is "
    "ansible_host right? Try `ssh <ansible_user>@<ansible_host>` from this machine.",
    ("hostfile", "missing"): "Run `ansible-playbook setup.yml` to render the hostfile.",
    "hostfile": "The hostfile is stale: re-run `ansible-playbook setup.yml` (it renders the "
    "hostfile from the inventory); never edit it by hand.",
    ("hosts_json", "missing"): "Run `ansible-playbook setup.yml` to render hosts.json.",
    "hosts_json": "hosts.json is stale: re-run `ansible-playbook setup.yml`.",
    "openmpi": "Install Open MPI on {target}: `ansible-playbook setup.yml --limit {target}` "
    "(macOS: brew install open-mpi).",
    "openmpi_same": "Install the same Open MPI everywhere (same version and prefix; mixed versions "
    "break the wire protocol): brew upgrade open-mpi on every Mac, then re-run setup.yml.",
    ("mpirun_local", "timeout"): "mpirun hangs on {target} even alone: look for a firewall "
    "blocking local TCP, or a stale Open MPI session dir (/tmp/ompi.*, $TMPDIR/prte.*).",
    "mpirun_local": "mpirun does not start on {target}: run `mpirun -np 1 hostname` there and "
    "reinstall Open MPI if it fails (re-run setup.yml).",
    ("mpirun_all", "timeout"): "mpirun across the cluster hangs: fix the failed ssh/ping/"
    "Thunderbolt rows first; a hang with those green means a firewall blocks Open MPI's TCP "
    "ports on the interconnect (macOS: allow incoming connections for orted/prted).",
    "mpirun_all": "Fix the hosts named above (ssh, Open MPI rows), then run setup.yml again.",
    ("ssh", "host_key_changed"): "The host key of the destination changed (reinstalled machine or "
    "an address reused by another host): verify it is the machine you expect, then re-run "
    "setup.yml, which pins every host's current key in ~/.ssh/mlx_cluster_known_hosts on {source} "
    "and the other hosts.",
    ("ssh", "host_key_unknown"): "The destination's host key is not pinned on {source}: re-run "
    "setup.yml (ssh_mesh pins every host key under all its names).",
    ("ssh", "auth"): "The mesh key is not accepted: re-run setup.yml to install {source}'s key in "
    "the destination's authorized_keys (and check the user name in ~/.ssh/config).",
    ("ssh", "unreachable"): "No SSH connection over the MPI address: check that sshd (Remote "
    "Login) runs on the destination and listens on that address, and the ping/Thunderbolt rows.",
    ("ssh", "wrong_host"): "The MPI address answers as another machine: two hosts share an "
    "address, or thunderbolt_ip in the inventory points at the wrong host.",
    "ssh": "Run `ssh -o BatchMode=yes -o StrictHostKeyChecking=yes <address> hostname` on "
    "{source} and fix what it prints.",
    ("tb_iface", "missing"): "{target} has no Thunderbolt interface: plug the cable, enable "
    "Thunderbolt Bridge (macOS) or load thunderbolt-net (Linux), or set thunderbolt_interface.",
    ("tb_iface", "down"): "Bring the interface up on {target}: re-run setup.yml, or check the "
    "cable (macOS: System Settings > Network > Thunderbolt Bridge; Linux: ip link set <if> up).",
    ("tb_iface", "address"): "The interface on {target} lacks its thunderbolt_ip: re-run "
    "setup.yml (it assigns the address), or fix thunderbolt_ip in the inventory.",
    "tb_iface": "Check the Thunderbolt interface on {target}.",
    "ping": "No ping over Thunderbolt from {source}: check the cable between the two hosts and "
    "both Thunderbolt rows; a cable that was re-plugged may have left bridge0 without an address.",
    "tb_loop": "Three or more hosts bridge the same Thunderbolt segment: cable them as a chain or "
    "a star, never a ring, or the bridges forward frames around the loop and flood the network.",
    "python_env": "Re-run setup.yml so every host gets the same Python and packages.",
    "train_pkg": "train/ on {target} differs from this checkout: re-run setup.yml to sync it (and "
    "do not edit the copy on a host).",
    "mlx_import": "mlx does not import on {target}: re-run setup.yml; on Linux mlx needs the "
    "mlx[cpu] wheel, on macOS Apple silicon and a native (arm64) Python.",
    ("mac_firewall", "blocked"): "The Application Firewall on {target} has no rule allowing the "
    "executables named above: a blocked Open MPI daemon or Python is the classic silent mpirun "
    "hang. Re-run setup.yml (it allows them), or on {target} for each path: `sudo "
    "/usr/libexec/ApplicationFirewall/socketfilterfw --add PATH` and `... --unblockapp PATH`.",
    ("mac_firewall", "block_all"): "The firewall on {target} blocks all incoming connections, "
    "allowed apps included: turn off \"Block all incoming connections\" (System Settings > "
    "Network > Firewall > Options).",
    "mac_firewall": "Read the firewall's state on {target}: `/usr/libexec/ApplicationFirewall/"
    "socketfilterfw --getglobalstate --listapps`; check the Python environment (re-run setup.yml).",
    ("mac_wired", "too_high"): "mlx_wired_limit_mb must stay below the memory of {target}: lower "
    "it in the inventory and re-run setup.yml.",
    ("mac_wired", "unsupported"): "{target} has no iogpu.wired_limit_mb (macOS 13 or older): "
    "upgrade to macOS 14 or later, or set mlx_wired_limit_mb: 0.",
    ("mac_wired", "not_persisted"): "The limit holds until the next reboot only: re-run setup.yml "
    "to write its LaunchDaemon (/Library/LaunchDaemons/org.mlx-cluster.wired-limit.plist).",
    "mac_wired": "Re-run setup.yml to set iogpu.wired_limit_mb to mlx_wired_limit_mb on {target} "
    "(or by hand: `sudo sysctl iogpu.wired_limit_mb=N`).",
    ("mac_sleep", "unknown"): "macos_pmset names a setting {target} does not have (see `pmset -g "
    "custom`): correct or remove it in the inventory.",
    "mac_sleep": "Re-run setup.yml to apply macos_pmset on {target} (or by hand: `sudo pmset -a "
    "SETTING VALUE`).",
    ("mlx_mpi", "timeout"): "MLX's MPI group hangs: fix earlier failed rows first; check that "
    "MLX_MPI_LIBNAME points at the same libmpi on every host.",
    "mlx_mpi": "MLX did not form one MPI group over all ranks: check the mpirun and Open MPI rows; "
    "MLX loads libmpi via MLX_MPI_LIBNAME, which must be the real shared library.",
    ("link", "slow"): "This pair is much slower than the best pair: replace or reseat the cable "
    "between them (Thunderbolt 4/5 cable, direct port, no hub), and check no link is shaped.",
    ("link", "timeout"): "The ping-pong hung: fix the mpirun across hostfile row first.",
    "link": "The ping-pong across the pair did not finish: fix the ping/ssh rows for the pair.",
    "doctor": "A check could not run on {target} (see the task named above); fix what the "
    "message says, or report it as a bug in check.yml.",
    ("any", "timeout"): "The check hung past its time bound; see the fix for its other failures.",
}


def _fix(row):
    check, reason = row["check"], row.get("reason")
    text = FIXES.get((check, reason)) or FIXES.get(check) or FIXES[("any", "timeout")]
    target = str(row.get("target", ""))
    source = target.split(" -> ")[0]
    return text.format(target=target, source=source, detail=row.get("detail", ""))


def doctor_row(check, target, ok, detail="", reason=None, status=None):
    """One result row; status comes from ok unless given (warn, skipped)."""
    if check not in CHECKS:
        raise ValueError(f"unknown check {check!r}; known: {', '.join(CHECKS)}")
    row_status = status or ("ok" if ok else "failed")
    return {
        "check": check,
        "target": str(target),
        "status": row_status,
        "reason": None if row_status == "ok" else reason,
        "detail": str(detail or "").strip(),
    }


def doctor_command_row(result, check, target, bound=None, expect=None):
    """Row for a bounded command: failed on timeout, non-zero rc, or stdout lacking `expect`.

    result: a registered result read through the shared `command_result` filter."""
    if result["timed_out"]:
        return doctor_row(check, target, False, f"hung, stopped after {bound}s", "timeout")
    stdout = str(result.get("stdout", ""))
    if result.get("rc", 1 if result.get("failed") else 0) != 0 or result.get("failed"):
        why = result["gist"] or result.get("msg", "")
        if not why or why == "Error executing command.":  # the program could not be started
            cmd = result.get("cmd") or "?"
            program = cmd.split()[0] if isinstance(cmd, str) else cmd[0]
            why = f"cannot run {program}"
            if result.get("rc") in (errno.ENOENT, errno.EACCES):  # the module reports errno as rc
                why += f" ({os.strerror(result['rc'])})"
        rc = f"rc={result['rc']}: " if result.get("rc") is not None else ""
        return doctor_row(check, target, False, f"{rc}{why}", "error")
    if expect is not None and str(expect) not in stdout:
        got = result["stdout_last"]
        return doctor_row(check, target, False, f"expected {expect!r}, got {got!r}", "unexpected")
    return doctor_row(check, target, True, result["stdout_last"])


def doctor_ssh_reason(result, expected_hostname=None):
    """Classify one `ssh -o BatchMode=yes -o StrictHostKeyChecking=yes <addr> hostname` result
    (read through `command_result`)."""
    if result["timed_out"]:
        return "timeout"
    stderr = str(result.get("stderr", ""))
    if result.get("rc", 0) == 0 and not result.get("failed"):
        got = result["stdout_last"].split(".")[0]
        if expected_hostname and got != str(expected_hostname).split(".")[0]:
            return "wrong_host"
        return "ok"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        return "host_key_changed"
    if "Host key verification failed" in stderr or "No ED25519 host key is known" in stderr:
        return "host_key_unknown"
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        return "auth"
    return "unreachable"


SSH_DETAIL = {
    "timeout": "hung",
    "host_key_changed": "host key CHANGED (REMOTE HOST IDENTIFICATION HAS CHANGED)",
    "host_key_unknown": "host key not known (would prompt)",
    "auth": "key not accepted (Permission denied)",
    "wrong_host": "answered as another host",
}


def doctor_ssh_row(result, source, dest, address, expected_hostname=None):
    reason = doctor_ssh_reason(result, expected_hostname)
    target = f"{source} -> {dest}"
    if reason == "ok":
        return doctor_row("ssh", target, True, f"{address}: {result['stdout_last']}")
    why = SSH_DETAIL.get(reason) or result["stderr_last"] or "no connection"
    if reason == "wrong_host":
        why += f" {result['stdout_last']!r}, expected {expected_hostname!r}"
    return doctor_row("ssh", target, False, f"{address}: {why}", reason)


def _iface_addresses(iface):
    """IPv4 addresses of one interface from Linux or macOS (Darwin) facts."""
    ipv4 = iface.get("ipv4") or []
    entries = ipv4 if isinstance(ipv4, list) else [ipv4]
    entries += iface.get("ipv4_secondaries") or []
    return [str(e.get("address")) for e in entries if isinstance(e, dict) and e.get("address")]


def _iface_up(iface):
    if "active" in iface:  # Linux facts: operstate is not "down"
        return bool(iface["active"])
    status = iface.get("status")  # macOS facts: ifconfig's "status: active/inactive"
    if status is not None:
        return status == "active"
    return "UP" in (iface.get("flags") or [])


def doctor_iface_row(facts, host, interface, expected_ip):
    """Thunderbolt interface row: present, up, carrying expected_ip."""
    key = str(interface).replace("-", "_").replace(".", "_")
    iface = (facts or {}).get(key)
    if not isinstance(iface, dict) or str(interface) not in (facts or {}).get("interfaces", [
        interface
    ]):
        return doctor_row("tb_iface", host, False, f"no interface {interface}", "missing")
    addresses = _iface_addresses(iface)
    if not _iface_up(iface):
        return doctor_row("tb_iface", host, False, f"{interface} is down", "down")
    if str(expected_ip) not in addresses:
        have = ", ".join(addresses) or "no IPv4 address"
        return doctor_row("tb_iface", host, False,
                          f"{interface} has {have}, expected {expected_ip}", "address")
    return doctor_row("tb_iface", host, True, f"{interface} up, {expected_ip}")


def _profiles(values):
    """{'AC Power': 1, 'Battery Power': 1} -> 'AC Power 1, Battery Power 1'."""
    return ", ".join(f"{profile} {value}" for profile, value in values.items())


def _mac_firewall_row(host, firewall):
    if not firewall["enabled"]:
        return doctor_row("mac_firewall", host, True, "Application Firewall off")
    names = ", ".join(a["target"].rsplit("/", 1)[-1] for a in firewall["apps"]) or "nothing"
    if firewall["errors"]:
        return doctor_row("mac_firewall", host, False, "on; " + "; ".join(firewall["errors"]),
                          "unreadable", "warn")
    if firewall["block_all"]:
        return doctor_row("mac_firewall", host, False,
                          "on, blocking all incoming connections", "block_all")
    blocked = [a["target"] for a in firewall["apps"] if not a["allowed"]]
    if blocked:
        return doctor_row("mac_firewall", host, False,
                          "on; no rule allows " + ", ".join(blocked), "blocked")
    return doctor_row("mac_firewall", host, True, f"on; allows {names}")


def _mac_wired_row(host, wired):
    now, memory, requested = wired["now"], wired["memory_mb"], wired["requested"]
    of = f" of {memory} MB" if memory else ""
    if not requested:
        shown = "no iogpu.wired_limit_mb" if now is None else (
            f"iogpu.wired_limit_mb {now}{of}" + (" (macOS' own)" if now == 0 else ""))
        return doctor_row("mac_wired", host, True, f"not requested; {shown}")
    if now is None:
        return doctor_row("mac_wired", host, False, "no iogpu.wired_limit_mb (macOS 13 or older)",
                          "unsupported")
    if memory and requested >= memory:
        return doctor_row("mac_wired", host, False,
                          f"requested {requested} MB, not below the memory ({memory} MB)",
                          "too_high")
    if now != requested:
        return doctor_row("mac_wired", host, False, f"iogpu.wired_limit_mb is {now}, "
                          f"requested {requested}{of}", "differs")
    if not wired["persisted"]:
        return doctor_row("mac_wired", host, False, f"{now} MB{of}, but not set again at boot",
                          "not_persisted", "warn")
    return doctor_row("mac_wired", host, True, f"{now} MB{of}, set again at boot")


def _mac_sleep_row(host, pmset):
    if pmset["errors"]:
        return doctor_row("mac_sleep", host, False, "; ".join(pmset["errors"]), "unknown")
    if pmset["changes"]:
        return doctor_row("mac_sleep", host, False, "; ".join(
            f"{c['setting']}: {_profiles(c['now'])} (requested {c['value']})"
            for c in pmset["changes"]), "differs")
    if pmset["requested"]:
        return doctor_row("mac_sleep", host, True, ", ".join(
            f"{setting} {value}" for setting, value in pmset["requested"].items())
            + " on every power source")
    sleep = {profile: settings["sleep"] for profile, settings in pmset["profiles"].items()
             if "sleep" in settings}
    return doctor_row("mac_sleep", host, True, "nothing requested"
                      + (f"; sleep: {_profiles(sleep)}" if sleep else ""))


def doctor_macos_rows(inspection, host, system):
    """The firewall, wired-limit and sleep rows of one host from the macos role's inspection
    (tasks_from: inspect); skipped rows saying "not macOS" on other systems."""
    if system != "Darwin":
        return [doctor_row(check, host, False, "not macOS", "skipped", "skipped")
                for check in ("mac_firewall", "mac_wired", "mac_sleep")]
    return [_mac_firewall_row(host, inspection["firewall"]),
            _mac_wired_row(host, inspection["wired"]),
            _mac_sleep_row(host, inspection["pmset"])]


def doctor_digest(value):
    """Short stable hash of any JSON-able value (shown in the table so hosts can be compared)."""
    blob = json.dumps(value, sort_keys=True).encode()
    return hashlib.sha1(blob).hexdigest()[:12]


def doctor_env_diff(packages, reference):
    """Requirement lines (name==version) present on one side only."""
    mine, theirs = set(packages or []), set(reference or [])
    return [f"+{p}" for p in sorted(mine - theirs)] + [f"-{p}" for p in sorted(theirs - mine)]


def doctor_link_rows(matrix, by_hostname, min_ratio=0.25):
    """Rows per host pair from pingpong.py output; a pair < min_ratio x the best pair is slow.

    matrix: {"hosts": [hostname by rank], "pairs": [{"a": i, "b": j, "latency_us", "gbps"}]}.
    by_hostname: hostname -> inventory name. When every slow pair shares one host, the detail
    names it (one bad port or cable shows as all that host's pairs being slow).
    """
    names = [by_hostname.get(h, h) for h in matrix["hosts"]]
    pairs = matrix["pairs"]
    best = max((p["gbps"] for p in pairs), default=0)
    slow = [p for p in pairs if best and p["gbps"] < min_ratio * best]
    shared = None
    if slow:
        common = set.intersection(*({p["a"], p["b"]} for p in slow))
        if len(common) == 1 and len(slow) > 1:
            shared = names[common.pop()]
    rows = []
    for p in pairs:
        target = f"{names[p['a']]} <-> {names[p['b']]}"
        detail = f"{p['latency_us']:.0f} us, {p['gbps']:.2f} Gbit/s"
        if p in slow:
            detail += f" (< {min_ratio:g} x best {best:.2f} Gbit/s)"
            if shared:
                detail += f"; every slow pair includes {shared}: check its cable/port"
            rows.append(doctor_row("link", target, False, detail, "slow"))
        else:
            rows.append(doctor_row("link", target, True, detail))
    return rows


def doctor_link_table(matrix, by_hostname):
    """Markdown latency and bandwidth matrices (rows/columns are inventory names)."""
    names = [by_hostname.get(h, h) for h in matrix["hosts"]]
    cells = {}
    for p in matrix["pairs"]:
        for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
            cells[(a, b)] = p
    lines = []
    for title, key, fmt in (("latency (us)", "latency_us", "{:.0f}"),
                            ("bandwidth (Gbit/s)", "gbps", "{:.2f}")):
        lines.append(f"| {title} | " + " | ".join(names) + " |")
        lines.append("|---" * (len(names) + 1) + "|")
        for i, name in enumerate(names):
            row = [fmt.format(cells[(i, j)][key]) if (i, j) in cells else "-"
                   for j in range(len(names))]
            lines.append(f"| {name} | " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def _order(row):
    return list(CHECKS).index(row["check"])


def doctor_sorted(rows):
    return sorted((r for r in rows if r), key=_order)


def doctor_failed(rows):
    return [r for r in rows if r and r["status"] == "failed"]


def doctor_report_rows(rows):
    """The report's rows in check order, built once: report.md, report.json and the printed
    table all render these. ok is false only for failed rows (a warning does not fail the play);
    fix is the text shown under a failure or warning, else None."""
    return [
        {
            "check": r["check"],
            "title": CHECKS[r["check"]],
            "host": r["target"],
            "status": r["status"],
            "ok": r["status"] != "failed",
            "detail": r["detail"],
            "fix": _fix(r) if r["status"] in ("failed", "warn") else None,
        }
        for r in doctor_sorted(rows)
    ]


def doctor_table(report, markdown=False):
    """The table of doctor_report_rows: one line per check x host, the fix under every failure
    or warning, a summary line."""
    counts = {s: sum(r["status"] == s for r in report) for s in ("ok", "failed", "warn", "skipped")}
    summary = (f"{counts['ok']} ok, {counts['failed']} failed, {counts['warn']} warnings, "
               f"{counts['skipped']} skipped")
    if markdown:
        lines = ["| check | target | result | detail | fix |", "|---|---|---|---|---|"]
        for r in report:
            cells = [r["title"], r["host"], r["status"], r["detail"], r["fix"] or ""]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines + ["", summary, ""])
    width_check = max([len(r["title"]) for r in report] + [5])
    width_target = max([len(r["host"]) for r in report] + [6])
    lines = [f"{'CHECK':<{width_check}}  {'TARGET':<{width_target}}  RESULT   DETAIL"]
    for r in report:
        status = r["status"] if r["status"] == "ok" else r["status"].upper()
        lines.append(f"{r['title']:<{width_check}}  {r['host']:<{width_target}}  "
                     f"{status:<7}  {r['detail']}".rstrip())
        if r["fix"]:
            lines.append(" " * (width_check + 2) + "fix: " + r["fix"])
    lines.append(summary)
    return "\n".join(lines)


class FilterModule:
    def filters(self):
        return {
            "doctor_command_row": doctor_command_row,
            "doctor_digest": doctor_digest,
            "doctor_env_diff": doctor_env_diff,
            "doctor_failed": doctor_failed,
            "doctor_iface_row": doctor_iface_row,
            "doctor_link_rows": doctor_link_rows,
            "doctor_macos_rows": doctor_macos_rows,
            "doctor_link_table": doctor_link_table,
            "doctor_row": doctor_row,
            "doctor_report_rows": doctor_report_rows,
            "doctor_ssh_row": doctor_ssh_row,
            "doctor_table": doctor_table,
        }
