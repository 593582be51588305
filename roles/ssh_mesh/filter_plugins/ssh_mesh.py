"""Jinja filters of the ssh_mesh role: the names each host is reached by, and the
known_hosts entries, authorized_keys lines, ~/.ssh/config block and verification report
built from them.

A "peer" is the plain dict each host publishes about itself (tasks/describe.yml):
name, names, ssh_host, mpi_address, port, user, nodename, host_keys, public_key.

Names and addresses come from the inventory, which roles/validate checked (RFC 1123 names,
IP addresses, plain user names); the filters still refuse what no ssh file can carry safely
(line breaks, double quotes, ssh_config patterns), so a bypassed check cannot inject a line.
"""

import ipaddress
import re

# ssh_config values with whitespace (e.g. a home directory "/Users/Jane Doe") need quotes.
_NEEDS_QUOTES = re.compile(r"\s")
# Never allowed in a value written to an ssh file: line breaks and control characters end or
# corrupt the line, a double quote ends a quoted value (ssh_config has no escape for it).
_UNSAFE = re.compile(r'[\x00-\x1f\x7f"]')
_BREAKS = re.compile(r"[\x00-\x1f\x7f]")
# Host names and addresses: also no pattern characters (* ? ! ,) and no whitespace.
_NAME = re.compile(r"[A-Za-z0-9.:-]+")
# The restrictions every mesh key carries besides from=. Both launchers only run commands:
# Open MPI (ssh <host> orted/prted ...) and mlx.launch (ssh -tt <host> <script>). mlx.launch
# asks for a terminal (-tt) and fails without one (exit 255, "PTY allocation request failed"),
# so no-pty is not among them.
KEY_RESTRICTIONS = ("no-agent-forwarding", "no-port-forwarding", "no-X11-forwarding")


class UnsafeValue(ValueError):
    """A value that cannot be written into an ssh file as it is."""


def _safe(value, what):
    value = str(value)
    if _UNSAFE.search(value):
        raise UnsafeValue(f"{what} {value!r} contains a line break, control character or quote")
    return value


def _safe_name(value, what):
    value = str(value)
    if not _NAME.fullmatch(value) or value.startswith("-"):
        raise UnsafeValue(f"{what} {value!r} is not a host name or address")
    return value


def ssh_mesh_names(inventory_name, ansible_host=None, thunderbolt_ip=None, cable_addresses=()):
    """Every name a host is reached by, in order, without duplicates or blanks:
    its inventory name, its management address and its interconnect addresses (thunderbolt_ip,
    or its ends of the cables)."""
    names = []
    for name in (inventory_name, ansible_host, thunderbolt_ip, *cable_addresses):
        name = str(name).strip() if name is not None else ""
        if name and name not in names:
            names.append(name)
    return names


def ssh_mesh_host_keys(facts, key_types):
    """The host's public host keys ("<type> <base64>") of the wanted types, read by
    Ansible's fact gathering from /etc/ssh/ssh_host_<type>_key.pub."""
    keys = []
    for key_type in key_types:
        data = facts.get(f"ssh_host_key_{key_type}_public")
        if data:
            keys.append(f"{facts[f'ssh_host_key_{key_type}_public_keytype']} {data}")
    return keys


def _known_hosts_name(name, port):
    # ssh lowercases host names before looking them up; non-default ports use [host]:port.
    name = name.lower()
    return name if int(port) == 22 else f"[{name}]:{int(port)}"


def _key(value, what):
    """"<type> <base64>" of a public key, without its comment."""
    words = _safe(value, what).split()
    if len(words) < 2:
        raise UnsafeValue(f"{what} {value!r} is not '<type> <base64>'")
    return f"{words[0]} {words[1]}"


