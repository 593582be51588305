"""Jinja filters that read the `cluster` inventory: validation, normalised hosts, hostfile data.

Pure functions over plain mappings (Ansible's hostvars behave like dicts), so tests/unit can
import this file and call them directly.
"""

import ipaddress
import re
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
    ansible_host. management_ip is the host's IP literal on the management network, for
    mlx.launch's "ips" and Open MPI's interface: ansible_host when it is one, else the host's
    default IPv4 from its facts (None when facts were not gathered).
    """
    result = []
    for name in hosts:
        hv = hostvars[name]
        facts = hv.get("ansible_facts") or {}
        ansible_host = str(hv.get("ansible_host") or name)
        thunderbolt_ip = hv.get("thunderbolt_ip") or None
        default_ip = (facts.get("default_ipv4") or {}).get("address")
        result.append(
            {
                "name": name,
                "ansible_host": ansible_host,
                "user": hv.get("ansible_user") or facts.get("user_id"),
                "thunderbolt_ip": thunderbolt_ip,
                "slots": _slots(hv),
                "mpi_address": str(thunderbolt_ip or ansible_host),
                "management_ip": ansible_host if _is_ip(ansible_host) else default_ip,
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


# The networks ranks can talk over, best first, and each host's address field on it.
NETWORK_ADDRESSES = {"thunderbolt": "thunderbolt_ip", "management": "management_ip"}


def cluster_network_labels(hosts):
    """The networks the ranked hosts share, the default first: thunderbolt when every one has a
    thunderbolt_ip, then management (ansible_host's network)."""
    ranked = [h for h in hosts if h["slots"] > 0]
    tb = bool(ranked) and all(h.get("thunderbolt_ip") for h in ranked)
    return (["thunderbolt"] if tb else []) + ["management"]


def mlx_hostfile_names(hosts):
    """{network: file name} of mlx.launch's hostfile per network: hosts.json for the default
    network (the one users run by hand), hosts-<network>.json for another."""
    labels = cluster_network_labels(hosts)
    return {label: "hosts.json" if i == 0 else f"hosts-{label}.json"
            for i, label in enumerate(labels)}


def _iface_with(facts, address):
    """(name, network) of the interface in Ansible facts that carries IPv4 `address`."""
    for name in facts.get("interfaces", []):
        iface = facts.get(name.replace("-", "_")) or {}
        ipv4 = iface.get("ipv4") or []
        for entry in (ipv4 if isinstance(ipv4, list) else [ipv4]) + list(
            iface.get("ipv4_secondaries") or []
        ):
            if isinstance(entry, dict) and entry.get("address") == address:
                mask = entry.get("netmask") or entry.get("prefix") or "32"
                return name, ipaddress.IPv4Network(f"{address}/{mask}", strict=False)
    return None, None


def cluster_networks(hosts, facts, thunderbolt_interface, labels=None):
    """The networks of cluster_network_labels (those in `labels`, when given) as {"label",
    "interface", "ips"}: the interface for Open MPI's if_include (thunderbolt_interface; for the
    management network the name the hosts' facts give its address, or its subnet when hosts
    name it differently) and each ranked host's address on it, in rank order. Only the
    management network needs the facts.

    hosts: cluster_hosts entries; facts: each ranked host's ansible_facts, in the same order.
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    networks = []
    for label in cluster_network_labels(hosts):
        if labels is not None and label not in labels:
            continue
        ips = [h[NETWORK_ADDRESSES[label]] for h in ranked]
        for h, ip in zip(ranked, ips, strict=True):
            if not ip:
                raise ValueError(f"{h['name']}: no IPv4 address for ansible_host "
                                 f"{h['ansible_host']} — gather facts or use an IP address as "
                                 "ansible_host")
        interface = thunderbolt_interface
        if label == "management":
            found = [_iface_with(f or {}, ip) for f, ip in zip(facts, ips, strict=True)]
            names = {name for name, _ in found}
            if None in names:
                missing = [h["name"] for h, (name, _) in zip(ranked, found, strict=True)
                           if name is None]
                raise ValueError(f"{', '.join(missing)}: no interface with the management "
                                 "address in the facts — gather facts (setup.yml) first")
            interface = names.pop() if len(names) == 1 else str(found[0][1])
        networks.append({"label": label, "interface": interface, "ips": ips})
    return networks


def mlx_hostfile(hosts, backend="ring", network=None):
    """mlx.launch's JSON hostfile in MLX's own format: {"backend", "envs", "hosts"}, with one
    {"ssh", "ips"} host entry per rank, so `mlx.launch --hostfile hosts.json -- ...` starts the
    job train.yml would start (-e backend=ring) without another flag.

    network: the label whose addresses the ranks talk over (default: the first of
    cluster_network_labels); mlx.launch still logs in to each host's mpi_address.
    mlx.launch has no slots field; like its own --repeat-hosts it repeats a host once per rank
    (the mpi backend counts the repeats into slots, the ring backend gives each its own port).
    With a single host every rank runs where mlx.launch runs, and mlx.launch starts ranks
    without ssh only for 127.0.0.1.
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    if len(ranked) == 1:
        entries = [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * ranked[0]["slots"]
    else:
        field = NETWORK_ADDRESSES[network or cluster_network_labels(hosts)[0]]
        entries = [{"ssh": h["mpi_address"], "ips": [h[field]] if h[field] else []}
                   for h in ranked for _ in range(h["slots"])]
    return {"backend": backend, "envs": [], "hosts": entries}


def _check_prefix(prefix):
    value = _int_or_none(prefix)
    if value is None or not 1 <= value <= 30:
        return None, [
            f"thunderbolt_prefix: {prefix!r} is not an integer from 1 to 30 — set it to the "
            "prefix length of the Thunderbolt subnet, e.g. 24 for 255.255.255.0"
        ]
    return value, []


# ---- Names and words that end up in ~/.ssh/config, known_hosts, authorized_keys (from=),
# hostfiles and shell commands: only what these allow gets past validation.

MAX_SLOTS = 256  # a Mac has a few dozen cores at most; more is a typo
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
_QUOTES = "'\"`‘’“”"


def _is_address(value):
    """An IPv4 or IPv6 literal without a zone (%en0), which no ssh file or from= can carry."""
    return "%" not in str(value) and _is_ip(value)


def _is_host_name(value):
    """An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens."""
    value = str(value)
    return len(value) <= 253 and all(_LABEL.fullmatch(label) for label in value.split("."))


def _looks_numeric(value):
    return str(value).replace(".", "").isdigit()


def _unsafe(value, allowed, reader):
    """Why value cannot be written into ssh files and command lines (None when it can): reader
    names the program that would take a leading '-' for an option."""
    if not value:
        return "it is empty"
    if value.startswith("-"):
        return f"it starts with '-', which {reader} would read as an option"
    if any(c in "\r\n" for c in value):
        return "it contains a line break"
    if any(c.isspace() for c in value):
        return "it contains a space"
    if any(c in _QUOTES for c in value):
        return "it contains a quote"
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in allowed))})
    return "it contains " + " ".join(repr(c) for c in bad) if bad else None


