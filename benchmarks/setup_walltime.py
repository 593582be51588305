"""Wall time of setup.yml on 2, 4 and 8 virtual hosts, fresh and re-run (one run each).

    sudo .venv/bin/python -m benchmarks.setup_walltime [--sizes 2,4,8]

Writes benchmarks/results/setup_walltime.md. Work runs in parallel across hosts, so a re-run
on 8 hosts should take at most about twice as long as on 2 (a sequential ssh loop: 4x).
"""

import argparse
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from tests.playbook import run_playbook
from tests.vcluster import VirtualCluster
from tests.wheelhouse import offline_pip_args

RESULTS = Path(__file__).parent / "results" / "setup_walltime.md"


def timed_setup(inventory, private_dir: Path) -> float:
    start = time.monotonic()
    run = run_playbook("setup.yml", inventory, private_dir)
    elapsed = time.monotonic() - start
    if run.status != "successful":
        raise SystemExit(f"setup.yml failed:\n{run.stdout[-4000:]}")
    return elapsed


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
            fresh = timed_setup(vc.inventory, Path(tmp) / "fresh")
            rerun = timed_setup(vc.inventory, Path(tmp) / "rerun")
            rows.append((size, fresh, rerun))
            print(f"{size} hosts: fresh {fresh:.0f} s, re-run {rerun:.0f} s", flush=True)

    base_fresh, base_rerun = rows[0][1], rows[0][2]
    lines = [
        "# setup.yml wall time on the virtual cluster",
        "",
        "One run per size on the shared 2-core CI machine; all hosts share those 2 cores,",
        "so real Macs (a machine each) scale better than this.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.setup_walltime --sizes {args.sizes}`",
        "",
        "| hosts | fresh (s) | re-run (s) | fresh vs smallest | re-run vs smallest |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, fresh, rerun in rows:
        ratios = f"{fresh / base_fresh:.2f}x | {rerun / base_rerun:.2f}x"
        lines.append(f"| {n} | {fresh:.0f} | {rerun:.0f} | {ratios} |")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
