"""The launch role's follower (launch_follow) against a real job directory on this machine.

A stand-in supervisor writes job.json and rank 0's log the way supervisor.py and the ranks do:
the follower streams every log line while the job runs, starts over on the fresh log of a
restarted job, reports the supervisor's state changes, and returns the final job.json once the
job ended. Stopping, restarting and the exit hang of Open MPI 5 belong to the supervisor
(tests/train/test_supervisor.py).
"""

import json
import subprocess
import sys
import textwrap
import time

from tools.playbook import ROOT, run_playbook

PLAYBOOK = """\
- name: Follow the stand-in job
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Follow rank 0 until the job ends
      launch_follow:
        job: "{{ job }}/job.json"
        log: "{{ job }}/rank.0.log"
        status: ["{{ python }}", "{{ supervisor }}", status, --runs-dir, "{{ job | dirname }}",
                 --json]
        interval: 0.5
      register: followed
"""
SUPERVISOR = ROOT / "roles/launch/files/supervisor.py"

# Two launches of one job: the first fails at step 2, the supervisor restarts it, the second
# writes a fresh log and finishes.
STAND_IN = textwrap.dedent("""\
    import json, os, runpy, sys, time
    from pathlib import Path
    job_dir = Path(sys.argv[1])
    supervisor = runpy.run_path(sys.argv[2])  # its record of this process: pid, start, boot
    me = {"boot_id": supervisor["boot_id"](), **supervisor["identity"]("supervisor", os.getpid())}
    def job(**state):
        (job_dir / ".job.json").write_text(json.dumps({"run": "r", **me, **state}))
        os.replace(job_dir / ".job.json", job_dir / "job.json")
    def log(*lines):
        with open(job_dir / "rank.0.log", "a") as f:
            for line in lines:
                f.write(line + "\\n"); f.flush(); time.sleep(0.6)
    job(state="running", restarts=[])
    log("[train] step 1 first launch", "[train] step 2 first launch")
    restart = {"reason": "rank_failed", "suspect": "rank 1 on b: killed by signal 9"}
    job(state="restarting", restarts=[restart], suspect=restart["suspect"])
    time.sleep(1.5)
    (job_dir / "rank.0.log").unlink()
    job(state="running", restarts=[restart])
    log("[train] resuming from step 1", "[train] step 2 second launch", "[train] done")
    job(state="finished", reason="completed", restarts=[restart])
""")


def follow(tmp_path, job_dir):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "follow.yml").write_text(PLAYBOOK)
    (tmp_path / "action_plugins").symlink_to(ROOT / "roles/launch/action_plugins")
    (tmp_path / "inventory.yml").write_text("all:\n  hosts:\n    localhost: "
                                            "{ansible_connection: local}\n")
    return run_playbook(str(tmp_path / "follow.yml"), tmp_path / "inventory.yml",
                        tmp_path / "runner", {"job": str(job_dir), "python": sys.executable,
                                              "supervisor": str(SUPERVISOR)})


def test_follower_streams_both_launches_and_returns_the_final_job(tmp_path):
    job_dir = tmp_path / "runs" / "r"
    job_dir.mkdir(parents=True)
    stand_in = subprocess.Popen([sys.executable, "-c", STAND_IN, str(job_dir), SUPERVISOR])
    try:
        run = follow(tmp_path, job_dir)
    finally:
        stand_in.kill()
    assert run.status == "successful", run.stdout[-3000:]
    [result] = [r["res"] for r in run.task_results() if r["task"].startswith("Follow")]
    assert result["job"]["state"] == "finished" and result["lost_contact"] is False
    assert result["job"] == json.loads((job_dir / "job.json").read_text())
    out = run.stdout
    order = ["step 1 first launch", "step 2 first launch", "job restarting",
             "suspect: rank 1 on b", "resuming from step 1", "step 2 second launch", "done",
             "job finished (completed)"]
    positions = [out.find(text) for text in order]
    assert -1 not in positions and positions == sorted(positions), (positions, out[-3000:])
    assert out.count("step 2 second launch") == 1


def test_a_lost_job_ends_the_follow_and_an_unknown_run_is_refused_at_once(tmp_path):
    """job.json of a job whose supervisor is gone (a pid that ran before this boot)."""
    job_dir = tmp_path / "runs" / "r"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({
        "run": "r", "state": "running", "reason": None, "last_step": 7, "restarts": [],
        "boot_id": "0b9a3f7e-5c1d-4e2a-8f6b-1d2c3e4f5a6b", "supervisor_pid": 1,
        "supervisor_start": "1"}))
    run = follow(tmp_path / "lost", job_dir)
    assert run.status == "successful", run.stdout[-3000:]
    [result] = [r["res"] for r in run.task_results() if r["task"].startswith("Follow")]
    assert result["job"]["state"] == "lost" and "another boot id" in result["job"]["reason"]

    started = time.monotonic()
    unknown = follow(tmp_path / "unknown", job_dir.with_name("nope"))
    assert unknown.status == "failed" and time.monotonic() - started < 30
    assert "there is no run nope on localhost — its runs: r " in unknown.stdout
