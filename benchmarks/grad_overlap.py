"""A training step of a link-bound model on capped hosts: its compute alone, its averaging alone,
the step as it was (compute, then averaging) and train's (each bucket's all-reduce started while
the backward pass goes on), against max(compute, averaging) and against what no overlap within
a step can beat: max(compute, forward + averaging), as no gradient exists before the forward
pass ends.

    sudo .venv/bin/python -m benchmarks.grad_overlap [--rounds 10] [--passes 3] [--hosts 2]
        [--cpus 1] [--rate 1gbit] [--layers 8] [--width 1024] [--batch 16] [--bucket-mib 4]

A virtual cluster of --hosts (one rank each, each host capped at --cpus CPUs, bridge0 shaped to
--rate) is set up with setup.yml; under mpirun with train.yml's flags (MLX mpi, train's Open MPI
rules) every host trains an MLP of --layers square layers of --width (float32) with Adam on
--batch examples per rank, in rounds that alternate the ways of running a step (and the forward
pass alone), so that a slow spell of the machine hits all of them.
Overlapping can only hide the averaging's wait for the link, not its work: the hosts' caps must
add up to no more than this machine's 2 cores (2 hosts of 1 CPU: each its own core), or the
all-reduce's copies and sums take the CPU the backward pass needs.
Writes benchmarks/results/grad_overlap-<hosts>hosts-<rate>-cpus<cpus>-batch<batch>.md.
"""

import argparse
import json
import shlex
import statistics
import subprocess
from pathlib import Path

from benchmarks.cluster import set_up_cluster, write_results
from benchmarks.launch_overhead import LIBMPI, VERSION, as_user, mpi

RESULTS = Path(__file__).parent / "results" / "grad_overlap.md"
WAYS = {
    "compute": "compute alone: forward, backward, Adam (no averaging)",
    "forward": "forward alone: the loss, before which no gradient exists",
    "averaging": "averaging alone: train's average of the step's gradients, already computed",
    "before": "step as it was: compute the gradients, average them, update",
    "after": "train's step: each bucket's all-reduce starts while the backward pass goes on, "
             "its parameters' update while the next buckets travel",
}
STEP = """
import json, sys, time
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from train import distributed, loop
layers, width, batch, bucket, rounds = map(int, sys.argv[1:6])
distributed.choose_openmpi_allreduce()  # as train does
group = mx.distributed.init(strict=True)
mx.random.seed(0)
model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
optimizer = optim.Adam(learning_rate=1e-5)
optimizer.init(model.trainable_parameters())
inputs = mx.random.normal((batch, width), key=mx.random.key(group.rank()))
mx.eval(model.parameters(), optimizer.state, inputs)
objective = lambda model, x: model(x).square().mean()
loss_and_grad = nn.value_and_grad(model, objective)
average = lambda grads: distributed.sum_gradients(grads, group, bucket)


def step(way):
    loss, grads = loss_and_grad(model, inputs)
    if way != "after":  # the gradients first, as train's loop did
        mx.eval(loss, grads)
    averaged = grads if way == "compute" else average(grads)
    if way == "after":  # train's step: the update of each bucket's parameters starts too
        loop.update(optimizer, model, averaged)
    else:
        mx.eval(averaged)
        optimizer.update(model, averaged)
    mx.eval(loss, model.parameters(), optimizer.state)


_, computed = loss_and_grad(model, inputs)
mx.eval(computed)
ways = {"compute": lambda: step("compute"), "forward": lambda: mx.eval(objective(model, inputs)),
        "averaging": lambda: mx.eval(average(computed)),
        "before": lambda: step("before"), "after": lambda: step("after")}
times = {way: [] for way in ways}
for round in range(rounds + 1):  # the first round connects and fills the buffer cache
    for way, run in ways.items():
        start = time.perf_counter()
        run()
        times[way].append(time.perf_counter() - start)
    if round == 0:
        loop.keep_freed_buffers()
if group.rank() == 0:
    print(json.dumps({way: t[1:] for way, t in times.items()}))
"""


