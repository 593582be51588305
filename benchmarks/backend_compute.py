"""Where a training step's time goes under each backend: averaging gradients and the rest.

    sudo .venv/bin/python -m benchmarks.backend_compute [--rounds 2] [--widths 4096,256]

On a 3-host virtual cluster (one rank each) the same mlp job runs through train.yml with
-e backend=mpi and -e backend=ring, alternating, at each width (4096: a 65 MiB gradient; 256:
a tiny one). summary.json gives the samples/s and the share of a step spent averaging; the rest
is the forward and backward pass and the optimizer. bench.yml times a backend's all-reduce
alone; this shows what the backend costs the computation around it on this machine, where the
virtual hosts share 2 cores. Writes benchmarks/results/backend_compute.md.
"""

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.cluster import set_up_cluster, train_yml, write_results

RESULTS = Path(__file__).parent / "results" / "backend_compute.md"
BATCH = 48


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--widths", default="4096,256")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    runs = {}  # (width, backend) -> [(step s, averaging s)]
    with set_up_cluster(hosts=3, slots=[1, 1, 1]) as (vc, workdir):
        for width in widths:
            for n in range(args.rounds):
                for backend in ("mpi", "ring") if n % 2 == 0 else ("ring", "mpi"):
                    run = f"w{width}-{backend}-{n}"
                    train_yml(vc, workdir, run, [
                        "-e", "model=mlp", "-e", f"width={width}", "-e", f"steps={args.steps}",
                        "-e", f"batch_size={BATCH}", "-e", "eval_every=0",
                        "-e", "checkpoint_every=0", "-e", f"backend={backend}"])
                    summary = json.loads((workdir / "runs" / run / "summary.json").read_text())
                    step = BATCH / summary["samples_per_s"]
                    runs.setdefault((width, backend), []).append(
                        (step, summary["comm_time_share"] * step))
                    print(f"{run}: step {step:.3f} s", flush=True)

    lines = [
        "# A training step's time under each backend: averaging and the rest",
        "",
        f"3 virtual hosts, one rank each, unshaped links; mlp on digits, {args.steps} steps, "
        f"global batch {BATCH}, train.yml with -e backend=mpi and -e backend=ring alternating, "
        f"{args.rounds} rounds per width; the shared 2-core machine.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.backend_compute --rounds {args.rounds} "
        f"--widths {args.widths}`",
        "",
        "Median over rounds, seconds per step:",
        "",
        "| width | backend | step | averaging | the rest (compute, optimizer) |",
        "|---:|---|---:|---:|---:|",
    ]
    for (width, backend), values in runs.items():
        step = statistics.median(v[0] for v in values)
        avg = statistics.median(v[1] for v in values)
        lines.append(f"| {width} | {backend} | {step:.3f} | {avg:.3f} | "
                     f"{statistics.median(v[0] - v[1] for v in values):.3f} |")
    write_results(RESULTS, lines)


if __name__ == "__main__":
    main()
