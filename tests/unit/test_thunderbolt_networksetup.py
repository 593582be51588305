"""macOS decisions of the thunderbolt role, checked against real `networksetup` output.

The samples below are real `networksetup` output collected from public repositories and
notes (layout kept byte for byte; private LAN addresses replaced by 198.19.x test addresses;
where a sample names services, a change of name is said at the sample).
"""

import pytest
import yaml

from tests.unit.plugins import ROOT, load

networksetup = load("roles/thunderbolt/filter_plugins/networksetup.py")
discovery = load("roles/cluster/filter_plugins/discovery.py")

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

# `networksetup -listnetworkserviceorder`, "the literal output captured from the machine this
# feature was built for, disabled (*) entries and all" (the tests of a public Python project's
# service_order.py, netdnsmonitor; stored file id 70140284349).
SERVICE_ORDER = """An asterisk (*) denotes that a network service is disabled.
(1) AX88179B
(Hardware Port: AX88179B, Device: en6)

(2) USB 10/100/1000 LAN
(Hardware Port: USB 10/100/1000 LAN, Device: en7)

(*) USB 10/100/1G/2.5G LAN
(Hardware Port: USB 10/100/1G/2.5G LAN, Device: en9)

(*) M3100
(Hardware Port: M3100, Device: en12)

(3) Thunderbolt Bridge
(Hardware Port: Thunderbolt Bridge, Device: bridge0)

(4) Wi-Fi
(Hardware Port: Wi-Fi, Device: en0)

(5) iPhone USB
(Hardware Port: iPhone USB, Device: en11)
"""

# The Thunderbolt Bridge switched off, a service named unlike its hardware port (librescoot/
# installer, test/network_service_test.dart; trailing blank line as published).
BRIDGE_OFF = """An asterisk (*) denotes that a network service is disabled.
(1) Wi-Fi
(Hardware Port: Wi-Fi, Device: en0)

(2) Scooter cable
(Hardware Port: AX88179A, Device: en7)

(*) Thunderbolt Bridge
(Hardware Port: Thunderbolt Bridge, Device: bridge0)

"""

# A Mac whose Thunderbolt ports each have a network service and no Thunderbolt Bridge, "the
# verbatim structure read off the two-Mac rig" of a public oMLX test module (stored file id
# 60471305076), with its `-listallhardwareports`. There the services were exo's "EXO Thunderbolt
# N"; renamed here to this role's mlx-<device>, as setup creates them.
TB_PORT_SERVICES = """An asterisk (*) denotes that a network service is disabled.
(1) Ethernet
(Hardware Port: Ethernet, Device: en0)

(2) Wi-Fi
(Hardware Port: Wi-Fi, Device: en1)

(3) mlx-en2
(Hardware Port: Thunderbolt 1, Device: en2)

(4) mlx-en3
(Hardware Port: Thunderbolt 2, Device: en3)

(*) mlx-en4
(Hardware Port: Thunderbolt 3, Device: en4)
"""
TB_PORT_HARDWARE = {"Ethernet": "en0", "Wi-Fi": "en1", "Thunderbolt 1": "en2",
                    "Thunderbolt 2": "en3", "Thunderbolt 3": "en4"}

# A VPN service without a device (a public Go project's fixture "in the style of this machine").
NO_DEVICE = """An asterisk (*) denotes that a network service is disabled.
(*) v2RayTun
(Hardware Port: v2RayTun, Device: )
"""


def _service(name, port, device, enabled=True):
    return {"name": name, "enabled": enabled, "hardware_port": port, "device": device}


def test_service_order_keeps_every_service_with_its_port_device_and_state():
    assert networksetup.networksetup_service_order(SERVICE_ORDER) == [
        _service("AX88179B", "AX88179B", "en6"),
        _service("USB 10/100/1000 LAN", "USB 10/100/1000 LAN", "en7"),
        _service("USB 10/100/1G/2.5G LAN", "USB 10/100/1G/2.5G LAN", "en9", enabled=False),
        _service("M3100", "M3100", "en12", enabled=False),
        _service("Thunderbolt Bridge", "Thunderbolt Bridge", "bridge0"),
        _service("Wi-Fi", "Wi-Fi", "en0"),
        _service("iPhone USB", "iPhone USB", "en11"),
    ]


def test_service_order_of_a_switched_off_bridge():
    services = networksetup.networksetup_service_order(BRIDGE_OFF)
    assert services[-1] == _service("Thunderbolt Bridge", "Thunderbolt Bridge", "bridge0",
                                    enabled=False)
    assert services[1] == _service("Scooter cable", "AX88179A", "en7")


def test_service_without_a_device():
    assert networksetup.networksetup_service_order(NO_DEVICE) == [
        _service("v2RayTun", "v2RayTun", None, enabled=False)]


def test_service_order_keeps_localized_names():
    out = ("An asterisk (*) denotes that a network service is disabled.\n(1) Puente Thunderbolt\n"
           "(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n")
    assert networksetup.networksetup_service_order(out) == [
        _service("Puente Thunderbolt", "Thunderbolt Bridge", "bridge0")]


