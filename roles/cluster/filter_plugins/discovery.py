"""Find the Thunderbolt cables between Macs from what each Mac reports about itself.

Each Mac runs `system_profiler SPThunderboltDataType -json` (one entry per Thunderbolt port,
with the port's own domain UUID and, under `_items`, the Mac cabled directly to it with the
domain UUID of *its* port) and `networksetup -listallhardwareports` (which network interface is
"Thunderbolt N", the port with receptacle N). A cable is two ports that name each other. This is
what mlx.distributed_config and exo read too. Pure functions, unit-tested against recorded real
outputs in tests/unit/test_discovery.py.
"""

import json


def networksetup_hardware_ports(stdout):
    """`networksetup -listallhardwareports` -> {hardware port: device}, e.g.
    {"Thunderbolt 1": "en1", "Thunderbolt Bridge": "bridge0", "Wi-Fi": "en0"}."""
    ports = {}
    port = None
    for line in str(stdout).splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue  # blank lines and the "VLAN Configurations" trailer
        if key == "Hardware Port":
            port = value.strip()
        elif key == "Device" and port is not None:
            ports[port] = value.strip()
            port = None
    return ports


def _receptacle_order(port):
    number = port["receptacle"]
    return (0, int(number), "") if number.isdigit() else (1, 0, number)


def thunderbolt_ports(system_profiler, hardware_ports):
    """One Mac's Thunderbolt ports from its `system_profiler SPThunderboltDataType -json` output
    and its `networksetup -listallhardwareports` output (text, or already parsed).

    Returns [{"receptacle": "2", "hardware_port": "Thunderbolt 2", "interface": "en6" or None,
    "domain": the port's domain UUID, "peer_domain": the domain UUID of the Mac port cabled to
    it or None, "peer_name": that Mac's name ("MacBook Pro") or None, "speed": "80 Gb/s",
    "status": "receptacle_connected"}], by receptacle. Entries without a domain UUID or a
    receptacle are not this Mac's ports and are left out, as MLX does. A Mac behind a dock or
    a drive is no peer: only a Mac directly on the port carries a domain UUID there.
    """
    if isinstance(system_profiler, str):
        system_profiler = json.loads(system_profiler)
    if isinstance(hardware_ports, str):
        hardware_ports = networksetup_hardware_ports(hardware_ports)
    ports = []
    for bus in system_profiler.get("SPThunderboltDataType") or []:
        tag = bus.get("receptacle_1_tag") or {}
        receptacle = tag.get("receptacle_id_key")
        if not bus.get("domain_uuid_key") or receptacle is None:
            continue
        peer = next((item for item in bus.get("_items") or [] if item.get("domain_uuid_key")),
                    {})
        name = f"Thunderbolt {receptacle}"
        ports.append({
            "receptacle": str(receptacle),
            "hardware_port": name,
            "interface": hardware_ports.get(name) or None,
            "domain": bus["domain_uuid_key"].upper(),
            "peer_domain": peer["domain_uuid_key"].upper() if peer else None,
            "peer_name": peer.get("_name"),
            "speed": tag.get("current_speed_key"),
            "status": tag.get("receptacle_status_key"),
        })
    return sorted(ports, key=_receptacle_order)


def _match(ports_by_host):
    """(cables, problems) of thunderbolt_cables_found / thunderbolt_discovery_problems."""
    owner = {port["domain"]: (host, port)
             for host, ports in ports_by_host.items() for port in ports}
    cables, problems, done = [], [], set()
    for host, ports in ports_by_host.items():
        for port in ports:
            if not port["peer_domain"] or port["domain"] in done:
                continue
            where = f"{host}: {port['hardware_port']}"
            if port["peer_domain"] not in owner:
                problems.append(
                    f"{where} is cabled to a Mac ({port['peer_name'] or 'unnamed'}, Thunderbolt "
                    f"domain {port['peer_domain']}) that is none of the hosts discovered — add "
                    "it to the inventory group `cluster` (and check it answered), or unplug the "
                    "cable"
                )
                continue
            peer_host, peer = owner[port["peer_domain"]]
            done.update((port["domain"], peer["domain"]))
            if peer["peer_domain"] != port["domain"]:
                problems.append(
                    f"{where} sees {peer_host}'s {peer['hardware_port']} at the other end, but "
                    f"{peer_host} does not see {host} there — reseat the cable and run again"
                )
                continue
            unmapped = [(h, p) for h, p in ((host, port), (peer_host, peer)) if not p["interface"]]
            for h, p in unmapped:
                problems.append(
                    f"{h}: `networksetup -listallhardwareports` shows no interface for "
                    f"{p['hardware_port']} (cabled to {peer_host if h == host else host}) — "
                    "list the cable in thunderbolt_cables, or recreate the port with `sudo "
                    "networksetup -detectnewhardware`"
                )
            if not unmapped:
                cables.append([host, port["interface"], peer_host, peer["interface"]])
    return cables, problems


def thunderbolt_cables_found(ports_by_host):
    """The cables between the hosts, [[host_a, interface_a, host_b, interface_b], ...] as in
    thunderbolt_cables. ports_by_host: {inventory name: thunderbolt_ports(...)}. A cable both
    ends of which name each other and have an interface is found; the rest is what
    thunderbolt_discovery_problems reports."""
    return _match(ports_by_host)[0]


def thunderbolt_discovery_problems(ports_by_host):
    """The cables discovery cannot place, one message each naming the host and port, with the
    fix: a Mac not among the hosts, a cable seen from one end only, a port with no interface."""
    return _match(ports_by_host)[1]


class FilterModule:
    def filters(self):
        return {
            "networksetup_hardware_ports": networksetup_hardware_ports,
            "thunderbolt_cables_found": thunderbolt_cables_found,
            "thunderbolt_discovery_problems": thunderbolt_discovery_problems,
            "thunderbolt_ports": thunderbolt_ports,
        }
