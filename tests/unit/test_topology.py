"""roles/cluster/filter_plugins/topology.py and mlx_hostfile over cables, checked against MLX's
own mlx.distributed_config (extract_rings, check_valid_mesh/ring and the hostfiles its
configure_ring / configure_jaccl / configure_jaccl_ring write for the same cabling), MLX's
hostfile parser and what mlx.launch's ring and jaccl launchers make of our hostfiles."""

import ipaddress
import itertools
import json
import random
import types

import pytest
from mlx._distributed_utils import config as mlx_config
from mlx._distributed_utils import launch as mlx_launch
from mlx._distributed_utils.common import Host, Hostfile

from tests.unit.plugins import load

inv = load("roles/cluster/filter_plugins/inventory.py")
cables_plugin = load("roles/cluster/filter_plugins/cables.py")
top = load("roles/cluster/filter_plugins/topology.py")
POOL = "198.18.0.0/24"


def hosts_of(n, slots=None):
    """cluster_hosts entries of m1..mn, reached on 198.18.1.i (the management network)."""
    hostvars = {f"m{i}": {"ansible_host": f"198.18.1.{i}", "mpi_slots": (slots or {}).get(i, 1)}
                for i in range(1, n + 1)}
    return inv.cluster_hosts(hostvars, list(hostvars))


def cable(a, ia, b, ib):
    return [f"m{a}", f"en{ia}", f"m{b}", f"en{ib}"]


# Each host's ports are en2, en3, ...: cable(1, 2, 2, 3) is m1's en2 to m2's en3.
SHAPES = {
    "pair": (2, [cable(1, 2, 2, 2)]),
    "pair of two cables": (2, [cable(1, 7, 2, 3), cable(1, 10, 2, 4)]),
    "chain of 3": (3, [cable(1, 2, 2, 2), cable(2, 3, 3, 2)]),
    "triangle": (3, [cable(1, 2, 2, 2), cable(2, 3, 3, 2), cable(3, 3, 1, 3)]),
    "ring of 4, crossed": (4, [cable(1, 2, 3, 3), cable(3, 2, 2, 3), cable(2, 2, 4, 3),
                               cable(4, 2, 1, 3)]),
    "mesh of 4": (4, [cable(a, 2 + b, b, 2 + a) for a, b in itertools.combinations(range(1, 5),
                                                                                 2)]),
    "mesh of 4, m1-m2 doubled": (4, [cable(a, 2 + b, b, 2 + a)
                                     for a, b in itertools.combinations(range(1, 5), 2)]
                                 + [cable(1, 9, 2, 9)]),
    "ring of 4, doubled": (4, [cable(a, p + 2 * s, a % 4 + 1, p + 2 * s + 1)
                               for a in range(1, 5) for s in (0, 1) for p in (2,)]),
    "star of 4": (4, [cable(1, 1 + b, b, 2) for b in (2, 3, 4)]),
    "ring of 5 with a chord": (5, [cable(a, 2, a % 5 + 1, 3) for a in range(1, 6)]
                               + [cable(1, 4, 3, 4)]),
    "two triangles": (6, [cable(1, 2, 2, 2), cable(2, 3, 3, 2), cable(3, 3, 1, 3),
                          cable(4, 2, 5, 2), cable(5, 3, 6, 2), cable(6, 3, 4, 3)]),
}


def topology_of(name, slots=None):
    n, cables = SHAPES[name]
    hosts = hosts_of(n, slots)
    plan = cables_plugin.cable_plan(cables, [h["name"] for h in hosts], POOL)
    return hosts, plan, top.cable_topology(hosts, plan)


# --- shapes and refusals -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "shape", "ring", "usable"), [
    ("pair", "mesh", ["m1", "m2"], ["ring", "jaccl", "jaccl-ring"]),
    ("pair of two cables", "mesh", ["m1", "m2"], ["ring", "jaccl", "jaccl-ring"]),
    ("chain of 3", "chain", [], []),
    ("triangle", "mesh", ["m1", "m2", "m3"], ["ring", "jaccl", "jaccl-ring"]),
    ("ring of 4, crossed", "ring", ["m1", "m3", "m2", "m4"], ["ring", "jaccl-ring"]),
    ("mesh of 4", "mesh", ["m1", "m2", "m3", "m4"], ["ring", "jaccl", "jaccl-ring"]),
    ("ring of 4, doubled", "ring", ["m1", "m2", "m3", "m4"], ["ring", "jaccl-ring"]),
    ("star of 4", "other", [], []),
    ("ring of 5 with a chord", "other", ["m1", "m2", "m3", "m4", "m5"], ["ring", "jaccl-ring"]),
    ("two triangles", "other", [], []),
])
def test_shape_ring_and_backends(name, shape, ring, usable):
    _, _, topology = topology_of(name)
    assert topology["shape"] == shape
    assert topology["ring"] == ring
    assert [b for b, ok in topology["backends"].items() if ok] == usable


