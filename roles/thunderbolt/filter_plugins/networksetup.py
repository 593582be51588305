"""Parse macOS `networksetup` output for the thunderbolt role.

macOS tasks cannot run on Linux CI, so every decision the Darwin tasks take is made here
and unit-tested against real `networksetup` output.
"""

import ipaddress
import re

# Values networksetup prints for a field that has no value.
_EMPTY = {"", "none", "(null)"}

_SERVICE = re.compile(r"^\((\*?\d*)\)\s*(\*?)\s*(.*?)\s*$")
_PORT = re.compile(r"^\(Hardware Port: (.*), Device: ?(.*?)\)\s*$")


def networksetup_service_order(stdout):
    """`networksetup -listnetworkserviceorder` -> [{"name", "enabled", "hardware_port",
    "device"}], in service order.

    Each service is a line "(1) Wi-Fi" ("(*) Name" when disabled) and, under it,
    "(Hardware Port: Wi-Fi, Device: en0)"; the first line explains the asterisk. hardware_port
    and device are None when networksetup shows none (a VPN's "Device: " is empty).
    """
    services = []
    for line in stdout.splitlines():
        line = line.strip()
        port = _PORT.match(line)
        if port and services:
            services[-1]["hardware_port"] = port.group(1).strip() or None
            services[-1]["device"] = port.group(2).strip() or None
            continue
        service = _SERVICE.match(line)
        if service and not line.startswith("(Hardware Port:"):
            services.append({
                "name": service.group(3),
                "enabled": "*" not in service.group(1) + service.group(2),
                "hardware_port": None,
                "device": None,
            })
    return services


def networksetup_info(stdout):
    """`networksetup -getinfo SERVICE` -> IPv4 settings of the service.

    Returns {"method": "Manual" | "DHCP" | "BOOTP" | ... | None, "ip_address", "subnet_mask",
    "router"}, each address None when networksetup shows none, "(null)" or nothing.
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    method = None
    if lines:
        match = re.match(r"^(\S+) Configuration\b", lines[0])
        method = match.group(1) if match else None
    fields = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()

    def field(name):
        value = fields.get(name, "")
        return None if value.lower() in _EMPTY else value

    return {
        "method": method,
        "ip_address": field("IP address"),
        "subnet_mask": field("Subnet mask"),
        "router": field("Router"),
    }


def _prefix(subnet_mask):
    """'255.255.255.252' -> 30; None for no or no valid mask."""
    try:
        return ipaddress.IPv4Network(f"0.0.0.0/{subnet_mask}").prefixlen
    except ValueError:
        return None


def networksetup_is_manual(info, ip_address, prefix):
    """True when the service already has exactly this manual address and prefix length."""
    return (
        info.get("method") == "Manual"
        and info.get("ip_address") == ip_address
        and _prefix(info.get("subnet_mask")) == int(prefix)
    )


def networksetup_probes(links):
    """concurrent_commands entries that read what the Darwin tasks decide on: the network
    services, the hardware ports and the IPv4 settings of each link's service (an error for a
    service that does not exist yet, which networksetup_state reads as "not set")."""
    return [
        {"item": "services", "argv": ["networksetup", "-listnetworkserviceorder"]},
        {"item": "hardware_ports", "argv": ["networksetup", "-listallhardwareports"]},
    ] + [
        {"item": {"getinfo": link["connection"]},
         "argv": ["networksetup", "-getinfo", link["connection"]]}
        for link in links
    ]


def _ours(service, connection_prefix):
    """A network service this role creates in the cables topology: <prefix><device> on a
    Thunderbolt port (not the bridge)."""
    port = service["hardware_port"] or ""
    return (bool(service["device"]) and service["name"] == connection_prefix + service["device"]
            and port.startswith("Thunderbolt ") and port != "Thunderbolt Bridge")


def networksetup_state(results, links, connection_prefix, bridge_service, hardware_ports):
    """What the Darwin tasks change, from the networksetup_probes run's results.

    links: the role's links ({"interface", "address", "prefix", "connection"});
    hardware_ports: {hardware port: device}, the probe's `-listallhardwareports` as
    networksetup_hardware_ports (roles/cluster/filter_plugins/discovery.py) reads it. Returns
    {"services": networksetup_service_order(...),
     "links": each link plus "hardware_port" (the port whose device is the link's interface,
              or None), "service" (its network service or None) and "manual" (the service
              already has exactly this manual address and prefix length),
     "bridge_enabled": bridge_service exists and is enabled,
     "bridge_disabled": bridge_service exists and is disabled,
     "ours": names of the services this role created (cables: <prefix><device>),
     "stale": those of them that belong to no link (a port no longer cabled)}.
    """
    found = {("getinfo", r["item"]["getinfo"]) if isinstance(r["item"], dict) else r["item"]: r
             for r in results}
    services = networksetup_service_order(found["services"]["stdout"])
    by_name = {service["name"]: service for service in services}
    port_of = {device: port for port, device in hardware_ports.items()}
    states = []
    for link in links:
        info = networksetup_info(found["getinfo", link["connection"]].get("stdout", ""))
        service = by_name.get(link["connection"])
        states.append({
            **link,
            "hardware_port": port_of.get(link["interface"]),
            "service": service,
            "manual": service is not None
            and networksetup_is_manual(info, link["address"], link["prefix"]),
        })
    bridge = by_name.get(bridge_service)
    ours = [s["name"] for s in services if _ours(s, connection_prefix)]
    connections = {link["connection"] for link in links}
    return {
        "services": services,
        "links": states,
        "bridge_enabled": bool(bridge and bridge["enabled"]),
        "bridge_disabled": bool(bridge and not bridge["enabled"]),
        "ours": ours,
        "stale": [name for name in ours if name not in connections],
    }


class FilterModule:
    def filters(self):
        return {
            "networksetup_probes": networksetup_probes,
            "networksetup_state": networksetup_state,
        }
