"""roles/launch/files/supervisor.py for real on this machine: a "cluster" of two local ranks under
the real mpirun, launched as train.yml launches them (command.sh in the run directory, each rank
`cd <work dir> && exec python -m train --out <work dir>/runs/<name> ...`). Faults are real
signals; every test ends with no process of its job left, also when it fails."""

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.browser import browse, needs_chromium, row
from tests.unit.plugins import load
from train import checkpoint

from .conftest import (
    MPIRUN,
    PAGE,
    ROOT,
    disk_bytes,
    mpirun_cmd,
    needs_mpirun,
    needs_root,
    run,
    summary,
    train_cmd,
)
from .test_resume import assert_same_weights

pytestmark = [needs_mpirun, pytest.mark.timeout(180)]
SUPERVISOR = ROOT / "roles" / "launch" / "files" / "supervisor.py"
supervisor_module = load("roles/launch/files/supervisor.py")
launch = load("roles/launch/filter_plugins/launch.py")
page = load("roles/launch/filter_plugins/page.py")
SETTINGS = ("--batch-size", "32", "--checkpoint-every", "100", "--log-every", "100",
            "--eval-every", "0")
# Long enough that a fault injected at step 150 or 450 lands mid-run, not in the final checkpoint:
# about 300 steps a second here, 3 s in all (the test that needs more time pauses the ranks).
STEPS = 1000
STALL = 10  # --stall-timeout of these tests, seconds: the least the supervisor takes
names = itertools.count()


def command_sh(work, name, steps, ranks, settings):
    """train.yml's command.sh (its rank program) with this machine's mpirun, Python and train/."""
    layout = {"work_dir": shlex.quote(str(work)), "python": shlex.quote(sys.executable)}
    argv = [MPIRUN, "--bind-to", "none", "--oversubscribe",
            *(["--allow-run-as-root"] if os.geteuid() == 0 else []), "-np", str(ranks),
            *launch.launch_rank_program(layout, f"runs/{name}"), *settings, "--steps", str(steps),
            f"--heartbeat=runs/{name}/logs/rank.{{rank}}.heartbeat"]
    return f"#!/bin/sh\nexport PYTHONPATH={ROOT}\nexec {shlex.join(argv)} \"$@\"\n"


def supervisor(*args, check=True):
    return run([sys.executable, SUPERVISOR, *map(str, args)], check=check, timeout=400)


class Job:
    """One supervised run in its own work dir; cleanup() kills whatever of it is left."""

    def __init__(self, tmp_path, kind, steps=STEPS, ranks=2, settings=SETTINGS):
        self.work = tmp_path / "work"
        self.name = f"{kind}-{os.getpid()}-{next(names)}"
        self.dir = self.work / "runs" / self.name
        (self.dir / "logs").mkdir(parents=True)
        (self.dir / "command.sh").write_text(command_sh(self.work, self.name, steps, ranks,
                                                        settings))
        self.hosts = json.dumps([{"rank": r, "host": f"h{r}", "address": "local"}
                                 for r in range(ranks)])
        self.lock = tmp_path / "supervisor.lock"
        self.pattern = supervisor_module.job_pattern(self.dir)
        self.pid = None

    def start(self, *options):
        out = supervisor("start", "--run-dir", self.dir, "--lock", self.lock, "--rank-hosts",
                         self.hosts, "--stall-timeout", STALL, "--restart-backoff", 1, "--poll",
                         0.5, *options).stdout
        assert out.startswith("started "), out
        self.pid = int(out.split()[1])

    def job(self):
        return json.loads((self.dir / "job.json").read_text())

    def status(self):
        """This run's row of `supervisor.py status --run`: with its ranks, hosts and metrics."""
        out = supervisor("status", "--runs-dir", self.work / "runs", "--json", "--run", self.name)
        return json.loads(out.stdout)[0]

    def wait(self, condition, timeout):
        """The job record once condition(job) holds; fails past the timeout."""
        deadline = time.monotonic() + timeout
        while not condition(job := self.job()):
            assert time.monotonic() < deadline, (job, self.log())
            time.sleep(0.1)
        return job

    def wait_step(self, step, timeout=90):
        return self.wait(lambda j: j["state"] == "running" and (j["last_step"] or 0) >= step,
                         timeout)

    def wait_ranks_at(self, step, timeout=90):
        """Every rank's heartbeat once all have reached step; none if the job stopped first."""
        beats = [self.dir / "logs" / f"rank.{rank}.heartbeat" for rank in (0, 1)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.job()["state"] not in ("starting", "running"):
                return []
            try:
                read = [json.loads(b.read_text()) for b in beats]
            except (FileNotFoundError, json.JSONDecodeError):  # not yet written, or mid-write
                read = []
            if read and all(beat["step"] >= step for beat in read):
                return read
            time.sleep(0.01)
        raise AssertionError(f"the ranks did not reach step {step}: {self.log()}")

    def wait_end(self, timeout):
        job = self.wait(lambda j: j["state"] in ("finished", "stopped", "failed"), timeout)
        deadline = time.monotonic() + 10  # the daemon exits right after its last record
        while alive(self.pid):
            assert time.monotonic() < deadline, "the supervisor did not exit"
            time.sleep(0.1)
        return job

    def rank_pid(self, rank):
        return json.loads((self.dir / "logs" / f"rank.{rank}.heartbeat").read_text())["pid"]

    def left(self):
        """pids of processes of this job still running (any state but zombie)."""
        out = subprocess.run(["pgrep", "-f", "--", self.pattern], capture_output=True, text=True)
        pids = [int(p) for p in out.stdout.split()]
        return [p for p in pids if state(p) not in (None, "Z")]

    def log(self):
        path = self.dir / "supervisor.log"
        return path.read_text() if path.exists() else ""

    def cleanup(self):
        """KILL the keeper (self.pid), then its supervisor, then the ranks."""
        pids = [self.pid, self.job()["supervisor_pid"]] if self.pid else []
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", "--", self.pattern])


def alive(pid):
    return state(pid) not in (None, "Z")


def state(pid):
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return out.stdout.strip()[:1] or None


@pytest.fixture
def jobs(tmp_path):
    made = []

    def make(kind, steps=STEPS, **options):
        made.append(Job(tmp_path, kind, steps, **options))
        return made[-1]

    yield make
    for job in made:
        job.cleanup()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The same job run straight through, two ranks: its final checkpoint is the reference."""
    out = tmp_path_factory.mktemp("whole") / "run"
    app = train_cmd(*SETTINGS, "--steps", STEPS, "--out", out)
    run(mpirun_cmd(app, train_cmd(*SETTINGS, "--steps", STEPS, "--out", out.with_name("r1"))))
    return out


@pytest.mark.slow
@needs_chromium
def test_frozen_rank_is_found_and_the_job_resumes(jobs, uninterrupted, tmp_path):
    """...and the run's page shows it: stalled, with the suspect, then the restart."""
    job = jobs("stall")
    job.start("--restart-backoff", 3)  # time to read the stalled job's page before the restart
    # A few points of the curves (one every 100 steps); read from the ranks' own heartbeats, as
    # job.json's step, a supervisor poll behind, may come when the ranks are near their end.
    assert job.wait_ranks_at(450), job.log()
    frozen = job.rank_pid(1)
    os.kill(frozen, signal.SIGSTOP)
    fault = time.time()
    while (row := job.status())["ranks"][1]["age"] < page.STALE_BEAT:  # before the stall timeout
        assert time.time() - fault < STALL - 2, row["ranks"]
        time.sleep(0.2)
    stalled = page.write_page(tmp_path / "stalled", row)
    job.wait(lambda j: j["state"] == "restarting", 60)
    judged = page.write_page(tmp_path / "judged", job.status())  # the supervisor's suspect

    done = job.wait_end(120)
    ended = page.write_page(tmp_path / "ended", job.status())
    restart = done["restarts"][0]
    detected, resumed = restart["at"] - fault, restart["resumed_at"] - fault
    print(f"\nSIGSTOP of rank 1: detected after {detected:.1f} s (stall timeout {STALL} s), "
          f"training again after {resumed:.1f} s")
    # the last heartbeat before the fault is at most 1 s old; then polling and the probe
    assert STALL - 1.5 < detected < STALL + 5, job.log()
    assert done["state"] == "finished" and done["reason"] == "completed", job.log()
    assert len(done["restarts"]) == 1 and restart["reason"] == "stall"
    assert restart["suspect"].startswith(f"rank 1 on h1: process {frozen} is stopped (state T")
    assert restart["from_step"] >= 100 and "--resume" in job.log()
    assert (job.dir / "exit_status").read_text() == "0\n"
    assert_same_weights(job.dir, uninterrupted)
    assert job.left() == [] and state(frozen) is None
    assert_pages(tmp_path, stalled, judged, ended, frozen)


def assert_pages(tmp_path, stalled, judged, ended, frozen):
    """The job's page as Chromium shows it: with rank 1 stopped, then once the supervisor named
    it, and the job once finished."""
    dom = browse(tmp_path / "stalled" / "index.html", screenshot=tmp_path / "stalled.png")
    assert (tmp_path / "stalled.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert '<meta http-equiv="refresh"' in dom and not re.search(r"(src|href)=", dom)
    for curve in ("train", "speed"):  # the curves, a few points each
        assert len(re.search(rf'<polyline class="{curve}" points="([^"]*)"', dom)[1].split()) >= 4
    cells, marked = row(dom, "ranks", 1)
    assert cells[1] == "h1" and int(cells[4].split()[0]) >= page.STALE_BEAT and marked == "stalled"
    cells, marked = row(dom, "ranks", 0)
    assert cells[1] == "h0" and cells[2] == "training" and marked == "" and cells[5] == ""
    assert " / " in row(dom, "hosts", "h0")[0][1]  # its memory: available / total
    assert stalled["state"] == "running" and stalled["suspect"] is None

    dom = browse(tmp_path / "judged" / "index.html")
    suspect = f"rank 1 on h1: process {frozen} is stopped (state T"
    assert re.search(rf'<span id="suspect">suspect: {re.escape(suspect)}', dom)
    # (stalled too, or not: the launcher's end may let the stopped rank run and beat once)
    assert "suspect" in row(dom, "ranks", 1)[0][5] and "suspect" not in row(dom, "ranks", 0)[0][5]
    timeline = re.search(r'<table id="events">(.*?)</table>', dom, re.S)[1]
    assert f"<td>stall</td><td>suspect: {suspect}" in timeline and "<td>restart</td>" in timeline
    assert [e["what"] for e in judged["events"]] == ["started", "stall", "restart"]

    html = (tmp_path / "ended" / "index.html").read_text()
    assert "http-equiv" not in html and not ended["live"]
    assert [e["what"] for e in ended["events"]] == [
        "started", "stall", "restart", "training again", "finished"]
    assert [(r["rank"], r["host"], r["phase"]) for r in ended["ranks"]] == [
        (0, "h0", "exiting"), (1, "h1", "exiting")]


@pytest.mark.slow
def test_killed_rank_is_restarted(jobs, uninterrupted):
    job = jobs("killed")
    job.start()
    job.wait_step(150)
    victim = job.rank_pid(1)
    # A host out of memory (Linux) loses a rank first: the ranks hold the memory, the launcher
    # (the oom test) second, and the supervisor, which restarts them, last.
    assert Path(f"/proc/{victim}/oom_score_adj").read_text() == "1000\n"
    os.kill(victim, signal.SIGKILL)
    fault = time.time()

    done = job.wait_end(120)
    restart = done["restarts"][0]
    detected, resumed = restart["at"] - fault, restart["resumed_at"] - fault
    print(f"\nSIGKILL of rank 1: detected after {detected:.1f} s, training again after "
          f"{resumed:.1f} s")
    assert done["state"] == "finished" and len(done["restarts"]) == 1, job.log()
    assert restart["reason"] == "rank_failed" and detected < 5
    assert restart["suspect"] == "rank 1 on h1: killed by signal 9 (out of memory? a model or " \
        "batch too big for the host, or killed by hand)", restart
    assert_same_weights(job.dir, uninterrupted)
    assert job.left() == []


@pytest.mark.slow
@needs_root
def test_full_disk_fails_a_checkpoint_and_the_job_resumes_once_space_is_freed(small_disk, jobs,
                                                                             tmp_path):
    """The checkpoints' own file system fills up at the third checkpoint (only there: a full
    disk under the supervisor's own records is another fault). Before the restart, the newest
    checkpoint left is also cut short: the restart falls back to the one before it."""
    whole = tmp_path / "whole"
    run(mpirun_cmd(*(train_cmd(*SETTINGS, "--steps", 600, "--out", out)
                     for out in (whole, tmp_path / "r1"))))
    job = jobs("disk", steps=600)
    size = disk_bytes(whole / "checkpoints" / "step_00000600")
    filler = small_disk(job.dir / "checkpoints", free=size * 5 // 2, taken=size * 4)
    job.start("--restart-backoff", 3)
    job.wait(lambda j: j["state"] == "restarting", 60)
    left = sorted((job.dir / "checkpoints").iterdir())
    assert [p.name for p in left] == [".filler", "step_00000100", "step_00000200"], job.log()
    assert all(checkpoint.problem(p) is None for p in left[1:])
    said = (job.dir / "logs" / "rank.0.log").read_text()  # until the restart replaces it
    assert (f"train: error: the checkpoint at step 300 could not be written to "
            f"{job.dir / 'checkpoints'}: No space left on device;") in said
    filler.unlink()
    os.truncate(left[2] / "model.safetensors", 100)

    done = job.wait_end(90)
    assert (done["state"], done["reason"]) == ("finished", "completed"), job.log()
    [restart] = done["restarts"]
    assert restart["reason"] == "rank_failed" and restart["from_step"] == 100, job.log()
    assert restart["suspect"] == "rank 0 on h0: exited with code 2", restart
    assert "resumed from step 100, not 200: newer checkpoints are broken" in job.log()
    assert [s["step"] for s in summary(job.dir)["checkpoints_skipped"]] == [200]
    assert_same_weights(job.dir, whole)
    assert job.left() == []


@needs_root
def test_a_full_disk_under_job_json_is_retried_not_fatal(small_disk, jobs):
    """A stand-in launcher fills the run directory's file system, beats step 5 into the last
    page, and frees the space 3 s later: the supervisor records step 5 then, and goes on."""
    job = jobs("full")
    small_disk(job.dir, free=64 * PAGE, taken=PAGE)
    (job.dir / "logs").mkdir()
    beat = ('{"phase": "training", "step": 5, "steps": 5, "progress": 0, "start": 0, '
            '"time": %s, "pid": %s}')
    (job.dir / "command.sh").write_text(
        "printf x >spare; cat /dev/zero >fill 2>/dev/null; rm spare\n"
        f"printf '{beat}' \"$(date +%s)\" $$ >logs/rank.0.heartbeat\n"
        "sleep 3; rm fill; sleep 2\n")
    job.start()
    done = job.wait_end(30)
    assert (done["state"], done["last_step"]) == ("finished", 5), job.log()
    assert "recorded the job's state in job.json again" in job.log()


def test_stop_checkpoints_and_a_second_start_is_refused(jobs):
    job, other = jobs("stop", steps=100000), jobs("other")
    job.start()
    job.wait_step(50)
    refused = supervisor("start", "--run-dir", other.dir, "--lock", job.lock, check=False)
    assert refused.returncode == 3 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert f"run {job.name} is already running (keeper pid {job.pid}" in line
    assert f"stop --run-dir {job.dir}" in line and not (other.dir / "job.json").exists()

    stopped = supervisor("stop", "--run-dir", job.dir, "--stop-grace", 60)
    done = job.job()
    step = json.loads((job.dir / "stopped.json").read_text())["step"]
    assert f"{job.name}: stopped (user) at step {step}; checkpoint there" in stopped.stdout
    assert (done["state"], done["reason"], done["exit_status"]) == ("stopped", "user", 0)
    assert (done["last_step"], done["checkpoint_step"]) == (step, step)
    assert (job.dir / "checkpoints" / f"step_{step:08d}").is_dir()
    assert not (job.dir / "summary.json").exists() and not (job.dir / "stop").exists()
    assert job.left() == [] and not alive(job.pid)
    status = supervisor("status", "--runs-dir", job.dir.parent).stdout
    assert f"{job.name}  stopped  step {step}/100000  restarts 0  user" in status


@pytest.mark.slow
def test_time_limit_stops_with_a_checkpoint_and_resume_completes(jobs, uninterrupted):
    job = jobs("limit", steps=100000)
    job.start("--time-limit", 4)
    # The ranks sleep through the rest of the limit, so the stop comes well before STEPS on any
    # machine (a fast one trains past 1500 steps in 4 s).
    beats = job.wait_ranks_at(1)
    for beat in beats:
        os.kill(beat["pid"], signal.SIGSTOP)
    if beats:
        job.wait(lambda j: j["state"] not in ("starting", "running"), 30)
    for beat in beats:
        os.kill(beat["pid"], signal.SIGCONT)
    done = job.wait_end(90)
    stopped = json.loads((job.dir / "stopped.json").read_text())
    print(f"\ntime limit: ranks paused at step {[b['step'] for b in beats]}, stopped at step "
          f"{stopped['step']}")
    assert (done["state"], done["reason"], done["exit_status"]) == ("stopped", "time_limit", 0)
    assert stopped["reason"] == "time_limit" and 1 <= stopped["step"] < STEPS, stopped
    assert (job.dir / "checkpoints" / f"step_{stopped['step']:08d}").is_dir()
    assert job.left() == []

    resumed = run(["sh", job.dir / "command.sh", "--resume", "--steps", str(STEPS)])
    assert resumed.returncode == 0 and (job.dir / "summary.json").exists()
    assert_same_weights(job.dir, uninterrupted)


def test_launcher_hanging_after_summary_is_stopped(jobs):
    """A stand-in for Open MPI 5's mpirun that never exits after the job (prrte#1839)."""
    job = jobs("hang")
    (job.dir / "command.sh").write_text(
        "echo '[train] done' && echo '{}' >summary.json && exec sleep 600\n")
    job.start("--exit-grace", 2)
    done = job.wait_end(30)
    assert (done["state"], done["reason"], done["restarts"]) == ("finished", "hung_at_exit", [])
    assert done["exit_status"] == 128 + signal.SIGTERM and not alive(done["launcher_pid"])
    assert "openpmix/prrte#1839" in job.log()


def test_a_stop_in_the_back_off_names_the_checkpoint_that_exists(jobs):
    """A stand-in launcher at step 150 whose latest checkpoint is step 100 fails: stopped in the
    back-off, the run is at step 150 and a resume starts from 100."""
    job = jobs("backoff")
    beat = ('{"phase": "training", "step": 150, "steps": 1000, "progress": 0, "start": 0, '
            '"time": %s, "pid": %s}')
    (job.dir / "command.sh").write_text(
        "mkdir -p checkpoints/step_00000100\n"
        f"printf '{beat}' \"$(date +%s)\" $$ >logs/rank.0.heartbeat\n"
        "sleep 2; exit 1\n")
    job.start("--restart-backoff", 60)
    job.wait(lambda j: j["state"] == "restarting", 30)
    stopped = supervisor("stop", "--run-dir", job.dir, "--stop-grace", 10).stdout
    assert f"{job.name}: stopped (user) at step 150; latest checkpoint at step 100" in stopped
    done = job.wait_end(10)
    assert (done["last_step"], done["checkpoint_step"]) == (150, 100)
    [restart] = done["restarts"]
    assert (restart["from_step"], restart["backoff_s"], restart["exit_status"]) == (100, 60, 1)
    assert not (job.dir / "stop").exists()


def test_a_non_zero_exit_or_a_cut_summary_is_never_completed(jobs):
    """Stand-ins for a launcher that exits 1 after rank 0 wrote summary.json (whole, or cut)."""
    whole, cut = jobs("whole"), jobs("cut")
    (whole.dir / "command.sh").write_text("echo '{}' >summary.json; exit 1\n")
    (cut.dir / "command.sh").write_text("printf '{\"steps\": 1' >summary.json; exit 1\n")
    ends = []
    for job in (whole, cut):  # one at a time: they share the lock
        job.start("--max-restarts", 0)
        ends.append(job.wait_end(30))
    assert [(end["state"], end["reason"], end["exit_status"]) for end in ends] == [
        ("failed", "rank_failed", 1), ("failed", "summary_unreadable", 1)]


# A notifier that records what it was told, one block per call, and fails.
RECORDER = "env | grep ^MLX_CLUSTER_ | sort >>notified; echo >>notified; exit 1"
# A stand-in launcher: rank 0's heartbeat at step 5 of 5, then a whole run.
FINISHED = ("printf '{\"phase\": \"exiting\", \"step\": 5, \"steps\": 5, \"progress\": 0, "
            "\"start\": 0, \"time\": %s, \"pid\": %s}' \"$(date +%s)\" $$ "
            ">logs/rank.0.heartbeat\necho '{}' >summary.json\n")


def notifications(run_dir, count, timeout=10):
    """The MLX_CLUSTER_ variables of each of the count notifications RECORDER wrote, once
    logs/notify.log says as many notifiers ended (they run detached: after the job, maybe)."""
    log = run_dir / "logs" / "notify.log"  # none until the first notifier starts
    deadline = time.monotonic() + timeout
    while (log.read_text() if log.exists() else "").count("the notifier exited") < count:
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no notify.log"
        time.sleep(0.1)
    blocks = (run_dir / "notified").read_text().split("\n\n")
    return [dict(line.split("=", 1) for line in block.splitlines()) for block in blocks if block]


def test_notify_tells_the_end_once_and_a_failing_notifier_changes_nothing(jobs):
    job = jobs("notify")
    (job.dir / "command.sh").write_text(FINISHED)
    job.start("--notify", RECORDER)
    done = job.wait_end(30)
    assert (done["state"], done["reason"], done["exit_status"]) == ("finished", "completed", 0)
    assert notifications(job.dir, 1) == [{
        "MLX_CLUSTER_RUN": job.name, "MLX_CLUSTER_STATE": "finished",
        "MLX_CLUSTER_REASON": "completed", "MLX_CLUSTER_STEP": "5", "MLX_CLUSTER_STEPS": "5",
        "MLX_CLUSTER_MESSAGE": f"{job.name}: finished (completed) at step 5/5"}]
    assert "the notifier exited with code 1" in (job.dir / "logs" / "notify.log").read_text()
    assert job.log().count("notifying (") == 1 and "notifying (finished)" in job.log()


def test_a_hanging_notifier_is_killed_after_its_bound_and_holds_nothing_up(jobs):
    """The job ends and its lock is free while the notifier still runs; 3 s after its start (its
    bound here) the notifier's whole process group is killed."""
    job, after = jobs("hanging"), jobs("after")
    (job.dir / "command.sh").write_text(FINISHED)
    (after.dir / "command.sh").write_text("echo '{}' >summary.json\n")
    notifier = job.dir / "notifier.pid"
    job.start("--notify", f"echo $$ >{notifier}; sleep 600; echo never", "--notify-timeout", 3)
    try:
        done = job.wait_end(30)
        assert (done["state"], done["reason"], done["exit_status"]) == ("finished", "completed", 0)
        after.start()  # not refused: the notifier holds no lock
        log = job.dir / "logs" / "notify.log"
        job.wait(lambda _: notifier.exists() and notifier.read_text(), 5)
        group = int(notifier.read_text())
        assert alive(group) and "killed" not in log.read_text()  # nothing waited for it
        assert after.wait_end(30)["state"] == "finished"
        job.wait(lambda _: "killed" in log.read_text(), 10)
        assert "the notifier was still running after 3 s: killed" in log.read_text()
        left = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True)
        assert [pid for pid in left.stdout.split() if alive(pid)] == []
        assert "never" not in log.read_text().splitlines()
    finally:
        if notifier.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(notifier.read_text()), signal.SIGKILL)


def test_a_stall_is_told_with_its_suspect_and_then_the_end(tmp_path):
    """A real Supervisor in this process (so below the CLI's least stall timeout, 10 s): a
    stand-in rank beats once at step 3 and hangs; the stall is told, then the end (no restarts
    left)."""
    run_dir = tmp_path / "runs" / "stalled"
    (run_dir / "logs").mkdir(parents=True)
    beat = ('{"phase": "training", "step": 3, "steps": 10, "progress": 0, "start": 0, '
            '"time": %s, "pid": %s}')
    (run_dir / "command.sh").write_text(
        f"printf '{beat}' \"$(date +%s)\" $$ >logs/rank.0.heartbeat\nexec sleep 60\n")
    args = supervisor_module.parser().parse_args(
        ["start", "--run-dir", str(run_dir), "--lock", str(tmp_path / "lock"), "--rank-hosts",
         '[{"rank": 0, "host": "h0", "address": "local"}]', "--max-restarts", "0",
         "--poll", "0.2", "--notify", RECORDER])
    args.stall_timeout, args.stop_grace = 1, 1
    term = signal.getsignal(signal.SIGTERM)
    try:
        assert supervisor_module.Supervisor(args, run_dir).run() == 1
    finally:
        signal.signal(signal.SIGTERM, term)
    stalled, failed = notifications(run_dir, 2)
    assert (stalled["MLX_CLUSTER_STATE"], stalled["MLX_CLUSTER_STEP"]) == ("stalled", "3")
    assert stalled["MLX_CLUSTER_REASON"].startswith("rank 0's heartbeat not rewritten for ")
    assert stalled["MLX_CLUSTER_REASON"].endswith("; suspect: rank 0 on h0: at step 3")
    assert (failed["MLX_CLUSTER_STATE"], failed["MLX_CLUSTER_REASON"]) == ("failed", "stall")


@pytest.mark.slow
def test_a_killed_supervisor_is_replaced_and_a_later_fault_is_still_caught(jobs, uninterrupted):
    job, other = jobs("spof"), jobs("other")
    job.start()
    before = job.wait_step(150)
    # The ranks wait (for less than the stall timeout) while the keeper replaces the supervisor:
    # here the job would otherwise reach its end first.
    ranks = [job.rank_pid(rank) for rank in (0, 1)]
    for pid in ranks:
        os.kill(pid, signal.SIGSTOP)
    os.kill(before["supervisor_pid"], signal.SIGKILL)
    killed = time.time()
    refused = supervisor("start", "--run-dir", other.dir, "--lock", job.lock, check=False)
    assert refused.returncode == 3 and "already running" in refused.stderr  # the keeper's lock

    adopted = job.wait(lambda j: j["supervisor_pid"] != before["supervisor_pid"], 5)
    print(f"\nkill -9 of the supervisor: another one after {time.time() - killed:.1f} s")
    for pid in ranks:
        os.kill(pid, signal.SIGCONT)
    assert adopted["launcher_pid"] == before["launcher_pid"] and alive(adopted["supervisor_pid"])
    # Going again, as the ranks' heartbeats say (job.json's step lags by the supervisor's poll,
    # and the job ends 3 s on: once it had, make test saw rank 1 frozen at its exit).
    job.wait_ranks_at(adopted["last_step"] + 1)
    frozen = job.rank_pid(1)
    os.kill(frozen, signal.SIGSTOP)

    done = job.wait_end(120)
    assert done["state"] == "finished" and done["reason"] == "completed", job.log()
    [restart] = done["restarts"]
    assert restart["reason"] == "stall" and f"process {frozen} is stopped" in restart["suspect"]
    assert f"the supervisor (pid {before['supervisor_pid']}) died (killed by signal 9)" in job.log()
    assert "adopted the launcher" in job.log()
    assert_same_weights(job.dir, uninterrupted)
    assert job.left() == [] and state(frozen) is None


def test_an_adopted_launchers_exit_code_is_read_from_its_wrapper(jobs):
    """A stand-in launcher exits 3 after its supervisor was killed: the next one, which cannot
    wait() for it, reads the code from launcher.exit."""
    job = jobs("exit")
    (job.dir / "command.sh").write_text("sleep 4; exit 3\n")
    job.start("--max-restarts", 0)
    before = job.wait(lambda j: j["launcher_pid"] is not None, 10)
    os.kill(before["supervisor_pid"], signal.SIGKILL)
    done = job.wait_end(30)
    assert (done["state"], done["reason"], done["exit_status"]) == ("failed", "rank_failed", 3)
    assert done["launcher_pid"] == before["launcher_pid"] and "adopted the launcher" in job.log()


def test_stop_of_a_job_whose_keeper_and_supervisor_died_is_graceful(jobs):
    """Nobody is left to tell the job's end: the first status that finds it lost runs the
    notifier, once, and does not wait for it (a notifier that waits until the test lets it
    go, at most 30 s: no time bound for a loaded machine to miss)."""
    job = jobs("orphan", steps=100000)
    job.start("--notify", "for i in $(seq 300); do [ -e go ] && break; sleep 0.1; done; "
              + RECORDER)
    before = job.wait_step(50)
    for pid in (job.pid, before["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    [row] = json.loads(supervisor("status", "--runs-dir", job.dir.parent, "--json", "--run",
                                  job.name).stdout)
    log = job.dir / "logs" / "notify.log"
    told = log.read_text() if log.exists() else ""
    (job.dir / "go").touch()
    assert "the notifier" not in told  # it had neither exited nor been killed
    assert (row["state"], row["reason"], row["launcher_running"]) == (
        "lost", "its supervisor is gone", True)
    assert "lost" in supervisor("status", "--runs-dir", job.dir.parent).stdout  # tells no more
    # Its ranks beat on: status --run reads each one's heartbeat.
    assert [(r["rank"], r["host"], r["reached"]) for r in row["ranks"]] == [
        (0, "h0", True), (1, "h1", True)]
    assert all(r["step"] is not None and r["age"] < 5 for r in row["ranks"]), row["ranks"]
    host = [{"item": "hostfile", "rc": 0}, {"item": "mlx_launch", "rc": 0}]
    [refused] = launch.launch_host_errors(host, "h0", "/h", [], [row])  # preflight's judgment
    assert refused.startswith(f"run {job.name} is lost (its supervisor is gone) but its launcher")

    stopped = supervisor("stop", "--run-dir", job.dir, "--stop-grace", 60)
    step = json.loads((job.dir / "stopped.json").read_text())["step"]
    assert f"{job.name}: stopped (user) at step {step}; checkpoint there" in stopped.stdout
    assert (job.dir / "checkpoints" / f"step_{step:08d}").is_dir()
    assert job.job()["state"] == "stopped" and not (job.dir / "stop").exists()
    assert job.left() == [] and not alive(before["launcher_pid"])
    step = row["last_step"]
    assert notifications(job.dir, 1) == [{
        "MLX_CLUSTER_RUN": job.name, "MLX_CLUSTER_STATE": "lost",
        "MLX_CLUSTER_REASON": "its supervisor is gone", "MLX_CLUSTER_STEP": str(step),
        "MLX_CLUSTER_STEPS": "100000",
        "MLX_CLUSTER_MESSAGE": f"{job.name}: lost (its supervisor is gone) at step {step}/100000"}]


def test_a_lost_job_says_what_its_launcher_said_of_the_failed_rank(jobs):
    """The kernel's OOM killer, freeing a killed rank's memory too slowly, went on to kill the
    keeper and the supervisor (seen in a capped cluster test). The job's processes are the
    kernel's first choice; if the keeper and supervisor die all the same, the launcher, which
    outlived them, reported the rank, and status still tells it."""
    job = jobs("oom")
    (job.dir / "command.sh").write_text(
        "cat /proc/self/oom_score_adj >oom_score_adj; sleep 3; echo 'mpirun noticed that process "
        "rank 1 with PID 0 on node h1 exited on signal 9 (Killed).'; exit 137\n")
    job.start("--max-restarts", 0)
    before = job.wait(lambda j: j["launcher_pid"] is not None, 10)
    ours = Path("/proc/self/oom_score_adj").read_text()
    assert [Path(f"/proc/{pid}/oom_score_adj").read_text()
            for pid in (job.pid, before["supervisor_pid"])] == [ours, ours]
    job.wait(lambda j: (job.dir / "oom_score_adj").exists(), 10)
    assert (job.dir / "oom_score_adj").read_text() == "500\n"
    for pid in (job.pid, before["supervisor_pid"]):
        os.kill(pid, signal.SIGKILL)
    [row] = json.loads(supervisor("status", "--runs-dir", job.dir.parent, "--json").stdout)
    assert (row["state"], row["reason"]) == ("lost", "its supervisor is gone"), row
    job.wait(lambda j: not alive(j["launcher_pid"]), 10)
    [row] = json.loads(supervisor("status", "--runs-dir", job.dir.parent, "--json").stdout)
    assert (row["state"], row["reason"]) == ("lost", "its supervisor is gone; the launcher said: "
                                             "rank 1 on h1: killed by signal 9"
                                             + supervisor_module.KILLED_HINT), row


def test_a_stale_job_from_before_a_reboot_is_lost_and_blocks_nothing(jobs):
    """job.json naming live processes that are not the job's: a reboot recycled the pids."""
    stale, after = jobs("stale"), jobs("after")
    others = [subprocess.Popen(["sleep", "300"], start_new_session=True) for _ in range(3)]
    try:
        record = {"run": stale.name, "boot_id": "0b9a3f7e-5c1d-4e2a-8f6b-1d2c3e4f5a6b",
                  "state": "running", "reason": None, "restarts": [], "last_step": 40,
                  "steps": 100, "rank_hosts": supervisor_module.rank_hosts(stale.hosts, stale.dir)}
        for who, other in zip(("keeper", "supervisor", "launcher"), others, strict=True):
            record.update(supervisor_module.identity(who, other.pid))
        (stale.dir / "job.json").write_text(json.dumps(record))
        [row] = json.loads(supervisor("status", "--runs-dir", stale.dir.parent, "--json").stdout)
        assert (row["state"], row["reason"], row["launcher_running"]) == (
            "lost", "the launch host restarted since (another boot id)", False)
        host = [{"item": "hostfile", "rc": 0}, {"item": "mlx_launch", "rc": 0}]
        assert launch.launch_host_errors(host, "h0", "/h", [], [row]) == []

        stopped = supervisor("stop", "--run-dir", stale.dir, "--stop-grace", 5)
        assert f"{stale.name}: stopped (user) at step 40; no checkpoint" in stopped.stdout
        (after.dir / "command.sh").write_text("echo '{}' >summary.json\n")
        after.start()
        assert after.wait_end(30)["state"] == "finished"
        assert [other.poll() for other in others] == [None] * 3  # untouched
    finally:
        for other in others:
            other.kill()
            other.wait()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="runs stop as another user (nobody)")
