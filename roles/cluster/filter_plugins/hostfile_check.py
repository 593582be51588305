"""Does a rendered hostfile match the inventory? One answer for train.yml's preflight and check.yml.

Pure functions, unit-tested in tests/unit/test_hostfile_check.py.
"""

import json
import re


def _entries(lines):
    """Parse Open MPI hostfile text into [(address, slots)]; comments and blanks skipped."""
    result = []
    for line in str(lines).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        slots = 1
        for field in fields[1:]:
            match = re.fullmatch(r"(?:slots|max_slots)=(\d+)", field)
            if match and field.startswith("slots"):
                slots = int(match.group(1))
        result.append((fields[0], slots))
    return result


def hostfile_problems(text, hosts):
    """What differs between a rendered Open MPI hostfile and the cluster_hosts entries."""
    expected = [(h["mpi_address"], h["slots"]) for h in hosts if h["slots"] > 0]
    found = _entries(text)
    problems = []
    for address, slots in expected:
        match = [s for a, s in found if a == address]
        if not match:
            problems.append(f"{address} missing")
        elif match[0] != slots:
            problems.append(f"{address} has slots={match[0]}, inventory says {slots}")
    known = {a for a, _ in expected}
    problems += [f"{a} is not in the inventory (or has mpi_slots 0)" for a, _ in found
                 if a not in known]
    if not problems and [a for a, _ in found] != [a for a, _ in expected]:
        problems.append("hosts are out of inventory order (rank 0 must be the launch host)")
    return problems


def hosts_json_problems(text, expected):
    """What differs between hosts.json and mlx_hostfile(cluster_hosts[, backend, topology]):
    the ranks' ssh names, the backend and envs, and each rank's ips and rdma devices (over
    cables: its cable addresses and its RDMA device matrix row)."""
    try:
        found = json.loads(text)
    except ValueError as err:
        return [f"not valid JSON: {err}"]
    if found == expected:
        return []
    if not isinstance(found, dict):
        return ["a list of hosts, not MLX's {backend, envs, hosts} format"]
    entries = [e if isinstance(e, dict) else {"ssh": e} for e in found.get("hosts") or []]
    got = [e.get("ssh") for e in entries]
    want = [e["ssh"] for e in expected["hosts"]]
    if got != want:
        return [f"ssh entries {got}, inventory gives {want}"]
    problems = [f"{key} {found.get(key)!r}, expected {expected[key]!r}"
                for key in ("backend", "envs") if found.get(key) != expected[key]]
    for rank, (entry, wanted) in enumerate(zip(entries, expected["hosts"], strict=True)):
        problems += [
            f"rank {rank} ({wanted['ssh']}): {key} {entry.get(key)}, expected {wanted.get(key)}"
            for key in ("ips", "rdma")
            if entry.get(key, []) != wanted.get(key, [])  # mlx.launch reads a missing list as []
        ]
    return problems or ["differs: " + json.dumps(found) + " vs " + json.dumps(expected)]


class FilterModule:
    def filters(self):
        return {"hostfile_problems": hostfile_problems, "hosts_json_problems": hosts_json_problems}
