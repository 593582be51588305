"""Wall time of setup.yml on 2, 4 and 8 virtual hosts, fresh and re-run (one run each).

    sudo .venv/bin/python -m benchmarks.setup_walltime [--sizes 2,4,8] [--host-cpus 0.2]

Writes benchmarks/results/setup_walltime.md. Work runs in parallel across hosts, so a re-run
on 8 hosts should take at most about twice as long as on 2 (a sequential ssh loop: 4x).

All virtual hosts share this machine's cores, so once those are busy the wall time follows the
CPU work, which grows with the host count. The re-run is therefore also timed with every host
capped at --host-cpus CPUs, so each host keeps the same speed whatever the cluster size, as
separate Macs do; both ways also with --forks 1 (one host at a time, like an ssh loop). The CPU
time the hosts and the controller spent is recorded too.
"""

import argparse
import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from tools.playbook import run_playbook
from tools.vcluster import VirtualCluster
from tools.wheelhouse import offline_pip_args

RESULTS = Path(__file__).parent / "results" / "setup_walltime.md"


def machine_cpu_seconds() -> float:
    """CPU time all cores spent busy since boot (/proc/stat, without idle and iowait)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed_setup(vc: VirtualCluster, private_dir: Path, cmdline: str | None = None) -> dict:
    """Wall seconds, and CPU seconds of the whole machine and of the hosts, of one setup.yml."""
    def hosts_cpu() -> float:
        return sum(vc.cpu_seconds(h) for h in vc.hosts)

    machine, hosts, start = machine_cpu_seconds(), hosts_cpu(), time.monotonic()
    run = run_playbook("setup.yml", vc.inventory, private_dir, cmdline=cmdline)
    wall = time.monotonic() - start
    if run.status != "successful":
        raise SystemExit(f"setup.yml failed:\n{run.stdout[-4000:]}")
    return {"wall": wall, "cpu": machine_cpu_seconds() - machine, "hosts_cpu": hosts_cpu() - hosts}


def measure(size: int, host_cpus: float, pip_args: str, tmp: Path) -> dict:
    with VirtualCluster(
        hosts=size, cpus=host_cpus, extra_vars={"python_env_pip_extra_args": pip_args}
    ) as vc:
        vc.set_cpus(None)
        fresh = timed_setup(vc, tmp / "fresh")
        rerun = timed_setup(vc, tmp / "rerun")
        serial = timed_setup(vc, tmp / "serial", cmdline="--forks 1")
        vc.set_cpus(host_cpus)
        capped = timed_setup(vc, tmp / "capped")
        capped_serial = timed_setup(vc, tmp / "capped-serial", cmdline="--forks 1")
    return {"fresh": fresh, "rerun": rerun, "serial": serial, "capped": capped,
            "capped serial": capped_serial}


def report(rows: dict[int, dict], sizes: str, host_cpus: float) -> str:
    cores = os.cpu_count()
    base = rows[min(rows)]
    lines = [
        "# setup.yml wall time on the virtual cluster",
        "",
        f"One run per size and column on this {cores}-core machine. Command:",
        f"`sudo .venv/bin/python -m benchmarks.setup_walltime --sizes {sizes} "
        f"--host-cpus {host_cpus}`",
        "",
        f"## Hosts sharing the machine's {cores} cores",
        "",
        "Every virtual host and the controller share the cores: CPU is the busy time of the whole",
        f"machine during the re-run (split into the hosts' and the controller's), so CPU / {cores}",
        "is the shortest wall time this machine allows for that work.",
        "",
        "| hosts | fresh (s) | re-run (s) | re-run vs smallest | re-run CPU (s) | of it hosts (s) "
        f"| CPU / {cores} (s) | one host at a time (s) | one at a time / parallel |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in rows.items():
        rerun = r["rerun"]
        lines.append(
            f"| {n} | {r['fresh']['wall']:.0f} | {rerun['wall']:.0f} "
            f"| {rerun['wall'] / base['rerun']['wall']:.2f}x "
            f"| {rerun['cpu']:.0f} | {rerun['hosts_cpu']:.0f} "
            f"| {rerun['cpu'] / cores:.0f} | {r['serial']['wall']:.0f} "
            f"| {r['serial']['wall'] / rerun['wall']:.2f}x |"
        )
    lines += [
        "",
        f"## Each host capped at {host_cpus} CPU",
        "",
        "Each host's processes (its sshd and everything Ansible and Open MPI start there) run in",
        f"their own CPU cgroup limited to {host_cpus} CPU, so a host is equally fast in every",
        "cluster size, like a separate machine. The controller is not capped and shares what is",
        "left of the machine, as one laptop driving all Macs does.",
        "",
        "| hosts | re-run (s) | re-run vs smallest | hosts' CPU (s) | controller CPU (s) "
        "| one host at a time (s) | one at a time / parallel |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in rows.items():
        capped, serial = r["capped"], r["capped serial"]
        lines.append(
            f"| {n} | {capped['wall']:.0f} | {capped['wall'] / base['capped']['wall']:.2f}x "
            f"| {capped['hosts_cpu']:.0f} | {capped['cpu'] - capped['hosts_cpu']:.0f} "
            f"| {serial['wall']:.0f} | {serial['wall'] / capped['wall']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8", help="host counts, comma separated")
    parser.add_argument("--host-cpus", type=float, default=0.2,
                        help="CPUs each host may use in the capped re-run")
    args = parser.parse_args()
    pip_args = offline_pip_args()

    rows = {}
    for size in [int(n) for n in args.sizes.split(",")]:
        with TemporaryDirectory() as tmp:
            rows[size] = r = measure(size, args.host_cpus, pip_args, Path(tmp))
        print(f"{size} hosts: " + ", ".join(f"{k} {v['wall']:.0f} s" for k, v in r.items()),
              flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(report(rows, args.sizes, args.host_cpus))
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
