"""Jinja filters that read the `cluster` inventory: validation, normalised hosts, hostfile data.

Pure functions over plain mappings (Ansible's hostvars behave like dicts), so tests/unit can
import this file and call them directly.
"""

import ipaddress
import re
from collections import Counter
from collections.abc import Mapping

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


def mlx_hostfile(hosts, backend="ring", topology=None, network=None):
    """mlx.launch's JSON hostfile in MLX's own format: {"backend", "envs", "hosts"}, with one
    {"ssh", "ips"} host entry per rank, so `mlx.launch --hostfile hosts.json -- ...` starts the
    job train.yml would start (-e backend=ring) without another flag.

    network: management for the hosts' management_ip (train.yml's -e network=management);
    default their Thunderbolt address (thunderbolt_ip, or over cables as below), else
    management_ip. mlx.launch still logs in to each host's mpi_address.
    mlx.launch has no slots field; like its own --repeat-hosts it repeats a host once per rank
    (the mpi backend counts the repeats into slots, the ring backend gives each its own port).
    With a single host every rank runs where mlx.launch runs, and mlx.launch starts ranks
    without ssh only for 127.0.0.1.

    topology (cable_topology's result, `cables` topology): for backend ring, jaccl and
    jaccl-ring the ranks talk over the cables, one per host, as mlx.distributed_config writes
    it (check cable_backend_errors first; mpi keeps the entries above). ring and jaccl-ring
    rank the hosts in the ring's order, not always the inventory's (rank 0 stays the first).
    """
    ranked = [h for h in hosts if h["slots"] > 0]
    if len(ranked) == 1:
        entries = [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * ranked[0]["slots"]
    elif network == "management" or topology is None or backend not in topology["backends"]:
        ips = [h["management_ip"] if network == "management"
               else h["thunderbolt_ip"] or h["management_ip"] for h in ranked]
        entries = [{"ssh": h["mpi_address"], "ips": [ip] if ip else []}
                   for h, ip in zip(ranked, ips, strict=True) for _ in range(h["slots"])]
    else:
        entries = _cable_entries(ranked, backend, topology)
    return {"backend": backend, "envs": [], "hosts": entries}


def _cable_entries(ranked, backend, topology):
    """The host entries of a cables hostfile (see mlx_hostfile)."""
    ends = {}  # (host, peer) -> [(interface, address)], the pair's cables in the plan's order
    for cable in topology["cables"]:
        (a, b), (ia, ib), (xa, xb) = cable["hosts"], cable["interfaces"], cable["addresses"]
        ends.setdefault((a, b), []).append((ia, xa))
        ends.setdefault((b, a), []).append((ib, xb))
    if not topology["backends"][backend]:
        raise ValueError(f"the cables cannot carry backend {backend} (cable_backend_errors "
                         "says why)")
    by_name = {h["name"]: h for h in ranked}
    order = list(topology["ring"]) if backend in ("ring", "jaccl-ring") else list(by_name)
    if backend == "jaccl":
        width = min(len(ends.get((a, b), [])) for a in order for b in order if a != b)
    else:
        width = topology["ring_width"]

    def devices(host, peer):
        names = [f"rdma_{interface}" for interface, _ in ends[host, peer][:width]]
        return names[0] if width == 1 else names

    entries = []
    for rank, name in enumerate(order):
        left, right = order[rank - 1], order[(rank + 1) % len(order)]
        host = by_name[name]
        if backend == "ring":  # rank r listens where rank r-1 connects: on the cable to it
            entries.append({"ssh": host["mpi_address"],
                            "ips": [address for _, address in ends[name, left][:width]]})
            continue
        if rank == 0 and not host["management_ip"]:
            raise ValueError(f"{name}: no IP address for the {backend} coordinator (rank 0) — "
                             "set ansible_host to its IP address, or gather facts")
        peers = order if backend == "jaccl" else (left, right)
        ips = [host["management_ip"]] if host["management_ip"] else []
        entries.append({"ssh": host["mpi_address"], "ips": ips,
                        "rdma": [devices(name, peer) if peer != name and peer in peers else None
                                 for peer in order]})
    return entries


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


def _check_wired_limit(name, hostvar):
    if hostvar.get("mlx_wired_limit_mb") is None:
        return []
    value = hostvar["mlx_wired_limit_mb"]
    if _int_or_none(value) is not None:
        return []
    return [
        f"{_label(name)}: mlx_wired_limit_mb {value!r} is not a whole number of megabytes — set "
        "0 to leave macOS' GPU wired-memory limit alone, or a limit in MB below the Mac's memory "
        "(e.g. 24576 on a 32 GB Mac; check.yml compares it with hw.memsize)"
    ]


_PMSET_KEY = re.compile(r"[a-z]{1,40}")


def _check_pmset(name, hostvar):
    """macos_pmset: {setting: whole number} as `pmset -a <setting> <value>` takes it."""
    if hostvar.get("macos_pmset") is None:
        return []
    value = hostvar["macos_pmset"]
    fix = ("set macos_pmset to a mapping of pmset settings (as `pmset -g custom` names them) to "
           "whole numbers, e.g. {sleep: 0, disksleep: 0, powernap: 0}")
    if not isinstance(value, Mapping):
        return [f"{_label(name)}: macos_pmset {value!r} is not a mapping — {fix}"]
    return [
        f"{_label(name)}: macos_pmset {key!r}: {setting!r} is not a pmset setting and a whole "
        f"number — {fix}"
        for key, setting in value.items()
        if not (isinstance(key, str) and _PMSET_KEY.fullmatch(key))
        or _int_or_none(setting) is None
    ]


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
GROUP_SETTINGS = ("thunderbolt_prefix", "thunderbolt_interface", "thunderbolt_topology",
                  "thunderbolt_cable_pool", "thunderbolt_cables")


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


TOPOLOGIES = {
    "bridge": "one thunderbolt_ip per host on the Thunderbolt Bridge",
    "cables": "the bridge off, one /30 per cable from thunderbolt_cable_pool",
}


def _check_topology(topology):
    if str(topology) in TOPOLOGIES:
        return []
    choices = "; ".join(f"{name}: {meaning}" for name, meaning in TOPOLOGIES.items())
    return [f"cluster: thunderbolt_topology {str(topology)!r} is not a topology — use {choices}"]


# Where a cable pool may lie: address space no one routes on the internet. Private (RFC 1918),
# shared (RFC 6598, carrier-grade NAT) and benchmark (RFC 2544) space.
POOL_SPACES = {
    "private": [ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12",
                                                   "192.168.0.0/16")],
    "shared": [ipaddress.IPv4Network("100.64.0.0/10")],
    "benchmark": [ipaddress.IPv4Network("198.18.0.0/15")],
}
# Interfaces a cable never ends on, whatever the system: loopback and (software) bridges, the
# Thunderbolt Bridge included; en0 and the management interface are judged from the host's
# facts and ports at setup (roles/thunderbolt).
_NOT_A_CABLE_PORT = re.compile(r"(lo|bridge|br|virbr|docker)\d*|br-.*|lo:.*")


