"""Parse macOS `networksetup` output for the thunderbolt role.

macOS tasks cannot run on Linux CI, so every decision the Darwin tasks take is made here
and unit-tested against real `networksetup` output.
"""

import re

# Values networksetup prints for a field that has no value.
_EMPTY = {"", "none", "(null)"}


def networksetup_services(stdout):
    """`networksetup -listallnetworkservices` -> [{"name": str, "enabled": bool}].

    The first line explains the asterisk that marks a disabled service; it is not a service.
    """
    services = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line or line.startswith("An asterisk"):
            continue
        enabled = not line.startswith("*")
        services.append({"name": line.lstrip("*").strip(), "enabled": enabled})
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


def networksetup_is_manual(info, ip_address, subnet_mask):
    """True when the service already has exactly this manual address and mask."""
    return (
        info.get("method") == "Manual"
        and info.get("ip_address") == ip_address
        and info.get("subnet_mask") == subnet_mask
    )


class FilterModule:
    def filters(self):
        return {
            "networksetup_services": networksetup_services,
            "networksetup_info": networksetup_info,
            "networksetup_is_manual": networksetup_is_manual,
        }
