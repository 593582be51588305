"""roles/cluster/filter_plugins/hostfile_check.py: does a rendered hostfile match the inventory."""

import json

from tests.unit.plugins import load

check = load("roles/cluster/filter_plugins/hostfile_check.py")

HOSTS = [
    {"name": "a", "mpi_address": "198.19.1.2", "slots": 2},
    {"name": "b", "mpi_address": "198.19.1.3", "slots": 1},
    {"name": "c", "mpi_address": "198.19.1.4", "slots": 0},
]


def test_hostfile_matching_the_inventory_has_no_problems():
    text = "# generated\n198.19.1.2 slots=2\n198.19.1.3 slots=1\n"
    assert check.hostfile_problems(text, HOSTS) == []


def test_hostfile_problems_name_each_address():
    text = "198.19.1.2 slots=1\n198.19.1.4 slots=1\n"
    assert check.hostfile_problems(text, HOSTS) == [
        "198.19.1.2 has slots=1, inventory says 2",
        "198.19.1.3 missing",
        "198.19.1.4 is not in the inventory (or has mpi_slots 0)",
    ]


def test_hostfile_out_of_order_is_a_problem():
    text = "198.19.1.3 slots=1\n198.19.1.2 slots=2\n"
    assert "order" in check.hostfile_problems(text, HOSTS)[0]


def test_hosts_json_problems():
    entries = [{"ssh": "198.19.1.2", "ips": ["198.19.1.2"]}]
    expected = {"backend": "ring", "envs": [], "hosts": entries}
    assert check.hosts_json_problems(json.dumps(expected), expected) == []
    assert "not valid JSON" in check.hosts_json_problems("[", expected)[0]
    wrong_host = {**expected, "hosts": [{"ssh": "x", "ips": []}]}
    assert "ssh entries" in check.hosts_json_problems(json.dumps(wrong_host), expected)[0]
    assert "backend" in check.hosts_json_problems(json.dumps({**expected, "backend": "mpi"}),
                                                  expected)[0]
    # what setup rendered before MLX's format: re-rendered by setup.yml
    assert "list of hosts" in check.hosts_json_problems(json.dumps(entries), expected)[0]


def test_launch_preflight_words_for_a_stale_hostfile():
    """train.yml's preflight check (the same function) names what differs."""
    problems = check.hostfile_problems("198.19.1.2 slots=2\n", HOSTS)
    assert problems == ["198.19.1.3 missing"]