def _why_not(value, max_length=253):
    """The first thing that makes value unusable as a name, in words."""
    value = str(value)
    why = _unsafe(value, "-.", "ssh and mpirun")
    if why:
        return why
    if len(value) > max_length:
        return f"it is longer than {max_length} characters"
    if any(len(label) > 63 for label in value.split(".")):
        return "a part between dots is longer than 63 characters"
    return "a part between dots is empty or starts or ends with '-'"


def _suggest_name(value, lower=True):
    """'Jane's MacBook Pro' -> 'janes-macbook-pro' (lower=False: 'Janes-MacBook-Pro', the
    name macOS gives the Mac on the local network)."""
    text = "".join(c for c in str(value) if c not in _QUOTES)
    text = re.sub(r"[^A-Za-z0-9.]+", "-", text)
    labels = [label.strip("-")[:63].strip("-") for label in text.split(".")]
    text = ".".join(label for label in labels if label)[:253].strip(".-") or "mac1"
    return text.lower() if lower else text


def _label(name):
    """How a message names a host: as is, or quoted when the name itself is the problem."""
    return str(name) if _is_host_name(name) or _is_address(name) else repr(str(name))


def _check_name(name, hostvar):
    if _is_address(name) or (_is_host_name(name) and not _looks_numeric(name)):
        return []
    if _looks_numeric(name):
        return [
            f"{name}: inventory name {name} is not a valid IPv4 address — use four numbers "
            "0-255 separated by dots, or a host name such as mac1"
        ]
    fix = f"use an inventory name like {_suggest_name(name)}"
    if not hostvar.get("ansible_host"):
        address = _suggest_name(name, lower=False)
        if any(c.isspace() or c in _QUOTES for c in str(name)):  # a Mac's computer name
            address += ".local"
        fix += f" with ansible_host: {address}"
    return [
        f"{_label(name)}: inventory name {str(name)!r} is not a valid host name "
        f"({_why_not(name)}; use letters, digits, hyphens and dots) — {fix}"
    ]