def test_the_ranks_follow_the_ring_not_the_inventory():
    _, _, topology = topology_of("ring of 4, crossed")
    assert topology["hosts"] == ["m1", "m2", "m3", "m4"]
    assert topology["ring"] == ["m1", "m3", "m2", "m4"]


@pytest.mark.parametrize(("name", "backend", "message"), [
    ("chain of 3", "ring",
     "ring: the cables between m1, m2, m3 form a chain, and ring needs a ring through every host "
     "that runs ranks — add a cable m1 - m3 to close the chain into a ring, or use backend mpi "
     "(over the management network)"),
    ("chain of 3", "jaccl",
     "jaccl: the cables between m1, m2, m3 form a chain, and jaccl needs a cable between every "
     "two hosts — add the cable(s) m1 - m3, or use backend jaccl-ring or ring, which need a "
     "ring"),
    ("ring of 4, crossed", "jaccl",
     "jaccl: the cables between m1, m2, m3, m4 form a ring, and jaccl needs a cable between "
     "every two hosts — add the cable(s) m1 - m2, m3 - m4, or use backend jaccl-ring or ring, "
     "which need a ring"),
    ("star of 4", "jaccl-ring",
     "jaccl-ring: the cables between m1, m2, m3, m4 form no chain, ring or full mesh, and "
     "jaccl-ring needs a ring through every host that runs ranks — cable the hosts as a ring "
     "(each to the next, the last to the first), or use backend mpi (over the management "
     "network)"),
])
def test_refusals_name_the_shape_and_the_fix(name, backend, message):
    topology = topology_of(name)[2]
    assert top.cable_backend_errors(topology, backend) == [message]
    assert top.cable_backend_errors(topology, "mpi") == []


def test_a_host_without_cable_is_named():
    hosts = hosts_of(3)
    plan = cables_plugin.cable_plan([cable(1, 2, 2, 2)], ["m1", "m2", "m3"], POOL)
    topology = top.cable_topology(hosts, plan)
    assert topology["disconnected"] == ["m3"]
    assert topology["summary"] == ("other: 3 hosts, 1 cable(s): m1 en2 - m2 en2; not cabled to "
                                   "the others: m3")
    assert top.cable_backend_errors(topology, "ring") == [
        "ring: the cables between m1, m2, m3 form no chain, ring or full mesh (m3: no cable to "
        "the others), and ring needs a ring through every host that runs ranks — cable m3 to "
        "the others (or give it mpi_slots 0), or use backend mpi (over the management network)"
    ]


def test_hosts_without_slots_are_left_out_of_the_graph():
    # m2 runs no ranks: the chain m1 - m2 - m3 carries nothing between m1 and m3.
    hosts = hosts_of(3, slots={2: 0})
    plan = cables_plugin.cable_plan(SHAPES["chain of 3"][1], ["m1", "m2", "m3"], POOL)
    topology = top.cable_topology(hosts, plan)
    assert topology["hosts"] == ["m1", "m3"] and topology["cables"] == []
    assert topology["disconnected"] == ["m1", "m3"]
    assert not any(topology["backends"].values())


def test_one_rank_per_host_over_cables():
    _, _, topology = topology_of("triangle", slots={2: 2})
    assert top.cable_backend_errors(topology, "ring") == [
        "m2: mpi_slots > 1 — over cables MLX's ring backend runs one rank per host (a rank "
        "listens on its host's cable addresses) — set mpi_slots 1, or use backend mpi"
    ]
    assert topology["backends"] == {"ring": False, "jaccl": False, "jaccl-ring": False}


def test_a_single_host_needs_no_cable():
    hosts = hosts_of(2, slots={2: 0})
    topology = top.cable_topology(hosts, cables_plugin.cable_plan([], ["m1", "m2"], POOL))
    assert topology["shape"] == "single"
    assert topology["summary"] == "one host runs ranks: its ranks need no cable"
    assert topology["backends"]["ring"]
    assert top.cable_backend_errors(topology, "jaccl") == [
        "jaccl: only m1 runs ranks, and jaccl connects hosts over RDMA — use backend ring (or "
        "mpi) on one host"
    ]
    assert inv.mlx_hostfile(hosts, "ring", topology)["hosts"] == [
        {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}]


