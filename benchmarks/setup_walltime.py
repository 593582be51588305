"""Wall time of setup.yml on 2, 4 and 8 virtual hosts, fresh and re-run (one run each).

    sudo .venv/bin/python -m benchmarks.setup_walltime [--sizes 2,4,8]

Writes benchmarks/results/setup_walltime.md. Work runs in parallel across hosts, so a re-run
on 8 hosts should take at most about twice as long as on 2 (a sequential ssh loop: 4x). The
re-run is also timed with --forks 1 (one host at a time), and the CPU time the whole machine
spent is recorded: all virtual hosts share this machine's cores, so once they are busy the
wall time follows the CPU work, which grows with the host count.
"""

import argparse
import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from tests.playbook import run_playbook
from tests.vcluster import VirtualCluster
from tests.wheelhouse import offline_pip_args

RESULTS = Path(__file__).parent / "results" / "setup_walltime.md"


def machine_cpu_seconds() -> float:
    """CPU time all cores spent busy since boot (/proc/stat, without idle and iowait)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed_setup(inventory, private_dir: Path, cmdline: str | None = None) -> tuple[float, float]:
    """(wall seconds, machine CPU seconds) of one successful setup.yml run."""
    cpu, start = machine_cpu_seconds(), time.monotonic()
    run = run_playbook("setup.yml", inventory, private_dir, cmdline=cmdline)
    elapsed, cpu = time.monotonic() - start, machine_cpu_seconds() - cpu
    if run.status != "successful":
        raise SystemExit(f"setup.yml failed:\n{run.stdout[-4000:]}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8", help="host counts, comma separated")
    args = parser.parse_args()
    pip_args = offline_pip_args()

    rows = []
    for size in [int(n) for n in args.sizes.split(",")]:
        with TemporaryDirectory() as tmp, VirtualCluster(
            hosts=size, extra_vars={"python_env_pip_extra_args": pip_args}
        ) as vc:
            fresh, _ = timed_setup(vc.inventory, Path(tmp) / "fresh")
            rerun, rerun_cpu = timed_setup(vc.inventory, Path(tmp) / "rerun")
            serial, _ = timed_setup(vc.inventory, Path(tmp) / "serial", cmdline="--forks 1")
            rows.append((size, fresh, rerun, rerun_cpu, serial))
            print(f"{size} hosts: fresh {fresh:.0f} s, re-run {rerun:.0f} s "
                  f"({rerun_cpu:.0f} CPU s), one host at a time {serial:.0f} s", flush=True)

    cores = os.cpu_count()
    base = rows[0]
    lines = [
        "# setup.yml wall time on the virtual cluster",
        "",
        f"One run per size on this {cores}-core machine; every virtual host and the controller",
        f"share those {cores} cores. CPU = busy time of the whole machine during the re-run, so",
        f"CPU / {cores} is the shortest wall time this machine allows for that work.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.setup_walltime --sizes {args.sizes}`",
        "",
        "| hosts | fresh (s) | re-run (s) | re-run vs smallest | re-run CPU (s) "
        f"| CPU / {cores} cores (s) | re-run, one host at a time (s) | one at a time / parallel |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, fresh, rerun, rerun_cpu, serial in rows:
        lines.append(
            f"| {n} | {fresh:.0f} | {rerun:.0f} | {rerun / base[2]:.2f}x | {rerun_cpu:.0f} "
            f"| {rerun_cpu / cores:.0f} | {serial:.0f} | {serial / rerun:.2f}x |"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
