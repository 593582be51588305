"""The networks ranks can talk over: train.yml's `network` picks one, bench.yml compares them.

thunderbolt is the Thunderbolt Bridge (every ranked host has a thunderbolt_ip) or, in the
`cables` topology, the cables; management is ansible_host's network (Wi-Fi or Ethernet on Macs).
Pure functions, unit-tested in tests/unit/test_networks.py.
"""

import ipaddress

NETWORKS = ("thunderbolt", "management")


def cluster_default_network(hosts, topology="bridge"):
    """The network a job uses unless told otherwise: thunderbolt when the inventory has it."""
    ranked = [h for h in hosts if h["slots"] > 0]
    bridged = bool(ranked) and all(h.get("thunderbolt_ip") for h in ranked)
    return "thunderbolt" if topology == "cables" or bridged else "management"


def _ipv4(facts, name):
    """[(address, network)] of an interface in Ansible facts: macOS lists its IPv4 entries, Linux
    gives one and its secondaries."""
    iface = facts.get(name.replace("-", "_")) or {}
    ipv4 = iface.get("ipv4") or []
    entries = (ipv4 if isinstance(ipv4, list) else [ipv4]) + list(iface.get("ipv4_secondaries")
                                                                  or [])
    return [(entry["address"], ipaddress.IPv4Network(
                f"{entry['address']}/{entry.get('netmask') or entry.get('prefix') or '32'}",
                strict=False))
            for entry in entries if isinstance(entry, dict) and entry.get("address")]


def _iface_with(facts, address):
    """(name, network) of the interface in Ansible facts that carries IPv4 `address`."""
    for name in facts.get("interfaces", []):
        for found, network in _ipv4(facts, name):
            if found == address:
                return name, network
    return None, None


def cable_host_errors(ports, facts, pool, name, management_ip=None):
    """What a host's facts (network subset) say against its cables, at setup, one message each
    with its fix: a cable port that is its management interface (the default route's, or the one
    with its management address), a loopback or a bridge; another network of the host inside the
    cable pool, which the cables' routes would shadow.

    ports: the host's cable ports (its entries of cluster_cable_plan); pool:
    thunderbolt_cable_pool; management_ip: cluster_hosts' management_ip. A /30 of the pool on a
    port is a cable end setup gave (this run's, or an earlier one's on a port since uncabled).
    """
    pool = ipaddress.IPv4Network(pool)
    management = {(facts.get("default_ipv4") or {}).get("interface"),
                  _iface_with(facts, management_ip)[0]} - {None}
    fix = ("correct the port in thunderbolt_cables: the device of the Thunderbolt port the cable "
           "is in (macOS: a \"Thunderbolt N\" port of `networksetup -listallhardwareports`; "
           "Linux: `ip link`)")
    errors = []
    for port in ports:
        kind = (facts.get(port.replace("-", "_")) or {}).get("type")
        if port in management:
            errors.append(f"{name}: cable port {port} is the interface Ansible and the other "
                          f"hosts reach {name} on (its management network) — {fix}")
        elif kind in ("loopback", "bridge"):
            errors.append(f"{name}: cable port {port} is a {kind} interface — {fix}")
    for iface in facts.get("interfaces", []):
        for _, network in [] if iface in ports else _ipv4(facts, iface):
            ours = network.prefixlen == 30 and network.subnet_of(pool)
            if network.overlaps(pool) and not ours:
                errors.append(f"{name}: {iface} is on {network}, which overlaps "
                              f"thunderbolt_cable_pool {pool} — set thunderbolt_cable_pool to a "
                              "range none of the hosts' networks uses")
    return errors