def _pool_errors(pool, cables):
    """(the pool as a network or None, errors): an IPv4 network with room for every cable."""
    field = "cluster: thunderbolt_cable_pool"
    text = str(pool)
    try:
        network = ipaddress.IPv4Network(text, strict=False)
    except ValueError:
        return None, [f"{field} {pool!r} is not an IPv4 network — write it as address/prefix "
                      "length, e.g. 10.213.0.0/24"]
    if "/" not in text:
        return None, [f"{field} {text} has no prefix length — write the network, e.g. {text}/24"]
    if str(network.network_address) != text.split("/")[0].strip():
        return None, [f"{field} {text} is not a network address — use {network}"]
    spaces = [space for listed in POOL_SPACES.values() for space in listed]
    if not any(network.subnet_of(space) for space in spaces):
        public = network.is_global and not any(network.overlaps(space) for space in spaces)
        kind = "public" if public else "not private, shared or benchmark"
        return None, [f"{field} {network} is {kind} address space — use private (10.0.0.0/8, "
                      "172.16.0.0/12, 192.168.0.0/16), shared (100.64.0.0/10) or benchmark "
                      "(198.18.0.0/15) space, e.g. 10.213.0.0/24"]
    room = network.num_addresses // 4  # a /30 per cable
    if not room:
        return None, [f"{field} {network} is smaller than the /30 one cable needs — use a /24 "
                      f"(room for 64 cables), e.g. {network.supernet(new_prefix=24)}"]
    if len(cables) > room:
        prefix = 32 - (len(cables) * 4 - 1).bit_length()
        return network, [
            f"{field} {network} holds {room} cable(s) (a /30 each) but there are {len(cables)} — "
            f"use a /{prefix} or larger, e.g. {network.supernet(new_prefix=prefix)}"
        ]
    return network, []