def test_unknown_backend():
    _, _, topology = topology_of("pair")
    assert top.cable_backend_errors(topology, "nccl") == [
        "backend 'nccl' is not one of mpi, ring, jaccl, jaccl-ring"]


@pytest.mark.parametrize(("name", "mpi"), [
    ("pair", {"over": "cables", "include": POOL}),
    ("pair of two cables", {"over": "cables", "include": POOL}),
    ("triangle", {"over": "management", "exclude": POOL}),
    ("chain of 3", {"over": "management", "exclude": POOL}),
])
def test_where_open_mpi_runs(name, mpi):
    assert topology_of(name)[2]["mpi"] == mpi


def test_dot():
    _, plan, _ = topology_of("pair")
    assert top.cable_dot(plan) == (
        'graph cables {\n  node [shape=box];\n  "m1";\n  "m2";\n'
        '  "m1" -- "m2" [label="en2 198.18.0.1\\nen2 198.18.0.2"];\n}\n')


# --- the ring MLX picks --------------------------------------------------------------------------


def mlx_rings(count):
    rings = mlx_config.extract_rings(count)
    return rings[0] if rings and len(rings[0][0]) == len(count) else ([], 0)


def ring_of(count):
    """Our ring through a connectivity matrix, by way of the plan and the topology."""
    n = len(count)
    cables = [cable(a + 1, 10 + 10 * b + k, b + 1, 10 + 10 * a + k)
              for a in range(n) for b in range(a + 1, n) for k in range(count[a][b])]
    hosts = hosts_of(n)
    topology = top.cable_topology(hosts, cables_plugin.cable_plan(
        cables, [h["name"] for h in hosts], "198.18.0.0/20"))
    return [int(name[1:]) - 1 for name in topology["ring"]], topology["ring_width"]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_ring_is_mlx_distributed_configs_on_every_graph(n):
    pairs = list(itertools.combinations(range(n), 2))
    for edges in itertools.product((0, 1), repeat=len(pairs)):
        count = [[0] * n for _ in range(n)]
        for (a, b), e in zip(pairs, edges, strict=True):
            count[a][b] = count[b][a] = e
        ring, width = mlx_rings(count)
        assert ring_of(count) == (list(ring), width), count


def test_the_ring_width_is_mlx_distributed_configs_with_parallel_cables():
    rng = random.Random(16)
    for _ in range(300):
        n = rng.randint(2, 6)
        count = [[0] * n for _ in range(n)]
        for a, b in itertools.combinations(range(n), 2):
            count[a][b] = count[b][a] = rng.choice((0, 0, 1, 1, 2, 3))
        ring, width = mlx_rings(count)
        assert ring_of(count) == (list(ring), width), count


# --- hostfiles, against what mlx.distributed_config writes for the same cables ------------------


def mlx_hostfile_for(tmp_path, monkeypatch, name, backend):
    """What mlx.distributed_config --backend BACKEND writes for SHAPES[name], and its addresses
    as {address: (ssh name, interface)}."""
    n, cables = SHAPES[name]
    hosts = [Host(i, f"198.18.1.{i + 1}", [], []) for i in range(n)]
    ports = {i: [] for i in range(n)}
    for a, ia, b, ib in cables:
        a, b = int(a[1:]) - 1, int(b[1:]) - 1
        ports[a].append(mlx_config.ThunderboltPort(ia, f"{a}/{ia}", f"{b}/{ib}"))
        ports[b].append(mlx_config.ThunderboltPort(ib, f"{b}/{ib}", f"{a}/{ia}"))
    tb_hosts = [mlx_config.ThunderboltHost(h.ssh_hostname,
                                           sorted(ports[i], key=lambda p: p.iface))
                for i, h in enumerate(hosts)]
    index = {p.uuid: (i, j) for i, h in enumerate(tb_hosts) for j, p in enumerate(h.ports)}
    ips = mlx_config.IPConfigurator(hosts, tb_hosts, index)
    connectivity = mlx_config.make_connectivity_matrix(tb_hosts, index)

    def run(argv, **kwargs):  # ssh HOST ipconfig getifaddr en0, and the --auto-setup commands
        return types.SimpleNamespace(stdout=argv[1] if "getifaddr" in argv else "")

    monkeypatch.setattr(mlx_config, "run", run)
    out = tmp_path / f"mlx-{backend}.json"
    args = types.SimpleNamespace(verbose=False, env=[], auto_setup=True, output_hostfile=out)
    sshinfo = [mlx_config.SSHInfo(True, True) for _ in hosts]
    if backend == "jaccl":
        assert mlx_config.check_valid_mesh(hosts, connectivity, strict=False)
        mlx_config.configure_jaccl(args, hosts, ips, sshinfo)
    else:
        rings = mlx_config.extract_rings(connectivity)
        assert mlx_config.check_valid_ring(hosts, rings, strict=False)
        configure = {"ring": mlx_config.configure_ring,
                     "jaccl-ring": mlx_config.configure_jaccl_ring}[backend]
        configure(args, hosts, ips, rings[0], sshinfo)
    ends = {ip: (hosts[src].ssh_hostname, iface)
            for (src, _), pairs in ips.ips.items() for iface, ip in pairs}
    return json.loads(out.read_text()), ends


