"""macOS decisions of the thunderbolt role, checked against real `networksetup` output.

The samples below are real `networksetup` output collected from public repositories and
notes (layout kept byte for byte; private LAN addresses replaced by 198.19.x test addresses).
"""

import pytest

from tests.unit.plugins import load

networksetup = load("roles/thunderbolt/filter_plugins/networksetup.py")

# Thunderbolt Bridge of a Mac whose Thunderbolt ports see no peer yet: no IPv4 lines at all.
TB_BRIDGE_FRESH = """DHCP Configuration
Client ID:
IPv6: Automatic
IPv6 IP address: none
IPv6 Router: none
"""

# DHCP found no server on the Thunderbolt link, so macOS picked a link-local address.
TB_BRIDGE_LINK_LOCAL = """DHCP Configuration
IP address: 169.254.34.128
Subnet mask: 255.255.0.0
Router: (null)
Client ID:
IPv6: Automatic
IPv6 IP address: none
IPv6 Router: none
"""

# After `networksetup -setmanual SERVICE IP MASK ""`: empty router shows as (null).
MANUAL = """Manual Configuration
IP address: 198.19.0.2
Subnet mask: 255.255.255.0
Router: (null)
IPv6: Automatic
IPv6 IP address: none
IPv6 Router: none
"""

# Manual service with nothing filled in, with a trailing hardware line.
MANUAL_EMPTY = """Manual Configuration
IP address: none
Subnet mask: none
Router: none
Ethernet Address: f8:e4:3b:e9:2a:cd
"""

# Wi-Fi with a router, IPv6 off and a Wi-Fi ID line (colons in the value).
WIFI_MANUAL = """Manual Configuration
IP address: 198.19.1.16
Subnet mask: 255.255.255.0
Router: 198.19.1.1
IPv6: Off
Wi-Fi ID: b8:f6:b1:13:6f:d3"""

# "Client ID: " with a trailing space, as printed by some macOS versions.
DHCP_LEASE = (
    "DHCP Configuration\n"
    "IP address: 198.19.2.218\n"
    "Subnet mask: 255.255.255.0\n"
    "Router: (null)\n"
    "Client ID: \n"
    "IPv6: Automatic\n"
    "IPv6 IP address: none\n"
    "IPv6 Router: none\n"
    "Ethernet Address: 8e:87:e6:a5:46:5a\n"
)

UNKNOWN_SERVICE = """NoSuch is not a recognized network service.
** Error: The parameters were not valid.
"""

SERVICES = """An asterisk (*) denotes that a network service is disabled.
Wi-Fi
USB 10/100/1000 LAN
Thunderbolt Bridge
iPhone USB
*Bluetooth PAN
"""


def test_services_skip_the_header_and_mark_disabled_ones():
    assert networksetup.networksetup_services(SERVICES) == [
        {"name": "Wi-Fi", "enabled": True},
        {"name": "USB 10/100/1000 LAN", "enabled": True},
        {"name": "Thunderbolt Bridge", "enabled": True},
        {"name": "iPhone USB", "enabled": True},
        {"name": "Bluetooth PAN", "enabled": False},
    ]


def test_services_keep_localized_names():
    out = "An asterisk (*) denotes that a network service is disabled.\nPuente Thunderbolt\n"
    assert networksetup.networksetup_services(out) == [
        {"name": "Puente Thunderbolt", "enabled": True}
    ]


def _info(method=None, ip_address=None, subnet_mask=None, router=None):
    return dict(method=method, ip_address=ip_address, subnet_mask=subnet_mask, router=router)


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        (TB_BRIDGE_FRESH, _info("DHCP")),
        (TB_BRIDGE_LINK_LOCAL, _info("DHCP", "169.254.34.128", "255.255.0.0")),
        (MANUAL, _info("Manual", "198.19.0.2", "255.255.255.0")),
        (MANUAL_EMPTY, _info("Manual")),
        (WIFI_MANUAL, _info("Manual", "198.19.1.16", "255.255.255.0", "198.19.1.1")),
        (DHCP_LEASE, _info("DHCP", "198.19.2.218", "255.255.255.0")),
        (UNKNOWN_SERVICE, _info()),
        ("", _info()),
    ],
)
def test_getinfo_parsing(sample, expected):
    assert networksetup.networksetup_info(sample) == expected


def test_ipv6_address_line_is_not_taken_for_the_ipv4_one():
    info = networksetup.networksetup_info(TB_BRIDGE_FRESH)
    assert info["ip_address"] is None


@pytest.mark.parametrize(
    ("sample", "ip", "mask", "expected"),
    [
        (MANUAL, "198.19.0.2", "255.255.255.0", True),
        (MANUAL, "198.19.0.3", "255.255.255.0", False),  # another address
        (MANUAL, "198.19.0.2", "255.255.0.0", False),  # prefix changed in the inventory
        (TB_BRIDGE_FRESH, "198.19.0.2", "255.255.255.0", False),
        (TB_BRIDGE_LINK_LOCAL, "169.254.34.128", "255.255.0.0", False),  # DHCP, not manual
        (DHCP_LEASE, "198.19.2.218", "255.255.255.0", False),  # right address, but leased
        (MANUAL_EMPTY, "198.19.0.2", "255.255.255.0", False),
        (UNKNOWN_SERVICE, "198.19.0.2", "255.255.255.0", False),
    ],
)
def test_setmanual_runs_only_when_getinfo_shows_something_else(sample, ip, mask, expected):
    info = networksetup.networksetup_info(sample)
    assert networksetup.networksetup_is_manual(info, ip, mask) is expected
