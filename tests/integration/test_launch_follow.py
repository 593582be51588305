"""The launch role's follower (launch_follow) against real processes on this machine.

A stand-in launcher is started the way train.yml starts mpirun (its pid in job.pid, its exit
status written when it ends); the follower must return when it exits, stop it at the time
limit, and stop it when it outlives the finished job (summary.json written): the Open MPI 5
hang after completion, openpmix/prrte#1839.
"""

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from tools.playbook import ROOT, run_playbook

PLAYBOOK = """\
- name: Follow the stand-in job
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Follow rank 0 until the job ends
      launch_follow:
        log: "{{ job }}/rank.0.log"
        status: "{{ job }}/exit_status"
        pid: "{{ job }}/job.pid"
        done: "{{ job }}/summary.json"
        time_limit: "{{ time_limit }}"
        exit_grace: 2
        interval: 1
      register: followed
"""

# What each stand-in launcher does: finish and exit, finish and never exit, never finish.
JOBS = {
    "exits": "echo '[train] done'; echo '{}' >summary.json",
    "hangs_after_finishing": "echo '[train] done'; echo '{}' >summary.json; exec sleep 600",
    "never_finishes": "echo '[train] step 1'; exec sleep 600",
}


def start_job(job_dir, script):
    """Start `script` in job_dir as run.yml starts its launcher; return the wrapper process."""
    (job_dir / "job.sh").write_text(f"exec >rank.0.log\n{script}\n")
    return subprocess.Popen(
        ["/bin/sh", "-c", "sh job.sh & echo $! >job.pid; wait $!; "
         "echo $? >exit_status.tmp && mv exit_status.tmp exit_status"],
        cwd=job_dir, start_new_session=True,
    )


@pytest.mark.parametrize("job, time_limit, expected", [
    ("exits", 300, {"exit_status": 0, "hung_at_exit": False, "timed_out": False}),
    ("hangs_after_finishing", 300, {"exit_status": 143, "hung_at_exit": True, "timed_out": False}),
    ("never_finishes", 3, {"exit_status": 143, "hung_at_exit": False, "timed_out": True}),
])
def test_follower_ends_with_the_job(tmp_path, job, time_limit, expected):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (tmp_path / "follow.yml").write_text(PLAYBOOK)
    (tmp_path / "action_plugins").symlink_to(ROOT / "roles/launch/action_plugins")
    (tmp_path / "inventory.yml").write_text(textwrap.dedent("""\
        all:
          hosts:
            localhost: {ansible_connection: local}
        """))
    wrapper = start_job(job_dir, JOBS[job])
    try:
        run = run_playbook(str(tmp_path / "follow.yml"), tmp_path / "inventory.yml",
                           tmp_path / "runner", {"job": str(job_dir), "time_limit": time_limit})
        assert run.status == "successful", run.stdout[-3000:]
        [result] = [r["res"] for r in run.task_results() if r["task"].startswith("Follow")]
        assert {k: result[k] for k in expected} == expected
        assert result["elapsed"] < 60, result  # far below the 600 s the launcher would last
        assert "[localhost] [train]" in run.stdout
        assert ("prrte#1839" in run.stdout) == expected["hung_at_exit"]
        assert wrapper.wait(timeout=10) == 0
        assert Path(job_dir / "exit_status").read_text().strip() == str(expected["exit_status"])
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
