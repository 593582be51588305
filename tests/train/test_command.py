"""`python -m train --command CMD`: any program as a rank, run for real on this machine."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train.conftest import ROOT, train_cmd


def start(tmp_path, command, *args, env=None):
    out = tmp_path / "run"
    cmd = train_cmd("--out", out, "--heartbeat", out / "logs" / "rank.{rank}.heartbeat",
                    "--command", command, *args)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    return proc, out


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has ended; only its parent has not read its status yet.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(") ")[1][0] != "Z"


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def program_pid(out):
    """The pid the program wrote to DIR/pid (its cwd is the run directory)."""
    assert wait_for(lambda: (out / "pid").exists() and (out / "pid").read_text().strip(), 20)
    return int((out / "pid").read_text())


def test_the_program_runs_in_the_run_directory_with_paths_and_the_environment_first(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc, out = start(tmp_path, "sh -c 'pwd; echo {data}; command -v python; echo {model}'",
                      "--data", data, "--model", "owner/repo", env={"PATH": "/usr/bin:/bin"})
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, output
    lines = output.splitlines()
    assert lines[1:5] == [str(out), str(data), str(Path(sys.executable).parent / "python"),
                          "owner/repo"], output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["output_lines"] == 4, summary
    beat = json.loads((out / "logs" / "rank.0.heartbeat").read_text())
    assert beat["step"] == 4, beat


def test_a_failing_program_fails_the_rank_without_a_summary(tmp_path):
    proc, out = start(tmp_path, "sh -c 'echo bad; exit 3'", env={"OMPI_COMM_WORLD_RANK": "0"})
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 3, output
    assert "rank 0: exited with code 3" in output
    assert not (out / "summary.json").exists()


def test_only_rank_0_writes_the_summary(tmp_path):
    proc, out = start(tmp_path, "true", env={"OMPI_COMM_WORLD_RANK": "1",
                                             "OMPI_COMM_WORLD_SIZE": "2"})
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0 and "rank 1 of 2: true" in output, output
    assert not (out / "summary.json").exists()
    assert (out / "logs" / "rank.1.heartbeat").exists()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "stop file"])
def test_nothing_of_the_program_outlives_its_rank(tmp_path, how):
    # The program ignores nothing: it sleeps in the foreground of its shell.
    proc, out = start(tmp_path, "sh -c 'echo $$ > pid; exec sleep 300'")
    pid = program_pid(out)
    if how == "stop file":
        (out / "stop").write_text("user\n")
    else:
        proc.send_signal(getattr(signal, how))
    proc.wait(timeout=30)
    assert wait_for(lambda: not alive(pid), 10), f"the program outlived its rank ({how})"
    assert proc.returncode == (-9 if how == "SIGKILL" else 128 + signal.SIGTERM), proc.returncode


@pytest.mark.parametrize(
    ("command", "extra", "message"),
    [("x {model}", [], "argument --command: uses {model} but no --model was given"),
     ("x {data}", [], "argument --command: uses {data} but no --data was given"),
     ('x "open', [], "argument --command: cannot split it like a shell would"),
     ("", [], "argument --command: empty"),
     ("x {data}", ["--data", "/no/such/path"], "data path '/no/such/path' does not exist")],
)
def test_a_command_that_cannot_run_is_refused_before_any_rank_starts(command, extra, message):
    done = subprocess.run(train_cmd("--check", "4", "--command", command, *extra), cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr
