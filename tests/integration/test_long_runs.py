"""Long runs survive (train.yml under its supervisor), with real faults on the shared 3-host
virtual cluster (world size 4): a frozen rank, a killed rank, the controller losing its
network, Ctrl-C, a second job, the time limit, a host powered off, resume and run names.

Every run trains the same mlp job (same seed, global batch and steps), so a run that was
interrupted and resumed must end with the uninterrupted reference run's parameters. The job is
sized to the faults: long enough that each lands mid-run on any machine, faults right after the
first checkpoint, the smallest stall_timeout train.yml takes, restarts after 1 s (restart_backoff;
the default back-off, its doubling and its cap: tests/unit). Timings of fault -> detection ->
training again are printed for benchmarks/results/long_runs.md.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.integration.conftest import TRAIN_SLOTS
from tests.integration.test_train_playbook import (
    failure_message,
    job_processes,
    rank_pid,
    rank_pids,
    train,
    vc_pids,
    wait_for,
)
from tests.train.conftest import long_jsonl, phase_spans
from tools.playbook import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

JOB = {"model": "mlp", "steps": 300, "batch_size": 64, "seed": 3, "checkpoint_every": 100,
       "eval_every": 0, "log_every": 50}
FAULT_STEP = 100  # the first checkpoint: a resumed run repeats the fewest steps
STALL = 10  # stall_timeout: the smallest train.yml takes
BACKOFF = 1  # restart_backoff: seconds before a restart
RANK_CPUS = 0.25  # a slow Mac's share of a CPU per rank, for the LoRA job's slow phases
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


@pytest.fixture
def vc(train_cluster):
    yield train_cluster
    # Whatever a test did, no job may be left running for the next one.
    assert job_processes(train_cluster) == {h.name: [] for h in train_cluster.hosts}


@pytest.fixture(scope="module")
def reference(train_cluster, tmp_path_factory):
    """The uninterrupted run every fault test must match."""
    run, out = train(train_cluster, tmp_path_factory.mktemp("reference"), "reference", **JOB)
    assert run.status == "successful", run.stdout[-6000:]
    return final_weights(out)


def final_weights(out):
    latest = sorted((Path(out) / "checkpoints").glob("step_*"))[-1]
    assert latest.name == f"step_{JOB['steps']:08d}", latest
    return {k: np.array(v) for k, v in mx.load(str(latest / "model.safetensors")).items()}


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)


def launch_file(vc, name, relpath):
    host = vc.hosts[0]
    path = f"mlx-cluster/runs/{name}/{relpath}"
    return vc.run(host, f"cat {path} 2>/dev/null || true", user=host.user).stdout


def job_state(vc, name):
    text = launch_file(vc, name, "job.json")
    return json.loads(text) if text.strip() else {}


def at_step(vc, name, step):
    """True once rank 0 of `name` has reported a step >= step."""
    beat = launch_file(vc, name, "logs/rank.0.heartbeat")
    return bool(beat.strip()) and json.loads(beat)["step"] >= step


def following(tmp_path, name):
    """True once the play of run `name` (train(), in the background) follows its job: its output
    so far, which ansible-runner writes as it comes, shows the follow task's start."""
    return any("TASK [launch : Follow rank 0" in out.read_text(errors="replace")
               for out in tmp_path.glob(f"runner-{name}/artifacts/*/stdout"))


def in_background(fn):
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", fn()))
    thread.start()
    return thread, outcome


def signal_a_rank(vc, tmp_path, name, victim, sig, **extravars):
    """Run the job, send sig to a rank on `victim` at FAULT_STEP; (run, results, time of sig)."""
    thread, outcome = in_background(lambda: train(vc, tmp_path, name, **{**JOB, **extravars}))
    try:
        wait_for(lambda: at_step(vc, name, FAULT_STEP), 600, f"rank 0 at step {FAULT_STEP}")
        pid = wait_for(lambda: rank_pid(vc, victim, name), 30, "a rank on " + victim)
        os.kill(pid, sig)
        signalled_at = time.time()
    finally:
        thread.join(timeout=1200)
    return (*outcome["value"], signalled_at)


def test_frozen_rank_is_named_and_the_job_resumes_to_the_same_result(vc, reference, tmp_path):
    victim = vc.hosts[2].name  # rank 3
    run, out, frozen_at = signal_a_rank(vc, tmp_path, "frozen", victim, signal.SIGSTOP,
                                        stall_timeout=STALL, restart_backoff=BACKOFF)
    assert run.status == "successful", run.stdout[-6000:]
    job = json.loads((out / "job.json").read_text())
    [restart] = job["restarts"]
    assert restart["reason"] == "stall"
    assert f"rank 3 on {victim}: process" in restart["suspect"] and "stopped" in restart["suspect"]
    detected, resumed = restart["at"] - frozen_at, restart["resumed_at"] - frozen_at
    # Detection: the stall timeout, plus the supervisor's poll and the suspect probe.
    assert detected < STALL + 30, detected
    print(f"\nfrozen rank: detected after {detected:.1f} s, training again after {resumed:.1f} s")
    assert_same_weights(final_weights(out), reference)


def test_killed_rank_restarts_once_and_finishes(vc, reference, tmp_path):
    victim = vc.hosts[1].name  # ranks 1 and 2
    run, out, killed_at = signal_a_rank(vc, tmp_path, "killed-resumed", victim, signal.SIGKILL,
                                        restart_backoff=BACKOFF)
    assert run.status == "successful", run.stdout[-6000:]
    job = json.loads((out / "job.json").read_text())
    [restart] = job["restarts"]
    assert restart["reason"] == "rank_failed" and victim in restart["suspect"]
    assert restart["backoff_s"] == BACKOFF  # train.yml's restart_backoff reached the supervisor
    summary = json.loads((out / "summary.json").read_text())
    assert summary["restarts"] == 1
    detected, resumed = restart["at"] - killed_at, restart["resumed_at"] - killed_at
    print(f"\nkilled rank: detected after {detected:.1f} s, training again after {resumed:.1f} s")
    assert_same_weights(final_weights(out), reference)


def rank_beat(vc, host, name, rank):
    """A rank's heartbeat on its host, {} before it writes one."""
    text = vc.run(host, f"cat mlx-cluster/runs/{name}/logs/rank.{rank}.heartbeat 2>/dev/null "
                  "|| true", user=host.user).stdout
    with contextlib.suppress(ValueError):
        return json.loads(text)
    return {}


def test_a_lora_job_slow_to_load_and_evaluate_runs_on_and_a_rank_frozen_evaluating_is_caught(
        vc, tmp_path, tiny_llm):
    """The issue's real job in small: a LoRA fine-tune on 3 ranks with the default batch whose
    load (a large train.jsonl to tokenise) and evaluation (a large valid.jsonl) each outlast the
    least stall_timeout, 10 s; rank 1, on another host than rank 0, SIGSTOPped mid-evaluation:
    caught, resumed from the checkpoint at step 5, completed with that one restart. The hosts are
    slow Macs, a quarter of a CPU per rank once the job has started (its hosts' CPU capped, as
    VirtualCluster.set_cpus does): their phases last as long on a busy machine as on a quiet one,
    and take the other tests a quarter of the CPU. About 2 min here (loads, evaluations and the
    ranks' last writes of about 20 s each, the writes no stall either; detected after 15 s)."""
    model, _ = tiny_llm
    data = long_jsonl(tmp_path / "data", train=20000, valid=2000)
    name, launch_host, victim = "lora-phases", vc.hosts[0], vc.hosts[1]  # rank 0; ranks 1, 2
    thread, outcome = in_background(lambda: train(
        vc, tmp_path, name, model=str(model), data=str(data), np=3, steps=10, checkpoint_every=5,
        eval_every=0, log_every=5, stall_timeout=10, restart_backoff=BACKOFF))
    beats, frozen, frozen_at = [], None, None  # (time, heartbeat) of ranks 0 and 1
    try:
        while thread.is_alive():
            rank0, rank1 = rank_beat(vc, launch_host, name, 0), rank_beat(vc, victim, name, 1)
            if not beats and (rank0 or rank1):  # the ranks have started: the play's tasks ran
                for host, ranks in ((launch_host, 1), (victim, 2)):
                    vc.set_cpus(RANK_CPUS * ranks, host)
            beats += [(time.monotonic(), b) for b in (rank0, rank1) if b]
            if frozen is None and rank1.get("phase") == "evaluating" and rank1["progress"] >= 3:
                os.kill(rank1["pid"], signal.SIGSTOP)
                frozen, frozen_at = rank1["pid"], time.time()
            time.sleep(0.5)
    finally:
        thread.join(timeout=1800)
        vc.set_cpus(None)
    run, out = outcome["value"]
    assert frozen, f"rank 1 was never seen evaluating: {beats[-2:]}"
    assert run.status == "successful", run.stdout[-6000:]
    job = json.loads((out / "job.json").read_text())
    [restart] = job["restarts"]
    detected = restart["at"] - frozen_at
    pids = list(dict.fromkeys(b["pid"] for _, b in beats if b["pid"] != frozen))
    first, again = phase_spans(beats, pids[0]), phase_spans(beats, pids[-1])  # before, after
    print(f"\nLoRA, 3 ranks: rank 1 frozen evaluating, detected after {detected:.1f} s, "
          f"training again after {restart['resumed_at'] - frozen_at:.1f} s; a rank before the "
          f"restart: {first}; after it: {again}")
    assert restart["reason"] == "stall" and restart["from_step"] == 5, restart
    suspect = f"rank 1 on {victim.name}: process {frozen} is stopped"
    assert restart["suspect"].startswith(suspect), restart
    # the stall timeout, its heartbeat read over ssh every 5 s, then the probe and the kill
    assert detected < 10 + 5 + 20, detected
    assert again["loading"] > 10 and again["evaluating"] > 10, again
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["world_size"], summary["steps"], summary["restarts"]) == (3, 10, 1), summary