def ssh_mesh_known_hosts(peers, marker):
    """One known_hosts entry per peer name and host key type: [{"name", "key"}].
    The trailing comment names the peer the line belongs to (marker@name), so a later run
    replaces exactly that peer's lines."""
    entries = []
    for peer in peers:
        owner = _safe_name(peer["name"], "inventory name")
        for name in peer["names"]:
            host = _known_hosts_name(_safe_name(name, "host name"), peer.get("port", 22))
            for key in peer["host_keys"]:
                key = _key(key, "host key")
                entries.append({"name": host, "key": f"{host} {key} {marker}@{owner}"})
    return entries


def ssh_mesh_addresses(hostvars, hosts):
    """The addresses a mesh login may come from: every host's thunderbolt_ip and its
    ansible_host (or inventory name) when that is an IP address, in inventory order.

    sshd compares from= with the client's IP address (its host name only with UseDNS yes,
    which is off by default and would trust reverse DNS), so a host reached by DNS name is
    represented by the addresses its own facts report (not loopback, not link-local; none
    when its facts were not gathered in this play)."""
    addresses = []

    def add(address):
        if address not in addresses:
            addresses.append(address)

    for name in hosts:
        hv = hostvars[name]
        if hv.get("thunderbolt_ip"):
            add(str(ipaddress.ip_address(str(hv["thunderbolt_ip"]))))
        ansible_host = str(hv.get("ansible_host") or name)
        try:
            add(str(ipaddress.ip_address(ansible_host)))
            continue
        except ValueError:
            pass
        facts = hv.get("ansible_facts") or {}
        found = facts.get("all_ipv4_addresses", []) + facts.get("all_ipv6_addresses", [])
        for value in sorted(found, key=lambda a: (":" in a, a)):
            try:
                address = ipaddress.ip_address(value)
            except ValueError:
                continue
            if not (address.is_loopback or address.is_link_local or address.is_unspecified):
                add(str(address))
    return addresses


def ssh_mesh_authorized_keys(peers, marker, addresses):
    """authorized_keys lines of every peer whose key exists (in a dry run on a fresh host
    it does not yet): from="<addresses>" and the restrictions, the key, and a marker
    comment naming the peer: [{"name", "line"}]."""
    if not addresses:
        raise UnsafeValue("no cluster address to restrict the mesh keys to (from=)")
    allowed = ",".join(str(ipaddress.ip_address(str(a))) for a in addresses)
    options = ",".join((f'from="{allowed}"', *KEY_RESTRICTIONS))
    return [
        {
            "name": peer["name"],
            "line": f"{options} {_key(peer['public_key'], 'public key')} "
            f"{marker}@{_safe_name(peer['name'], 'inventory name')}",
        }
        for peer in peers
        if peer.get("public_key")
    ]


def _owner(line, marker):
    """(True, owner) for a line the mesh wrote ("... marker@owner"; owner None for the
    unnamed marker of older versions), (False, None) for anyone else's line."""
    match = re.search(rf"(?:^|\s){re.escape(marker)}(?:@(\S+))?\s*$", line)
    return (True, match.group(1)) if match else (False, None)


def ssh_mesh_merged(text, lines, marker, replace="all", header=None):
    """A file's new text: the user's lines exactly as they were, then the mesh's.

    lines: the mesh's lines now (each ending in marker@owner). replace: the owners whose
    earlier lines these replace; "all" replaces every earlier mesh line (a run over the whole
    cluster: the mesh becomes exactly `lines`, so hosts gone from the inventory and old keys
    disappear). header: the file is the mesh's own, so it holds only the header and the
    mesh's lines. With no mesh lines at all, the user's part is returned untouched."""
    lines = list(lines)
    user, kept = [], []
    for line in (text or "").splitlines(keepends=True):
        ours, owner = _owner(line.rstrip("\r\n"), marker)
        if not ours:
            user.append(line)
        elif replace != "all" and owner is not None and owner not in replace:
            kept.append(line.rstrip("\r\n"))
    for line in lines:
        if not isinstance(line, str):
            raise UnsafeValue(f"line {line!r} is not a text line")
        if _BREAKS.search(line):
            raise UnsafeValue(f"line {line!r} contains a line break or control character")
    mesh = list(dict.fromkeys(kept + [str(line) for line in lines]))
    if header is not None:
        return "".join(f"{line}\n" for line in [*header.splitlines(), *mesh])
    head = "".join(user)
    if mesh and head and not head.endswith("\n"):
        head += "\n"
    return head + "".join(f"{line}\n" for line in mesh)


