"""Linux decisions of the thunderbolt role: iproute2 state and the NetworkManager switch.

`ip -j addr show` samples were captured from iproute2 6.1 on a bridge0 in a scratch network
namespace; nmcli samples are real `nmcli -t -f ... device show IF` output.
"""

import pytest

from tests.unit.plugins import load

linux_link = load("roles/thunderbolt/filter_plugins/linux_link.py")

# Fresh bridge0: down, no addresses.
BRIDGE_FRESH = (
    '[{"ifindex":2,"ifname":"bridge0","flags":["BROADCAST","MULTICAST"],"mtu":1500,'
    '"qdisc":"noop","operstate":"DOWN","group":"default","txqlen":1000,"link_type":"ether",'
    '"address":"8a:ab:23:3e:02:b5","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[]}]\n'
)

# After `ip addr add 198.19.250.1/24 dev bridge0` and `ip link set bridge0 up`.
BRIDGE_CONFIGURED = (
    '[{"ifindex":2,"ifname":"bridge0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],'
    '"mtu":1500,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,'
    '"link_type":"ether","address":"8a:ab:23:3e:02:b5","broadcast":"ff:ff:ff:ff:ff:ff",'
    '"addr_info":[{"family":"inet","local":"198.19.250.1","prefixlen":24,"scope":"global",'
    '"label":"bridge0","valid_life_time":4294967295,"preferred_life_time":4294967295},'
    '{"family":"inet6","local":"fe80::88ab:23ff:fe3e:2b5","prefixlen":64,"scope":"link",'
    '"tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295}]}]\n'
)


def test_missing_interface():
    # `ip -j addr show dev nope` prints nothing on stdout (the error goes to stderr, rc 1).
    state = linux_link.ip_link_state("", "198.19.250.1", 24)
    assert state == {"exists": False, "up": False, "has_address": False, "stale_prefixes": []}


def test_fresh_bridge_needs_address_and_link_up():
    state = linux_link.ip_link_state(BRIDGE_FRESH, "198.19.250.1", 24)
    assert state == {"exists": True, "up": False, "has_address": False, "stale_prefixes": []}


def test_configured_bridge_needs_nothing():
    state = linux_link.ip_link_state(BRIDGE_CONFIGURED, "198.19.250.1", "24")
    assert state == {"exists": True, "up": True, "has_address": True, "stale_prefixes": []}


def test_other_address_on_the_bridge_is_not_ours():
    state = linux_link.ip_link_state(BRIDGE_CONFIGURED, "198.19.250.2", 24)
    assert state["has_address"] is False
    assert state["stale_prefixes"] == []


def test_our_address_with_an_old_prefix_is_stale():
    state = linux_link.ip_link_state(BRIDGE_CONFIGURED, "198.19.250.1", 16)
    assert state["has_address"] is False
    assert state["stale_prefixes"] == [24]


def test_ipv6_link_local_does_not_count():
    state = linux_link.ip_link_state(BRIDGE_CONFIGURED, "fe80::88ab:23ff:fe3e:2b5", 64)
    assert state["has_address"] is False


def _nmcli(stdout, rc=0):
    return {"rc": rc, "stdout": stdout}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # NetworkManager has an active profile on the Thunderbolt device.
        (
            _nmcli(
                "GENERAL.TYPE:ethernet\nGENERAL.STATE:100 (connected)\n"
                "GENERAL.CONNECTION:Wired connection 1"
            ),
            {"managed": True, "type": "ethernet", "connection": "Wired connection 1"},
        ),
        # Managed but no cable: NetworkManager would still undo `ip addr add`.
        (
            _nmcli("GENERAL.TYPE:ethernet\nGENERAL.STATE:20 (unavailable)\nGENERAL.CONNECTION:"),
            {"managed": True, "type": "ethernet", "connection": ""},
        ),
        (
            _nmcli("GENERAL.TYPE:bridge\nGENERAL.STATE:30 (disconnected)\nGENERAL.CONNECTION:"),
            {"managed": True, "type": "bridge", "connection": ""},
        ),
        # Listed as unmanaged (e.g. in unmanaged-devices): iproute2 owns it.
        (
            _nmcli("GENERAL.TYPE:tun\nGENERAL.STATE:10 (unmanaged)\nGENERAL.CONNECTION:"),
            {"managed": False, "type": "generic", "connection": ""},
        ),
        # NetworkManager installed but stopped.
        (
            _nmcli("Error: NetworkManager is not running.", rc=8),
            {"managed": False, "type": "generic", "connection": ""},
        ),
        # Device unknown to NetworkManager.
        (
            _nmcli("Error: Device 'bridge0' not found.", rc=10),
            {"managed": False, "type": "generic", "connection": ""},
        ),
        # nmcli not installed: the command module reports rc 2 and no stdout.
        (
            {"rc": 2, "msg": "[Errno 2] No such file or directory: b'nmcli'"},
            {"managed": False, "type": "generic", "connection": ""},
        ),
    ],
)
def test_networkmanager_decision(result, expected):
    assert linux_link.nmcli_device(result) == expected


