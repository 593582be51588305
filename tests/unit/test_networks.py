"""roles/cluster/filter_plugins/networks.py: the networks ranks talk over (train.yml's `network`,
bench.yml's comparison), and bench.yml's iperf3 pairs and per-backend networks over them."""

import pytest

from tests.unit.plugins import load

networks = load("roles/cluster/filter_plugins/networks.py")
inventory = load("roles/cluster/filter_plugins/inventory.py")
cables = load("roles/cluster/filter_plugins/cables.py")
topology = load("roles/cluster/filter_plugins/topology.py")
bench = load("roles/bench/filter_plugins/bench.py")
POOL = "198.19.1.0/24"


def hosts_of(hostvars):
    """cluster_hosts of hostvars in their order, as the cluster role normalises them."""
    return inventory.cluster_hosts(hostvars, list(hostvars))


def facts(iface, address, linux=True):
    """Facts as Ansible's setup module gathers them: on Linux an interface's ipv4 is one dict,
    on macOS a list of them."""
    entry = {"address": address, "netmask": "255.255.255.0"}
    return {"interfaces": ["lo", iface], iface: {"ipv4": entry if linux else [entry]}}


MACS = hosts_of({"a": {"ansible_host": "198.18.1.11", "thunderbolt_ip": "198.19.1.11"},
                 "b": {"ansible_host": "198.18.1.12", "thunderbolt_ip": "198.19.1.12"}})


def test_thunderbolt_is_the_default_network_when_the_inventory_has_it():
    assert networks.cluster_default_network(MACS) == "thunderbolt"
    plain = hosts_of({"a": {"ansible_host": "198.18.1.11"}})
    assert networks.cluster_default_network(plain) == "management"
    assert networks.cluster_default_network(plain, "cables") == "thunderbolt"
    # a host without ranks needs no Thunderbolt address
    off = hosts_of({"a": {"ansible_host": "198.18.1.11", "thunderbolt_ip": "198.19.1.11"},
                    "c": {"ansible_host": "198.18.1.13", "mpi_slots": 0}})
    assert networks.cluster_default_network(off) == "thunderbolt"


def test_networks_thunderbolt_and_management_by_interface_name():
    nets = networks.cluster_networks(MACS, {"a": facts("en0", "198.18.1.11"),
                                            "b": facts("en0", "198.18.1.12", linux=False)},
                                     "bridge0")
    assert nets == [
        {"label": "thunderbolt", "interface": "bridge0", "ips": ["198.19.1.11", "198.19.1.12"]},
        {"label": "management", "interface": "en0", "ips": ["198.18.1.11", "198.18.1.12"]},
    ]


def test_only_the_management_network_needs_the_facts():
    assert networks.cluster_networks(MACS, {}, "bridge0", labels=["thunderbolt"]) == [
        {"label": "thunderbolt", "interface": "bridge0", "ips": ["198.19.1.11", "198.19.1.12"]}]
    with pytest.raises(ValueError, match="a, b: no interface with the management address"):
        networks.cluster_networks(MACS, {}, "bridge0", labels=["management"])


def test_networks_use_the_subnet_when_hosts_name_the_interface_differently():
    hosts = hosts_of({"a": {"ansible_host": "198.18.1.11"}, "b": {"ansible_host": "198.18.1.12"}})
    nets = networks.cluster_networks(hosts, {"a": facts("en0", "198.18.1.11"),
                                             "b": facts("en1", "198.18.1.12")}, "bridge0")
    assert nets == [{"label": "management", "interface": "198.18.1.0/24",
                     "ips": ["198.18.1.11", "198.18.1.12"]}]


def test_networks_resolve_a_dns_ansible_host_from_facts():
    f = {**facts("en0", "198.18.1.11"), "default_ipv4": {"address": "198.18.1.11"}}
    nets = networks.cluster_networks(hosts_of({"a": {"ansible_host": "mac1.local",
                                                     "ansible_facts": f}}), {"a": f}, "bridge0")
    assert nets[0]["ips"] == ["198.18.1.11"] and nets[0]["interface"] == "en0"
    with pytest.raises(ValueError, match=r"a \(mac1.local\): no IPv4 address"):
        networks.cluster_networks(hosts_of({"a": {"ansible_host": "mac1.local"}}), {}, "bridge0")


# thunderbolt_topology cables (cluster defaults): the topology and hosts.json of the same inventory.
def cabled(names, cable_list):
    hosts = hosts_of({n: {"ansible_host": f"198.18.1.{11 + i}"} for i, n in enumerate(names)})
    plan = cables.cable_plan(cable_list, names, POOL)
    topo = topology.cable_topology(hosts, plan)
    hostfile = inventory.mlx_hostfile(hosts, "ring", topo if topo["backends"]["ring"] else None)
    facts_by_host = {h["name"]: facts("en0", h["ansible_host"]) for h in hosts}
    return hosts, plan, {"topology": topo, "hostfile": hostfile}, facts_by_host