def _quote(value, what="value"):
    """A value as ssh_config reads it back: in double quotes when it has whitespace."""
    value = _safe(value, what)
    return f'"{value}"' if _NEEDS_QUOTES.search(value) else value


def ssh_mesh_config_block(peers, identity_file, known_hosts_file):
    """The ~/.ssh/config block: for each peer, all its names map to its user, its
    port, our dedicated key and our dedicated known_hosts file; its inventory name also
    maps to its ssh address.

    The block is inserted at the top of the file (first value wins in ssh_config,
    so a user's `Host *` defaults cannot override it) and ends with `Host *`, so any
    lines the user had at the top of the file keep applying to every host."""
    lines = []
    for peer in peers:
        name = _safe_name(peer["name"], "inventory name")
        names = [_safe_name(n, "host name") for n in peer["names"]]
        lines.append(f"# {name}: MPI address {_safe_name(peer['mpi_address'], 'MPI address')}")
        if peer["ssh_host"] != peer["name"]:
            # Only the inventory name gets a HostName: each address must stay itself.
            lines += [f"Host {name}", f"    HostName {_safe_name(peer['ssh_host'], 'address')}"]
        lines.append("Host " + " ".join(names))
        lines.append(f"    User {_quote(peer['user'], 'user')}")
        if int(peer.get("port", 22)) != 22:
            lines.append(f"    Port {int(peer['port'])}")
        lines += [
            f"    IdentityFile {_quote(identity_file, 'key path')}",
            "    IdentitiesOnly yes",
            # Pins live in the mesh's own file: the user's known_hosts is never read or written
            # for these names, and nothing but setup writes the mesh's file.
            f"    UserKnownHostsFile {_quote(known_hosts_file, 'known_hosts path')}",
            "    StrictHostKeyChecking yes",
            "    CheckHostIP no",
            "    UpdateHostKeys no",
        ]
    lines += ["# Back to all hosts: the lines below this block apply everywhere.", "Host *"]
    return "\n".join(lines)


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def ssh_mesh_probe_failures(probes):
    """Failed logins of the verification, one line per pair: "m1 -> m2 (198.19.0.2): why".

    probes maps each source host to its registered loop result; each item is the
    target peer. A login counts only if it printed the peer's own hostname."""
    failures = []
    for source, registered in probes.items():
        for result in (registered or {}).get("results", []):
            if result.get("skipped"):
                continue
            peer = result["item"]
            printed = (result.get("stdout") or "").strip()
            if result.get("rc") == 0 and printed.lower() == str(peer["nodename"]).lower():
                continue
            if result.get("rc") == 0:
                why = f"logged in to {printed!r}, expected {peer['nodename']!r}"
            else:
                why = (
                    _last_line(result.get("stderr"))
                    or result.get("msg")
                    or f"exit code {result.get('rc')}"
                )
            failures.append(f"{source} -> {peer['name']} ({peer['mpi_address']}): {why}")
    return failures


class FilterModule:
    def filters(self):
        return {
            "ssh_mesh_names": ssh_mesh_names,
            "ssh_mesh_host_keys": ssh_mesh_host_keys,
            "ssh_mesh_known_hosts": ssh_mesh_known_hosts,
            "ssh_mesh_authorized_keys": ssh_mesh_authorized_keys,
            "ssh_mesh_addresses": ssh_mesh_addresses,
            "ssh_mesh_merged": ssh_mesh_merged,
            "ssh_mesh_config_block": ssh_mesh_config_block,
            "ssh_mesh_probe_failures": ssh_mesh_probe_failures,
        }
