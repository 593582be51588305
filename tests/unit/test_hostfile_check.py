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


def test_hosts_json_problems_over_cables():
    """A cables hostfile: ranks in the ring's order, cable addresses and RDMA devices."""
    inv = load("roles/cluster/filter_plugins/inventory.py")
    cables = load("roles/cluster/filter_plugins/cables.py")
    topology = load("roles/cluster/filter_plugins/topology.py")
    hostvars = {f"m{i}": {"ansible_host": f"198.18.1.{i}"} for i in (1, 2, 3, 4)}
    hosts = inv.cluster_hosts(hostvars, list(hostvars))
    ring = [["m1", "en2", "m3", "en3"], ["m3", "en2", "m2", "en3"], ["m2", "en2", "m4", "en3"],
            ["m4", "en2", "m1", "en3"]]
    plan = cables.cable_plan(ring, list(hostvars), "198.18.0.0/24")
    expected = inv.mlx_hostfile(hosts, "jaccl-ring", topology.cable_topology(hosts, plan))
    assert check.hosts_json_problems(json.dumps(expected), expected) == []
    # The bridge-mode file of the same hosts: inventory order, where the ring is m1 m3 m2 m4.
    assert check.hosts_json_problems(json.dumps(inv.mlx_hostfile(hosts)), expected) == [
        "ssh entries ['198.18.1.1', '198.18.1.2', '198.18.1.3', '198.18.1.4'], inventory gives "
        "['198.18.1.1', '198.18.1.3', '198.18.1.2', '198.18.1.4']"
    ]
    # m3 recabled: its row of the device matrix names the old ports.
    stale = json.loads(json.dumps(expected))
    stale["hosts"][1]["rdma"] = ["rdma_en5", None, "rdma_en2", None]
    assert check.hosts_json_problems(json.dumps(stale), expected) == [
        "rank 1 (198.18.1.3): rdma ['rdma_en5', None, 'rdma_en2', None], expected ['rdma_en3', "
        "None, 'rdma_en2', None]"
    ]
    stale = {**expected, "backend": "ring", "hosts": [{**h, "ips": ["198.18.0.1"]}
                                                     for h in expected["hosts"]]}
    assert check.hosts_json_problems(json.dumps(stale), expected) == [
        "backend 'ring', expected 'jaccl-ring'",
        "rank 0 (198.18.1.1): ips ['198.18.0.1'], expected ['198.18.1.1']",
        "rank 1 (198.18.1.3): ips ['198.18.0.1'], expected ['198.18.1.3']",
        "rank 2 (198.18.1.2): ips ['198.18.0.1'], expected ['198.18.1.2']",
        "rank 3 (198.18.1.4): ips ['198.18.0.1'], expected ['198.18.1.4']",
    ]
