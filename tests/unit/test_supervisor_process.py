"""roles/launch/files/supervisor.py: which process a recorded pid is (start time and boot id,
parsed from real outputs of Linux and macOS), and the back-off before a restart."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.plugins import load

supervisor = load("roles/launch/files/supervisor.py")

# cat /proc/PID/stat of `sleep` copied to "/tmp/we ird) (x" (Linux 6.x), and of an unreaped child.
STAT = ("14272 (we ird) (x) S 14271 14268 3518 0 -1 4194304 136 0 0 0 0 0 0 0 20 0 1 0 90683 "
        "2990080 428 18446744073709551615 94111659859968 94111659877897 140728002026752 0 0 0 0 "
        "6 0 1 0 0 17 0 0 0 0 0 0 94111659891984 94111659893248 94111675424768 140728002030105 "
        "140728002030124 140728002030124 140728002031592 0\n")
ZOMBIE = ("14318 (true) Z 14277 14268 3518 0 -1 4227084 48 0 0 0 0 0 0 0 20 0 1 0 90713 0 0 "
          "18446744073709551615 0 0 0 0 0 0 0 0 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
# macOS: `ps -o lstart= -p PID` prints "%a %b %e %T %Y" (the day padded), nothing for a gone pid.
LSTART = "Thu Nov  6 08:45:00 2025\n"


def test_the_start_time_is_field_22_of_proc_stat_whatever_the_command_name():
    assert supervisor.stat_start(STAT) == "90683"
    assert supervisor.stat_start(ZOMBIE) is None  # exited: not running, whoever reaps it


def test_how_a_zombie_ended_is_its_wait_status_in_proc_stat():
    """A rank killed while its launcher died too is left a zombie: the supervisor names its end
    from its wait status (the recorded zombie: `true`; then real ones of this host)."""
    assert supervisor.stat_end(STAT) is None  # it runs
    assert supervisor.stat_end(ZOMBIE) == "exited with code 0"
    children = [subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sh", "-c", "exit 3"])]
    children[0].kill()
    try:
        ends = []
        for child in children:
            deadline = time.monotonic() + 10
            while not (end := supervisor.stat_end(Path(f"/proc/{child.pid}/stat").read_text())):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            ends.append(end)
        assert ends == ["killed by signal 9", "exited with code 3"]
    finally:
        for child in children:
            child.wait()


def test_macos_start_time_from_ps_lstart():
    assert supervisor.lstart(LSTART) == "Thu Nov 6 08:45:00 2025"
    assert supervisor.lstart("") is None


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_recorded_process_runs_only_with_the_same_start_time_and_boot():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        job = {"boot_id": supervisor.boot_id(), **supervisor.identity("launcher", sleeper.pid)}
        assert supervisor.running(job, "launcher")
        assert not supervisor.running({**job, "launcher_start": "1"}, "launcher")  # recycled pid
        other_boot = "0b9a3f7e-5c1d-4e2a-8f6b-1d2c3e4f5a6b"
        assert not supervisor.running({**job, "boot_id": other_boot}, "launcher")
        assert not supervisor.running({**job, "launcher_start": None}, "launcher")
        assert not supervisor.running(job, "keeper")  # not recorded
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not supervisor.running(job, "launcher")


def restarts(*progressed):
    return [{"resumed_at": 1.0 if p else None} for p in progressed]


def test_backoff_doubles_while_restarts_train_nothing_and_resets_after_progress():
    assert supervisor.backoff([], 10) == 10
    assert supervisor.backoff(restarts(False), 10) == 20
    assert supervisor.backoff(restarts(False, False, False), 10) == 80
    assert supervisor.backoff(restarts(False, False, True), 10) == 10  # the last one trained
    assert supervisor.backoff(restarts(True, False), 10) == 20


def test_backoff_is_capped():
    assert supervisor.backoff(restarts(*[False] * 11), 10) == supervisor.BACKOFF_CAP == 300
    assert supervisor.backoff(restarts(*[False] * 99), 10) == 300


def test_max_restarts_has_a_range():
    start = ["start", "--run-dir", "r", "--lock", "l", "--max-restarts"]
    assert supervisor.parser().parse_args([*start, "100"]).max_restarts == 100
    for bad in ("101", "-1", "1000000"):
        with pytest.raises(SystemExit):
            supervisor.parser().parse_args([*start, bad])


def test_check_prints_the_jobs_options_settled_or_the_first_error_with_its_fix():
    """`supervisor.py check`, as a user runs it: start's job options with their defaults (the one
    statement of them), or exit 2 naming the flag, the value, its range and a value that works."""
    path = supervisor.__file__
    done = subprocess.run([sys.executable, path, "check", "--stall-timeout", "600"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {
        "time_limit": 86400, "stall_timeout": 600, "startup_timeout": 1800, "max_restarts": 2,
        "restart_backoff": 10, "stop_grace": 120, "elastic": None, "notify": None}
    bad = subprocess.run([sys.executable, path, "check", "--restart-backoff=0.5"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1] == (
        "supervisor.py check: error: argument --restart-backoff: '0.5' is not an integer from 0 "
        "to 300 — e.g. --restart-backoff=10")


def test_the_first_backoff_is_at_most_the_cap():
    start = ["start", "--run-dir", "r", "--lock", "l", "--restart-backoff"]
    assert supervisor.parser().parse_args([*start, "300"]).restart_backoff == 300
    with pytest.raises(SystemExit):
        supervisor.parser().parse_args([*start, "301"])