def _check_ansible_host(name, hostvar):
    value = hostvar.get("ansible_host")
    if value is None or value == "":
        return []  # the inventory name is the address, checked by _check_name
    value = str(value)
    if _is_address(value):
        return []
    if _looks_numeric(value):
        return [
            f"{_label(name)}: ansible_host {value} is not a valid IPv4 address — use four numbers "
            "0-255 separated by dots, or a DNS name"
        ]
    if _is_host_name(value):
        return []
    return [
        f"{_label(name)}: ansible_host {value!r} is neither an IP address nor a DNS name "
        f"({_why_not(value)}) — use an IPv4 or IPv6 address (e.g. 192.168.1.21) or a host name "
        f"of letters, digits, hyphens and dots (e.g. {_suggest_name(value, lower=False)})"
    ]


def _user_why(value):
    return _unsafe(value, "_.-", "ssh") or "it is longer than 64 characters"


def _check_user(name, hostvar):
    value = hostvar.get("ansible_user")
    if value is None:
        return []  # the login of whoever runs Ansible
    value = str(value)
    if _USER.fullmatch(value):
        return []
    return [
        f"{_label(name)}: ansible_user {value!r} is not a user name ({_user_why(value)}) — set "
        "the Mac's short user name (`whoami` on that Mac): letters, digits, '_', '.' and '-', "
        "not starting with '-'"
    ]


def _check_port(name, hostvar):
    if hostvar.get("ansible_port") is None:
        return []
    value = hostvar["ansible_port"]
    port = _int_or_none(value)
    if port is None or not 1 <= port <= 65535:
        return [
            f"{_label(name)}: ansible_port {value!r} is not a port number — use a whole number "
            "from 1 to 65535 (sshd's port, 22 unless you changed it)"
        ]
    return []


def _check_interface(where, value):
    if _INTERFACE.fullmatch(str(value)):
        return []
    return [
        f"{where}: thunderbolt_interface {str(value)!r} is not an interface name — use the name "
        "`ifconfig` (macOS) or `ip link` (Linux) shows, e.g. bridge0 or thunderbolt0: up to 15 "
        "letters, digits, '_', '.' and '-'"
    ]


def _check_slots(name, hostvar):
    if "mpi_slots" not in hostvar:
        return []
    value = hostvar["mpi_slots"]
    slots = _int_or_none(value)
    if slots is None:
        return [
            f"{_label(name)}: mpi_slots {value!r} is not a non-negative integer — set the number "
            f"of ranks to start on this host, 0 to {MAX_SLOTS} (0 keeps it out of the hostfile)"
        ]
    if slots > MAX_SLOTS:
        return [
            f"{_label(name)}: mpi_slots {slots} is more than {MAX_SLOTS} — set the number of "
            f"ranks to start on this host, 0 to {MAX_SLOTS}: usually 1 per Mac (MLX uses every "
            "core of the GPU from one process)"
        ]
    return []


def _check_thunderbolt_ip(name, value, prefix):
    name = _label(name)
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


# Settings that mean one thing for the whole cluster: a value on some hosts only would be
# used by those hosts alone (Ansible gives each host its own variables), so it is an error.
GROUP_SETTINGS = ("thunderbolt_prefix", "thunderbolt_interface")


def _group_setting(hostvars, hosts, setting, default):
    """(value for the cluster, errors): the inventory value when every host has the same one,
    the role default when none has one."""
    present = [h for h in hosts if setting in hostvars[h]]
    if not present:
        return default, []
    if len(present) < len(hosts):
        others = [h for h in hosts if h not in present]
        return hostvars[present[0]][setting], [
            f"{_label(h)}: {setting} {hostvars[h][setting]} is set for this host only, while "
            f"{', '.join(map(_label, others[:3]))}{' ...' if len(others) > 3 else ''} use the "
            f"default — {setting} applies to the whole cluster: set it once under "
            "`cluster: vars:` (or on every host)"
            for h in present
        ]
    first = hostvars[hosts[0]][setting]
    return first, [
        f"{_label(h)}: {setting} {hostvars[h][setting]} differs from {first} on "
        f"{_label(hosts[0])} — set {setting} once for the whole cluster group"
        for h in hosts
        if str(hostvars[h][setting]) != str(first)
    ]


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
            f"{_label(host)}: {field} {value} is also the {first_field} of {_label(first_host)} — "
            f"give every host its own {field}"
        )
    return errors


