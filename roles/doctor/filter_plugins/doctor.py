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
    "topology": "cable topology",
    "backend": "backend over the cables",
    "bridge_off": "Thunderbolt Bridge off",
    "cable_port": "cable port",
    "cable_ping": "ping across cable",
    "rdma": "RDMA ready",
    "macos_build": "macOS build identical",
    "python_env": "Python env identical",
    "train_pkg": "train/ identical",
    "mlx_import": "mlx imports",
    "mac_firewall": "firewall lets MPI in",
    "mac_wired": "GPU wired memory limit",
    "mac_sleep": "sleep settings",
    "mlx_mpi": "MLX MPI group",
    "link": "link latency/bandwidth",
    "cable_link": "cable latency/bandwidth",
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
    "topology": "Cable every host that runs ranks to the others (see the backend row).",
    "backend": "The cables cannot carry this backend (the detail says why and which cable to "
    "add); cable as it says, or pick a backend they allow: train.yml -e backend=..., and "
    "check.yml -e doctor_backend=... to check for it.",
    ("bridge_off", "member"): "The Thunderbolt Bridge still joins the cable ports on {target}: "
    "without spanning tree it forwards frames around any loop of cables and floods every Mac on "
    "it. Re-run setup.yml (cables mode takes the bridge down), or on the Mac: System Settings > "
    "Network > Thunderbolt Bridge > Make Inactive.",
    ("bridge_off", "address"): "bridge0 on {target} still carries an address from the bridge "
    "topology: run `ansible-playbook reset.yml --tags thunderbolt` with the inventory that set "
    "it, then setup.yml.",
    "bridge_off": "Take the Thunderbolt Bridge down on {target} (re-run setup.yml).",
    ("cable_port", "missing"): "{target}: no such interface. Check the cable's entry in "
    "thunderbolt_cables (the device `networksetup -listallhardwareports` shows for the port, "
    "`ip link` on Linux) and that the cable is plugged in.",
    ("cable_port", "down"): "The port is down on {target}: check its cable, then re-run setup.yml "
    "(Linux: ip link set <port> up).",
    ("cable_port", "address"): "The port lacks its cable's address on {target}: re-run setup.yml, "
    "which gives each cable its /30 from thunderbolt_cables and thunderbolt_cable_pool.",
    "cable_port": "Check the cable port on {target}.",
    "cable_ping": "No reply across this cable ({target}): check that it is plugged in at both "
    "ends named (a Thunderbolt cable, not a charging-only USB-C one) and both cable port rows, "
    "then re-run setup.yml.",
    ("rdma", "no_rdma_ctl"): "{target} has no rdma_ctl: RDMA over Thunderbolt needs macOS 26.2 or "
    "later on a Mac with Thunderbolt 5; update macOS, or train with backend ring.",
    ("rdma", "disabled"): "RDMA over Thunderbolt is off on {target}, and only macOS Recovery can "
    "turn it on (not remotely, not with sudo): shut the Mac down, hold the power button until "
    "the startup options appear, choose Options, then Utilities > Terminal: `rdma_ctl enable`, "
    "and restart. Do this on every Mac.",
    ("rdma", "devices"): "RDMA is on but a cable port of {target} has no RDMA device: RDMA needs "
    "Thunderbolt 5 on both Macs and a Thunderbolt 5 cable (on a Mac Studio not the port next to "
    "Ethernet); see `ibv_devices` and `ibv_devinfo` (PORT_ACTIVE) there.",
    "rdma": "Run `rdma_ctl status` and `ibv_devices` on {target} and fix what they say.",
    "macos_build": "RDMA needs the same macOS build on every Mac (`sw_vers -buildVersion`): "
    "update them all to one release (Software Update), betas included.",
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
    ("cable_link", "slow"): "This cable is much slower than the best one: replace or reseat it "
    "(a Thunderbolt 4/5 cable, straight into the port, no hub or dock).",
    "cable_link": "The ping-pong across this cable did not finish: fix its ping row first.",
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


