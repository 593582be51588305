"""Decide what the thunderbolt role changes on a Linux interface.

Inputs are the real outputs of `ip -j addr show dev IF` and
`nmcli -t -f GENERAL.STATE,GENERAL.TYPE,GENERAL.CONNECTION device show IF`.
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


class FilterModule:
    def filters(self):
        return {"ip_link_state": ip_link_state, "nmcli_device": nmcli_device}