def test_the_play_survives_the_controller_changing_address(vc, tmp_path):
    """A laptop that sleeps and wakes on another network: its ssh connections are dead. The job
    is long enough to outlast the reading of its step and the address's removal (300 steps, 200
    of them after FAULT_STEP, ended before that once in make test): about 20 s here, as long as
    the play takes to notice a dead connection."""
    bridge, old = vc.mgmt_bridge, f"{vc.controller_ip}/24"
    new = f"{vc.mgmt_subnet[200]}/24"
    job = {**JOB, "steps": 1000}
    thread, outcome = in_background(lambda: train(vc, tmp_path, "roaming", **job))
    try:
        # The play following the job, not in a task before: those run over new connections.
        wait_for(lambda: following(tmp_path, "roaming") and at_step(vc, "roaming", FAULT_STEP),
                 600, f"the play following rank 0 at step {FAULT_STEP}")
        subprocess.run(["ip", "addr", "del", old, "dev", bridge], check=True)
        assert job_state(vc, "roaming")["state"] == "running", "the job ended before the change"
        time.sleep(20)
        subprocess.run(["ip", "addr", "add", new, "dev", bridge], check=True)
        thread.join(timeout=900)
    finally:
        # The new address goes first: deleting a subnet's primary address deletes the rest.
        subprocess.run(["ip", "addr", "del", new, "dev", bridge], check=False)
        subprocess.run(["ip", "addr", "add", old, "dev", bridge], check=False)
        thread.join(timeout=900)
    assert not thread.is_alive(), "the play never came back"
    run, out = outcome["value"]
    assert run.status == "successful", run.stdout[-6000:]
    assert json.loads((out / "summary.json").read_text())["steps"] == job["steps"]
    assert "lost the connection" in run.stdout
    # A play started afterwards does not hang on connections left from before the change.
    status, _ = train(vc, tmp_path, "after-roaming", status=True)
    assert status.status == "successful", status.stdout[-4000:]


def ansible_playbook(vc, tmp_path, **extravars):
    extravars = {"launch_results_dir": str(tmp_path / "runs"), **extravars}
    return subprocess.Popen(
        [str(ANSIBLE_PLAYBOOK), "-i", str(vc.inventory), "train.yml", "-e",
         json.dumps(extravars)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})


def test_ctrl_c_detaches_and_attach_follows_the_job_to_its_end(vc, tmp_path):
    job = {**JOB, "steps": 600}  # still running once the play has ended and attach begins
    play = ansible_playbook(vc, tmp_path, run_name="followed-again", **job)
    wait_for(lambda: at_step(vc, "followed-again", FAULT_STEP), 600,
             f"rank 0 at step {FAULT_STEP}")
    play.send_signal(signal.SIGINT)
    play.communicate(timeout=120)
    assert job_state(vc, "followed-again")["state"] in ("starting", "running")
    # kill -9 of the supervisor too: its keeper starts another, which adopts the running job.
    killed = job_state(vc, "followed-again")["supervisor_pid"]
    os.kill(killed, signal.SIGKILL)

    attach, out = train(vc, tmp_path / "attach", "followed-again", attach="followed-again")
    assert attach.status == "successful", attach.stdout[-6000:]
    assert "[train] step" in attach.stdout  # it followed the progress, not just the end
    assert json.loads((out / "summary.json").read_text())["steps"] == job["steps"]
    state = json.loads((out / "job.json").read_text())
    assert state["state"] == "finished" and state["supervisor_pid"] != killed
    assert "adopted the launcher" in (out / "supervisor.log").read_text()


