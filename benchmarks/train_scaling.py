"""Data-parallel training on this machine, one run each: (a) samples/s with 2 ranks vs 1,
(b) step time with nn.average_gradients (bucketed) vs one all_sum per tensor on a model of many
small tensors, (c) the share of step time spent in gradient sync.

    .venv/bin/python -m benchmarks.train_scaling [--steps 100]

Writes benchmarks/results/train_scaling.md. Ranks are processes on this machine's cores
(`mpirun --bind-to none`), so the 2-rank speed-up is bounded by the free cores.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "train_scaling.md"
MPIRUN = [shutil.which("mpirun") or "mpirun", "--bind-to", "none", "--oversubscribe",
          *(["--allow-run-as-root"] if os.geteuid() == 0 else []), "-np", "2"]
SYNC_LAYERS, SYNC_WIDTH = 100, 32  # 200 tensors of at most 4 KB


def train(model, steps, out, ranks):
    cmd = [sys.executable, "-m", "train", "--model", model, "--steps", str(steps),
           "--batch-size", "256", "--eval-every", "0", "--checkpoint-every", "0",
           "--log-every", str(steps), "--out", str(out)]
    subprocess.run((MPIRUN if ranks == 2 else []) + cmd, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text()), " ".join(
        ["mpirun --bind-to none -np 2"] * (ranks == 2) + ["python"] + cmd[1:-2])


def sync_worker(steps):
    """Under mpirun: mean step and sync time of a deep narrow MLP with each way of averaging
    gradients, alternating the two every step so that load changes hit both alike."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    group = mx.distributed.init(strict=True)
    mx.random.seed(0)
    model = nn.Sequential(*[nn.Linear(SYNC_WIDTH, SYNC_WIDTH) for _ in range(SYNC_LAYERS)])
    x = mx.random.normal((8, SYNC_WIDTH))
    loss_and_grad = nn.value_and_grad(model, lambda m: (m(x) ** 2).mean())
    optimizer = optim.SGD(learning_rate=1e-3)
    modes = (("bucketed", 32 * 1024**2), ("per_tensor", 0))
    totals = {name: [0.0, 0.0] for name, _ in modes}  # step time, sync time
    for step in range(2 * (steps + 5)):  # the first 5 steps of each are warm-up
        name, bucket_bytes = modes[step % 2]
        tick = time.perf_counter()
        _, grads = loss_and_grad(model)
        mx.eval(grads)
        synced = time.perf_counter()
        grads = nn.average_gradients(grads, group=group, all_reduce_size=bucket_bytes)
        mx.eval(grads)
        sync = time.perf_counter() - synced
        optimizer.update(model, grads)
        mx.eval(model.parameters())
        if step >= 10:
            totals[name][0] += (time.perf_counter() - tick) / steps
            totals[name][1] += sync / steps
    if group.rank() == 0:
        print(json.dumps(totals))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--sync-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync_worker:
        return sync_worker(args.steps)

    rows = []
    with TemporaryDirectory() as tmp:
        for model in ("mlp", "cnn"):
            one, cmd1 = train(model, args.steps, Path(tmp) / f"{model}1", 1)
            two, cmd2 = train(model, args.steps, Path(tmp) / f"{model}2", 2)
            ratio = two["samples_per_s"] / one["samples_per_s"]
            print(f"{model}: {one['samples_per_s']:.0f} vs {two['samples_per_s']:.0f} samples/s, "
                  f"sync share {two['comm_time_share']:.1%}", flush=True)
            rows.append((model, one, two, ratio, cmd1, cmd2))
    sync_cmd = [*MPIRUN, sys.executable, "-m", "benchmarks.train_scaling", "--sync-worker",
                "--steps", str(args.steps)]
    sync = json.loads(subprocess.run(sync_cmd, cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout)
    print(f"sync: {sync}")

    lines = [
        "# Data-parallel training on one machine",
        "",
        f"One run each on the shared 2-core CI machine (load average {os.getloadavg()[0]:.1f} "
        "at the end), MLX CPU, Open MPI, `--bind-to none`; global batch 256 (128 per rank), "
        f"{args.steps} steps on `digits`. Other people's jobs share the 2 cores, so a second "
        "rank often finds no free core: repeated runs of (a) gave anything from 0.5x to 2.8x "
        "here. On Macs (a machine per rank, Accelerate BLAS) the same command measures real "
        "scaling.",
        "",
        f"Command: `.venv/bin/python -m benchmarks.train_scaling --steps {args.steps}`",
        "",
        "## (a) samples/s, 2 ranks vs 1 and (c) gradient sync share of step time",
        "",
        "| model | 1 rank samples/s | 2 ranks samples/s | 2 vs 1 | sync share (2 ranks) |",
        "|---|---:|---:|---:|---:|",
    ]
    for model, one, two, ratio, _, _ in rows:
        lines.append(f"| {model} | {one['samples_per_s']:.0f} | {two['samples_per_s']:.0f} | "
                     f"{ratio:.2f}x | {two['comm_time_share']:.1%} |")
    lines += ["", "Each run: " + "; ".join(f"`{cmd}`" for row in rows for cmd in row[4:]), ""]
    lines += [
        f"## (b) step time, {SYNC_LAYERS}-layer MLP of width {SYNC_WIDTH} "
        f"({2 * SYNC_LAYERS} small tensors), 2 ranks",
        "",
        "| gradient averaging | step time (ms) | of which sync (ms) |",
        "|---|---:|---:|",
        "| `nn.average_gradients` (one bucketed all_sum) | "
        f"{sync['bucketed'][0] * 1e3:.2f} | {sync['bucketed'][1] * 1e3:.2f} |",
        "| one `all_sum` per tensor (`all_reduce_size=0`) | "
        f"{sync['per_tensor'][0] * 1e3:.2f} | {sync['per_tensor'][1] * 1e3:.2f} |",
        "| per tensor vs bucketed | "
        f"{sync['per_tensor'][0] / sync['bucketed'][0]:.2f}x | "
        f"{sync['per_tensor'][1] / sync['bucketed'][1]:.2f}x |",
        "",
        "The two modes alternate step by step within one run (batch of 8, so that compute is "
        "small next to the 200 reductions).",
        "",
        "Command: `" + " ".join(["mpirun --bind-to none -np 2 python", *sync_cmd[-5:]]) + "`",
        "",
    ]
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
