"""roles/thunderbolt/filter_plugins/cabling.py: the links a host configures in the cables
topology, the line setup states about the cables, and what it refuses, on real cable plans and
topologies (roles/cluster/filter_plugins/cables.py, topology.py)."""

import pytest

from tests.unit.plugins import load

inv = load("roles/cluster/filter_plugins/inventory.py")
cables_plugin = load("roles/cluster/filter_plugins/cables.py")
top = load("roles/cluster/filter_plugins/topology.py")
cabling = load("roles/thunderbolt/filter_plugins/cabling.py")
POOL = "198.19.3.0/24"


def topology(n, pairs, slots=None):
    """cluster_hosts of vc-1..vc-n (slots: {position: mpi_slots}), each cable [a, b] of 0-based
    positions on ports en2, en3, ... in the order of each host's cables, as tools/vcluster.py
    numbers them; returns (plan, topology)."""
    hostvars = {f"vc-{i}": {"ansible_host": f"198.18.3.{10 + i}",
                            "mpi_slots": (slots or {}).get(i - 1, 1)} for i in range(1, n + 1)}
    hosts = inv.cluster_hosts(hostvars, list(hostvars))
    port = [2] * n
    cables = []
    for a, b in pairs:
        cables.append([f"vc-{a + 1}", f"en{port[a]}", f"vc-{b + 1}", f"en{port[b]}"])
        port[a] += 1
        port[b] += 1
    plan = cables_plugin.cable_plan(cables, list(hostvars), POOL)
    return plan, top.cable_topology(hosts, plan)


RING = [(0, 1), (1, 2), (2, 0)]
MESH4 = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def test_links_are_the_hosts_ends_with_a_connection_per_port():
    plan, _ = topology(3, RING)
    assert cabling.thunderbolt_cable_links(plan["hosts"]["vc-1"], "mlx-") == [
        {"interface": "en2", "address": "198.19.3.1", "prefix": 30, "network": "198.19.3.0/30",
         "peer": "vc-2", "peer_interface": "en2", "peer_address": "198.19.3.2",
         "connection": "mlx-en2"},
        {"interface": "en3", "address": "198.19.3.5", "prefix": 30, "network": "198.19.3.4/30",
         "peer": "vc-3", "peer_interface": "en3", "peer_address": "198.19.3.6",
         "connection": "mlx-en3"},
    ]


def test_a_host_without_cables_has_no_links():
    plan, _ = topology(3, [(0, 1)])
    assert cabling.thunderbolt_cable_links(plan["hosts"]["vc-3"], "mlx-") == []


@pytest.mark.parametrize(("n", "pairs", "slots", "line"), [
    (3, RING, None,  # three hosts in a ring: a cable between every two
     "mesh: 3 hosts, 3 cable(s): vc-1 en2 - vc-2 en2, vc-1 en3 - vc-3 en3, vc-2 en3 - vc-3 en2. "
     "Ring order (ranks of ring, jaccl-ring): vc-1, vc-2, vc-3. Backends: ring, jaccl, "
     "jaccl-ring, mpi (mpi over the management network, off 198.19.3.0/24)"),
    (4, [(0, 1), (1, 2), (2, 3)], None,
     "chain: 4 hosts, 3 cable(s): vc-1 en2 - vc-2 en2, vc-2 en3 - vc-3 en2, vc-3 en3 - vc-4 en2. "
     "Backends: mpi (mpi over the management network, off 198.19.3.0/24); not ring, jaccl, "
     "jaccl-ring"),
    (4, [(0, 1), (1, 2), (2, 3), (3, 0)], None,
     "ring: 4 hosts, 4 cable(s): vc-1 en2 - vc-2 en2, vc-2 en3 - vc-3 en2, vc-1 en3 - vc-4 en3, "
     "vc-3 en3 - vc-4 en2. Ring order (ranks of ring, jaccl-ring): vc-1, vc-2, vc-3, vc-4. "
     "Backends: ring, jaccl-ring, mpi (mpi over the management network, off 198.19.3.0/24); "
     "not jaccl"),
    (2, [(0, 1)], None,
     "mesh: 2 hosts, 1 cable(s): vc-1 en2 - vc-2 en2. Ring order (ranks of ring, jaccl-ring): "
     "vc-1, vc-2. Backends: ring, jaccl, jaccl-ring, mpi (mpi over the cables (198.19.3.0/24))"),
    (2, [(0, 1)], {1: 0}, "one host runs ranks: its ranks need no cable"),
])
def test_the_line_setup_states(n, pairs, slots, line):
    _, found = topology(n, pairs, slots)
    assert cabling.cable_topology_report(found) == line


def test_the_mesh_of_four_allows_every_backend():
    _, found = topology(4, MESH4)
    assert "Backends: ring, jaccl, jaccl-ring, mpi" in cabling.cable_topology_report(found)
    assert "; not" not in cabling.cable_topology_report(found)


def test_a_ranked_host_without_a_cable_is_refused_by_name():
    _, found = topology(4, [(0, 1), (1, 2), (2, 0)])
    assert cabling.cable_setup_errors(found) == [
        "vc-4: no Thunderbolt cable to another host that runs ranks (cabled: vc-1, vc-2, vc-3) — "
        "plug its cable(s) in (and list them in thunderbolt_cables where cables are not "
        "discovered), or give it mpi_slots 0"
    ]


@pytest.mark.parametrize(("n", "pairs", "slots"), [
    (3, RING, None),
    (4, [(0, 1), (1, 2), (2, 3)], None),  # a chain: no MLX backend, but mpi runs
    (3, [(0, 1)], {2: 0}),  # the host without a cable runs no rank
    (1, [], None),
])
def test_shapes_some_backend_can_use_pass(n, pairs, slots):
    _, found = topology(n, pairs, slots)
    assert cabling.cable_setup_errors(found) == []


def test_no_cable_at_all_names_every_host():
    _, found = topology(2, [])
    assert [e.split(":")[0] for e in cabling.cable_setup_errors(found)] == ["vc-1", "vc-2"]
    assert "(cabled: none)" in cabling.cable_setup_errors(found)[0]


def test_filter_names():
    assert set(cabling.FilterModule().filters()) == {
        "cable_setup_errors", "cable_topology_report", "thunderbolt_cable_links"}