def test_service_order_of_nothing():
    assert networksetup.networksetup_service_order("") == []


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
    ("sample", "ip", "prefix", "expected"),
    [
        (MANUAL, "198.19.0.2", 24, True),
        (MANUAL, "198.19.0.2", "24", True),  # extra vars arrive as strings
        (MANUAL, "198.19.0.3", 24, False),  # another address
        (MANUAL, "198.19.0.2", 16, False),  # prefix changed in the inventory
        (TB_BRIDGE_FRESH, "198.19.0.2", 24, False),
        (TB_BRIDGE_LINK_LOCAL, "169.254.34.128", 16, False),  # DHCP, not manual
        (DHCP_LEASE, "198.19.2.218", 24, False),  # right address, but leased
        (MANUAL_EMPTY, "198.19.0.2", 24, False),
        (UNKNOWN_SERVICE, "198.19.0.2", 24, False),
    ],
)
def test_setmanual_runs_only_when_getinfo_shows_something_else(sample, ip, prefix, expected):
    info = networksetup.networksetup_info(sample)
    assert networksetup.networksetup_is_manual(info, ip, prefix) is expected


# --- networksetup_state: what the Darwin tasks change -------------------------------------------


def _result(item, stdout, rc=0):
    return {"item": item, "rc": rc, "stdout": stdout, "stderr": ""}


def _state(links, service_order, hardware_ports, infos, bridge="Thunderbolt Bridge"):
    """The probe run's results (networksetup_probes' items) fed to networksetup_state."""
    probes = networksetup.networksetup_probes(links)
    stdout = {"services": service_order, "hardware_ports": "(parsed by the caller)"}
    results = [_result(p["item"], stdout.get(p["item"]) if isinstance(p["item"], str)
                       else infos.get(p["item"]["getinfo"], UNKNOWN_SERVICE)) for p in probes]
    return networksetup.networksetup_state(results, links, "mlx-", bridge, hardware_ports)


def _link(interface, address, connection=None):
    return {"interface": interface, "address": address, "prefix": 30,
            "connection": connection or f"mlx-{interface}"}


def _manual(address, mask="255.255.255.252"):
    return MANUAL.replace("198.19.0.2", address).replace("255.255.255.0", mask)


def test_probes_read_the_services_the_ports_and_each_links_settings():
    assert networksetup.networksetup_probes([_link("en2", "10.213.0.1")]) == [
        {"item": "services", "argv": ["networksetup", "-listnetworkserviceorder"]},
        {"item": "hardware_ports", "argv": ["networksetup", "-listallhardwareports"]},
        {"item": {"getinfo": "mlx-en2"}, "argv": ["networksetup", "-getinfo", "mlx-en2"]},
    ]


def test_first_cables_run_on_a_stock_mac():
    # The bridge holds the ports and is on; no port has a service: create, set, switch off.
    hardware = {"Thunderbolt Bridge": "bridge0", "Wi-Fi": "en0", "Thunderbolt 1": "en1",
                "Thunderbolt 2": "en2"}
    state = _state([_link("en1", "10.213.0.1"), _link("en2", "10.213.0.6")], SERVICE_ORDER,
                   hardware, {})
    assert [(link["connection"], link["hardware_port"], link["service"], link["manual"])
            for link in state["links"]] == [("mlx-en1", "Thunderbolt 1", None, False),
                                            ("mlx-en2", "Thunderbolt 2", None, False)]
    assert state["bridge_enabled"] and not state["bridge_disabled"]
    assert state["ours"] == [] and state["stale"] == []


def test_second_cables_run_changes_nothing_but_a_disabled_service():
    links = [_link("en2", "10.213.0.1"), _link("en3", "10.213.0.5"), _link("en4", "10.213.0.9")]
    infos = {"mlx-en2": _manual("10.213.0.1"), "mlx-en3": _manual("10.213.0.5"),
             "mlx-en4": _manual("10.213.0.9")}
    state = _state(links, TB_PORT_SERVICES, TB_PORT_HARDWARE, infos)
    assert [link["manual"] for link in state["links"]] == [True, True, True]
    assert [link["service"]["enabled"] for link in state["links"]] == [True, True, False]
    # No Thunderbolt Bridge service on this Mac at all: nothing to switch off, or back on.
    assert not state["bridge_enabled"] and not state["bridge_disabled"]
    assert state["ours"] == ["mlx-en2", "mlx-en3", "mlx-en4"] and state["stale"] == []


def test_a_port_no_longer_cabled_is_stale_and_a_moved_address_is_set_again():
    links = [_link("en2", "10.213.0.1"), _link("en3", "10.213.0.6")]
    infos = {"mlx-en2": _manual("10.213.0.1"), "mlx-en3": _manual("10.213.0.5")}
    state = _state(links, TB_PORT_SERVICES, TB_PORT_HARDWARE, infos)
    assert [link["manual"] for link in state["links"]] == [True, False]
    assert state["stale"] == ["mlx-en4"]