def cluster_networks(hosts, facts_by_host, thunderbolt_interface, cables=None, labels=None):
    """The networks ranks can talk over, labelled thunderbolt (the bridge), cables, management;
    only those in `labels` when given (only management needs the facts).

    hosts: cluster_hosts entries of the ranked hosts; facts_by_host: name -> ansible_facts.
    Each network: {"label", "interface" (Open MPI if_include: a name, or a CIDR when hosts name
    it differently), "ips" (per rank)}, and where not every backend or rank order applies,
    "backends" (those that run on it) and "order" (the hosts in rank order).

    cables (thunderbolt_topology cables): {"topology": cable_topology, "hostfile": the ring
    hostfile, cluster_mlx_hostfile}. Two hosts cabled: every backend over the cables. More,
    cabled as a ring: MLX's ring over the cables, its ranks in the ring's order (as train.yml
    runs it), and Open MPI over the management network (as train.yml's mpi backend runs it).
    """
    wanted = set(labels or ("thunderbolt", "cables", "management"))
    networks = []
    if "thunderbolt" in wanted and hosts and all(h.get("thunderbolt_ip") for h in hosts):
        networks.append({"label": "thunderbolt", "interface": thunderbolt_interface,
                         "ips": [h["thunderbolt_ip"] for h in hosts]})
    management = {}
    if cables and len(hosts) > 1:
        over_cables = _cable_network(hosts, cables)
        if over_cables and over_cables[0].get("backends") == ["ring"]:
            management = {"backends": ["mpi", "mpi4py"]}  # ring runs over the cables
        networks += over_cables if "cables" in wanted else []
    if "management" in wanted and hosts:
        networks.append({"label": "management", **_management(hosts, facts_by_host),
                         **management})
    return networks


def _management(hosts, facts_by_host):
    """{"interface", "ips"} of ansible_host's network: the name the hosts' facts give the
    interface with their address, or its subnet when hosts name it differently."""
    missing = [f"{h['name']} ({h['ansible_host']})" for h in hosts if not h["management_ip"]]
    if missing:
        raise ValueError(f"{', '.join(missing)}: no IPv4 address for ansible_host — gather "
                         "facts (setup.yml) or use an IP address as ansible_host")
    ips = [h["management_ip"] for h in hosts]
    found = [_iface_with(facts_by_host.get(h["name"]) or {}, ip)
             for h, ip in zip(hosts, ips, strict=True)]
    missing = [h["name"] for h, (name, _) in zip(hosts, found, strict=True) if name is None]
    if missing:
        raise ValueError(f"{', '.join(missing)}: no interface with the management address in "
                         "the facts — gather facts (setup.yml) first")
    names = {name for name, _ in found}
    return {"interface": names.pop() if len(names) == 1 else str(found[0][1]), "ips": ips}


def _cable_network(hosts, cables):
    """The cables as a network to run all-reduces over ([] when they carry none)."""
    topology, hostfile = cables["topology"], cables["hostfile"]
    pool = topology["mpi"].get("include") or topology["mpi"].get("exclude")
    if topology["mpi"]["over"] == "cables":  # two hosts: a cable's two ends
        cable = topology["cables"][0]
        by_host = dict(zip(cable["hosts"], cable["addresses"], strict=True))
        return [{"label": "cables", "interface": pool, "ips": [by_host[h["name"]] for h in hosts]}]
    if not topology["backends"]["ring"]:
        return []
    # hosts.json over the cables: rank r listens on its cable to rank r-1, in the ring's order.
    return [{"label": "cables", "interface": pool, "backends": ["ring"],
             "order": list(topology["ring"]), "ips": [e["ips"][0] for e in hostfile["hosts"]]}]


def network_errors(network, hosts, topology="bridge", backend="mpi", cable_topology=None):
    """Why train.yml cannot run `backend` over `network` (-e network=...), with the fix."""
    if network in (None, ""):
        return []
    if network not in NETWORKS:
        return [f"network: {network!r} is not one of {', '.join(NETWORKS)} — e.g. "
                "-e network=management, or leave it out (Thunderbolt when the inventory has it)"]
    if network == "management" and backend in ("jaccl", "jaccl-ring"):
        return [f"network: {backend} runs over the cables' RDMA devices only — drop "
                "-e network=management, or use backend ring or mpi"]
    if network != "thunderbolt":
        return []
    if cluster_default_network(hosts, topology) != "thunderbolt":
        without = [h["name"] for h in hosts if h["slots"] > 0 and not h.get("thunderbolt_ip")]
        return [f"network: thunderbolt needs a thunderbolt_ip on every host with slots (none on "
                f"{', '.join(without)}) — set thunderbolt_ip in the inventory and run setup.yml "
                "again, or use -e network=management"]
    if topology == "cables" and backend == "mpi" and (cable_topology or {}).get(
            "mpi", {}).get("over") != "cables":
        return ["network: over cables Open MPI reaches only two hosts (it cannot route around a "
                "ring of cables) — use -e backend=ring for the cables, or -e network=management"]
    return []


class FilterModule:
    def filters(self):
        return {
            "cluster_default_network": cluster_default_network,
            "cable_host_errors": cable_host_errors,
            "cluster_networks": cluster_networks,
            "network_errors": network_errors,
        }
