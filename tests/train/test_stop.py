"""A stop request (the file DIR/stop) ends every rank at one agreed step with a checkpoint there,
and a resumed run ends where an uninterrupted one does; every rank's heartbeat shows progress."""

import json
import subprocess
import time

import pytest

from .conftest import ROOT, final_weights, mpirun_cmd, needs_mpirun, run, train_cmd
from .test_resume import assert_same_weights

SETTINGS = ("--batch-size", "32", "--checkpoint-every", "100", "--log-every", "100",
            "--eval-every", "0", "--steps", "600")


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def two_ranks(*args, out, other):
    """mpirun with two ranks; rank 1 is told another --out to show that it writes nothing."""
    return mpirun_cmd(train_cmd(*args, "--out", out), train_cmd(*args, "--out", other))


def wait_for(condition, timeout, process=None):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert process is None or process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


@pytest.mark.slow
@needs_mpirun
def test_stop_file_stops_both_ranks_at_one_step_and_resume_completes(tmp_path):
    whole, out, other = tmp_path / "whole", tmp_path / "run", tmp_path / "rank1"
    beats = tmp_path / "logs" / "rank.{rank}.heartbeat"
    # Same world size as the stopped run: summation order makes 600 steps of one process and
    # of two ranks differ in the last digits.
    run(two_ranks(*SETTINGS, out=whole, other=other))
    process = subprocess.Popen(two_ranks(*SETTINGS, "--heartbeat", beats, out=out, other=other),
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        files = [tmp_path / "logs" / f"rank.{r}.heartbeat" for r in (0, 1)]
        first = wait_for(lambda: read_json(files[0]), 120, process)  # step 0, before training
        wait_for(lambda: read_json(files[0])["step"] >= 1, 60, process)
        time.sleep(0.3)
        (out / "stop").write_text("")  # empty: the reason is "user"
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr

    stopped = json.loads((out / "stopped.json").read_text())
    step = stopped["step"]
    assert stopped == {"step": step, "reason": "user", "steps": 600} and 1 <= step < 600
    assert f"[train] stopped at step {step} (user)" in stdout
    assert (out / "checkpoints" / f"step_{step:08d}").is_dir()
    assert not (out / "summary.json").exists() and not (out / "stop").exists()
    assert not other.exists()  # only rank 0 writes the run's files
    for rank, path in enumerate(files):
        beat = read_json(path)
        assert beat["step"] == step and beat["time"] > first["time"], (rank, beat)
        assert beat["pid"] != first["pid"] if rank else beat["pid"] == first["pid"]

    resumed = run(two_ranks(*SETTINGS, "--resume", out=out, other=other)).stdout
    assert f"(step {step})" in resumed and (out / "summary.json").exists()
    assert not (out / "stopped.json").exists()
    assert_same_weights(out, whole)


def test_stop_requested_before_the_first_step(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "stop").write_text("time_limit\n")
    result = run(train_cmd(*SETTINGS, "--out", out))
    assert "[train] stopped at step 1 (time_limit)" in result.stdout
    assert read_json(out / "stopped.json") == {"step": 1, "reason": "time_limit", "steps": 600}
    assert sorted(final_weights(out)) and not (out / "summary.json").exists()
