"""Decide what the thunderbolt role changes on Linux interfaces.

Inputs are the real outputs of `ip -j addr show dev IF` and
`nmcli -t -f GENERAL.STATE,GENERAL.TYPE,GENERAL.CONNECTION device show IF`, for each link the
role configures (bridge topology: thunderbolt_interface; cables: each cable port), all read in
one concurrent_commands run.
"""

import json

# NetworkManager device states (NMDeviceState): 10 = unmanaged, 20 and above = managed
# (20 unavailable still means NetworkManager owns the device and would undo `ip addr add`).
_NM_STATE_UNMANAGED = 10

# NetworkManager device type -> community.general.nmcli connection type.
_NM_CONNECTION_TYPES = {"ethernet": "ethernet", "bridge": "bridge"}


def ip_link_state(stdout, ip_address, prefix):
    """`ip -j addr show dev IF` -> what the interface lacks.

    Returns {"exists", "up" (administratively), "has_address" (ip_address/prefix present),
    "stale_prefixes" (ip_address present with another prefix)}. Empty stdout (the command
    failed: no such device) means the interface does not exist.
    """
    links = json.loads(stdout) if stdout.strip() else []
    if not links:
        return {"exists": False, "up": False, "has_address": False, "stale_prefixes": []}
    link = links[0]
    prefixes = [
        info["prefixlen"]
        for info in link.get("addr_info", [])
        if info.get("family") == "inet" and info.get("local") == ip_address
    ]
    prefix = int(prefix)
    return {
        "exists": True,
        "up": "UP" in link.get("flags", []),
        "has_address": prefix in prefixes,
        "stale_prefixes": [p for p in prefixes if p != prefix],
    }


def nmcli_device(result):
    """Registered result of the nmcli device query -> {"managed", "type", "connection"}.

    nmcli missing (rc 2 from the command module), NetworkManager not running (rc 8) or the
    device unknown to it (rc 10) all mean: NetworkManager does not manage it.
    """
    fields = {}
    if result.get("rc") == 0:
        for line in result.get("stdout", "").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key] = value.replace("\\:", ":")
    state = fields.get("GENERAL.STATE", "").split(" ", 1)[0]
    managed = state.isdigit() and int(state) > _NM_STATE_UNMANAGED
    device_type = fields.get("GENERAL.TYPE", "")
    return {
        "managed": managed,
        "type": _NM_CONNECTION_TYPES.get(device_type, "generic"),
        "connection": fields.get("GENERAL.CONNECTION", ""),
    }


_NMCLI_FIELDS = "GENERAL.STATE,GENERAL.TYPE,GENERAL.CONNECTION"


def linux_link_probes(links):
    """concurrent_commands entries that read each link's interface: its addresses, and whether
    NetworkManager manages it. links: [{"interface", "address", "prefix", ...}]."""
    return [
        {"item": {"interface": link["interface"], "probe": probe}, "argv": argv}
        for link in links
        for probe, argv in (
            ("ip", ["ip", "-j", "addr", "show", "dev", link["interface"]]),
            ("nmcli", ["nmcli", "-t", "-f", _NMCLI_FIELDS, "device", "show", link["interface"]]),
        )
    ]


def linux_link_states(results, links):
    """The links with what each lacks: ip_link_state's fields ("exists", "up", "has_address",
    "stale_prefixes") and "nm", nmcli_device's answer. results: the linux_link_probes run's."""
    found = {(r["item"]["interface"], r["item"]["probe"]): r for r in results}
    return [
        {
            **link,
            **ip_link_state(found[link["interface"], "ip"].get("stdout", ""), link["address"],
                            link["prefix"]),
            "nm": nmcli_device(found[link["interface"], "nmcli"]),
        }
        for link in links
    ]


class FilterModule:
    def filters(self):
        return {"linux_link_probes": linux_link_probes, "linux_link_states": linux_link_states}
