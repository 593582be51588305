"""setup.yml driven through ansible-runner: validation first, check mode, idempotence."""

import textwrap

import pytest

from tools.playbook import run_playbook
from tools.wheelhouse import offline_pip_args


def write_inventory(path, hosts: dict) -> str:
    lines = ["cluster:", "  hosts:"]
    for name, hostvars in hosts.items():
        lines.append(f"    {name}:")
        lines += [f"      {key}: {value}" for key, value in hostvars.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("hosts", "field"),
    [
        (  # two hosts claim one Thunderbolt address
            {"a": {"ansible_host": "198.18.200.1", "thunderbolt_ip": "198.19.200.1"},
             "b": {"ansible_host": "198.18.200.2", "thunderbolt_ip": "198.19.200.1"}},
            "thunderbolt_ip",
        ),
        (  # negative slots
            {"a": {"ansible_host": "198.18.200.1", "mpi_slots": -1},
             "b": {"ansible_host": "198.18.200.2"}},
            "mpi_slots",
        ),
    ],
)
def test_bad_inventory_stops_before_any_host_is_touched(tmp_path, hosts, field):
    # These addresses belong to no host: if setup tried to reach one, the run would show it.
    inventory = write_inventory(tmp_path / "hosts.yml", hosts)
    run = run_playbook("setup.yml", inventory, tmp_path / "runner")

    assert run.status == "failed"
    assert run.changed() == []
    assert run.task_results("runner_on_unreachable") == []
    [failure] = run.task_results("runner_on_failed")
    message = str(failure["res"].get("msg", ""))
    assert field in message, message
    assert "a" in message or "b" in message


@pytest.mark.cluster
@pytest.mark.slow
def test_check_mode_then_setup_then_rerun_changes_nothing(vcluster, tmp_path):
    vc = vcluster(hosts=2, extra_vars={"python_env_pip_extra_args": offline_pip_args()})

    check = run_playbook("setup.yml", vc.inventory, tmp_path / "check", cmdline="--check --diff")
    assert check.status == "successful", check.stdout[-6000:]
    for host in vc.hosts:  # check mode left bridge0 without an address
        assert "inet " not in vc.run(host.name, "ip -4 addr show dev bridge0").stdout

    first = run_playbook("setup.yml", vc.inventory, tmp_path / "first")
    assert first.status == "successful", first.stdout[-6000:]
    assert first.changed(), "a fresh cluster needs changes"

    second = run_playbook("setup.yml", vc.inventory, tmp_path / "second")
    assert second.status == "successful", second.stdout[-6000:]
    assert second.changed() == [], textwrap.indent(str(second.changed()), "  ")
    assert set(second.stats["changed"].values()) <= {0}