def _cable_label(cable):
    return f"{cable[0]} {cable[1]} - {cable[2]} {cable[3]}"


def cable_errors(cables, hosts, pool):
    """What makes a cable list unusable for the `cables` topology, one message each with its fix.

    cables: thunderbolt_cables or what discovery found, each [host_a, interface_a, host_b,
    interface_b]; hosts: the inventory names; pool: thunderbolt_cable_pool. Checked: the pool,
    the form of each cable, its hosts and interface names, a host cabled to itself, the same cable
    listed twice, one port in two cables. Cables that pass can be given to cable_plan.
    """
    hosts = [str(h) for h in hosts]
    if cables is None or cables == "":
        cables = []
    if not isinstance(cables, (list, tuple)):
        return [
            f"cluster: thunderbolt_cables {cables!r} is not a list — write a list of cables, each "
            "[host_a, interface_a, host_b, interface_b], e.g. [[mac1, en2, mac2, en3]]"
        ]
    errors = _pool_errors(pool, cables)[1]
    good = []
    for number, cable in enumerate(cables, 1):
        entry = f"thunderbolt_cables entry {number}"
        if not (isinstance(cable, (list, tuple)) and len(cable) == 4
                and all(isinstance(item, str) for item in cable)):
            errors.append(f"cluster: {entry} {cable!r} is not [host_a, interface_a, host_b, "
                          "interface_b] — write each cable as four names, e.g. [mac1, en2, mac2, "
                          "en3]")
            continue
        problems = []
        for host in (cable[0], cable[2]):
            if host not in hosts:
                listed = ", ".join(hosts[:3]) + (" ..." if len(hosts) > 3 else "")
                problems.append(f"cluster: {entry} names {host!r}, which is not in the inventory "
                                f"group `cluster` — use the inventory names ({listed})")
        for host, interface in ((cable[0], cable[1]), (cable[2], cable[3])):
            if not _INTERFACE.fullmatch(interface):
                problems.append(
                    f"{_label(host)}: {entry} interface {interface!r} is not an interface name — "
                    "use the device `networksetup -listallhardwareports` shows for the port "
                    "(macOS, e.g. en2) or `ip link` shows (Linux)"
                )
            elif _NOT_A_CABLE_PORT.fullmatch(interface):
                problems.append(
                    f"{_label(host)}: {entry} interface {interface} is a loopback or bridge "
                    "interface, not a cable port — use the device of the Thunderbolt port the "
                    "cable is in (macOS: a \"Thunderbolt N\" port of `networksetup "
                    "-listallhardwareports`, e.g. en2; Linux: `ip link`)"
                )
        if cable[0] == cable[2] and not problems:
            problems.append(f"{_label(cable[0])}: {entry} ({_cable_label(cable)}) cables "
                            f"{cable[0]} to itself — a cable joins two different hosts: check "
                            "the host names")
        errors += problems
        if not problems:
            good.append((number, cable))
    errors += _port_errors(good)
    return errors