def ours(name, backend):
    hosts, plan, topology = topology_of(name)
    by_name = {h["name"]: h["mpi_address"] for h in hosts}
    ends = {address: (by_name[host], interface) for c in plan["cables"]
            for host, interface, address in zip(c["hosts"], c["interfaces"], c["addresses"],
                                                strict=True)}
    return inv.mlx_hostfile(hosts, backend, topology), ends


def through(hostfile, ends):
    """A hostfile with each address replaced by the (host, interface) it belongs to."""
    return [(h["ssh"], [ends[ip] for ip in h["ips"]]) for h in hostfile["hosts"]]


RING_SHAPES = ["pair", "pair of two cables", "triangle", "ring of 4, crossed", "mesh of 4",
               "mesh of 4, m1-m2 doubled", "ring of 4, doubled", "ring of 5 with a chord"]
MESH_SHAPES = ["pair", "pair of two cables", "triangle", "mesh of 4", "mesh of 4, m1-m2 doubled"]


@pytest.mark.parametrize("name", RING_SHAPES)
def test_ring_hostfile_is_mlx_distributed_configs(tmp_path, monkeypatch, name):
    theirs, their_ends = mlx_hostfile_for(tmp_path, monkeypatch, name, "ring")
    mine, my_ends = ours(name, "ring")
    assert mine["backend"] == theirs["backend"] == "ring"
    # MLX numbers its own 192.168.x addresses: compare the cable ends they stand for.
    assert through(mine, my_ends) == through(theirs, their_ends)


@pytest.mark.parametrize("name", MESH_SHAPES)
def test_jaccl_hostfile_is_mlx_distributed_configs(tmp_path, monkeypatch, name):
    theirs, _ = mlx_hostfile_for(tmp_path, monkeypatch, name, "jaccl")
    assert ours(name, "jaccl")[0] == theirs


@pytest.mark.parametrize("name", RING_SHAPES)
def test_jaccl_ring_hostfile_is_mlx_distributed_configs(tmp_path, monkeypatch, name):
    theirs, _ = mlx_hostfile_for(tmp_path, monkeypatch, name, "jaccl-ring")
    assert ours(name, "jaccl-ring")[0] == theirs


def test_a_jaccl_matrix_by_hand():
    # Against MLX's documented format: null for self, a device per peer, rank 0's IP first.
    hostfile, _ = ours("triangle", "jaccl")
    assert hostfile == {"backend": "jaccl", "envs": [], "hosts": [
        {"ssh": "198.18.1.1", "ips": ["198.18.1.1"], "rdma": [None, "rdma_en2", "rdma_en3"]},
        {"ssh": "198.18.1.2", "ips": ["198.18.1.2"], "rdma": ["rdma_en2", None, "rdma_en3"]},
        {"ssh": "198.18.1.3", "ips": ["198.18.1.3"], "rdma": ["rdma_en3", "rdma_en2", None]},
    ]}


def test_parallel_cables_give_lists_of_devices_and_addresses():
    hostfile, _ = ours("ring of 4, doubled", "jaccl-ring")
    assert hostfile["hosts"][0]["rdma"] == [None, ["rdma_en2", "rdma_en4"], None,
                                            ["rdma_en3", "rdma_en5"]]
    hostfile, _ = ours("ring of 4, doubled", "ring")
    assert [len(h["ips"]) for h in hostfile["hosts"]] == [2, 2, 2, 2]


def test_a_backend_the_cables_cannot_carry_is_refused():
    hosts, _, topology = topology_of("chain of 3")
    with pytest.raises(ValueError, match="cannot carry backend ring"):
        inv.mlx_hostfile(hosts, "ring", topology)
    # mpi keeps the bridge-style entries: mlx.launch's mpi backend only ssh-es to them.
    assert inv.mlx_hostfile(hosts, "mpi", topology) == inv.mlx_hostfile(hosts, "mpi")


