"""roles/cluster/filter_plugins/discovery.py against recorded real `system_profiler
SPThunderboltDataType -json` and `networksetup -listallhardwareports` outputs
(tests/unit/data/thunderbolt_outputs.yml says where each comes from), and against what MLX's
own mlx.distributed_config reads from the same outputs."""

import types
from pathlib import Path

import pytest
import yaml
from mlx._distributed_utils import config as mlx_config
from mlx._distributed_utils.common import Host

from tests.unit.plugins import load

discovery = load("roles/cluster/filter_plugins/discovery.py")
OUTPUTS = yaml.safe_load((Path(__file__).parent / "data/thunderbolt_outputs.yml").read_text())


def output(name):
    return OUTPUTS[name]["output"]


# --- networksetup -listallhardwareports ---------------------------------------------------------


def test_hardware_ports_map_each_port_to_its_device():
    assert discovery.networksetup_hardware_ports(output("osaurus_peer_hardware_ports")) == {
        "Ethernet Adapter (en3)": "en3",
        "Thunderbolt Bridge": "bridge0",
        "Wi-Fi": "en0",
        "Thunderbolt 1": "en1",
        "Thunderbolt 2": "en6",
        "Thunderbolt 3": "en2",
    }


def test_hardware_ports_agree_with_mlx():
    text = output("osaurus_peer_hardware_ports")
    assert discovery.networksetup_hardware_ports(text) == mlx_config.parse_hardware_ports(
        text.encode())


def test_hardware_ports_of_nothing():
    assert discovery.networksetup_hardware_ports("") == {}
    assert discovery.networksetup_hardware_ports("VLAN Configurations\n===================\n") == {}


# --- system_profiler SPThunderboltDataType -json -----------------------------------------------


def test_ports_of_a_mac_cabled_to_another():
    ports = discovery.thunderbolt_ports(output("osaurus_peer"),
                                        output("osaurus_peer_hardware_ports"))
    assert ports == [
        {"receptacle": "1", "hardware_port": "Thunderbolt 1", "interface": "en1",
         "domain": "00000005-0000-4000-8000-000000000005", "peer_domain": None,
         "peer_name": None, "speed": "Up to 120 Gb/s",
         "status": "receptacle_no_devices_connected"},
        {"receptacle": "2", "hardware_port": "Thunderbolt 2", "interface": "en6",
         "domain": "00000003-0000-4000-8000-000000000003",
         "peer_domain": "00000004-0000-4000-8000-000000000004", "peer_name": "MacBook Pro",
         "speed": "80 Gb/s", "status": "receptacle_connected"},
        {"receptacle": "3", "hardware_port": "Thunderbolt 3", "interface": "en2",
         "domain": "00000002-0000-4000-8000-000000000002", "peer_domain": None,
         "peer_name": None, "speed": "40 Gb/s", "status": "receptacle_connected"},
    ]


def test_a_drive_or_a_dock_is_no_peer():
    # The Mac Studio's receptacle 4 holds an OWC Envoy Ultra drive: connected, but no Mac.
    studio = discovery.thunderbolt_ports(output("omlx_mac_studio"), "")
    assert [(p["receptacle"], p["peer_name"]) for p in studio] == [
        ("1", None), ("2", "MacBook Pro"), ("3", None), ("4", None), ("5", None), ("6", None)]
    assert studio[3]["status"] == "receptacle_connected"
    # osaurus_local's receptacle 3 holds a Sabrent dock.
    local = discovery.thunderbolt_ports(output("osaurus_local"), {})
    assert [p["peer_name"] for p in local] == [None, "MacBook Pro", None]


def test_ports_without_a_listing_have_no_interface():
    ports = discovery.thunderbolt_ports(output("omlx_macbook_pro"), "")
    assert [(p["hardware_port"], p["interface"]) for p in ports] == [
        ("Thunderbolt 1", None), ("Thunderbolt 2", None), ("Thunderbolt 3", None)]


def test_entries_that_are_not_ports_are_left_out():
    data = {"SPThunderboltDataType": [
        {"_name": "thunderboltusb4_bus_0", "receptacle_1_tag": {"receptacle_id_key": "1"}},
        {"_name": "no receptacle", "domain_uuid_key": "ab"},
    ]}
    assert discovery.thunderbolt_ports(data, {}) == []
    assert discovery.thunderbolt_ports('{"SPThunderboltDataType": []}', "") == []
    assert discovery.thunderbolt_ports("{}", "") == []


# --- combined across hosts -----------------------------------------------------------------------

