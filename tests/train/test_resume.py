"""Checkpoints: atomic, complete, and a killed then resumed run ends where an uninterrupted one
does (also when the resumed run has two ranks and only rank 0 can read the checkpoint, and when
the newest checkpoints were damaged since)."""

import json
import os
import signal
import subprocess
import time

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
import pytest

from train import checkpoint, models

from .conftest import (
    ROOT,
    final_weights,
    metrics,
    mpirun_cmd,
    needs_mpirun,
    run,
    summary,
    train_cmd,
)

SETTINGS = ("--batch-size", "32", "--checkpoint-every", "20", "--log-every", "20",
            "--eval-every", "0")


def assert_same_weights(a, b):
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_allclose(wa[name], wb[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """200 steps straight through."""
    out = tmp_path_factory.mktemp("whole") / "run"
    run(train_cmd(*SETTINGS, "--steps", "200", "--out", out))
    return out


def test_killed_and_resumed_run_equals_uninterrupted(tmp_path, whole):
    killed = tmp_path / "killed"

    # A run far too long to finish, killed without warning once it has checkpointed.
    process = subprocess.Popen(train_cmd(*SETTINGS, "--steps", "100000", "--out", killed),
                               cwd=ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (killed / "checkpoints" / "step_00000040").exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL

    resumed = run(train_cmd(*SETTINGS, "--steps", "200", "--out", killed, "--resume")).stdout
    start = summary(killed)["resumed_from_step"]
    assert 40 <= start < 200 and f"(step {start})" in resumed
    assert_same_weights(killed, whole)
    # the killed run's records after its checkpoint were replaced, not duplicated
    assert [r["step"] for r in metrics(killed)] == [r["step"] for r in metrics(whole)]


def test_resume_skips_damaged_checkpoints_and_says_so(tmp_path, whole):
    out = tmp_path / "run"
    run(train_cmd(*SETTINGS, "--steps", "60", "--out", out))
    newest, before = (out / "checkpoints" / f"step_{s:08d}" for s in (60, 40))
    size = (newest / "model.safetensors").stat().st_size
    os.truncate(newest / "model.safetensors", size - 1000)  # as a power cut can leave it
    data = bytearray((before / "optimizer.safetensors").read_bytes())
    data[-5] ^= 0xFF  # same size: only the checksum sees it
    (before / "optimizer.safetensors").write_bytes(data)

    resumed = run(train_cmd(*SETTINGS, "--steps", "200", "--out", out, "--resume")).stdout
    assert f"[train] skipping checkpoint {newest}: model.safetensors has {size - 1000} bytes, " \
        f"its manifest says {size}\n[train] skipping checkpoint {before}: optimizer.safetensors " \
        f"does not match its sha256 in the manifest\n[train] resuming from " \
        f"{out / 'checkpoints' / 'step_00000020'} (step 20)\n" in resumed
    result = summary(out)
    assert result["resumed_from_step"] == 20 and [s["step"] for s in result[
        "checkpoints_skipped"]] == [60, 40]
    assert_same_weights(out, whole)


@pytest.mark.slow
@needs_mpirun
def test_two_ranks_resume_from_rank0_checkpoint(tmp_path):
    whole, first, other = tmp_path / "whole", tmp_path / "first", tmp_path / "rank1"
    run(train_cmd(*SETTINGS, "--steps", "80", "--out", whole))
    run(train_cmd(*SETTINGS, "--steps", "40", "--out", first))
    # rank 1's --out has no checkpoint: it must get step, weights and Adam state from rank 0
    rest = (*SETTINGS, "--steps", "80", "--resume")
    run(mpirun_cmd(train_cmd(*rest, "--out", first), train_cmd(*rest, "--out", other)))
    assert summary(first)["resumed_from_step"] == 40 and summary(first)["world_size"] == 2
    assert_same_weights(first, whole)
    assert not other.exists()


def test_resume_refuses_a_different_run(tmp_path):
    out = tmp_path / "run"
    run(train_cmd(*SETTINGS, "--steps", "20", "--out", out))
    result = run(train_cmd(*SETTINGS, "--steps", "40", "--out", out), check=False)
    assert result.returncode == 2 and "already has checkpoints; pass --resume" in result.stderr
    changed = [*SETTINGS, "--steps", "40", "--out", out, "--resume", "--seed", "1"]
    result = run(train_cmd(*changed), check=False)
    assert result.returncode == 2 and "was made with --seed 0, not 1" in result.stderr
    wider = [*SETTINGS, "--steps", "40", "--out", out, "--resume", "--width", "256"]
    result = run(train_cmd(*wider), check=False)
    assert result.returncode == 2 and "was made with --width 128, not 256" in result.stderr
    done = run(train_cmd(*SETTINGS, "--steps", "20", "--out", out, "--resume")).stdout
    assert "already at step 20 of 20; nothing to do" in done
    # Lost after its last checkpoint, before summary.json: resumed, it writes what it lacked.
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    finished = run(train_cmd(*SETTINGS, "--steps", "20", "--out", out, "--resume")).stdout
    assert "nothing to do" not in finished and "wrote summary.json" in finished
    again = json.loads((out / "summary.json").read_text())
    assert {k: again[k] for k in ("train_loss", "eval_loss", "eval_accuracy", "steps")} == {
        k: summary[k] for k in ("train_loss", "eval_loss", "eval_accuracy", "steps")}
    assert again["resumed_from_step"] == 20 and again["samples_per_s"] is None


def test_checkpoint_round_trip_and_half_written_ones_are_ignored(tmp_path):
    model, optimizer = models.MLP(4, 8), optim.Adam(learning_rate=0.1)
    optimizer.init(model.trainable_parameters())
    saved = checkpoint.save(tmp_path, 7, model, optimizer, {"seed": 3})
    assert saved.name == "step_00000007"
    assert sorted(p.name for p in saved.iterdir()) == [
        "manifest.json", "model.safetensors", "optimizer.safetensors", "state.json"]
    # a crash mid-write leaves only a hidden temporary directory, never a step_* one
    (tmp_path / "checkpoints" / ".tmp_step_00000009").mkdir()
    assert checkpoint.newest_first(tmp_path) == [saved]

    fresh, fresh_optimizer = models.MLP(4, 8), optim.Adam(learning_rate=0.1)
    state = checkpoint.load(saved, fresh, fresh_optimizer)
    assert state == {"step": 7, "config": {"seed": 3}}
    for (name, a), (_, b) in zip(sorted(model.parameters()["head"].items()),
                                 sorted(fresh.parameters()["head"].items()), strict=True):
        assert mx.array_equal(a, b), name
    assert fresh_optimizer.state["learning_rate"].item() == pytest.approx(0.1)