def doctor_iface_row(facts, host, interface, expected_ip, check="tb_iface"):
    """An interface row (Thunderbolt interface, or a cable port with check cable_port): present,
    up, carrying expected_ip. A cable port's target names the port: 'mac1 en2'."""
    target = host if check == "tb_iface" else f"{host} {interface}"
    key = str(interface).replace("-", "_").replace(".", "_")
    iface = (facts or {}).get(key)
    if not isinstance(iface, dict) or str(interface) not in (facts or {}).get("interfaces", [
        interface
    ]):
        return doctor_row(check, target, False, f"no interface {interface}", "missing")
    addresses = _iface_addresses(iface)
    if not _iface_up(iface):
        return doctor_row(check, target, False, f"{interface} is down", "down")
    if str(expected_ip) not in addresses:
        have = ", ".join(addresses) or "no IPv4 address"
        return doctor_row(check, target, False,
                          f"{interface} has {have}, expected {expected_ip}", "address")
    return doctor_row(check, target, True, f"{interface} up, {expected_ip}")


# ---- cables topology (thunderbolt_topology: cables)


def doctor_topology_rows(topology, backend, errors):
    """The cables' rows, on the cluster: what they form (shape, the ring MLX would take, i.e. the
    ranks of ring and jaccl-ring), and whether they carry `backend` (the one train.yml will run;
    doctor_backend) with the others they allow. topology: cable_topology's result; errors:
    cable_backend_errors(topology, backend), why they cannot carry it."""
    shape = topology["summary"]
    if topology["ring"]:
        shape += "; ring order (ranks of ring, jaccl-ring): " + ", ".join(topology["ring"])
    allowed = [name for name, ok in topology["backends"].items() if ok]
    mpi = topology["mpi"]
    over = ("over the cables" if mpi["over"] == "cables"
            else f"over the management network ({mpi['exclude']} excluded)")
    detail = (f"they allow {', '.join(allowed) or 'none of ring, jaccl, jaccl-ring'}; "
              f"mpi runs {over}")
    return [
        doctor_row("topology", "cluster", not topology["disconnected"], shape, "disconnected",
                   None if not topology["disconnected"] else "warn"),
        doctor_row("backend", backend, not errors, "; ".join(errors) or detail, "refused"),
    ]


def doctor_bridge_state(ifconfig):
    """macOS `ifconfig bridge0` (a result read through command_result) -> {"exists", "up",
    "members", "addresses"}: up when its flags say UP (`ifconfig bridge0 down` clears it, as
    mlx.distributed_config does), members from its `member:` lines, IPv4 from `inet` lines.
    A failed ifconfig (no bridge0) means there is none."""
    if ifconfig.get("rc", 1) != 0:
        return {"exists": False, "up": False, "members": [], "addresses": []}
    lines = str(ifconfig.get("stdout", "")).splitlines()
    flags = lines[0].partition("<")[2].partition(">")[0].split(",") if lines else []
    words = [line.split() for line in lines[1:]]
    return {"exists": True, "up": "UP" in flags,
            "members": [w[1] for w in words if len(w) > 1 and w[0] == "member:"],
            "addresses": [w[1] for w in words if len(w) > 1 and w[0] == "inet"]}


def doctor_bridge_facts(facts, bridge="bridge0"):
    """The same state from Linux facts (bridges list their members under `interfaces`)."""
    iface = (facts or {}).get(bridge)
    if not isinstance(iface, dict):
        return {"exists": False, "up": False, "members": [], "addresses": []}
    return {"exists": True, "up": _iface_up(iface), "members": list(iface.get("interfaces") or []),
            "addresses": _iface_addresses(iface)}


def doctor_bridge_row(state, host, ports, bridge="bridge0"):
    """Thunderbolt Bridge off, as cables mode needs: no cable port of this host (ports) in an
    up bridge0, and no address on it. state: doctor_bridge_state or doctor_bridge_facts."""
    if not state["exists"]:
        return doctor_row("bridge_off", host, True, f"no {bridge}")
    bridged = sorted(set(state["members"]) & set(ports)) if state["up"] else []
    if bridged:
        return doctor_row("bridge_off", host, False,
                          f"{bridge} is up with the cable port(s) {', '.join(bridged)}", "member")
    if state["addresses"]:
        return doctor_row("bridge_off", host, False,
                          f"{bridge} has {', '.join(state['addresses'])}", "address")
    members = f", members {', '.join(state['members'])}" if state["members"] else ""
    return doctor_row("bridge_off", host, True,
                      f"{bridge} {'up' if state['up'] else 'down'}{members}, no address")