def test_jaccl_needs_an_address_for_rank_0():
    hostvars = {f"m{i}": {"ansible_host": f"m{i}.local"} for i in (1, 2)}
    hosts = inv.cluster_hosts(hostvars, list(hostvars))
    plan = cables_plugin.cable_plan([cable(1, 2, 2, 2)], ["m1", "m2"], POOL)
    with pytest.raises(ValueError, match="m1: no IP address for the jaccl coordinator"):
        inv.mlx_hostfile(hosts, "jaccl", top.cable_topology(hosts, plan))


# --- what mlx.launch makes of our hostfiles ------------------------------------------------------


def launched(tmp_path, monkeypatch, hostfile):
    """Parse hostfile with MLX's Hostfile and run mlx.launch's launcher for its backend up to
    the point where it would start the ranks; returns (hosts, files, env) it would start with."""
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(hostfile))
    parsed = Hostfile.from_file(path)
    started = {}
    monkeypatch.setattr(mlx_launch, "_launch_with_io",
                        lambda cls, arguments, verbose: started.update(arguments=arguments))
    parser = types.SimpleNamespace(error=pytest.fail)
    args = types.SimpleNamespace(starting_port=32323, connections_per_ip=1, env=[], verbose=False,
                                 cwd=None, python=None, backend=parsed.backend)
    launcher = mlx_launch.launch_ring if parsed.backend == "ring" else mlx_launch.launch_jaccl
    launcher(parser, parsed.hosts, args, ["python", "-c", "pass"])
    (_, _, _, _, files, env, _), _ = started["arguments"][0]
    return parsed.hosts, files, env


def cable_ends(hosts, plan):
    """{ssh name: {address: network}} of every host's cable ends."""
    names = {h["name"]: h["mpi_address"] for h in hosts}
    ends = {}
    for end_host, ends_of in plan["hosts"].items():
        for end in ends_of:
            ends.setdefault(names[end_host], {})[end["address"]] = end["network"]
    return ends


@pytest.mark.parametrize("name", RING_SHAPES)
def test_mlx_launch_ring_connects_each_rank_to_the_next_over_a_cable(tmp_path, monkeypatch,
                                                                     name):
    hosts, plan, topology = topology_of(name)
    ranks, files, _ = launched(tmp_path, monkeypatch, inv.mlx_hostfile(hosts, "ring", topology))
    nodes = json.loads(files["MLX_HOSTFILE"])  # what every rank reads: [["ip:port", ...], ...]
    ends = cable_ends(hosts, plan)
    for rank, node in enumerate(nodes):
        listening = [address.split(":")[0] for address in node]
        # A rank listens on its own cable addresses...
        assert set(listening) <= set(ends[ranks[rank].ssh_hostname])
        # ...and the rank before it reaches each of them over a cable of its own.
        before = ends[ranks[rank - 1].ssh_hostname]
        for address in listening:
            assert any(ipaddress.IPv4Address(address) in ipaddress.IPv4Network(net)
                       for net in before.values()), (rank, address)


@pytest.mark.parametrize(("name", "backend"), [(n, "jaccl") for n in MESH_SHAPES]
                         + [(n, "jaccl-ring") for n in RING_SHAPES])
def test_mlx_launch_accepts_our_jaccl_hostfiles(tmp_path, monkeypatch, name, backend):
    hosts, plan, topology = topology_of(name)
    ranks, files, env = launched(tmp_path, monkeypatch,
                                 inv.mlx_hostfile(hosts, backend, topology))
    assert f"MLX_JACCL_COORDINATOR={ranks[0].ips[0]}:32323" in env
    assert ("MLX_JACCL_RING=1" in env) == (backend == "jaccl-ring")
    devices = json.loads(files["MLX_IBV_DEVICES"])
    interfaces = {(h["mpi_address"], end["interface"]): next(
        p["mpi_address"] for p in hosts if p["name"] == end["peer"])
        for h in hosts for end in plan["hosts"][h["name"]]}
    for i, row in enumerate(devices):
        for j, device in enumerate(row):
            for name_ in [device] if isinstance(device, str) else device or []:
                # rdma_enX of rank i leads over a cable to rank j.
                assert interfaces[ranks[i].ssh_hostname, name_[len("rdma_"):]] == \
                    ranks[j].ssh_hostname