def cluster_inventory_errors(hostvars, hosts, prefix, interface="bridge0"):
    """Every problem with the `cluster` inventory, one message per host and field with its fix.

    prefix and interface are the role defaults of thunderbolt_prefix and thunderbolt_interface,
    used when no host sets them. An empty list means the inventory is usable. Nothing stops at
    the first error, so a user fixes everything in one go. Everything that passes is safe to
    write into ~/.ssh/config, known_hosts, authorized_keys, hostfiles and command lines.
    """
    hosts = list(hosts or [])
    if not hosts:
        return [
            "cluster: the inventory group `cluster` is missing or empty — list your hosts under "
            "cluster: hosts: (see inventory/examples/)"
        ]
    errors = []
    prefix, group_errors = _group_setting(hostvars, hosts, "thunderbolt_prefix", prefix)
    errors += group_errors
    prefix, prefix_errors = _check_prefix(prefix)
    errors += prefix_errors
    interface, group_errors = _group_setting(hostvars, hosts, "thunderbolt_interface", interface)
    errors += group_errors
    if not group_errors:
        errors += _check_interface("cluster", interface)
    identities = []
    networks = {}
    with_tb = [h for h in hosts if hostvars[h].get("thunderbolt_ip")]
    for name in hosts:
        hv = hostvars[name]
        identities.append((name, "inventory name", name))
        if hv.get("ansible_host"):  # unset, it is the inventory name, checked just above
            identities.append((name, "ansible_host", hv["ansible_host"]))
        errors += _check_name(name, hv)
        errors += _check_ansible_host(name, hv)
        errors += _check_user(name, hv)
        errors += _check_port(name, hv)
        errors += _check_slots(name, hv)
        if hv.get("thunderbolt_ip"):
            identities.append((name, "thunderbolt_ip", hv["thunderbolt_ip"]))
            network, tb_errors = _check_thunderbolt_ip(name, hv["thunderbolt_ip"], prefix)
            errors += tb_errors
            if network is not None:
                networks[name] = (hv["thunderbolt_ip"], network)
        elif with_tb:
            errors.append(
                f"{_label(name)}: thunderbolt_ip is missing while {_label(with_tb[0])} has one — "
                "set thunderbolt_ip on every host of `cluster`, or on none"
            )
    errors += _check_unique(identities)
    errors += _subnet_errors(networks, prefix)
    if all(_slots(hostvars[h]) == 0 for h in hosts):
        errors.append(
            "cluster: every host has mpi_slots 0 — give at least one host mpi_slots 1 or more"
        )
    # Group the messages by host, in inventory order (cluster-wide ones first).
    order = {_label(name) + ":": i for i, name in enumerate(hosts)}
    return sorted(
        errors, key=lambda error: next((i for k, i in order.items() if error.startswith(k)), -1)
    )


def _subnet_errors(networks, prefix):
    """Hosts whose thunderbolt_ip lies outside the subnet most hosts share.

    networks: host -> (thunderbolt_ip, its network at the prefix)."""
    if not networks:
        return []
    # most_common keeps first-seen order on ties, so the first host's subnet wins a tie.
    subnet = Counter(net for _, net in networks.values()).most_common(1)[0][0]
    return [
        f"{_label(name)}: thunderbolt_ip {address} is outside {subnet} "
        f"(thunderbolt_prefix {prefix}) — put every thunderbolt_ip in one subnet, or lower "
        "thunderbolt_prefix to widen the subnet"
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
            "cluster_network_labels": cluster_network_labels,
            "cluster_networks": cluster_networks,
            "hostname_count_errors": hostname_count_errors,
            "launch_host": launch_host,
            "mlx_hostfile": mlx_hostfile,
            "mlx_hostfile_names": mlx_hostfile_names,
            "prefix_to_netmask": prefix_to_netmask,
        }