def measure(vc, args):
    """{way: [seconds of each round]} on rank 0 of one mpirun over the 3 hosts' bridge0."""
    for host in vc.hosts:  # each host has its own /tmp: the script goes to every home
        vc.run(host, "cat >overlap.py", user=host.user, input=STEP)
    argv = mpi.mpirun_argv("/usr/bin/mpirun", "mlx-cluster/hostfile", len(vc.hosts), VERSION,
                           interface="bridge0", env={"MLX_MPI_LIBNAME": LIBMPI})
    script = ["mlx-cluster/venv/bin/python", "overlap.py", args.layers, args.width, args.batch,
              args.bucket_mib << 20, args.rounds]
    line = f"cd && {shlex.join(argv + [str(a) for a in script])}"
    done = subprocess.run(as_user(vc, vc.hosts[0], line), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=1800)
    if done.returncode:
        raise SystemExit(f"the steps failed:\n{done.stdout}\n{done.stderr}")
    times = json.loads(done.stdout.strip().splitlines()[-1])
    print({way: f"{min(t) * 1e3:.0f} ms" for way, t in times.items()}, flush=True)
    return times


def bound(times, forward):
    """max(compute, averaging) of {way: seconds}; with forward, max(compute, forward +
    averaging)."""
    return max(times["compute"], forward * times["forward"] + times["averaging"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket-mib", type=int, default=4)
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    with set_up_cluster(hosts=args.hosts, shape=f"bridge0={args.rate}", cpus=args.cpus) as (vc, _):
        passes = [measure(vc, args) for _ in range(args.passes)]
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    rounds = {way: [t for times in passes for t in times[way]] for way in WAYS}
    fastest = {way: min(t) for way, t in rounds.items()}
    median = {way: statistics.median(t) for way, t in rounds.items()}
    # The fastest step against the bounds of the fastest ways, medians alike.
    ratios = {way: [t[way] / bound(t, forward) for forward in (0, 1) for t in (fastest, median)]
              for way in ("before", "after")}
    mib = args.layers * (args.width + 1) * args.width * 4 / (1 << 20)
    lines = [
        "# Overlapping the gradients' averaging with the backward pass",
        "",
        f"{args.hosts} virtual hosts (one rank each), each capped at {args.cpus} CPUs (its own",
        f"CPU cgroup) on the shared 2-core machine, over bridge0 (veth, shaped to {args.rate}",
        "with tc tbf); MLX mpi under mpirun with train.yml's flags and train's Open MPI rules.",
        f"The model: an MLP of {args.layers} layers of {args.width}x{args.width} (float32, "
        f"{mib:.0f} MiB of gradients",
        f"in {args.bucket_mib} MiB buckets: train's --grad-bucket-bytes), Adam, {args.batch} "
        "examples per rank: its",
        f"averaging alone takes {median['averaging'] / median['compute']:.1f}x its compute alone"
        " (medians). Each round runs the five ways one",
        f"after the other; {args.passes} launches of {args.rounds} rounds (after one that",
        "connects). Ratios: the fastest step over the larger of the fastest compute and",
        "averaging; the median over the larger median. No overlap within a step starts the",
        "averaging before the forward pass ends, so the step's bound is max(compute, forward +",
        "averaging): ratios to it in the last two columns.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.grad_overlap --rounds {args.rounds} "
        f"--passes {args.passes} --hosts {args.hosts} --cpus {args.cpus} --rate {args.rate} "
        f"--layers {args.layers} --width {args.width} --batch {args.batch} "
        f"--bucket-mib {args.bucket_mib}`",
        "",
        "| way | fastest ms | median ms | / max(compute, averaging): fastest | median "
        "| / max(compute, forward + averaging): fastest | median |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for way, name in WAYS.items():
        ratio = " | ".join(f"{r:.2f}x" for r in ratios[way]) if way in ratios else " |  |  | "
        lines.append(f"| {name} | {fastest[way] * 1e3:.0f} | {median[way] * 1e3:.0f} | {ratio} |")
    both = sum(median[way] for way in ("compute", "averaging"))
    lines += [
        "",
        f"Medians: max(compute, averaging) {bound(median, 0) * 1e3:.0f} ms, max(compute, forward"
        f" + averaging) {bound(median, 1) * 1e3:.0f} ms, compute + averaging {both * 1e3:.0f} ms.",
        f"Machine load average before: {' '.join(load)}; after: {' '.join(load_after)}.",
    ]
    write_results(RESULTS.with_stem(f"grad_overlap-{args.hosts}hosts-{args.rate}-cpus{args.cpus}"
                                    f"-batch{args.batch}"), lines)


if __name__ == "__main__":
    main()