def test_ctrl_c_detaches_attach_follows_stop_checkpoints(vc, tmp_path):
    play = ansible_playbook(vc, tmp_path, run_name="detached", **{**JOB, "steps": 200000})
    wait_for(lambda: at_step(vc, "detached", 100), 600, "rank 0 at step 100")
    # The job only has to run on through the plays below: its ranks on a tenth of a CPU each
    # leave the machine's CPU to the plays (and to the tests beside this one).
    for host, ranks in zip(vc.hosts, TRAIN_SLOTS, strict=True):
        pids = rank_pids(vc, host, "detached")
        assert len(pids) == ranks, (host.name, pids)
        vc.cap_processes(host, pids, 0.1 * ranks)
    play.send_signal(signal.SIGINT)
    play.communicate(timeout=120)
    time.sleep(5)
    assert job_state(vc, "detached")["state"] == "running"  # the job went on without the play

    # One job at a time: a second train.yml is refused, naming the running one.
    second, _ = train(vc, tmp_path, "second", **JOB)
    assert second.status == "failed"
    assert "run detached is running" in failure_message(second)
    assert "-e attach=detached" in failure_message(second)

    # Its row and one row per rank, from every host's heartbeat; the same as JSON for scripts.
    status, _ = train(vc, tmp_path, "status", status="detached")
    # (rank 0 writes a checkpoint every 100 steps: a rank may be checkpointing; the ETA a time)
    assert re.search(r"detached +running \(.+\) +\d+/200000 +\d", status.stdout)
    assert re.search(r"RANK +HOST +PHASE +STEP +HEARTBEAT", status.stdout)
    [row] = json.loads((tmp_path / "runs" / "status.json").read_text())
    assert [r["rank"] for r in row["ranks"]] == [0, 1, 2, 3]
    assert {r["host"] for r in row["ranks"]} == {h.name for h in vc.hosts}
    assert all(r["phase"] in ("training", "checkpointing") and r["age"] < STALL
               for r in row["ranks"]), row
    # Its page beside it, live: every rank's row, each host's memory and its job interface's
    # bytes, read on the host (tests/train/test_supervisor.py opens a page in Chromium).
    view = json.loads((tmp_path / "runs" / "detached" / "status.json").read_text())
    assert view["live"] and [(r["rank"], r["host"]) for r in view["ranks"]] == [
        (r["rank"], r["host"]) for r in row["ranks"]]
    assert sorted(h["host"] for h in view["hosts"]) == sorted(h.name for h in vc.hosts)
    assert all(h["memory"]["available"] and [i for i in h["interfaces"] if i["job"] and i["rx"]]
               for h in view["hosts"]), view["hosts"]
    assert '<meta http-equiv="refresh"' in (tmp_path / "runs" / "detached" / "index.html"
                                            ).read_text()

    # Each play gets its own runner directory: ansible-runner keeps a directory's extra vars.
    stop, out = train(vc, tmp_path / "stop", "detached", stop="detached")
    assert stop.status == "successful", stop.stdout[-6000:]
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["reason"] == "user"
    assert f"stopped at step {stopped['step']} of 200000 (user) with a checkpoint there" in (
        stop.stdout)
    latest = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert latest.name == f"step_{stopped['step']:08d}"
    view = json.loads((out / "status.json").read_text())  # the page the stop followed to its end
    assert not view["live"] and view["events"][-1]["what"] == "stopped", view["events"]
    assert "http-equiv" not in (out / "index.html").read_text()
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}
    host = vc.hosts[0]
    left = vc.run(host, "ls mlx-cluster/runs/detached", user=host.user).stdout.split()
    assert "stop" not in left  # command.sh run by hand later would stop at once

    unknown, _ = train(vc, tmp_path / "unknown", "nope", attach="nope")
    assert unknown.status == "failed"
    assert "there is no run nope on" in failure_message(unknown)
    assert "detached" in failure_message(unknown)

    attach, out = train(vc, tmp_path / "attach", "detached", attach="detached")
    assert attach.status == "successful", attach.stdout[-6000:]
    assert "stopped at step" in attach.stdout


