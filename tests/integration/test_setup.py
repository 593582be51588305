"""setup.yml driven through ansible-runner: validation first, check mode, idempotence."""

import textwrap

import pytest
import yaml

from tools.playbook import run_playbook
from tools.wheelhouse import offline_pip_args


def write_inventory(path, hosts: dict) -> str:
    path.write_text(yaml.safe_dump({"cluster": {"hosts": hosts}}, sort_keys=False))
    return str(path)


# Hosts that answer nothing: a closed port on the loopback (no firewall or other test's cluster
# can answer there). If setup tried to reach one, the run would show it as unreachable.
def nowhere(i: int, **hostvars) -> dict:
    return {"ansible_host": f"127.0.0.{i}", "ansible_port": 9, **hostvars}


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        pytest.param(
            {"a": nowhere(1, thunderbolt_ip="198.19.200.1"),
             "b": nowhere(2, thunderbolt_ip="198.19.200.1")},
            "b: thunderbolt_ip 198.19.200.1 is also the thunderbolt_ip of a",
            id="two hosts claim one Thunderbolt address",
        ),
        pytest.param(
            {"a": nowhere(1, mpi_slots=-1), "b": nowhere(2)},
            "a: mpi_slots -1 is not a non-negative integer",
            id="negative slots",
        ),
        pytest.param(
            {"a": nowhere(1, mpi_slots=1000000000), "b": nowhere(2)},
            "a: mpi_slots 1000000000 is more than 256",
            id="huge slots",
        ),
        pytest.param(
            {"Jane's MacBook Pro": {"ansible_port": 9}, "b": nowhere(2)},
            "use an inventory name like janes-macbook-pro with ansible_host: "
            "Janes-MacBook-Pro.local",
            id="a Mac's computer name as inventory name",
        ),
        pytest.param(
            {"a": nowhere(1), "b": nowhere(2, ansible_host="-oProxyCommand=touch /tmp/pwned")},
            "b: ansible_host '-oProxyCommand=touch /tmp/pwned' is neither an IP address nor a "
            "DNS name",
            id="ansible_host as an ssh option",
        ),
        pytest.param(
            {"a": nowhere(1, ansible_user="jane doe"), "b": nowhere(2)},
            "a: ansible_user 'jane doe' is not a user name",
            id="user name with a space",
        ),
        pytest.param(
            # The first host is the one the validate task runs on: its value used to be taken
            # for everyone's, while the thunderbolt role on b used the default 24.
            {"a": nowhere(1, thunderbolt_ip="198.19.1.1", thunderbolt_prefix=16),
             "b": nowhere(2, thunderbolt_ip="198.19.2.2")},
            "a: thunderbolt_prefix 16 is set for this host only, while b use the default",
            id="thunderbolt_prefix on one host only",
        ),
    ],
)  # fmt: skip
def test_bad_inventory_stops_before_any_host_is_touched(tmp_path, hosts, expected):
    inventory = write_inventory(tmp_path / "hosts.yml", hosts)
    run = run_playbook("setup.yml", inventory, tmp_path / "runner")

    assert run.status == "failed"
    assert run.changed() == []
    assert run.task_results("runner_on_unreachable") == []
    [failure] = run.task_results("runner_on_failed")
    assert failure["task"] == "Check the inventory"
    message = str(failure["res"].get("msg", ""))
    assert expected in message, message
    # Only the cases' own problem: the rest of each inventory is valid.
    assert message.startswith("The inventory has 1 problem(s):"), message


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