def test_a_port_that_is_no_thunderbolt_port_of_this_mac_has_no_hardware_port():
    state = _state([_link("en9", "10.213.0.1")], TB_PORT_SERVICES, TB_PORT_HARDWARE, {})
    assert state["links"][0]["hardware_port"] is None


def test_services_of_others_are_never_ours():
    # Named like ours but on a non-Thunderbolt port, or on the bridge: not ours.
    order = ("An asterisk (*) denotes that a network service is disabled.\n"
             "(1) mlx-en0\n(Hardware Port: Wi-Fi, Device: en0)\n\n"
             "(2) mlx-bridge0\n(Hardware Port: Thunderbolt Bridge, Device: bridge0)\n\n"
             "(3) mlx-en2\n(Hardware Port: Thunderbolt 1, Device: en3)\n")
    assert _state([], order, {}, {})["ours"] == []


def test_bridge_topology_reads_the_bridge_service_as_its_link():
    link = _link("bridge0", "198.19.0.2", connection="Thunderbolt Bridge")
    link["prefix"] = 24
    state = _state([link], SERVICE_ORDER, {"Thunderbolt Bridge": "bridge0"},
                   {"Thunderbolt Bridge": MANUAL})
    assert state["links"][0]["manual"] and state["links"][0]["service"]["enabled"]
    assert state["bridge_enabled"]
    off = _state([link], BRIDGE_OFF, {"Thunderbolt Bridge": "bridge0"}, {})
    assert off["bridge_disabled"] and not off["bridge_enabled"]
    assert not off["links"][0]["manual"]


# A real `networksetup -listallhardwareports` (tests/unit/data/thunderbolt_outputs.yml: a Mac
# with Wi-Fi en0, the Thunderbolt Bridge bridge0 and Thunderbolt ports en1, en2, en6).
RECORDED_PORTS = discovery.networksetup_hardware_ports(yaml.safe_load(
    (ROOT / "tests/unit/data/thunderbolt_outputs.yml").read_text())[
    "osaurus_peer_hardware_ports"]["output"])
PORT_FIX = ("correct the port in thunderbolt_cables (the Device of a \"Thunderbolt N\" port), or "
            "recreate the ports with `sudo networksetup -detectnewhardware`")


def test_a_cable_port_must_be_a_thunderbolt_port_of_the_mac():
    links = [_link(port, "10.213.0.1") for port in ("en1", "en0", "bridge0", "en3", "en9")]
    state = _state(links, SERVICE_ORDER, RECORDED_PORTS, {})
    assert networksetup.networksetup_port_errors(state["links"], "mac1") == [
        f"mac1: cable port en0 is the Mac's \"Wi-Fi\" port, not a Thunderbolt port — {PORT_FIX}",
        "mac1: cable port bridge0 is the Mac's \"Thunderbolt Bridge\" port, not a Thunderbolt "
        f"port — {PORT_FIX}",
        "mac1: cable port en3 is the Mac's \"Ethernet Adapter (en3)\" port, not a Thunderbolt "
        f"port — {PORT_FIX}",
        "mac1: cable port en9 is no hardware port of this Mac (`networksetup "
        f"-listallhardwareports`) — {PORT_FIX}",
    ]
    assert networksetup.networksetup_port_errors(state["links"][:1], "mac1") == []


@pytest.mark.parametrize(
    ("sample", "argv"),
    [(MANUAL, ["-setmanual", "Thunderbolt Bridge", "198.19.0.2", "255.255.255.0", ""]),
     (WIFI_MANUAL, ["-setmanual", "Thunderbolt Bridge", "198.19.1.16", "255.255.255.0",
                    "198.19.1.1"]),
     (TB_BRIDGE_FRESH, ["-setdhcp", "Thunderbolt Bridge"]),
     (DHCP_LEASE, ["-setdhcp", "Thunderbolt Bridge"]),
     (MANUAL_EMPTY, ["-setdhcp", "Thunderbolt Bridge"]),
     ("BOOTP Configuration\n", ["-setbootp", "Thunderbolt Bridge"])],
    ids=["manual", "manual-with-router", "fresh", "dhcp", "manual-without-address", "bootp"])
def test_reset_gives_the_bridge_back_the_settings_it_had_before_setup(sample, argv):
    link = _link("bridge0", "198.19.0.9", connection="Thunderbolt Bridge")
    state = _state([link], SERVICE_ORDER, {"Thunderbolt Bridge": "bridge0"},
                   {"Thunderbolt Bridge": sample})
    before = state["links"][0]["ipv4"]  # what setup records before its -setmanual
    assert networksetup.networksetup_restore_argv(before, "Thunderbolt Bridge") == [
        "networksetup", *argv]


def test_reset_without_a_record_returns_to_dhcp():
    assert networksetup.networksetup_restore_argv(None, "Thunderbolt Bridge") == [
        "networksetup", "-setdhcp", "Thunderbolt Bridge"]


def test_filter_names():
    assert set(networksetup.FilterModule().filters()) == {
        "networksetup_port_errors", "networksetup_probes", "networksetup_restore_argv",
        "networksetup_state"}