def test_terse_escaped_colons_in_connection_names():
    result = _nmcli("GENERAL.STATE:100 (connected)\nGENERAL.CONNECTION:tb\\:left")
    assert linux_link.nmcli_device(result)["connection"] == "tb:left"


# --- every link in one probe run: linux_link_probes and linux_link_states -----------------------

concurrent_commands = load("roles/cluster/library/concurrent_commands.py")


def _link(interface, address, prefix):
    return {"interface": interface, "address": address, "prefix": prefix, "connection": "mlx-x"}


def test_probes_read_each_links_addresses_and_networkmanager_state():
    assert linux_link.linux_link_probes([_link("en2", "10.213.0.1", 30)]) == [
        {"item": {"interface": "en2", "probe": "ip"}, "argv": ["ip", "-j", "addr", "show", "dev",
                                                               "en2"]},
        {"item": {"interface": "en2", "probe": "nmcli"},
         "argv": ["nmcli", "-t", "-f", "GENERAL.STATE,GENERAL.TYPE,GENERAL.CONNECTION", "device",
                  "show", "en2"]},
    ]


def test_states_from_a_real_probe_run_on_this_machine():
    # The probes run here as concurrent_commands runs them on a host: lo exists with 127.0.0.1/8,
    # nosuch0 does not (ip prints nothing on stdout, rc 1); nmcli answers, fails or is missing.
    links = [_link("lo", "127.0.0.1", 8), _link("lo", "127.0.0.1", 30),
             _link("nosuch0", "10.213.0.1", 30)]
    results = [concurrent_commands.run(command, 10)
               for command in linux_link.linux_link_probes(links)]
    states = linux_link.linux_link_states(results, links)
    assert [(s["interface"], s["exists"], s["up"], s["has_address"], s["stale_prefixes"])
            for s in states] == [("lo", True, True, True, []), ("lo", True, True, False, [8]),
                                 ("nosuch0", False, False, False, [])]
    assert states[2]["nm"] == {"managed": False, "type": "generic", "connection": ""}
    assert all(s["connection"] == "mlx-x" and "nm" in s for s in states)


def test_states_keep_each_link_with_its_own_results():
    results = [
        {"item": {"interface": "bridge0", "probe": "ip"}, "rc": 0, "stdout": BRIDGE_CONFIGURED},
        {"item": {"interface": "bridge0", "probe": "nmcli"}, "rc": 0,
         "stdout": "GENERAL.STATE:100 (connected)\nGENERAL.TYPE:bridge\nGENERAL.CONNECTION:mlx-x"},
        {"item": {"interface": "en2", "probe": "ip"}, "rc": 1, "stdout": ""},
        {"item": {"interface": "en2", "probe": "nmcli"}, "rc": 10, "stdout": ""},
    ]
    links = [_link("en2", "10.213.0.1", 30), _link("bridge0", "198.19.250.1", 24)]
    states = linux_link.linux_link_states(results, links)
    assert [(s["interface"], s["exists"], s["has_address"], s["nm"]["managed"])
            for s in states] == [("en2", False, False, False), ("bridge0", True, True, True)]


def test_filter_names():
    assert set(linux_link.FilterModule().filters()) == {"linux_link_probes", "linux_link_states"}
