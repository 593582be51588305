"""Joining the launcher's world, and sharing rank 0's state with the other ranks."""

import contextlib
import functools
import itertools
import json
import os
import sys
import traceback
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map, tree_unflatten

# What each launcher tells its processes about the world size.
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MLX_WORLD_SIZE")
# Open MPI's all-reduce by message size, as rules for its tuned collectives (the format Open
# MPI 4 and 5 both read: 1 collective, the all-reduce (2), for communicators from 2 ranks, 2
# message sizes; from each, an algorithm). Below 1 MiB Open MPI's own choice (0), whose fewer
# steps were up to 4x faster there; from 1 MiB its ring (4), which moves 2(n-1)/n of the message
# through each rank's link, the least there is: a 64 MiB gradient on 3 and 4 ranks took 1.1-1.3x
# that time on the wire, against 2-3.4x with Open MPI's own choice
# (benchmarks/results/mpi_allreduce-1gbit.md).
OPENMPI_RULES = Path(__file__).with_name("openmpi-allreduce.rules")


def launcher_sizes():
    """{variable: world size} announced by mpirun / mlx.launch in this process's environment."""
    sizes = {k: int(os.environ[k]) for k in SIZE_VARIABLES if k in os.environ}
    if hostfile := os.environ.get("MLX_HOSTFILE"):  # mlx.launch ring: one entry per rank
        text = Path(hostfile).read_text().strip()  # empty for a single process
        sizes["MLX_HOSTFILE"] = len(json.loads(text)) if text else 1
    return sizes


def first_out_of_memory():
    """Linux: this rank is the first process a host out of memory loses (the ranks hold the
    memory), before its launcher and the supervisor that restarts the job. Nothing elsewhere."""
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def init():
    """The world group: strict under a launcher, so that failing to join it is an error. (Under
    train.yml's mpirun, Open MPI's all-reduce follows OPENMPI_RULES: the launch passes them.)"""
    sizes = launcher_sizes()
    if all(size == 1 for size in sizes.values()):  # no launcher, or a world of one process
        # Not MLX's first choice, MPI: under mpirun it starts MPI, finds one process and gives
        # up without finalizing it, and mpirun fails the job that succeeded (mlx 0.32).
        return mx.distributed.init(backend="ring")
    try:
        return mx.distributed.init(strict=True)
    except RuntimeError as e:
        raise SystemExit(f"train: error: launched as one of {max(sizes.values())} processes "
                         f"({_describe(sizes)}) but MLX could not join them: {e}") from None


def choose_openmpi_allreduce():
    """OPENMPI_RULES for a process that starts Open MPI outside train.yml's launch (which passes
    them to every rank itself: roles/launch, launch_openmpi_rules), as bench.yml's all-reduce
    and benchmarks/ do: Open MPI reads its parameters from the environment when MLX starts it.
    Unless the launcher set any of its tuned collectives' parameters (mpirun --mca
    coll_tuned_... reaches each rank as OMPI_MCA_coll_tuned_...), which then decide alone."""
    if not any(key.startswith("OMPI_MCA_coll_tuned_") for key in os.environ):
        os.environ.update(OMPI_MCA_coll_tuned_use_dynamic_rules="1",
                          OMPI_MCA_coll_tuned_dynamic_rules_filename=str(OPENMPI_RULES))


def check_size(group):
    """A world that is not the size the launcher announced is an error: the classic failure is
    every process silently training alone at world size 1."""
    wrong = {k: v for k, v in launcher_sizes().items() if v != group.size()}
    if wrong:
        raise SystemExit(f"train: error: MLX world size is {group.size()} but the launcher "
                         f"said {_describe(wrong)}; check that mpirun and MLX use the same MPI "
                         "(MLX_MPI_LIBNAME)")


@contextlib.contextmanager
def stop_all_on_error(group):
    """A rank that fails leaves at once. A normal exit would run MPI_Finalize, which waits for
    the ranks still training, and the whole job would hang instead of being stopped by mpirun."""
    try:
        yield
    except BaseException as error:
        if group.size() == 1:
            raise
        code = error.code if isinstance(error, SystemExit) else 1
        if isinstance(code, str):
            print(code, file=sys.stderr)
        elif not isinstance(error, SystemExit):
            traceback.print_exception(error)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def _describe(sizes):
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def from_rank0(tree, group):
    """Every rank gets rank 0's values (a sum in which the other ranks contribute zeros).

    The sums run here, one by one in the order of their keys: rank 0's tree may come from a
    checkpoint, whose keys are in another order than the tree the other ranks built (a LoRA
    model's optimizer state), and sums evaluated later in each rank's own order would pair
    different arrays (MPI_ERR_TRUNCATE, or a wrong value)."""
    if group.size() == 1:
        return tree
    keep = group.rank() == 0
    summed = tree_map(
        lambda a: mx.distributed.all_sum(a if keep else mx.zeros_like(a), group=group), tree)
    for _, array in sorted(tree_flatten(summed), key=lambda item: item[0]):
        mx.eval(array)
    return summed


@functools.cache
def comm_stream():
    """The CPU stream of a step's all-reduces: its own worker thread sends one bucket of
    gradients while the default stream computes the next (MLX runs each stream's work on a
    thread of its own, in the order it was started, waiting for inputs from other streams)."""
    return mx.new_stream(mx.cpu)


def sum_gradients(grads, group, bucket_bytes, wire_dtype=mx.float32):
    """Every rank's gradients summed: each rank's loss is its share of the global batch's mean
    (train.loop), so the sum is the mean's gradient without a pass over every gradient to
    divide it. Tensors travel concatenated in buckets of at least bucket_bytes on the wire (0:
    one all-reduce per tensor; the first tensors' bucket may be smaller) and as wire_dtype:
    bfloat16 halves the bytes, and the sums come back in each tensor's own dtype, so the weights
    and the optimizer stay float32. (mlx.nn.average_gradients divides, and has no wire dtype.)
    Buckets are filled from the last tensor back, the order in which the backward pass computes
    them, and each one's all-reduce starts on comm_stream() as soon as its gradients exist:
    given unevaluated gradients, they travel while the backward pass goes on, as PyTorch's DDP
    does. Any other all-reduce until these are evaluated must run on comm_stream() too, after
    them, in the same order on every rank."""
    if group.size() == 1:
        return grads
    buckets, bucket, size = [], [], 0
    for key, grad in reversed(tree_flatten(grads)):
        bucket.append((key, grad))
        size += grad.size * wire_dtype.size
        if size >= bucket_bytes:
            buckets.append(bucket)
            bucket, size = [], 0
    buckets += [bucket] if bucket else []
    return tree_unflatten([item for bucket in buckets
                           for item in all_sum_together(bucket, group, wire_dtype, comm_stream())])


def all_sum_together(items, group, wire_dtype=None, stream=None):
    """[(key, array)] summed over the group in one all-reduce: concatenated (as wire_dtype, if
    given), summed, and cut back into each array's shape and dtype. On a stream, the all-reduce
    starts at once and runs there, without holding up the default stream's work. Nothing else
    holds the concatenation, so the all-reduce sums in its buffer (MLX donates it: no copy of
    the bucket first, and one bucket less of memory)."""
    total = mx.distributed.all_sum(
        mx.concatenate([a.reshape(-1).astype(wire_dtype or a.dtype) for _, a in items]),
        group=group, stream=stream)
    if stream is not None:
        mx.async_eval(total)
    ends = list(itertools.accumulate(a.size for _, a in items))[:-1]
    return [(key, part.astype(a.dtype).reshape(a.shape))
            for (key, a), part in zip(items, mx.split(total, ends), strict=True)]
