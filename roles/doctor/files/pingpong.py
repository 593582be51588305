"""Ping-pong between every pair of MPI ranks (one rank per host): latency and bandwidth matrix.

Run under mpirun with one rank per host; rank 0 prints one JSON line:
{"hosts": [hostname by rank], "pairs": [{"a", "b", "latency_us", "gbps"}]}.
Pairs run one at a time so they do not share CPU or links with each other. The fastest round
counts: other load on a host only ever adds time, so the minimum is the link's own figure.
"""

import argparse
import json
import socket
import time

import numpy as np
from mpi4py import MPI


def pingpong(comm, peer, first, buf, seconds, min_reps):
    """Fastest round-trip time of `buf` bouncing between this rank and peer."""
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        if first:
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
        else:
            comm.Recv(buf, source=peer)
            comm.Send(buf, dest=peer)
        times.append(time.perf_counter() - t0)
        # The first rank decides when to stop, so both sides run the same number of rounds.
        done = first and len(times) >= min_reps and time.perf_counter() - start > seconds
        theirs = comm.sendrecv(done, dest=peer, source=peer)
        if done or theirs:
            return min(times)


def idle_barrier(comm):
    """A barrier that sleeps while it waits: ranks not in the measured pair must not spin on
    CPUs the pair needs (MPI's blocking calls busy-poll)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1 << 20, help="bandwidth message bytes")
    parser.add_argument("--seconds", type=float, default=0.2, help="time per measurement")
    parser.add_argument("--passes", type=int, default=3, help="measurements per pair")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname().split(".")[0])
    small = np.zeros(8, dtype=np.uint8)
    large = np.zeros(args.size, dtype=np.uint8)
    best = {}  # (a, b) -> [fastest small round trip, fastest large round trip]
    # Several passes over all pairs: a pair measured while its hosts were busy gets more chances.
    for _ in range(args.passes):
        for a in range(size):
            for b in range(a + 1, size):
                idle_barrier(comm)
                if rank in (a, b):
                    peer = b if rank == a else a
                    times = (pingpong(comm, peer, rank == a, small, args.seconds / 3, 10),
                             pingpong(comm, peer, rank == a, large, args.seconds, 3))
                    best[(a, b)] = [min(t) for t in zip(best.get((a, b), times), times,
                                                        strict=True)]
    pairs = [{"a": a, "b": b, "latency_us": rtt / 2 * 1e6, "gbps": 2 * args.size * 8 / big / 1e9}
             for (a, b), (rtt, big) in best.items() if rank == a]
    idle_barrier(comm)
    pairs = [p for chunk in comm.gather(pairs, root=0) or [] for p in chunk]
    if rank == 0:
        print(json.dumps({"hosts": hosts, "size": args.size, "pairs": pairs}), flush=True)


if __name__ == "__main__":
    main()
