"""setup.yml and reset.yml in the cables topology, on the session's 3-host cable ring (no bridge0,
no shared segment; tests/integration/conftest.py: cable_ring), which test_cables_run.py trains on.

What the addresses and hostfiles must be comes from the filters the playbooks use
(roles/cluster/filter_plugins: cable_plan, cable_topology, mlx_hostfile) fed with the inventory
the virtual cluster wrote; what they are is read inside the hosts' namespaces. Other shapes (a
full mesh of 4, rings of 4 and 5, parallel cables) are the same roles on more ports: the filters
are checked on them against MLX's own in tests/unit/test_topology.py.
"""

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from tests.unit.plugins import load
from tools.playbook import run_playbook

inv = load("roles/cluster/filter_plugins/inventory.py")
cables_plugin = load("roles/cluster/filter_plugins/cables.py")
top = load("roles/cluster/filter_plugins/topology.py")

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


class Cabled:
    """The cable ring after setup.yml, with what the filters say it should have."""

    def __init__(self, ring):
        self.vc, self.workdir = ring.vc, ring.workdir
        self.check, self.setup = ring.check, ring.setup
        inventory = yaml.safe_load(Path(self.vc.inventory).read_text())["cluster"]
        names = list(inventory["hosts"])
        group = inventory["vars"]
        self.pool = group["thunderbolt_cable_pool"]
        self.plan = cables_plugin.cable_plan(group["thunderbolt_cables"], names, self.pool)
        self.hosts = inv.cluster_hosts(inventory["hosts"], names)
        self.topology = top.cable_topology(self.hosts, self.plan)

    def run(self, playbook, name, **kw):
        return run_playbook(playbook, self.vc.inventory, self.workdir / name, **kw)

    def pool_addresses(self, host):
        """{interface: {address/prefix}} of the host's IPv4 addresses inside the cable pool."""
        found, pool = {}, ipaddress.ip_network(self.pool)
        for link in json.loads(self.vc.run(host, ["ip", "-j", "addr"]).stdout):
            for info in link.get("addr_info", []):
                if info["family"] == "inet" and ipaddress.ip_address(info["local"]) in pool:
                    found.setdefault(link["ifname"], set()).add(
                        f"{info['local']}/{info['prefixlen']}")
        return found

    def expected_addresses(self, host):
        return {end["interface"]: {f"{end['address']}/30"} for end in self.plan["hosts"][host]}


@pytest.fixture
def cabled(cable_ring):
    return Cabled(cable_ring)


def test_check_mode_changed_nothing(cabled):
    assert cabled.check.status == "successful", cabled.check.stdout[-4000:]
    assert cabled.check.changed() == []
    # setup came after it; what check mode found is in its own run: every port without address.
    states = [ev for ev in cabled.check.task_results()
              if ev.get("task") == "Record what each Thunderbolt interface lacks"]
    assert len(states) == len(cabled.vc.hosts)
    for ev in states:
        links = ev["res"]["ansible_facts"]["thunderbolt_link_states"]
        assert links and not any(link["has_address"] for link in links), links


def test_every_cable_port_has_its_30_and_no_other_pool_address(cabled):
    for host in cabled.vc.hosts:
        assert cabled.pool_addresses(host.name) == cabled.expected_addresses(host.name)


def test_setup_states_the_topology_and_pinged_across_every_cable(cabled):
    assert f"Thunderbolt cables: {cabled.topology['summary']}" in " ".join(
        cabled.setup.stdout.split())
    pings = [ping for ev in cabled.setup.task_results()
             if ev.get("task") == "Ping across each cable out of its own port"
             for ping in ev["res"]["results"]]
    assert len(pings) == 2 * len(cabled.plan["cables"])  # each cable from both ends
    assert all(p["rc"] == 0 for p in pings), pings
    for ping in pings:  # out of the cable's own port, to the address at its other end
        assert ping["cmd"][-3:] == ["-I", ping["item"]["interface"], ping["item"]["peer_address"]]


def test_hostfiles_are_what_the_filters_say(cabled):
    launch = cabled.hosts[0]["name"]
    user_home = cabled.vc.host(launch).home
    hosts_json = json.loads(cabled.vc.run(launch, ["cat", f"{user_home}/mlx-cluster/hosts.json"])
                            .stdout)
    assert cabled.topology["backends"]["ring"]
    assert hosts_json == inv.mlx_hostfile(cabled.hosts, "ring", cabled.topology)
    # Ranks in ring order, each listening on its cable to the rank before it.
    first = cabled.plan["hosts"][launch]
    assert hosts_json["hosts"][0]["ips"] == [
        end["address"] for end in first if end["peer"] == cabled.topology["ring"][-1]]
    hostfile = cabled.vc.run(launch, ["cat", f"{user_home}/mlx-cluster/hostfile"]).stdout
    assert [line for line in hostfile.splitlines() if not line.startswith("#")] == [
        f"{h.en0_ip} slots=1" for h in cabled.vc.hosts]
    # mpirun's check ran over the management network, kept off the cable pool.
    [check] = [ev for ev in cabled.setup.task_results()
               if ev.get("task") == "Run hostname on every slot of the hostfile"]
    argv = check["res"]["cmd"]
    assert argv[argv.index("btl_tcp_if_exclude") + 1] == f"127.0.0.1/8,sppp,{cabled.pool}"
    assert argv[argv.index("oob_tcp_if_exclude") + 1] == cabled.pool


