"""All-reduce (sum) time per gradient size, with MLX's mpi or ring backend or mpi4py.

A size is a float32 gradient's bytes; with --dtype bfloat16 (MLX backends) the same gradient
travels in bfloat16, half the bytes, as train.yml's grad_dtype=bfloat16 sends it: each round
casts the float32 gradient to bfloat16 and the sum back, as train's average does every step, so
that the casts count against the halved bytes.

Start it like training: under mpirun (mpi, mpi4py), or once per host with MLX_RANK and
MLX_HOSTFILE set (ring). Rank 0 prints one JSON line:
{"backend", "dtype", "ranks", "sizes": [bytes], "seconds": [fastest all-reduce per size],
 "median_seconds": [median round per size], "rounds": [rounds per size]}.
The fastest round is what the links and backend can do (other load on a host only ever adds
time); the median is what a training step usually sees. A configuration is only clearly faster
than another when its median beats the other's minimum.
Every rank runs the same number of rounds (rank 0 decides from a timed round), so no rank
waits in a collective the others skipped. With --deadline the kernel ends the process when it
passes (SIGALRM, exit -14), also in a collective whose peer is gone: a hung run leaves nothing
running on its host.
"""

import argparse
import json
import signal
import statistics
import time


class Mpi4py:
    def __init__(self):
        import numpy as np
        from mpi4py import MPI

        self.np, self.MPI, self.comm = np, MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def operation(self, nbytes):
        buf = self.np.ones(nbytes // 4, dtype=self.np.float32)
        return lambda: self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def from_rank0(self, value):
        return self.comm.bcast(value, root=0)


class Mlx:
    def __init__(self, backend, dtype):
        import mlx.core as mx

        self.mx, self.dtype = mx, getattr(mx, dtype)
        if backend == "mpi":  # Open MPI's all-reduce as train chooses it (mpi4py keeps its own)
            from train import distributed

            distributed.choose_openmpi_allreduce()
        self.group = mx.distributed.init(strict=True, backend=backend)
        self.rank, self.size = self.group.rank(), self.group.size()

    def operation(self, nbytes):
        mx = self.mx
        x = mx.ones((nbytes // 4,), dtype=mx.float32)
        mx.eval(x)
        if self.dtype == mx.float32:
            return lambda: mx.eval(mx.distributed.all_sum(x, group=self.group))
        return lambda: mx.eval(
            mx.distributed.all_sum(x.astype(self.dtype), group=self.group).astype(mx.float32))

    def from_rank0(self, value):
        mine = self.mx.array(value if self.rank == 0 else 0, dtype=self.mx.int32)
        return self.mx.distributed.all_sum(mine, group=self.group).item()


def measure(comm, nbytes, seconds, max_rounds):
    run = comm.operation(nbytes)
    run()  # warm-up: connections, buffers
    t0 = time.perf_counter()
    run()
    rounds = int(min(max_rounds, max(5, seconds / max(time.perf_counter() - t0, 1e-6))))
    rounds = comm.from_rank0(rounds)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), rounds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["mpi", "ring", "mpi4py"], required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True,
                        help="gradient bytes in float32")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="what the gradient travels as (bfloat16: MLX backends)")
    parser.add_argument("--seconds", type=float, default=0.5, help="time budget per size")
    parser.add_argument("--max-rounds", type=int, default=50)
    parser.add_argument("--deadline", type=int, default=0,
                        help="seconds after which the process ends (0: none)")
    args = parser.parse_args()
    if args.backend == "mpi4py" and args.dtype != "float32":
        parser.error("mpi4py sums float32 only")
    signal.alarm(args.deadline)  # SIGALRM's default action: no handler, which a collective blocks

    comm = Mpi4py() if args.backend == "mpi4py" else Mlx(args.backend, args.dtype)
    fastest, median, rounds = zip(*(measure(comm, n, args.seconds, args.max_rounds)
                                    for n in args.sizes), strict=True)
    if comm.rank == 0:
        print(json.dumps({"backend": args.backend, "dtype": args.dtype, "ranks": comm.size,
                          "sizes": args.sizes, "seconds": fastest, "median_seconds": median,
                          "rounds": rounds}),
              flush=True)


if __name__ == "__main__":
    main()