def doctor_rdma_row(host, system, ctl, devices, missing, required):
    """RDMA ready on one host, for MLX's jaccl backends: `rdma_ctl status` says enabled and
    `ibv_devices` lists rdma_<port> for each of its cable ports. ctl: rdma_ctl_state of its
    output (None when rdma_ctl could not run); devices: ibv_device_names; missing:
    rdma_missing_devices for its cable ports. Not needed (required false: the backend is ring
    or mpi), a problem is a warning."""
    if system != "Darwin":
        return doctor_row("rdma", host, True, f"not macOS ({system}): RDMA over Thunderbolt is "
                          "a macOS feature", status="skipped")
    status = None if required else "warn"
    if ctl is None:
        return doctor_row("rdma", host, False, "no rdma_ctl (macOS before 26.2?)", "no_rdma_ctl",
                          status)
    if ctl != "enabled":
        return doctor_row("rdma", host, False, f"rdma_ctl status: {ctl}", "disabled", status)
    listed = f"ibv_devices: {', '.join(devices) or 'none'}"
    if missing:
        return doctor_row("rdma", host, False, f"enabled, but no {', '.join(missing)} for its "
                          f"cables ({listed})", "devices", status)
    return doctor_row("rdma", host, True, f"enabled; {listed}")


def doctor_build_row(host, system, build, reference, required):
    """This Mac's macOS build (sw_vers -buildVersion) against the launch host's: RDMA needs the
    same build everywhere. reference: the launch host's build (None when it is no Mac)."""
    if system != "Darwin":
        return doctor_row("macos_build", host, True, f"not macOS ({system})", status="skipped")
    same = reference is None or build == reference
    detail = f"{build}" + ("" if same else f" (launch host: {reference})")
    return doctor_row("macos_build", host, same, detail, "differs",
                      None if same or required else "warn")


def doctor_cable_port_rows(facts, host, ends):
    """A cable port row per end of this host's cables (cable_plan's "hosts" entries): up and
    carrying its address of the cable's /30."""
    return [doctor_iface_row(facts, host, end["interface"], end["address"], "cable_port")
            for end in ends]


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


def _slow_links(links, min_ratio):
    """(the best link's Gbit/s, the links below min_ratio x that)."""
    best = max((link["gbps"] for link in links), default=0)
    return best, [link for link in links if best and link["gbps"] < min_ratio * best]


def _link_rows(check, links, min_ratio):
    """Rows of measured links [{"target", "ends": (a, b), "latency_us", "gbps"}]: a link below
    min_ratio x the best one is slow; when every slow link shares one host, the detail names it
    (one bad port or cable shows as all that host's links being slow)."""
    best, slow = _slow_links(links, min_ratio)
    shared = None
    if slow:
        common = set.intersection(*(set(link["ends"]) for link in slow))
        if len(common) == 1 and len(slow) > 1:
            shared = common.pop()
    rows = []
    for link in links:
        detail = f"{link['latency_us']:.0f} us, {link['gbps']:.2f} Gbit/s"
        if link in slow:
            detail += f" (< {min_ratio:g} x best {best:.2f} Gbit/s)"
            if shared:
                detail += f"; every slow {'cable' if check == 'cable_link' else 'pair'} " \
                          f"includes {shared}: check its cable/port"
            rows.append(doctor_row(check, link["target"], False, detail, "slow"))
        else:
            rows.append(doctor_row(check, link["target"], True, detail))
    return rows


def doctor_faster_matrix(matrix, again):
    """matrix (pingpong.py's) with each pair's better figures from `again`, the same hosts
    measured a second time: the higher bandwidth, the lower latency."""
    if not again:
        return matrix

    def by_hosts(m):
        return {tuple(sorted((m["hosts"][p["a"]], m["hosts"][p["b"]]))): p for p in m["pairs"]}

    second = by_hosts(again)
    pairs = []
    for key, pair in by_hosts(matrix).items():
        other = second.get(key, pair)
        pairs.append({**pair, "gbps": max(pair["gbps"], other["gbps"]),
                      "latency_us": min(pair["latency_us"], other["latency_us"])})
    return {**matrix, "pairs": pairs}