def test_a_second_setup_changes_nothing(cabled):
    again = cabled.run("setup.yml", "setup-again")
    assert again.status == "successful", again.stdout[-6000:]
    assert again.changed() == []
    assert set(again.stats["changed"].values()) <= {0}


def test_an_unplugged_cable_fails_setup_naming_it_by_both_ends(cabled):
    cable = cabled.vc.cables[1]
    [planned] = [c for c in cabled.plan["cables"]
                 if {(h, i) for h, i in zip(c["hosts"], c["interfaces"], strict=True)}
                 == {(cable.a, cable.a_if), (cable.b, cable.b_if)}]
    cabled.vc.cable_down(cable)
    try:
        broken = cabled.run("setup.yml", "unplugged", cmdline="--tags thunderbolt")
    finally:
        cabled.vc.cable_up(cable)
    assert broken.status == "failed"
    [failure] = broken.failures()  # once, for the whole cluster
    message = " ".join(failure["res"]["msg"].split())
    ends = [f"{h} {i} {a}" for h, i, a in zip(planned["hosts"], planned["interfaces"],
                                               planned["addresses"], strict=True)]
    assert f"{ends[0]} - {ends[1]} ({planned['network']})" in message, message
    assert "across 1 cable(s)" in message, message
    assert broken.changed() == []


def test_the_management_interface_as_a_cable_port_or_a_pool_in_use_fails_setup(cabled):
    """From the hosts' facts, before any address changes: a cable listed on en0 (the interface
    Ansible reaches the host on) and a host with another network inside the pool."""
    listed = [[c.a, "en0" if i == 0 else c.a_if, c.b, c.b_if]
              for i, c in enumerate(cabled.vc.cables)]
    crowded = cabled.vc.hosts[-1].name
    theirs = f"{ipaddress.ip_network(cabled.pool)[200]}/24"  # the pool, on its en0
    cabled.vc.run(crowded, ["ip", "addr", "add", theirs, "dev", "en0"])
    try:
        refused = cabled.run("setup.yml", "on-en0", cmdline="--tags thunderbolt",
                             extravars={"thunderbolt_cables": listed})
    finally:
        cabled.vc.run(crowded, ["ip", "addr", "del", theirs, "dev", "en0"])
    assert refused.status == "failed"
    messages = sorted(refused.failure_messages())
    assert messages == sorted([
        f"{listed[0][0]}: cable port en0 is the interface Ansible and the other hosts reach "
        f"{listed[0][0]} on (its management network) — correct the port in thunderbolt_cables: "
        "the device of the Thunderbolt port the cable is in (macOS: a \"Thunderbolt N\" port of "
        "`networksetup -listallhardwareports`; Linux: `ip link`)",
        f"{crowded}: en0 is on {cabled.pool}, which overlaps thunderbolt_cable_pool "
        f"{cabled.pool} — set thunderbolt_cable_pool to a range none of the hosts' networks uses",
    ]), messages
    assert refused.changed() == []


def test_reset_removes_every_address_it_added_and_nothing_else(cabled):
    host = cabled.vc.hosts[-1].name
    port = cabled.plan["hosts"][host][0]["interface"]
    theirs = "198.18.255.7/32"  # the user's own address on a cable port stays
    cabled.vc.run(host, ["ip", "addr", "add", theirs, "dev", port])
    undo = cabled.run("reset.yml", "reset")
    assert undo.status == "successful", undo.stdout[-6000:]
    for h in cabled.vc.hosts:
        assert cabled.pool_addresses(h.name) == {}
        home = h.home
        left = cabled.vc.run(h.name, ["ls", f"{home}/mlx-cluster"], check=False).stdout.split()
        assert "hosts.json" not in left and "hostfile" not in left
    addresses = cabled.vc.run(host, ["ip", "-4", "-o", "addr", "show", "dev", port]).stdout
    assert theirs in addresses
    again = cabled.run("reset.yml", "reset-again")
    assert again.status == "successful", again.stdout[-6000:]
    assert again.changed() == []
    # Undone for the tests that share the ring: the roles reset.yml took back, set up again.
    cabled.vc.run(host, ["ip", "addr", "del", theirs, "dev", port])
    redo = cabled.run("setup.yml", "setup-after-reset",
                      cmdline="--tags thunderbolt,ssh_mesh,hostfiles")
    assert redo.status == "successful", redo.stdout[-6000:]
    for h in cabled.vc.hosts:
        assert cabled.pool_addresses(h.name) == cabled.expected_addresses(h.name)
