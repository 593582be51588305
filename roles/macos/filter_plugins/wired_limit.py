"""Filters for the macos role's GPU wired-memory limit (mlx_wired_limit_mb): what `sysctl -n`
prints, and whether setup must set `iogpu.wired_limit_mb` or its boot-time LaunchDaemon.

`sysctl -n iogpu.wired_limit_mb` prints the limit in MB (0: macOS' own heuristic),
`sysctl -n hw.memsize` the memory in bytes; `sudo sysctl iogpu.wired_limit_mb=N` prints
"iogpu.wired_limit_mb: 0 -> N". The name exists from macOS 14 (Sonoma) on.
"""

import re

MB = 1024 * 1024


def sysctl_int(result):
    """The whole number a registered `sysctl -n NAME` printed (the last number of a
    "name: old -> new" line too); None when it failed, e.g. on an unknown name."""
    result = result or {}
    text = str(result.get("stdout") or "").strip()
    numbers = re.findall(r"-?\d+", text.splitlines()[-1]) if text else []
    return int(numbers[-1]) if result.get("rc", 1) == 0 and numbers else None


def wired_limit_suggestion(memory_mb):
    """A limit that leaves macOS room: the larger of 80 % of memory and memory less 5 GB (the rule
    of exo's configure_mlx.sh)."""
    return max(memory_mb * 80 // 100, memory_mb - 5120)


def wired_limit_plan(results, requested, daemon_expected):
    """What setup must do for mlx_wired_limit_mb, and what check.yml reports.

    results: {item: result} of the probe, with `wired` (sysctl -n iogpu.wired_limit_mb), `memsize`
    (sysctl -n hw.memsize) and `daemon` (cat of the LaunchDaemon plist); requested: the limit in
    MB, 0 or unset to leave macOS' limit alone; daemon_expected: the plist setup writes.
    Returns {requested, now, memory_mb, change, persisted, daemon_present, errors}: change when
    the live value must be set; persisted when the LaunchDaemon holds exactly the requested limit.
    """
    requested = int(requested or 0)
    now = sysctl_int(results.get("wired"))
    memsize = sysctl_int(results.get("memsize"))
    memory_mb = memsize // MB if memsize else None
    daemon = results.get("daemon") or {}
    persisted = daemon.get("rc", 1) == 0 and daemon.get("stdout") == daemon_expected.rstrip("\n")
    errors = []
    if requested and now is None:
        errors.append(
            "mlx_wired_limit_mb: this Mac has no iogpu.wired_limit_mb (macOS 14 Sonoma and later "
            "have it) — upgrade macOS, or set mlx_wired_limit_mb: 0")
    elif requested and memory_mb and requested >= memory_mb:
        errors.append(
            f"mlx_wired_limit_mb {requested} is not below this Mac's memory ({memory_mb} MB) — "
            "leave macOS room for itself, e.g. mlx_wired_limit_mb: "
            f"{wired_limit_suggestion(memory_mb)}")
    return {
        "requested": requested, "now": now, "memory_mb": memory_mb,
        "change": bool(requested) and not errors and now != requested,
        "persisted": persisted, "daemon_present": daemon.get("rc", 1) == 0, "errors": errors,
    }


class FilterModule:
    def filters(self):
        return {
            "sysctl_int": sysctl_int,
            "wired_limit_plan": wired_limit_plan,
        }
