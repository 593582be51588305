"""The address plan of the `cables` topology: one /30 per Thunderbolt cable.

A cable is [host_a, interface_a, host_b, interface_b] (inventory names), as written in
thunderbolt_cables or found by discovery (thunderbolt_cables_found). The cables must have passed
cable_errors (inventory.py) first. Pure functions, unit-tested in tests/unit/test_cables.py.
"""

import ipaddress

PREFIX = 30  # a point-to-point subnet: network, one address per end, broadcast


def _ends(cable, position):
    """((host, interface), (host, interface)) with the host earlier in the inventory first."""
    a, b = (str(cable[0]), str(cable[1])), (str(cable[2]), str(cable[3]))
    return (a, b) if position[a[0]] <= position[b[0]] else (b, a)


def _order(cable, position):
    """Where a cable's /30 lies in the pool: the cables of later inventory hosts come after those
    of earlier ones, so a Mac appended to the inventory (and cabled) renumbers no existing cable.
    Within a pair of hosts the earlier host's interface decides, as in mlx.distributed_config."""
    (host_a, interface_a), (host_b, interface_b) = _ends(cable, position)
    return position[host_b], position[host_a], interface_a, interface_b


def cable_plan(cables, hosts, pool):
    """Each cable's /30 from pool, and each host's share of it.

    hosts: the inventory names in inventory order. The same cables give the same addresses
    whatever order they were listed or discovered in. Returns
    {"pool": "10.213.0.0/24",
     "cables": [{"hosts": [a, b], "interfaces": [ifa, ifb], "addresses": [ipa, ipb],
                 "network": "10.213.0.0/30", "prefix": 30,
                 "label": "a ifa - b ifb"}, ...],   # in address order; label: how messages name it
     "hosts": {host: [{"interface", "address", "prefix", "network",
                       "peer", "peer_interface", "peer_address"}, ...], ...}}
    where a is the end earlier in the inventory and gets the lower address; every host of hosts
    has an entry in "hosts" (an empty list when it has no cable).
    """
    hosts = [str(h) for h in hosts]
    position = {name: i for i, name in enumerate(hosts)}
    network = ipaddress.IPv4Network(str(pool))
    ordered = sorted(cables or [], key=lambda cable: _order(cable, position))
    if len(ordered) * 2 ** (32 - PREFIX) > network.num_addresses:
        raise ValueError(f"thunderbolt_cable_pool {network} is too small for {len(ordered)} "
                         "cables (check them with cable_errors first)")
    plan = {"pool": str(network), "cables": [], "hosts": {name: [] for name in hosts}}
    for index, cable in enumerate(ordered):
        subnet = ipaddress.IPv4Network((int(network.network_address) + 4 * index, PREFIX))
        (host_a, interface_a), (host_b, interface_b) = _ends(cable, position)
        addresses = [str(subnet[1]), str(subnet[2])]
        plan["cables"].append({
            "hosts": [host_a, host_b],
            "interfaces": [interface_a, interface_b],
            "addresses": addresses,
            "network": str(subnet),
            "prefix": PREFIX,
            "label": f"{host_a} {interface_a} - {host_b} {interface_b}",
        })
        ends = [(host_a, interface_a, addresses[0]), (host_b, interface_b, addresses[1])]
        for (host, interface, address), (peer, peer_interface, peer_address) in (
            ends, ends[::-1]
        ):
            plan["hosts"][host].append({
                "interface": interface,
                "address": address,
                "prefix": PREFIX,
                "network": str(subnet),
                "peer": peer,
                "peer_interface": peer_interface,
                "peer_address": peer_address,
            })
    return plan


class FilterModule:
    def filters(self):
        return {"cable_plan": cable_plan}