def test_stop_as_another_user_is_a_clear_error():
    """A run directory of root's (private), stopped by nobody: one line naming the owner."""
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        run_dir = Path(top) / "r"
        run_dir.mkdir(mode=0o700)
        (run_dir / "job.json").write_text("{}")
        done = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                    "/usr/bin/python3", SUPERVISOR, "stop", "--run-dir", run_dir], check=False)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == (f"supervisor: error: {run_dir} belongs to root (uid 0), not to you: "
                           "run this as that user\n")


def test_status_shows_a_dead_supervisor_as_lost(tmp_path):
    run_dir = tmp_path / "runs" / "gone"
    run_dir.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    job = {"run": "gone", "boot_id": supervisor_module.boot_id(), "supervisor_pid": dead.pid,
           "supervisor_start": "90683", "state": "running", "last_step": 7, "steps": 10,
           "restarts": [], "reason": None}
    (run_dir / "job.json").write_text(json.dumps(job))
    assert supervisor("status", "--runs-dir", tmp_path / "runs").stdout == (
        "gone  lost  step 7/10  restarts 0  its supervisor is gone\n")


def test_status_shows_the_ranks_phase(tmp_path):
    run_dir = tmp_path / "runs" / "live"
    run_dir.mkdir(parents=True)
    job = {"run": "live", "boot_id": supervisor_module.boot_id(), "state": "running",
           **supervisor_module.identity("supervisor", os.getpid()),  # this test: a live one
           "last_step": 40, "steps": 200, "restarts": [], "reason": None,
           "phases": {"0": "evaluating", "1": "evaluating", "2": "evaluating"}}
    lines = []
    for phase in ("evaluating", "loading"):
        job["phases"]["2"] = phase
        (run_dir / "job.json").write_text(json.dumps(job))
        lines.append(supervisor("status", "--runs-dir", tmp_path / "runs").stdout)
    assert lines == ["live  running  step 40/200 (evaluating)  restarts 0\n",
                     "live  running  step 40/200 (rank 0 evaluating, rank 1 evaluating, rank 2 "
                     "loading)  restarts 0\n"]


def test_stop_kills_a_job_whose_supervisor_died(tmp_path):
    run_dir = tmp_path / "runs" / "orphan"
    run_dir.mkdir(parents=True)
    launcher = subprocess.Popen(["sleep", "300"], start_new_session=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        job = {"run": "orphan", "boot_id": supervisor_module.boot_id(),
               "supervisor_pid": dead.pid, "supervisor_start": "90683",
               **supervisor_module.identity("launcher", launcher.pid),
               "state": "running", "reason": None, "restarts": [], "last_step": 3,
               "rank_hosts": [{"rank": 0, "host": "h0", "address": "local",
                               "run_dir": str(run_dir)}]}
        (run_dir / "job.json").write_text(json.dumps(job))
        out = supervisor("stop", "--run-dir", run_dir, "--stop-grace", 1).stdout
        assert "orphan: stopped (user) at step 3; no checkpoint" in out
        assert launcher.wait(5) == -signal.SIGKILL and not (run_dir / "stop").exists()
    finally:
        launcher.kill()
