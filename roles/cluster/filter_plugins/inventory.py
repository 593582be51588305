"""Jinja filters that read the `cluster` inventory: validation, normalised hosts, hostfile data.

Pure functions over plain mappings (Ansible's hostvars behave like dicts), so tests/unit can
import this file and call them directly.
"""

import ipaddress
from collections import Counter

DEFAULT_SLOTS = 1


def _int_or_none(value):
    """Non-negative int from an int or a digit string (extra vars arrive as strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _is_ip(value):
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def _slots(hostvar):
    value = hostvar.get("mpi_slots", DEFAULT_SLOTS)
    slots = _int_or_none(value)
    return DEFAULT_SLOTS if slots is None else slots


def cluster_hosts(hostvars, hosts):
    """One dict per host, in inventory order, with every name the other roles need.

    mpi_address is the address Open MPI (and the SSH mesh) uses: thunderbolt_ip when set, else
    ansible_host. ip is an IP literal for mlx.launch's "ips": the MPI address when it is one, else
    the host's default IPv4 from its facts (None when facts were not gathered).
    """
    result = []
    for name in hosts:
        hv = hostvars[name]
        facts = hv.get("ansible_facts") or {}
        ansible_host = str(hv.get("ansible_host") or name)
        thunderbolt_ip = hv.get("thunderbolt_ip") or None
        mpi_address = str(thunderbolt_ip or ansible_host)
        default_ip = (facts.get("default_ipv4") or {}).get("address")
        result.append(
            {
                "name": name,
                "ansible_host": ansible_host,
                "user": hv.get("ansible_user") or facts.get("user_id"),
                "thunderbolt_ip": thunderbolt_ip,
                "slots": _slots(hv),
                "mpi_address": mpi_address,
                "ip": mpi_address if _is_ip(mpi_address) else default_ip,
                "hostname": facts.get("hostname"),
            }
        )
    return result


def launch_host(hostvars, hosts):
    """Inventory name of the rank-0 host: the first host with mpi_slots > 0 (None if none)."""
    return next((h["name"] for h in cluster_hosts(hostvars, hosts) if h["slots"] > 0), None)


def prefix_to_netmask(prefix):
    """24 -> '255.255.255.0' (macOS networksetup wants a dotted netmask)."""
    return str(ipaddress.IPv4Network(f"0.0.0.0/{int(prefix)}").netmask)


def mlx_hostfile_entries(hosts):
    """mlx.launch's JSON hostfile: one {"ssh", "ips"} entry per rank.

    mlx.launch has no slots field; like its own --repeat-hosts it repeats a host once per rank
    (the mpi backend counts the repeats into slots, the ring backend gives each its own port).
    With a single host every rank runs where mlx.launch runs, and mlx.launch starts ranks
    without ssh only for 127.0.0.1.
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    if len(ranked) == 1:
        return [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * ranked[0]["slots"]
    return [
        {"ssh": h["mpi_address"], "ips": [h["ip"]] if h["ip"] else []}
        for h in ranked
        for _ in range(h["slots"])
    ]


def _check_prefix(prefix):
    value = _int_or_none(prefix)
    if value is None or not 1 <= value <= 30:
        return None, [
            f"thunderbolt_prefix: {prefix!r} is not an integer from 1 to 30 — set it to the "
            "prefix length of the Thunderbolt subnet, e.g. 24 for 255.255.255.0"
        ]
    return value, []


def _check_slots(name, hostvar):
    if "mpi_slots" not in hostvar:
        return []
    value = hostvar["mpi_slots"]
    if _int_or_none(value) is None:
        return [
            f"{name}: mpi_slots {value!r} is not a non-negative integer — set the number of "
            "ranks to start on this host (0 keeps it out of the hostfile)"
        ]
    return []


def _check_ansible_host(name, hostvar):
    value = str(hostvar.get("ansible_host") or name)
    looks_numeric = value.replace(".", "").isdigit()
    if looks_numeric and not _is_ip(value):
        return [
            f"{name}: ansible_host {value} is not a valid IPv4 address — use four numbers "
            "0-255 separated by dots, or a DNS name"
        ]
    return []


def _check_thunderbolt_ip(name, value, prefix):
    try:
        address = ipaddress.IPv4Address(str(value))
    except ValueError:
        fix = (
            "write the address alone and the prefix length in thunderbolt_prefix"
            if "/" in str(value)
            else "use four numbers 0-255 separated by dots, e.g. 10.0.0.1"
        )
        return None, [f"{name}: thunderbolt_ip {value!r} is not a valid IPv4 address — {fix}"]
    if address.is_loopback or address.is_multicast or address.is_unspecified or address.is_reserved:
        return None, [
            f"{name}: thunderbolt_ip {address} is a loopback, multicast or reserved address — "
            "use a private address such as 10.0.0.x"
        ]
    if prefix is None:
        return None, []
    network = ipaddress.IPv4Network(f"{address}/{prefix}", strict=False)
    if address in (network.network_address, network.broadcast_address):
        kind = "network" if address == network.network_address else "broadcast"
        return network, [
            f"{name}: thunderbolt_ip {address} is the {kind} address of {network} — "
            f"pick a host address between {network[1]} and {network[-2]}"
        ]
    return network, []


def _check_unique(entries):
    """entries: (host, field, value) triples; a value may name only one host."""
    owners = {}
    errors = []
    for host, field, value in entries:
        key = str(value).lower()
        if key not in owners:
            owners[key] = (host, field)
            continue
        first_host, first_field = owners[key]
        if first_host == host:
            continue  # e.g. ansible_host equal to the inventory name
        errors.append(
            f"{host}: {field} {value} is also the {first_field} of {first_host} — "
            f"give every host its own {field}"
        )
    return errors


def cluster_inventory_errors(hostvars, hosts, prefix):
    """Every problem with the `cluster` inventory, one message per host and field with its fix.

    prefix is the default thunderbolt_prefix (a host's own inventory value wins, so this works
    from a play on any host). An empty list means the inventory is usable. Nothing stops at the
    first error, so a user fixes everything in one go.
    """
    hosts = list(hosts or [])
    if not hosts:
        return [
            "cluster: the inventory group `cluster` is missing or empty — list your hosts under "
            "cluster: hosts: (see inventory/examples/)"
        ]
    prefixes = {h: hostvars[h].get("thunderbolt_prefix", prefix) for h in hosts}
    errors = [
        f"{name}: thunderbolt_prefix {value} differs from {prefixes[hosts[0]]} on {hosts[0]} — "
        "set thunderbolt_prefix once for the whole cluster group"
        for name, value in prefixes.items()
        if str(value) != str(prefixes[hosts[0]])
    ]
    prefix, prefix_errors = _check_prefix(prefixes[hosts[0]])
    errors += prefix_errors
    identities = []
    networks = {}
    with_tb = [h for h in hosts if hostvars[h].get("thunderbolt_ip")]
    for name in hosts:
        hv = hostvars[name]
        identities.append((name, "inventory name", name))
        if hv.get("ansible_host"):  # unset, it is the inventory name, checked just above
            identities.append((name, "ansible_host", hv["ansible_host"]))
        errors += _check_ansible_host(name, hv)
        errors += _check_slots(name, hv)
        if hv.get("thunderbolt_ip"):
            identities.append((name, "thunderbolt_ip", hv["thunderbolt_ip"]))
            network, tb_errors = _check_thunderbolt_ip(name, hv["thunderbolt_ip"], prefix)
            errors += tb_errors
            if network is not None:
                networks[name] = (hv["thunderbolt_ip"], network)
        elif with_tb:
            errors.append(
                f"{name}: thunderbolt_ip is missing while {with_tb[0]} has one — set "
                "thunderbolt_ip on every host of `cluster`, or on none"
            )
    errors += _check_unique(identities)
    errors += _subnet_errors(networks, prefix)
    if all(_slots(hostvars[h]) == 0 for h in hosts):
        errors.append(
            "cluster: every host has mpi_slots 0 — give at least one host mpi_slots 1 or more"
        )
    # Group the messages by host, in inventory order (cluster-wide ones first).
    order = {name: i for i, name in enumerate(hosts)}
    return sorted(errors, key=lambda error: order.get(error.split(":")[0], -1))


def _subnet_errors(networks, prefix):
    """Hosts whose thunderbolt_ip lies outside the subnet most hosts share.

    networks: host -> (thunderbolt_ip, its network at the prefix)."""
    if not networks:
        return []
    # most_common keeps first-seen order on ties, so the first host's subnet wins a tie.
    subnet = Counter(net for _, net in networks.values()).most_common(1)[0][0]
    return [
        f"{name}: thunderbolt_ip {address} is outside {subnet} (thunderbolt_prefix {prefix}) — "
        "put every thunderbolt_ip in one subnet, or lower thunderbolt_prefix to widen the subnet"
        for name, (address, network) in networks.items()
        if network != subnet
    ]


def hostname_count_errors(output, hosts):
    """Compare `mpirun ... hostname` output with the hosts that should have answered.

    hosts: cluster_hosts entries with "hostname" (from facts). Every host with slots > 0 must print
    its own short hostname exactly `slots` times, and no two of them may share a hostname (Open MPI
    5 then mixes the hosts up and returns wrong results or hangs).
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    errors = []
    by_hostname = {}
    for h in ranked:
        other = by_hostname.setdefault(h["hostname"], h["name"])
        if other != h["name"]:
            errors.append(
                f"{h['name']}: hostname {h['hostname']} is also the hostname of {other} — give "
                "every host its own hostname (macOS: sudo scutil --set LocalHostName <name>)"
            )
    if errors:
        return errors
    printed = Counter(line.strip().split(".")[0] for line in output.splitlines() if line.strip())
    for h in ranked:
        got = printed.get(h["hostname"], 0)
        if got != h["slots"]:
            errors.append(
                f"{h['name']}: mpirun started {got} rank(s) on {h['hostname']}, expected "
                f"{h['slots']} (mpi_slots) — check that {h['mpi_address']} reaches this host"
            )
    return errors


class FilterModule:
    def filters(self):
        return {
            "cluster_hosts": cluster_hosts,
            "cluster_inventory_errors": cluster_inventory_errors,
            "hostname_count_errors": hostname_count_errors,
            "launch_host": launch_host,
            "mlx_hostfile_entries": mlx_hostfile_entries,
            "prefix_to_netmask": prefix_to_netmask,
        }