def test_time_limit_stops_with_a_checkpoint_and_resume_finishes(vc, reference, tmp_path):
    # The limit passes long before the job's end on any machine (on one so slow that it passes
    # before the first step, the job stops at step 1).
    run, out = train(vc, tmp_path, "limited", time_limit=4, **JOB)
    assert run.status == "successful", run.stdout[-6000:]
    stopped = json.loads((out / "stopped.json").read_text())
    assert stopped["reason"] == "time_limit" and 0 < stopped["step"] < JOB["steps"]
    assert "stopped at step" in run.stdout and "time_limit" in run.stdout
    latest = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert latest.name == f"step_{stopped['step']:08d}"

    resumed, out = train(vc, tmp_path / "resume", "limited", resume=True, **JOB)
    assert resumed.status == "successful", resumed.stdout[-6000:]
    assert_same_weights(final_weights(out), reference)


def power_off_mid_run(vc, tmp_path, name, victim, **extravars):
    """Run the job and, at FAULT_STEP, power `victim` off: its links go down and every process in
    its namespace is killed (sshd too). It is powered on again afterwards for the next tests.
    Returns (run, results, time of the power-off)."""
    thread, outcome = in_background(
        lambda: train(vc, tmp_path, name, stall_timeout=STALL, **{**JOB, **extravars}))
    try:
        wait_for(lambda: at_step(vc, name, FAULT_STEP), 600, f"rank 0 at step {FAULT_STEP}")
        for ifname in ("en0", "bridge0"):
            vc.run(victim, f"ip link set {ifname} down")
        for pid in vc_pids(victim.netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        off_at = time.time()
        thread.join(timeout=900)
    finally:
        for ifname in ("en0", "bridge0"):
            vc.run(victim, f"ip link set {ifname} up", check=False)
        vc.start_sshd(victim)
        thread.join(timeout=900)
    return (*outcome["value"], off_at)


def test_a_host_powered_off_is_named_and_rank_0s_results_come_back(vc, tmp_path):
    victim = vc.hosts[2]
    run, out, off_at = power_off_mid_run(vc, tmp_path, "poweroff", victim, max_restarts=0,
                                         steps=100000)
    assert run.status == "failed"
    message = failure_message(run)
    assert victim.name in message, message
    job = json.loads((out / "job.json").read_text())
    ended = job["ended"] - off_at
    assert ended < STALL + 60, job
    print(f"\nhost powered off: job ended after {ended:.1f} s, suspect: {job['suspect']}")
    assert (out / "metrics.jsonl").stat().st_size > 0  # rank 0's results were fetched
    assert (out / "checkpoints").is_dir()


def test_elastic_job_finishes_on_the_hosts_left(vc, tmp_path):
    victim = vc.hosts[2]  # 1 of the 4 slots: a global batch of 48 splits over 4 and over 3
    run, out, off_at = power_off_mid_run(vc, tmp_path, "elastic", victim, elastic=True,
                                         batch_size=48, restart_backoff=BACKOFF)
    assert run.status == "successful", run.stdout[-6000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 3 and summary["steps"] == JOB["steps"]
    assert summary["hosts_left_out"] == [victim.name] and summary["restarts"] == 1
    job = json.loads((out / "job.json").read_text())
    resumed = job["restarts"][0]["resumed_at"] - off_at
    print(f"\nhost powered off, elastic: training again on 3 ranks after {resumed:.1f} s")


def test_resume_of_a_finished_run_keeps_it_and_names_are_not_reused(vc, tmp_path):
    run, out = train(vc, tmp_path, "done", **{**JOB, "steps": 50})
    assert run.status == "successful", run.stdout[-6000:]
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    again, _ = train(vc, tmp_path, "done", resume=True, **{**JOB, "steps": 50})
    assert again.status == "successful", again.stdout[-6000:]
    assert "nothing to resume" in again.stdout
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert launch_file(vc, "done", "summary.json").strip()  # kept on the launch host too

    # A new run may not take a name the controller already has results under.
    (tmp_path / "runs" / "taken").mkdir()
    taken, _ = train(vc, tmp_path, "taken", **{**JOB, "steps": 10})
    assert taken.status == "failed"
    assert "already exists on the controller" in failure_message(taken)