def doctor_link_rows(matrix, by_hostname, min_ratio=0.25):
    """Rows per host pair from pingpong.py output; a pair < min_ratio x the best pair is slow.

    matrix: {"hosts": [hostname by rank], "pairs": [{"a": i, "b": j, "latency_us", "gbps"}]}.
    by_hostname: hostname -> inventory name.
    """
    names = [by_hostname.get(h, h) for h in matrix["hosts"]]
    return _link_rows("link", [
        {"target": f"{names[p['a']]} <-> {names[p['b']]}", "ends": (names[p["a"]], names[p["b"]]),
         "latency_us": p["latency_us"], "gbps": p["gbps"]} for p in matrix["pairs"]
    ], min_ratio)


def _cable_links(results, bound):
    """(failed rows, measured links) of pingpong.py runs across cables (read through
    `command_result`, each with its cable, a cable_plan entry with its "label", as item). A cable
    measured more than once counts its better figures, as doctor_faster_matrix does for pairs;
    any failed run of it is its row."""
    failed, best = {}, {}
    for result in results:
        cable = result["item"]
        matrix = next((json.loads(line) for line in str(result.get("stdout", "")).splitlines()
                       if line.startswith("{")), None)
        if result["timed_out"] or result.get("rc") or result.get("failed"):
            failed.setdefault(cable["label"], doctor_command_row(
                result, "cable_link", cable["label"], bound))
        elif not matrix or len(matrix.get("pairs") or []) != 1:
            failed.setdefault(cable["label"], doctor_row(
                "cable_link", cable["label"], False,
                f"no measurement printed: {result['stdout_last']!r}", "error"))
        else:
            [pair] = matrix["pairs"]
            before = best.get(cable["label"], pair)
            best[cable["label"]] = {
                "target": cable["label"], "ends": tuple(cable["hosts"]), "cable": cable,
                "gbps": max(pair["gbps"], before["gbps"]),
                "latency_us": min(pair["latency_us"], before["latency_us"])}
    return list(failed.values()), [link for label, link in best.items() if label not in failed]


def doctor_slow_cables(results, min_ratio=0.25):
    """The cables whose ping-pong run (results as for doctor_cable_link_rows) was below
    min_ratio x the best cable's: each is measured again before it is called slow, since a
    moment when one of its hosts was busy is not a bad cable."""
    return [link["cable"] for link in _slow_links(_cable_links(results, None)[1], min_ratio)[1]]


def doctor_cable_link_rows(results, min_ratio=0.25, bound=None):
    """Rows per cable from pingpong.py runs across each cable (its two hosts, Open MPI's data
    on that cable's /30 alone), read through `command_result`, each with the cable as item; a
    cable measured again counts its better figures. A run that printed no matrix is a failed row
    naming the cable."""
    failed, links = _cable_links(results, bound)
    return failed + _link_rows("cable_link", links, min_ratio)


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
            "doctor_bridge_facts": doctor_bridge_facts,
            "doctor_bridge_row": doctor_bridge_row,
            "doctor_bridge_state": doctor_bridge_state,
            "doctor_build_row": doctor_build_row,
            "doctor_cable_link_rows": doctor_cable_link_rows,
            "doctor_cable_port_rows": doctor_cable_port_rows,
            "doctor_command_row": doctor_command_row,
            "doctor_digest": doctor_digest,
            "doctor_env_diff": doctor_env_diff,
            "doctor_faster_matrix": doctor_faster_matrix,
            "doctor_failed": doctor_failed,
            "doctor_iface_row": doctor_iface_row,
            "doctor_link_rows": doctor_link_rows,
            "doctor_macos_rows": doctor_macos_rows,
            "doctor_link_table": doctor_link_table,
            "doctor_rdma_row": doctor_rdma_row,
            "doctor_slow_cables": doctor_slow_cables,
            "doctor_row": doctor_row,
            "doctor_report_rows": doctor_report_rows,
            "doctor_ssh_row": doctor_ssh_row,
            "doctor_table": doctor_table,
            "doctor_topology_rows": doctor_topology_rows,
        }