# osaurus_local's own listing was not published; these tests give it its peer's listing, from
# the same model (Mac17,6), so that both ends of the recorded cable have an interface.
OSAURUS = {
    "mbp-a": discovery.thunderbolt_ports(output("osaurus_local"),
                                         output("osaurus_peer_hardware_ports")),
    "mbp-b": discovery.thunderbolt_ports(output("osaurus_peer"),
                                         output("osaurus_peer_hardware_ports")),
}


def test_the_cable_between_two_macs_is_found_from_both_ends():
    assert discovery.thunderbolt_cables_found(OSAURUS) == [["mbp-a", "en6", "mbp-b", "en6"]]
    assert discovery.thunderbolt_discovery_problems(OSAURUS) == []


def test_discovery_agrees_with_mlx_distributed_config(monkeypatch):
    """mlx.distributed_config's extract_connectivity, fed the same recorded outputs."""
    recorded = {("mbp-a", "system_profiler"): output("osaurus_local"),
                ("mbp-b", "system_profiler"): output("osaurus_peer"),
                ("mbp-a", "networksetup"): output("osaurus_peer_hardware_ports"),
                ("mbp-b", "networksetup"): output("osaurus_peer_hardware_ports")}

    def run(argv, capture_output):  # what MLX would read from `ssh HOST COMMAND`
        assert argv[0] == "ssh" and capture_output
        return types.SimpleNamespace(stdout=recorded[argv[1], argv[2]].encode())

    monkeypatch.setattr(mlx_config, "run", run)
    hosts = [Host(0, "mbp-a", [], []), Host(1, "mbp-b", [], [])]
    tb_hosts, index = mlx_config.extract_connectivity(hosts, verbose=False)
    mlx_cables = {frozenset({(hosts[i].ssh_hostname, port.iface),
                             (hosts[index[port.connected_to][0]].ssh_hostname,
                              tb_hosts[index[port.connected_to][0]].ports[
                                  index[port.connected_to][1]].iface)})
                  for i, host in enumerate(tb_hosts) for port in host.ports
                  if port.connected_to in index}
    ours = {frozenset({(a, ia), (b, ib)}) for a, ia, b, ib in
            discovery.thunderbolt_cables_found(OSAURUS)}
    assert ours == mlx_cables == {frozenset({("mbp-a", "en6"), ("mbp-b", "en6")})}


def test_a_port_without_interface_is_named_with_the_fix():
    # The omlx pair was published without networksetup listings.
    ports = {"studio": discovery.thunderbolt_ports(output("omlx_mac_studio"), ""),
             "macbook": discovery.thunderbolt_ports(output("omlx_macbook_pro"), "")}
    assert discovery.thunderbolt_cables_found(ports) == []
    assert discovery.thunderbolt_discovery_problems(ports) == [
        "studio: `networksetup -listallhardwareports` shows no interface for Thunderbolt 2 "
        "(cabled to macbook) — list the cable in thunderbolt_cables, or recreate the port with "
        "`sudo networksetup -detectnewhardware`",
        "macbook: `networksetup -listallhardwareports` shows no interface for Thunderbolt 1 "
        "(cabled to studio) — list the cable in thunderbolt_cables, or recreate the port with "
        "`sudo networksetup -detectnewhardware`",
    ]


def test_a_mac_outside_the_inventory_is_named():
    ports = {"mbp-b": OSAURUS["mbp-b"]}
    assert discovery.thunderbolt_cables_found(ports) == []
    assert discovery.thunderbolt_discovery_problems(ports) == [
        "mbp-b: Thunderbolt 2 is cabled to a Mac (MacBook Pro, Thunderbolt domain "
        "00000004-0000-4000-8000-000000000004) that is none of the hosts discovered — add it to "
        "the inventory group `cluster` (and check it answered), or unplug the cable"
    ]


def test_a_cable_seen_from_one_end_only_is_named():
    # mbp-a's port points at mbp-b's receptacle 2, whose own report names another port.
    moved = [dict(p, peer_domain="00000009-0000-4000-8000-000000000009")
             if p["receptacle"] == "2" else p for p in OSAURUS["mbp-b"]]
    ports = {"mbp-a": OSAURUS["mbp-a"], "mbp-b": moved}
    assert discovery.thunderbolt_cables_found(ports) == []
    assert discovery.thunderbolt_discovery_problems(ports) == [
        "mbp-a: Thunderbolt 2 sees mbp-b's Thunderbolt 2 at the other end, but mbp-b does not "
        "see mbp-a there — reseat the cable and run again"
    ]


@pytest.mark.parametrize("name", ["omlx_macbook_pro", "omlx_mac_studio", "osaurus_local",
                                  "osaurus_peer"])
def test_domains_are_unique_and_upper_case(name):
    ports = discovery.thunderbolt_ports(output(name), "")
    domains = [p["domain"] for p in ports]
    assert len(set(domains)) == len(domains) and all(d == d.upper() for d in domains)