def _port_errors(numbered):
    """The same cable listed twice, and a port (host, interface) in two different cables."""
    errors = []
    cables = {}
    ports = {}
    for number, cable in numbered:
        ends = frozenset({(cable[0], cable[1]), (cable[2], cable[3])})
        if ends in cables:
            errors.append(
                f"cluster: thunderbolt_cables entries {cables[ends]} and {number} are the same "
                f"cable ({_cable_label(cable)}) — list each cable once"
            )
            continue
        cables[ends] = number
        for host, interface in sorted(ends):
            if (host, interface) in ports:
                errors.append(
                    f"{_label(host)}: {interface} is in thunderbolt_cables entries "
                    f"{ports[host, interface]} and {number} — a port takes one cable: correct "
                    "the interface (or host) of one of them"
                )
            else:
                ports[host, interface] = number
    return errors


def _pool_overlap_errors(hostvars, hosts, pool):
    """Hosts Ansible reaches on an address inside the cable pool, which the cables would shadow."""
    network = _pool_errors(pool, [])[0]
    if network is None:
        return []
    errors = []
    for name in hosts:
        address = str(hostvars[name].get("ansible_host") or name)
        if _is_address(address) and ipaddress.ip_address(address) in network:
            errors.append(
                f"{_label(name)}: ansible_host {address} is inside thunderbolt_cable_pool "
                f"{network} — set thunderbolt_cable_pool to a range no host is reached on"
            )
    return errors


def cluster_inventory_errors(hostvars, hosts, prefix, interface="bridge0", topology="bridge",
                             pool=None, cables=None):
    """Every problem with the `cluster` inventory, one message per host and field with its fix.

    prefix, interface, topology, pool and cables are the role defaults of thunderbolt_prefix,
    thunderbolt_interface, thunderbolt_topology, thunderbolt_cable_pool and thunderbolt_cables,
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
    topology, group_errors = _group_setting(hostvars, hosts, "thunderbolt_topology", topology)
    errors += group_errors + _check_topology(topology)
    cabled = str(topology) == "cables" and not group_errors  # else one error is enough
    if cabled:
        pool, group_errors = _group_setting(hostvars, hosts, "thunderbolt_cable_pool", pool)
        errors += group_errors
        cables, group_errors = _group_setting(hostvars, hosts, "thunderbolt_cables", cables)
        errors += group_errors + cable_errors(cables, hosts, pool)
        errors += _pool_overlap_errors(hostvars, hosts, pool)
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
        errors += _check_wired_limit(name, hv)
        errors += _check_pmset(name, hv)
        if hv.get("thunderbolt_ip") and cabled:
            errors.append(
                f"{_label(name)}: thunderbolt_ip {hv['thunderbolt_ip']} is set while "
                "thunderbolt_topology is cables, where each cable gets its addresses from "
                "thunderbolt_cable_pool and the Thunderbolt Bridge is off — remove thunderbolt_ip, "
                "or set thunderbolt_topology: bridge"
            )
        elif hv.get("thunderbolt_ip"):
            identities.append((name, "thunderbolt_ip", hv["thunderbolt_ip"]))
            network, tb_errors = _check_thunderbolt_ip(name, hv["thunderbolt_ip"], prefix)
            errors += tb_errors
            if network is not None:
                networks[name] = (hv["thunderbolt_ip"], network)
        elif with_tb and not cabled:
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
            "cable_errors": cable_errors,
            "cluster_inventory_errors": cluster_inventory_errors,
            "hostname_count_errors": hostname_count_errors,
            "launch_host": launch_host,
            "mlx_hostfile": mlx_hostfile,
            "prefix_to_netmask": prefix_to_netmask,
        }
