"""Jinja filters of the ssh_mesh role: the names each host is reached by, and the
known_hosts entries, ~/.ssh/config block and verification report built from them.

A "peer" is the plain dict each host publishes about itself (tasks/describe.yml):
name, names, ssh_host, mpi_address, port, user, nodename, host_keys, public_key.
"""

import re

# ssh_config values with whitespace (e.g. a home directory "/Users/Jane Doe") need quotes.
_NEEDS_QUOTES = re.compile(r"\s")


def ssh_mesh_names(inventory_name, ansible_host=None, thunderbolt_ip=None):
    """Every name a host is reached by, in order, without duplicates or blanks:
    its inventory name, its management address and its interconnect address."""
    names = []
    for name in (inventory_name, ansible_host, thunderbolt_ip):
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


def ssh_mesh_known_hosts(peers, marker):
    """One known_hosts entry per peer name and host key type: [{"name", "key"}].
    The trailing comment marks the line as ours, so reset removes exactly these."""
    entries = []
    for peer in peers:
        for name in peer["names"]:
            host = _known_hosts_name(name, peer.get("port", 22))
            for key in peer["host_keys"]:
                entries.append({"name": host, "key": f"{host} {key} {marker}"})
    return entries


def ssh_mesh_authorized_keys(peers, marker):
    """authorized_keys lines of every peer whose key exists (in a dry run on a fresh host
    it does not yet), each with a marker comment naming the peer: [{"name", "line"}]."""
    return [
        {"name": peer["name"], "line": f"{peer['public_key']} {marker}@{peer['name']}"}
        for peer in peers
        if peer.get("public_key")
    ]


def ssh_mesh_missing(entries, text, attribute):
    """The entries whose line (entry[attribute]) is not yet a line of the file's text.
    Looping the modules over these only keeps a re-run at a constant cost per host
    instead of one module call per peer, name and key type."""
    present = {line.strip() for line in (text or "").splitlines()}
    return [entry for entry in entries if entry[attribute].strip() not in present]


def _quote(value):
    value = str(value)
    return f'"{value}"' if _NEEDS_QUOTES.search(value) else value


def ssh_mesh_config_block(peers, identity_file):
    """The ~/.ssh/config block: for each peer, all its names map to its user, its
    port and our dedicated key; its inventory name also maps to its ssh address.

    The block is inserted at the top of the file (first value wins in ssh_config,
    so a user's `Host *` defaults cannot override it) and ends with `Host *`, so any
    lines the user had at the top of the file keep applying to every host."""
    lines = []
    for peer in peers:
        lines.append(f"# {peer['name']}: MPI address {peer['mpi_address']}")
        if peer["ssh_host"] != peer["name"]:
            # Only the inventory name gets a HostName: each address must stay itself.
            lines += [f"Host {peer['name']}", f"    HostName {peer['ssh_host']}"]
        lines.append("Host " + " ".join(peer["names"]))
        lines.append(f"    User {_quote(peer['user'])}")
        if int(peer.get("port", 22)) != 22:
            lines.append(f"    Port {int(peer['port'])}")
        lines += [
            f"    IdentityFile {_quote(identity_file)}",
            "    IdentitiesOnly yes",
            "    StrictHostKeyChecking yes",
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
            "ssh_mesh_missing": ssh_mesh_missing,
            "ssh_mesh_config_block": ssh_mesh_config_block,
            "ssh_mesh_probe_failures": ssh_mesh_probe_failures,
        }
