"""The thunderbolt role on a 3-host virtual cluster, through ansible-runner.

bridge0 in each host starts without an address; the role's iproute2 path assigns it (the test
hosts have no NetworkManager), pings every pair over bridge0, warns about ring cabling, and
reset removes exactly the address it set.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.playbook import ROOT, run_playbook

MACOS_INVENTORY = os.environ.get("MLX_CLUSTER_MACOS_INVENTORY", "")

SETUP = """\
- name: Configure the Thunderbolt interface
  hosts: cluster
  roles:
    - thunderbolt
"""

RESET = """\
- name: Remove the Thunderbolt address
  hosts: cluster
  tasks:
    - name: Reset the thunderbolt role
      ansible.builtin.include_role:
        name: thunderbolt
        tasks_from: reset
"""


def ipv4_on_bridge0(vc, host) -> set[str]:
    links = json.loads(vc.run(host, ["ip", "-j", "addr", "show", "dev", "bridge0"]).stdout)
    return {
        f"{a['local']}/{a['prefixlen']}" for a in links[0]["addr_info"] if a["family"] == "inet"
    }


def is_up(vc, host) -> bool:
    links = json.loads(vc.run(host, ["ip", "-j", "link", "show", "dev", "bridge0"]).stdout)
    return "UP" in links[0]["flags"]


def ping_results(run) -> list[dict]:
    """One result per ping: each host's ping task returns all of its pings."""
    return [
        ping
        for e in run.task_results()
        if e.get("task", "").startswith("Ping every other host")
        for ping in e["res"].get("results", [])
    ]


@pytest.mark.cluster
@pytest.mark.slow
def test_thunderbolt_role_on_three_hosts(vcluster, tmp_path):
    vc = vcluster(hosts=3)
    setup, reset = tmp_path / "setup.yml", tmp_path / "reset.yml"
    setup.write_text(SETUP)
    reset.write_text(RESET)
    first, second, third = (h.name for h in vc.hosts)
    ours = {h.name: f"{h.thunderbolt_ip}/24" for h in vc.hosts}
    # An address the user already had on bridge0: setup and reset must leave it alone.
    users_own = f"{vc.thunderbolt_subnet[250]}/32"
    vc.run(first, ["ip", "addr", "add", users_own, "dev", "bridge0"])
    vc.run(second, ["ip", "link", "set", "bridge0", "down"])  # as a freshly created bridge

    check = run_playbook(str(setup), vc.inventory, tmp_path / "check", cmdline="--check --diff")
    assert check.status == "successful", check.stdout[-4000:]
    assert check.changed() == []
    assert all(ours[h.name] not in ipv4_on_bridge0(vc, h.name) for h in vc.hosts)
    assert not is_up(vc, second)

    tx_before = {h.name: vc.iface_bytes(h.name, "bridge0")[1] for h in vc.hosts}
    run = run_playbook(str(setup), vc.inventory, tmp_path / "first")
    assert run.status == "successful", run.stdout[-4000:]
    for host in vc.hosts:
        assert ipv4_on_bridge0(vc, host.name) >= {ours[host.name]}
        # The pings really left through bridge0 (the controller is not on that segment).
        assert vc.iface_bytes(host.name, "bridge0")[1] > tx_before[host.name]
    assert users_own in ipv4_on_bridge0(vc, first)
    assert is_up(vc, second)
    assert {host for host, _ in run.changed()} == set(ours)
    pings = ping_results(run)
    assert len(pings) == 6, pings  # every ordered pair of 3 hosts
    assert all(p["rc"] == 0 for p in pings), pings
    assert "WARNING: 3 hosts" in run.stdout and "never a ring" in run.stdout

    rerun = run_playbook(str(setup), vc.inventory, tmp_path / "second")
    assert rerun.status == "successful", rerun.stdout[-4000:]
    assert rerun.changed() == []
    assert not any(rerun.stats.get("changed", {}).values()), rerun.stats

    # Unplug the third host's cable: the bridge stays up with its address, but the link is dead.
    vc.run(third, ["ip", "link", "set", "thunderbolt0", "down"])
    broken = run_playbook(str(setup), vc.inventory, tmp_path / "broken")
    assert broken.status == "failed"
    [failure] = broken.task_results("runner_on_failed")  # failed once, for all pairs
    message = failure["res"]["msg"]
    for pair in (
        f"{first} -> {third}",
        f"{second} -> {third}",
        f"{third} -> {first}",
        f"{third} -> {second}",
    ):
        assert pair in message, message
    assert f"{first} -> {second}" not in message and f"{second} -> {first}" not in message
    assert broken.changed() == []
    vc.run(third, ["ip", "link", "set", "thunderbolt0", "up"])

    undo = run_playbook(str(reset), vc.inventory, tmp_path / "reset")
    assert undo.status == "successful", undo.stdout[-4000:]
    assert sorted(host for host, _ in undo.changed()) == sorted(ours)
    for host in vc.hosts:
        assert ours[host.name] not in ipv4_on_bridge0(vc, host.name)
    assert ipv4_on_bridge0(vc, first) == {users_own}

    again = run_playbook(str(reset), vc.inventory, tmp_path / "reset-again")
    assert again.status == "successful", again.stdout[-4000:]
    assert again.changed() == []


def test_macos_scenario_stops_clearly_when_no_macs_are_given(tmp_path, monkeypatch):
    # The create step of molecule/macos: without an inventory of Macs it names the fix.
    monkeypatch.delenv("MLX_CLUSTER_MACOS_INVENTORY", raising=False)
    no_macs = tmp_path / "no-macs.yml"
    no_macs.write_text("cluster:\n  hosts: {}\n")
    run = run_playbook("molecule/macos/create.yml", no_macs, tmp_path / "runner")
    assert run.status == "failed"
    [failure] = run.task_results("runner_on_failed")
    assert "No Macs given" in failure["res"]["msg"], failure["res"]
    assert "MLX_CLUSTER_MACOS_INVENTORY" in failure["res"]["msg"], failure["res"]


@pytest.mark.slow
@pytest.mark.skipif(
    not MACOS_INVENTORY, reason="no Macs given: set MLX_CLUSTER_MACOS_INVENTORY=<inventory of Macs>"
)
def test_molecule_macos_scenario_on_real_macs():
    venv_bin = Path(sys.executable).parent  # molecule calls ansible-playbook by name
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [str(venv_bin / "molecule"), "test", "--scenario-name", "macos"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "idempotence" in output.lower()
