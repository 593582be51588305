"""setup.yml --tags <role> runs that role (with its verification) and nothing else but the
always-on validation. On the session's cable ring (conftest.py; the train cluster's worker is the
busier of `make test`'s two): ssh_mesh is idempotent, its logins over the cables' addresses."""

from pathlib import Path

import pytest

from tests.integration.conftest import own_reports
from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_setup_tags_ssh_mesh_runs_only_the_ssh_mesh_role(cable_ring, tmp_path):
    vc = cable_ring.vc
    host = vc.hosts[1]
    pins = f"{host.home}/.ssh/mlx_cluster_known_hosts"
    vc.run(host.name, ["rm", pins])  # something only ssh_mesh puts back

    run = run_playbook("setup.yml", vc.inventory, tmp_path / "ssh_mesh", cmdline="--tags ssh_mesh")

    assert run.status == "successful", run.stdout[-6000:]
    # Ansible tags every role's argument spec check `always`: a no-op here, left out.
    started = [(e["event_data"].get("role") or None, e["event_data"]["task"]) for e in run.events
               if e.get("event") == "playbook_on_task_start"
               and not e["event_data"].get("task_action", "").endswith("validate_argument_spec")]
    assert {role for role, _ in started} == {None, "validate", "ssh_mesh"}, started
    assert {task for role, task in started if role is None} == {"Gathering Facts"}
    assert ("ssh_mesh", "Log in to every other host over its MPI address") in started
    assert ("ssh_mesh", "Report every pair that cannot log in") in started
    pin_task = "Pin every host's host keys under all its names in the mesh's own known_hosts"
    assert {task for _, task in run.changed()} == {pin_task}, run.changed()
    assert {h for h, _ in run.changed()} == {host.name}
    assert vc.run(host.name, ["cat", pins]).stdout.strip()


def test_check_tags_ssh_reports_only_the_ssh_rows(cable_ring, tmp_path):
    vc = cable_ring.vc
    run = run_playbook("check.yml", vc.inventory, tmp_path / "ssh", cmdline="--tags ssh",
                       extravars=own_reports(tmp_path))

    assert run.status == "successful", run.stdout[-6000:]
    [collected] = [e["event_data"]["res"]["ansible_facts"] for e in run.events
                   if e.get("event") == "runner_on_ok"
                   and e["event_data"].get("task") == "Collect the rows of every host"]
    rows = collected["doctor_all_rows"]
    # reach always runs (it gathers the facts); every ordered pair is logged into over ssh.
    assert {r["check"] for r in rows} == {"reach", "ssh"}, rows
    n = len(vc.hosts)
    assert sum(r["check"] == "ssh" and r["status"] == "ok" for r in rows) == n * (n - 1)
    report = (Path(collected["doctor_run_dir"]) / "report.md").read_text()
    assert "ssh over MPI address" in report and "Open MPI installed" not in report
