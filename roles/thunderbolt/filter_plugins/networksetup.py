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


def _thunderbolt_port(port):
    """A hardware port a cable plugs into: "Thunderbolt N", not the bridge over them."""
    return bool(port) and port.startswith("Thunderbolt ") and port != "Thunderbolt Bridge"


def networksetup_port_errors(links, host):
    """The cables topology's links (networksetup_state's) whose interface is no Thunderbolt port
    of this Mac, one message each with its fix: en0 is the Wi-Fi or Ethernet port, bridge0 the
    Thunderbolt Bridge (a cable port would get its own network service, mlx-en0, and address)."""
    errors = []
    for link in links:
        port = link["hardware_port"]
        if _thunderbolt_port(port):
            continue
        what = (f"is the Mac's \"{port}\" port, not a Thunderbolt port" if port else
                "is no hardware port of this Mac (`networksetup -listallhardwareports`)")
        errors.append(f"{host}: cable port {link['interface']} {what} — correct the port in "
                      "thunderbolt_cables (the Device of a \"Thunderbolt N\" port), or recreate "
                      "the ports with `sudo networksetup -detectnewhardware`")
    return errors


def networksetup_restore_argv(before, service):
    """networksetup argv that gives a service back the IPv4 settings `before` (its
    networksetup_info before setup first changed it) shows: the manual address, or DHCP or BOOTP;
    DHCP when nothing was recorded (a setup from before the record)."""
    before = before or {}
    if before.get("method") == "Manual" and before.get("ip_address") and before.get(
            "subnet_mask"):
        return ["networksetup", "-setmanual", service, before["ip_address"],
                before["subnet_mask"], before.get("router") or ""]
    if before.get("method") == "BOOTP":
        return ["networksetup", "-setbootp", service]
    return ["networksetup", "-setdhcp", service]


def _ours(service, connection_prefix):
    """A network service this role creates in the cables topology: <prefix><device> on a
    Thunderbolt port (not the bridge)."""
    return (bool(service["device"]) and service["name"] == connection_prefix + service["device"]
            and _thunderbolt_port(service["hardware_port"]))


def networksetup_state(results, links, connection_prefix, bridge_service, hardware_ports):
    """What the Darwin tasks change, from the networksetup_probes run's results.

    links: the role's links ({"interface", "address", "prefix", "connection"});
    hardware_ports: {hardware port: device}, the probe's `-listallhardwareports` as
    networksetup_hardware_ports (roles/cluster/filter_plugins/discovery.py) reads it. Returns
    {"services": networksetup_service_order(...),
     "links": each link plus "hardware_port" (the port whose device is the link's interface,
              or None), "service" (its network service or None), "manual" (the service
              already has exactly this manual address and prefix length) and "ipv4" (the
              service's IPv4 settings now, networksetup_info),
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
            "ipv4": info,
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
            "networksetup_port_errors": networksetup_port_errors,
            "networksetup_probes": networksetup_probes,
            "networksetup_restore_argv": networksetup_restore_argv,
            "networksetup_state": networksetup_state,
        }