RING = [["a", "en2", "c", "en2"], ["c", "en3", "b", "en2"], ["b", "en3", "d", "en2"],
        ["d", "en3", "a", "en3"]]


def test_a_ring_of_cables_runs_mlx_ring_in_ring_order_and_open_mpi_over_management():
    # a - c - b - d - a: MLX's ring (and train.yml's hosts.json) ranks a, c, b, d.
    hosts, plan, cabling, facts_by_host = cabled(["a", "b", "c", "d"], RING)
    nets = networks.cluster_networks(hosts, facts_by_host, "bridge0", cabling)
    assert nets == [
        {"label": "cables", "interface": POOL, "backends": ["ring"], "order": ["a", "c", "b", "d"],
         "ips": [e["ips"][0] for e in cabling["hostfile"]["hosts"]]},
        {"label": "management", "interface": "en0", "backends": ["mpi", "mpi4py"],
         "ips": ["198.18.1.11", "198.18.1.12", "198.18.1.13", "198.18.1.14"]},
    ]
    assert bench.bench_networks_for(nets, ["ring"]) == nets[:1]
    assert bench.bench_networks_for(nets, ["mpi", "mpi4py"]) == nets[1:]
    bridged = [{"label": "thunderbolt", "interface": "bridge0", "ips": ["198.19.1.11"]}]
    assert bench.bench_networks_for(bridged, ["ring"]) == bridged  # no "backends": all run
    # rank 1 (c) listens on its cable to rank 0 (a), where a connects
    a_c = next(c for c in plan["cables"] if c["hosts"] == ["a", "c"])
    assert nets[0]["ips"][1] == a_c["addresses"][1]
    # train.yml -e network=management: only that network, still without MLX's ring on it
    assert networks.cluster_networks(hosts, facts_by_host, "bridge0", cabling,
                                     labels=["management"]) == nets[1:]


def test_two_cabled_hosts_run_everything_over_their_cable():
    hosts, plan, cabling, facts_by_host = cabled(["a", "b"], [["a", "en2", "b", "en3"]])
    nets = networks.cluster_networks(hosts, facts_by_host, "bridge0", cabling)
    assert nets[0] == {"label": "cables", "interface": POOL,
                       "ips": plan["cables"][0]["addresses"]}
    assert nets[1] == {"label": "management", "interface": "en0",
                       "ips": ["198.18.1.11", "198.18.1.12"]}


def test_a_chain_has_no_all_reduce_over_the_cables():
    hosts, _, cabling, facts_by_host = cabled(["a", "b", "c"], [["a", "en2", "b", "en2"],
                                                                ["b", "en3", "c", "en2"]])
    nets = networks.cluster_networks(hosts, facts_by_host, "bridge0", cabling)
    assert [n["label"] for n in nets] == ["management"] and "backends" not in nets[0]


def test_iperf3_measures_host_pairs_per_network_and_each_cable_alone():
    hosts, plan, cabling, facts_by_host = cabled(["a", "b", "c"], [["a", "en2", "b", "en2"],
                                                                   ["b", "en3", "c", "en2"]])
    nets = networks.cluster_networks(hosts, facts_by_host, "bridge0", cabling)
    pairs = bench.bench_iperf3_pairs(nets, ["a", "b", "c"], plan["cables"])
    assert [(p["network"], p["link"], p["a_ip"], p["b_ip"]) for p in pairs] == [
        ("management", "a -> b", "198.18.1.11", "198.18.1.12"),
        ("management", "a -> c", "198.18.1.11", "198.18.1.13"),
        ("management", "b -> c", "198.18.1.12", "198.18.1.13"),
        ("cables", "a en2 - b en2", "198.19.1.1", "198.19.1.2"),
        ("cables", "b en3 - c en2", "198.19.1.5", "198.19.1.6"),
    ]
    assert (pairs[-1]["a"], pairs[-1]["b"]) == ("b", "c")
    assert bench.bench_iperf3_pairs(nets, ["a", "b", "c"]) == pairs[:3]


# ---- train.yml -e network=...: what each topology and backend allow


def test_a_network_we_do_not_know_names_the_choices():
    [error] = networks.network_errors("wifi", MACS)
    assert error.startswith("network: 'wifi' is not one of thunderbolt, management — ")
    assert networks.network_errors(None, MACS) == networks.network_errors("", MACS) == []
    assert networks.network_errors("management", MACS) == []
    assert networks.network_errors("thunderbolt", MACS, backend="ring") == []


