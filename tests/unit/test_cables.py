"""roles/cluster/filter_plugins/cables.py: one /30 per cable, deterministic and stable."""

import ipaddress
import itertools

import pytest

from tests.unit.plugins import load

cables = load("roles/cluster/filter_plugins/cables.py")

HOSTS = ["m1", "m2", "m3", "m4"]
POOL = "198.18.0.0/24"
RING = [["m1", "en2", "m2", "en3"], ["m2", "en2", "m3", "en3"], ["m3", "en2", "m4", "en3"],
        ["m4", "en2", "m1", "en3"]]


def addresses(plan):
    """{frozenset of both (host, interface) ends: (network, {end: address})}"""
    return {frozenset(zip(c["hosts"], c["interfaces"], strict=True)):
            (c["network"], dict(zip(zip(c["hosts"], c["interfaces"], strict=True),
                                    c["addresses"], strict=True)))
            for c in plan["cables"]}


def test_a_ring_of_four():
    plan = cables.cable_plan(RING, HOSTS, POOL)
    assert plan["pool"] == POOL
    assert plan["cables"] == [
        {"hosts": ["m1", "m2"], "interfaces": ["en2", "en3"],
         "addresses": ["198.18.0.1", "198.18.0.2"], "network": "198.18.0.0/30", "prefix": 30,
         "label": "m1 en2 - m2 en3"},
        {"hosts": ["m2", "m3"], "interfaces": ["en2", "en3"],
         "addresses": ["198.18.0.5", "198.18.0.6"], "network": "198.18.0.4/30", "prefix": 30,
         "label": "m2 en2 - m3 en3"},
        # m4's cables come last (it is last in the inventory), m1's first among them.
        {"hosts": ["m1", "m4"], "interfaces": ["en3", "en2"],
         "addresses": ["198.18.0.9", "198.18.0.10"], "network": "198.18.0.8/30", "prefix": 30,
         "label": "m1 en3 - m4 en2"},
        {"hosts": ["m3", "m4"], "interfaces": ["en2", "en3"],
         "addresses": ["198.18.0.13", "198.18.0.14"], "network": "198.18.0.12/30",
         "prefix": 30, "label": "m3 en2 - m4 en3"},
    ]


def test_each_host_sees_its_ends_and_its_peers():
    plan = cables.cable_plan(RING, HOSTS, POOL)
    assert plan["hosts"]["m1"] == [
        {"interface": "en2", "address": "198.18.0.1", "prefix": 30, "network": "198.18.0.0/30",
         "peer": "m2", "peer_interface": "en3", "peer_address": "198.18.0.2"},
        {"interface": "en3", "address": "198.18.0.9", "prefix": 30,
         "network": "198.18.0.8/30", "peer": "m4", "peer_interface": "en2",
         "peer_address": "198.18.0.10"},
    ]
    for host, ends in plan["hosts"].items():
        for end in ends:
            [mirror] = [e for e in plan["hosts"][end["peer"]]
                        if e["interface"] == end["peer_interface"]]
            assert (mirror["peer"], mirror["peer_interface"], mirror["peer_address"]) == (
                host, end["interface"], end["address"])
            network = ipaddress.IPv4Network(end["network"])
            assert ipaddress.IPv4Address(end["address"]) in network
            assert ipaddress.IPv4Address(end["peer_address"]) in network


def test_an_uncabled_host_has_an_empty_list():
    plan = cables.cable_plan(RING[:1], HOSTS, POOL)
    assert plan["hosts"]["m3"] == [] and plan["hosts"]["m4"] == []
    assert cables.cable_plan([], HOSTS, POOL) == {
        "pool": POOL, "cables": [], "hosts": {h: [] for h in HOSTS}}


def test_the_order_cables_are_listed_in_and_their_direction_do_not_matter():
    first = cables.cable_plan(RING, HOSTS, POOL)
    for order in itertools.permutations(RING):
        flipped = [[c[2], c[3], c[0], c[1]] if i % 2 else c for i, c in enumerate(order)]
        assert cables.cable_plan(flipped, HOSTS, POOL) == first


def test_a_host_appended_to_the_inventory_renumbers_no_cable():
    before = addresses(cables.cable_plan(RING, HOSTS, POOL))
    grown = RING + [["m5", "en2", "m1", "en4"], ["m5", "en3", "m3", "en4"]]
    after = addresses(cables.cable_plan(grown, HOSTS + ["m5"], POOL))
    assert {k: after[k] for k in before} == before
    assert len(after) == 6


def test_a_cable_between_later_hosts_keeps_the_earlier_ones():
    chain = RING[:2]  # m1-m2, m2-m3
    before = addresses(cables.cable_plan(chain, HOSTS, POOL))
    after = addresses(cables.cable_plan(chain + [["m3", "en4", "m4", "en4"]], HOSTS, POOL))
    assert {k: after[k] for k in before} == before


def test_two_cables_between_one_pair_follow_the_earlier_hosts_interfaces():
    plan = cables.cable_plan([["m2", "en3", "m1", "en7"], ["m2", "en4", "m1", "en10"]],
                             ["m1", "m2"], POOL)
    # String order, as mlx.distributed_config sorts a host's ports: en10 before en7.
    assert [c["interfaces"] for c in plan["cables"]] == [["en10", "en4"], ["en7", "en3"]]


def test_the_pool_sets_the_addresses():
    plan = cables.cable_plan(RING[:1], HOSTS, "198.19.8.0/29")
    assert plan["cables"][0]["addresses"] == ["198.19.8.1", "198.19.8.2"]


def test_a_pool_too_small_is_refused():
    with pytest.raises(ValueError, match="198.18.0.0/29 is too small for 4 cables"):
        cables.cable_plan(RING, HOSTS, "198.18.0.0/29")