def test_thunderbolt_needs_an_address_on_every_ranked_host():
    hosts = hosts_of({"a": {"ansible_host": "198.18.1.11", "thunderbolt_ip": "198.19.1.11"},
                      "b": {"ansible_host": "198.18.1.12"}})
    [error] = networks.network_errors("thunderbolt", hosts)
    assert "(none on b)" in error and "-e network=management" in error


def test_over_cables_open_mpi_reaches_two_hosts_and_jaccl_only_runs_over_rdma():
    hosts, _, cabling, _ = cabled(["a", "b", "c", "d"], RING)
    ring = cabling["topology"]
    assert networks.network_errors("thunderbolt", hosts, "cables", "ring", ring) == []
    [error] = networks.network_errors("thunderbolt", hosts, "cables", "mpi", ring)
    assert "Open MPI reaches only two hosts" in error and "-e backend=ring" in error
    two, _, pair, _ = cabled(["a", "b"], [["a", "en2", "b", "en3"]])
    assert networks.network_errors("thunderbolt", two, "cables", "mpi", pair["topology"]) == []
    [error] = networks.network_errors("management", hosts, "cables", "jaccl-ring", ring)
    assert error.startswith("network: jaccl-ring runs over the cables' RDMA devices only")


def host_facts(linux=True, **extra):
    """A cabled host's facts: en0 its management interface (198.18.1.11), en2 and en3 its cable
    ports (en2 with its /30 from an earlier setup), lo and bridge0 as Ansible types them."""
    base = facts("en0", "198.18.1.11", linux)
    ipv4 = {"address": "198.19.1.1", "netmask": "255.255.255.252"}
    return {**base, "interfaces": ["lo", "en0", "en2", "en3", "bridge0", *extra],
            "lo": {"type": "loopback", "ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0"}},
            "en2": {"type": "ether", "ipv4": ipv4 if linux else [ipv4]},
            "en3": {"type": "ether"}, "bridge0": {"type": "bridge"},
            **{name: {"type": "ether", "ipv4": {"address": address, "netmask": "255.255.255.0"}}
               for name, address in extra.items()}}


FIX = ("correct the port in thunderbolt_cables: the device of the Thunderbolt port the cable is "
       "in (macOS: a \"Thunderbolt N\" port of `networksetup -listallhardwareports`; Linux: "
       "`ip link`)")


@pytest.mark.parametrize("linux", [True, False], ids=["linux", "macos"])
def test_cable_ports_and_networks_that_pass(linux):
    assert networks.cable_host_errors(["en2", "en3"], host_facts(linux), POOL, "a",
                                      "198.18.1.11") == []
    # A /30 of the pool on a port no longer cabled is an earlier setup's, not another network.
    assert networks.cable_host_errors(["en3"], host_facts(linux), POOL, "a", "198.18.1.11") == []


def test_the_management_interface_a_loopback_or_a_bridge_is_no_cable_port():
    found = networks.cable_host_errors(["en0", "lo", "bridge0"], host_facts(), POOL, "a",
                                       "198.18.1.11")
    assert found == [
        f"a: cable port en0 is the interface Ansible and the other hosts reach a on (its "
        f"management network) — {FIX}",
        f"a: cable port lo is a loopback interface — {FIX}",
        f"a: cable port bridge0 is a bridge interface — {FIX}",
    ]
    # With a DNS name as ansible_host, the default route's interface is the management one.
    routed = {**host_facts(), "default_ipv4": {"interface": "en0", "address": "198.18.1.11"}}
    assert networks.cable_host_errors(["en0"], routed, POOL, "a")[0].startswith(
        "a: cable port en0 is the interface Ansible")


def test_a_network_of_the_host_inside_the_pool():
    found = networks.cable_host_errors(["en2"], host_facts(en5="198.19.1.77"), POOL, "a",
                                       "198.18.1.11")
    assert found == ["a: en5 is on 198.19.1.0/24, which overlaps thunderbolt_cable_pool "
                     "198.19.1.0/24 — set thunderbolt_cable_pool to a range none of the hosts' "
                     "networks uses"]
    # A larger network around the pool overlaps it too.
    wide = host_facts(en5="198.19.200.1")
    wide["en5"]["ipv4"]["netmask"] = "255.255.0.0"
    assert networks.cable_host_errors(["en2"], wide, POOL, "a", "198.18.1.11") == [
        "a: en5 is on 198.19.0.0/16, which overlaps thunderbolt_cable_pool 198.19.1.0/24 — set "
        "thunderbolt_cable_pool to a range none of the hosts' networks uses"]
