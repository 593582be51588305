"""roles/cluster/filter_plugins/inventory.py: validation, normalised hosts, hostfile data."""

import pytest

from tests.unit.plugins import load

inv = load("roles/cluster/filter_plugins/inventory.py")


def two_macs(**overrides):
    """hostvars of inventory/examples/two-macs.yml-like hosts; overrides: {host: {var: value}}."""
    hostvars = {
        "mac1": {"ansible_host": "198.18.1.21", "thunderbolt_ip": "198.19.0.1", "mpi_slots": 1},
        "mac2": {"ansible_host": "198.18.1.22", "thunderbolt_ip": "198.19.0.2", "mpi_slots": 1},
    }
    for host, values in overrides.items():
        hostvars.setdefault(host, {}).update(values)
    return hostvars


def errors(hostvars, prefix=24):
    return inv.cluster_inventory_errors(hostvars, list(hostvars), prefix)


# --- cluster_inventory_errors: good inventories -------------------------------------------------


def test_default_inventory_is_valid():
    assert errors({"localhost": {"ansible_connection": "local", "mpi_slots": 2}}) == []


def test_two_macs_are_valid():
    assert errors(two_macs()) == []


def test_no_thunderbolt_anywhere_is_valid():
    hostvars = two_macs(mac1={"thunderbolt_ip": None}, mac2={"thunderbolt_ip": ""})
    assert errors(hostvars) == []


def test_dns_names_and_missing_slots_are_valid():
    hostvars = {"a": {"ansible_host": "a.local"}, "b": {}}
    assert errors(hostvars) == []


def test_digit_strings_from_extra_vars_are_accepted():
    assert errors(two_macs(mac1={"mpi_slots": "2"}), prefix="16") == []


# --- cluster_inventory_errors: one case per kind of error ---------------------------------------


def test_empty_group():
    assert errors({}) == [
        "cluster: the inventory group `cluster` is missing or empty — list your hosts under "
        "cluster: hosts: (see inventory/examples/)"
    ]


def test_duplicate_ansible_host():
    assert errors(two_macs(mac2={"ansible_host": "198.18.1.21"})) == [
        "mac2: ansible_host 198.18.1.21 is also the ansible_host of mac1 — "
        "give every host its own ansible_host"
    ]


def test_duplicate_ansible_host_ignores_case():
    hostvars = {"a": {"ansible_host": "Mac.local"}, "b": {"ansible_host": "mac.LOCAL"}}
    assert errors(hostvars) == [
        "b: ansible_host mac.LOCAL is also the ansible_host of a — "
        "give every host its own ansible_host"
    ]


def test_ansible_host_equal_to_another_inventory_name():
    hostvars = {"mac1": {}, "mac2": {"ansible_host": "mac1"}}
    assert errors(hostvars) == [
        "mac2: ansible_host mac1 is also the inventory name of mac1 — "
        "give every host its own ansible_host"
    ]


def test_duplicate_thunderbolt_ip():
    assert errors(two_macs(mac2={"thunderbolt_ip": "198.19.0.1"})) == [
        "mac2: thunderbolt_ip 198.19.0.1 is also the thunderbolt_ip of mac1 — "
        "give every host its own thunderbolt_ip"
    ]


def test_thunderbolt_ip_equal_to_another_ansible_host():
    hostvars = two_macs(mac2={"thunderbolt_ip": "198.19.0.2"}, mac1={"ansible_host": "198.19.0.2"})
    assert errors(hostvars) == [
        "mac2: thunderbolt_ip 198.19.0.2 is also the ansible_host of mac1 — "
        "give every host its own thunderbolt_ip"
    ]


def test_thunderbolt_ip_not_an_address():
    [message] = errors(two_macs(mac2={"thunderbolt_ip": "198.19.0.300"}))
    assert message.startswith(
        "mac2: thunderbolt_ip '198.19.0.300' is not a valid IPv4 address — use four numbers 0-255 "
        "separated by dots, e.g. "
    )


def test_thunderbolt_ip_with_a_prefix():
    assert errors(two_macs(mac2={"thunderbolt_ip": "198.19.0.2/24"})) == [
        "mac2: thunderbolt_ip '198.19.0.2/24' is not a valid IPv4 address — "
        "write the address alone and the prefix length in thunderbolt_prefix"
    ]


def test_inventory_names_differing_only_in_case():
    assert errors({"Mac1": {}, "mac1": {}}) == [
        "mac1: inventory name mac1 is also the inventory name of Mac1 — "
        "give every host its own inventory name"
    ]


def test_thunderbolt_ip_ipv6_is_refused():
    assert "is not a valid IPv4 address" in errors(two_macs(mac2={"thunderbolt_ip": "fe80::1"}))[0]


def test_thunderbolt_ip_loopback():
    hostvars = two_macs(mac1={"thunderbolt_ip": "127.0.0.1"}, mac2={"thunderbolt_ip": "127.0.0.2"})
    assert errors(hostvars) == [
        "mac1: thunderbolt_ip 127.0.0.1 is a loopback, multicast or reserved address — "
        "use a private address such as 10.0.0.x",
        "mac2: thunderbolt_ip 127.0.0.2 is a loopback, multicast or reserved address — "
        "use a private address such as 10.0.0.x",
    ]  # fmt: skip


def test_thunderbolt_ip_is_the_broadcast_address():
    assert errors(two_macs(mac2={"thunderbolt_ip": "198.19.0.255"})) == [
        "mac2: thunderbolt_ip 198.19.0.255 is the broadcast address of 198.19.0.0/24 — "
        "pick a host address between 198.19.0.1 and 198.19.0.254"
    ]


def test_thunderbolt_ip_outside_the_subnet():
    assert errors(two_macs(mac2={"thunderbolt_ip": "198.19.1.2"})) == [
        "mac2: thunderbolt_ip 198.19.1.2 is outside 198.19.0.0/24 (thunderbolt_prefix 24) — "
        "put every thunderbolt_ip in one subnet, or lower thunderbolt_prefix to widen the subnet"
    ]


def test_subnet_outlier_is_the_host_in_the_minority():
    hostvars = two_macs(mac1={"thunderbolt_ip": "198.19.1.1"})
    hostvars["mac3"] = {"thunderbolt_ip": "198.19.0.3"}
    assert [e.split(":")[0] for e in errors(hostvars)] == ["mac1"]


def test_a_wider_prefix_accepts_the_same_addresses():
    assert errors(two_macs(mac2={"thunderbolt_ip": "198.19.1.2"}), prefix=16) == []


def test_thunderbolt_on_some_hosts_only():
    assert errors(two_macs(mac2={"thunderbolt_ip": None})) == [
        "mac2: thunderbolt_ip is missing while mac1 has one — set thunderbolt_ip on every host "
        "of `cluster`, or on none"
    ]


@pytest.mark.parametrize("slots", [-1, "two", 1.5, True, None])
def test_bad_mpi_slots(slots):
    assert errors(two_macs(mac2={"mpi_slots": slots})) == [
        f"mac2: mpi_slots {slots!r} is not a non-negative integer — set the number of ranks to "
        "start on this host, 0 to 256 (0 keeps it out of the hostfile)"
    ]


def test_all_slots_zero():
    assert errors(two_macs(mac1={"mpi_slots": 0}, mac2={"mpi_slots": 0})) == [
        "cluster: every host has mpi_slots 0 — give at least one host mpi_slots 1 or more"
    ]


@pytest.mark.parametrize("prefix", [0, 31, "abc", None, -24])
def test_bad_prefix(prefix):
    assert errors(two_macs(), prefix=prefix) == [
        f"thunderbolt_prefix: {prefix!r} is not an integer from 1 to 30 — set it to the prefix "
        "length of the Thunderbolt subnet, e.g. 24 for 255.255.255.0"
    ]


def test_bad_ansible_host_address():
    assert errors(two_macs(mac1={"ansible_host": "198.18.1.256"})) == [
        "mac1: ansible_host 198.18.1.256 is not a valid IPv4 address — use four numbers 0-255 "
        "separated by dots, or a DNS name"
    ]


def test_all_errors_are_reported_at_once():
    hostvars = two_macs(
        mac1={"mpi_slots": -1},
        mac2={"ansible_host": "198.18.1.21", "thunderbolt_ip": "198.19.9.9"},
    )
    hostvars["mac3"] = {"ansible_host": "198.18.1.23", "mpi_slots": 1}
    found = errors(hostvars)
    assert [e.split(" — ")[0] for e in found] == [
        "mac1: mpi_slots -1 is not a non-negative integer",
        "mac2: ansible_host 198.18.1.21 is also the ansible_host of mac1",
        "mac2: thunderbolt_ip 198.19.9.9 is outside 198.19.0.0/24 (thunderbolt_prefix 24)",
        "mac3: thunderbolt_ip is missing while mac1 has one",
    ]


# --- cluster_inventory_errors: the `cables` topology ---------------------------------------------

POOL = "198.18.0.0/24"


def cabled(cables=None, **overrides):
    """Three Macs in `cables` mode (set on every host, as a group var is), no thunderbolt_ip."""
    hostvars = {f"mac{i}": {"ansible_host": f"198.19.1.{i}", "thunderbolt_topology": "cables",
                            "thunderbolt_cable_pool": POOL,
                            "thunderbolt_cables": cables or []} for i in (1, 2, 3)}
    for host, values in overrides.items():
        hostvars.setdefault(host, {}).update(values)
    return hostvars


RING = [["mac1", "en2", "mac2", "en3"], ["mac2", "en2", "mac3", "en3"],
        ["mac3", "en2", "mac1", "en3"]]


def test_cables_topology_is_valid():
    assert errors(cabled(RING)) == []
    assert errors(cabled([])) == []  # the Macs discover their cables


def test_cables_as_defaults_are_checked_too():
    hostvars = {h: {"ansible_host": f"198.19.1.{i}"} for i, h in enumerate(["m1", "m2"], 1)}
    found = inv.cluster_inventory_errors(hostvars, ["m1", "m2"], 24, topology="cables",
                                         pool="198.18.0.0/31", cables=[])
    assert found == ["cluster: thunderbolt_cable_pool 198.18.0.0/31 is smaller than the /30 one "
                     "cable needs — use a /24 (room for 64 cables), e.g. 198.18.0.0/24"]


def test_unknown_topology():
    assert errors(cabled(**{h: {"thunderbolt_topology": "cable"}
                            for h in ("mac1", "mac2", "mac3")})) == [
        "cluster: thunderbolt_topology 'cable' is not a topology — use bridge: one thunderbolt_ip "
        "per host on the Thunderbolt Bridge; cables: the bridge off, one /30 per cable from "
        "thunderbolt_cable_pool"
    ]


def test_topology_on_some_hosts_only():
    hostvars = two_macs(mac1={"thunderbolt_topology": "cables"})
    assert errors(hostvars) == [
        "mac1: thunderbolt_topology cables is set for this host only, while mac2 use the default "
        "— thunderbolt_topology applies to the whole cluster: set it once under `cluster: vars:` "
        "(or on every host)"
    ]


def test_thunderbolt_ip_is_refused_with_cables():
    assert errors(cabled(RING, mac2={"thunderbolt_ip": "198.19.0.2"})) == [
        "mac2: thunderbolt_ip 198.19.0.2 is set while thunderbolt_topology is cables, where each "
        "cable gets its addresses from thunderbolt_cable_pool and the Thunderbolt Bridge is off — "
        "remove thunderbolt_ip, or set thunderbolt_topology: bridge"
    ]


@pytest.mark.parametrize(("pool", "message"), [
    ("198.18.0", "cluster: thunderbolt_cable_pool '198.18.0' is not an IPv4 network — write it "
                 "as address/prefix length, e.g. 10.213.0.0/24"),
    ("2001:db8::/64", "cluster: thunderbolt_cable_pool '2001:db8::/64' is not an IPv4 network"),
    ("198.18.0.0", "cluster: thunderbolt_cable_pool 198.18.0.0 has no prefix length — write the "
                   "network, e.g. 198.18.0.0/24"),
    ("198.18.0.7/24", "cluster: thunderbolt_cable_pool 198.18.0.7/24 is not a network address — "
                      "use 198.18.0.0/24"),
    ("169.254.0.0/16", "cluster: thunderbolt_cable_pool 169.254.0.0/16 is not private, shared "
                       "or benchmark address space — use private (10.0.0.0/8, 172.16.0.0/12, "
                       "192.168.0.0/16), shared (100.64.0.0/10) or benchmark (198.18.0.0/15) "
                       "space, e.g. 10.213.0.0/24"),
    # Public space would shadow real hosts on the internet for every rank.
    ("8.8.8.0/24", "cluster: thunderbolt_cable_pool 8.8.8.0/24 is public address space — use "
                   "private"),
    ("10.0.0.0/7", "cluster: thunderbolt_cable_pool 10.0.0.0/7 is not private, shared or "
                   "benchmark address space"),
    ("198.18.0.0/29", "cluster: thunderbolt_cable_pool 198.18.0.0/29 holds 2 cable(s) (a /30 "
                      "each) but there are 3 — use a /28 or larger, e.g. 198.18.0.0/28"),
])
def test_bad_pool(pool, message):
    hostvars = cabled(RING, **{h: {"thunderbolt_cable_pool": pool} for h in ("mac1", "mac2",
                                                                             "mac3")})
    [found] = errors(hostvars)
    assert found.startswith(message), found


def test_a_host_reached_inside_the_pool():
    assert errors(cabled(RING, mac3={"ansible_host": "198.18.0.9"})) == [
        "mac3: ansible_host 198.18.0.9 is inside thunderbolt_cable_pool 198.18.0.0/24 — set "
        "thunderbolt_cable_pool to a range no host is reached on"
    ]


def test_cables_not_a_list():
    assert errors(cabled("mac1 en2 mac2 en3")) == [
        "cluster: thunderbolt_cables 'mac1 en2 mac2 en3' is not a list — write a list of cables, "
        "each [host_a, interface_a, host_b, interface_b], e.g. [[mac1, en2, mac2, en3]]"
    ]


def test_a_cable_of_the_wrong_form():
    assert errors(cabled([["mac1", "en2", "mac2"], ["mac1", "en3", "mac2", 3]])) == [
        "cluster: thunderbolt_cables entry 1 ['mac1', 'en2', 'mac2'] is not [host_a, "
        "interface_a, host_b, interface_b] — write each cable as four names, e.g. [mac1, en2, "
        "mac2, en3]",
        "cluster: thunderbolt_cables entry 2 ['mac1', 'en3', 'mac2', 3] is not [host_a, "
        "interface_a, host_b, interface_b] — write each cable as four names, e.g. [mac1, en2, "
        "mac2, en3]",
    ]


def test_a_cable_to_an_unknown_host():
    assert errors(cabled([["mac1", "en2", "mac9", "en3"]])) == [
        "cluster: thunderbolt_cables entry 1 names 'mac9', which is not in the inventory group "
        "`cluster` — use the inventory names (mac1, mac2, mac3)"
    ]


def test_a_cable_with_a_bad_interface_name():
    assert errors(cabled([["mac1", "-en2", "mac2", "Thunderbolt 1"]])) == [
        "mac1: thunderbolt_cables entry 1 interface '-en2' is not an interface name — use the "
        "device `networksetup -listallhardwareports` shows for the port (macOS, e.g. en2) or "
        "`ip link` shows (Linux)",
        "mac2: thunderbolt_cables entry 1 interface 'Thunderbolt 1' is not an interface name — "
        "use the device `networksetup -listallhardwareports` shows for the port (macOS, e.g. "
        "en2) or `ip link` shows (Linux)",
    ]


@pytest.mark.parametrize("port", ["bridge0", "lo0", "lo", "br0", "br-5f2c", "virbr0", "docker0"])
def test_a_loopback_or_bridge_is_no_cable_port(port):
    assert errors(cabled([["mac1", port, "mac2", "en2"], ["mac2", "en3", "mac3", "en2"]])) == [
        f"mac1: thunderbolt_cables entry 1 interface {port} is a loopback or bridge interface, "
        "not a cable port — use the device of the Thunderbolt port the cable is in (macOS: a "
        "\"Thunderbolt N\" port of `networksetup -listallhardwareports`, e.g. en2; Linux: `ip "
        "link`)"
    ]
    # Names that merely begin like one are ports.
    assert errors(cabled([["mac1", "bridgeport1x", "mac2", "en2"], ["mac2", "lom1", "mac3",
                                                                     "en2"]])) == []


def test_a_host_cabled_to_itself():
    assert errors(cabled([["mac2", "en2", "mac2", "en3"]])) == [
        "mac2: thunderbolt_cables entry 1 (mac2 en2 - mac2 en3) cables mac2 to itself — a cable "
        "joins two different hosts: check the host names"
    ]


def test_a_cable_listed_twice_either_way_round():
    assert errors(cabled(RING + [["mac3", "en3", "mac2", "en2"]])) == [
        "cluster: thunderbolt_cables entries 2 and 4 are the same cable (mac3 en3 - mac2 en2) — "
        "list each cable once"
    ]


def test_one_port_in_two_cables():
    assert errors(cabled(RING[:2] + [["mac3", "en3", "mac1", "en3"]])) == [
        "mac3: en3 is in thunderbolt_cables entries 2 and 3 — a port takes one cable: correct "
        "the interface (or host) of one of them"
    ]


def test_the_same_checks_for_discovered_cables():
    assert inv.cable_errors([["mac1", "en6", "mac1", "en6"]], ["mac1"], POOL) == [
        "mac1: thunderbolt_cables entry 1 (mac1 en6 - mac1 en6) cables mac1 to itself — a cable "
        "joins two different hosts: check the host names"
    ]
    assert inv.cable_errors(None, ["mac1"], POOL) == []


def test_cables_are_ignored_in_bridge_mode():
    hostvars = two_macs()
    for hv in hostvars.values():
        hv["thunderbolt_cables"] = [["mac1", "en2", "nowhere", "en3"]]
    assert errors(hostvars) == []


# --- cluster_hosts, launch_host, prefix_to_netmask ---------------------------------------------


def test_cluster_hosts_normalises_in_inventory_order():
    hostvars = {
        "b": {"ansible_host": "198.18.1.2", "ansible_user": "bob", "thunderbolt_ip": "198.19.0.2"},
        "a": {
            "ansible_host": "a.local",
            "mpi_slots": 0,
            "ansible_facts": {
                "hostname": "a",
                "user_id": "alice",
                "default_ipv4": {"address": "198.18.1.1"},
            },
        },  # fmt: skip
        "localhost": {"mpi_slots": "2"},
    }
    assert inv.cluster_hosts(hostvars, ["b", "a", "localhost"]) == [
        {"name": "b", "ansible_host": "198.18.1.2", "user": "bob", "thunderbolt_ip": "198.19.0.2",
         "slots": 1, "mpi_address": "198.19.0.2", "management_ip": "198.18.1.2",
         "hostname": None},
        {"name": "a", "ansible_host": "a.local", "user": "alice", "thunderbolt_ip": None,
         "slots": 0, "mpi_address": "a.local", "management_ip": "198.18.1.1", "hostname": "a"},
        {"name": "localhost", "ansible_host": "localhost", "user": None, "thunderbolt_ip": None,
         "slots": 2, "mpi_address": "localhost", "management_ip": None, "hostname": None},
    ]  # fmt: skip


def test_launch_host_is_the_first_host_with_slots():
    hostvars = two_macs(mac1={"mpi_slots": 0})
    assert inv.launch_host(hostvars, ["mac1", "mac2"]) == "mac2"
    assert inv.launch_host(hostvars, ["mac2", "mac1"]) == "mac2"
    assert inv.launch_host(two_macs(), ["mac1", "mac2"]) == "mac1"


def test_launch_host_none_when_no_host_has_slots():
    assert inv.launch_host({"a": {"mpi_slots": 0}}, ["a"]) is None


@pytest.mark.parametrize(
    ("prefix", "netmask"),
    [(24, "255.255.255.0"), ("16", "255.255.0.0"), (30, "255.255.255.252"), (20, "255.255.240.0")],
)
def test_prefix_to_netmask(prefix, netmask):
    assert inv.prefix_to_netmask(prefix) == netmask


# --- mlx_hostfile, hostname_count_errors -----------------------------------------------


def test_mlx_entries_repeat_hosts_per_slot_and_skip_zero_slots():
    hosts = inv.cluster_hosts(
        two_macs(
            mac1={"mpi_slots": 2}, mac2={"mpi_slots": 0}, mac3={"thunderbolt_ip": "198.19.0.3"}
        ),
        ["mac1", "mac2", "mac3"],
    )
    assert inv.mlx_hostfile(hosts)["hosts"] == [
        {"ssh": "198.19.0.1", "ips": ["198.19.0.1"]},
        {"ssh": "198.19.0.1", "ips": ["198.19.0.1"]},
        {"ssh": "198.19.0.3", "ips": ["198.19.0.3"]},
    ]


def test_mlx_entries_on_the_management_network_keep_logging_in_over_thunderbolt():
    hosts = inv.cluster_hosts(two_macs(mac1={"mpi_slots": 2}), ["mac1", "mac2"])
    assert inv.mlx_hostfile(hosts, network="management")["hosts"] == [
        {"ssh": "198.19.0.1", "ips": ["198.18.1.21"]},
        {"ssh": "198.19.0.1", "ips": ["198.18.1.21"]},
        {"ssh": "198.19.0.2", "ips": ["198.18.1.22"]},
    ]
    assert inv.mlx_hostfile(hosts, network="thunderbolt") == inv.mlx_hostfile(hosts)


def test_mlx_entries_without_an_ip_have_empty_ips():
    hosts = inv.cluster_hosts({"a": {"ansible_host": "a.local"}, "b": {}}, ["a", "b"])
    assert inv.mlx_hostfile(hosts)["hosts"] == [
        {"ssh": "a.local", "ips": []},
        {"ssh": "b", "ips": []},
    ]


def test_mlx_hostfile_is_mlx_launchs_own_format():
    hosts = inv.cluster_hosts({"a": {"ansible_host": "a.local"}, "b": {}}, ["a", "b"])
    hostfile = inv.mlx_hostfile(hosts)
    assert hostfile == {"backend": "ring", "envs": [], "hosts": hostfile["hosts"]}


def test_mlx_entries_of_a_single_host_use_loopback():
    hostvars = {"localhost": {"mpi_slots": 2}, "off": {"mpi_slots": 0}}
    hosts = inv.cluster_hosts(hostvars, ["off", "localhost"])
    assert inv.mlx_hostfile(hosts)["hosts"] == [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2


def _ranked(*specs):
    return [
        {"name": n, "hostname": hn, "slots": s, "mpi_address": f"{n}.addr"} for n, hn, s in specs
    ]


def test_hostname_counts_match():
    hosts = _ranked(("mac1", "studio1", 2), ("mac2", "studio2", 1), ("mac3", "off", 0))
    assert inv.hostname_count_errors("studio1\nstudio2.local\nstudio1\n", hosts) == []


def test_hostname_missing_and_extra_ranks():
    hosts = _ranked(("mac1", "studio1", 2), ("mac2", "studio2", 1))
    assert inv.hostname_count_errors("studio1\nstudio1\nstudio1\n", hosts) == [
        "mac1: mpirun started 3 rank(s) on studio1, expected 2 (mpi_slots) — check that "
        "mac1.addr reaches this host",
        "mac2: mpirun started 0 rank(s) on studio2, expected 1 (mpi_slots) — check that "
        "mac2.addr reaches this host",
    ]


def test_shared_hostname_is_an_error():
    hosts = _ranked(("mac1", "mac", 1), ("mac2", "mac", 1))
    assert inv.hostname_count_errors("mac\nmac\n", hosts) == [
        "mac2: hostname mac is also the hostname of mac1 — give every host its own hostname "
        "(macOS: sudo scutil --set LocalHostName <name>)"
    ]


def test_prefix_from_the_inventory_wins_over_the_default():
    hostvars = two_macs(mac2={"thunderbolt_ip": "198.19.1.2"})
    for hv in hostvars.values():
        hv["thunderbolt_prefix"] = 16
    assert errors(hostvars, prefix=24) == []


def test_hosts_with_different_prefixes():
    hostvars = two_macs(mac1={"thunderbolt_prefix": 24}, mac2={"thunderbolt_prefix": 16})
    assert errors(hostvars) == [
        "mac2: thunderbolt_prefix 16 differs from 24 on mac1 — set thunderbolt_prefix once for "
        "the whole cluster group"
    ]


# --- bad inventories: every value that reaches ~/.ssh files, hostfiles or a command line -------
LONG_LABEL = "m" * 64 + ".local"
LONG_NAME = ".".join(["m" * 60] * 5)
# (host, {var: value}) applied to two_macs(); each case names the host and the field of the one
# message it must produce, and words of its fix.
BAD = {
    "name with spaces and a quote": (
        "Jane's MacBook Pro", {"ansible_host": None, "thunderbolt_ip": "198.19.0.3"},
        "\"Jane's MacBook Pro\": inventory name", "contains a space",
        "use an inventory name like janes-macbook-pro with ansible_host: Janes-MacBook-Pro.local",
    ),
    "name with a space, ansible_host given": (
        "mac 3", {"ansible_host": "198.18.1.23", "thunderbolt_ip": "198.19.0.3"},
        "'mac 3': inventory name", "contains a space", "use an inventory name like mac-3",
    ),
    "name with a double quote": (
        'mac"3', {"ansible_host": "198.18.1.23", "thunderbolt_ip": "198.19.0.3"},
        "'mac\"3': inventory name", "contains a quote", "use an inventory name like mac3",
    ),
    "name with a newline": (
        "mac3\nHost *", {"ansible_host": "198.18.1.23", "thunderbolt_ip": "198.19.0.3"},
        "'mac3\\nHost *': inventory name", "line break", "use an inventory name like mac3-host",
    ),
    "name with a leading hyphen": (
        "-oProxyCommand=x", {"ansible_host": "198.18.1.23", "thunderbolt_ip": "198.19.0.3"},
        "'-oProxyCommand=x': inventory name", "starts with '-'",
        "use an inventory name like oproxycommand-x",
    ),
    "name with an underscore": (
        "mac_3", {"ansible_host": "198.18.1.23", "thunderbolt_ip": "198.19.0.3"},
        "'mac_3': inventory name", "contains '_'", "use an inventory name like mac-3",
    ),
    "name with a 64-character label": (
        LONG_LABEL, {"thunderbolt_ip": "198.19.0.3"}, f"{LONG_LABEL!r}: inventory name",
        "longer than 63", "use an inventory name like",
    ),
    "name longer than 253 characters": (
        LONG_NAME, {"thunderbolt_ip": "198.19.0.3"}, f"{LONG_NAME!r}: inventory name",
        "longer than 253", "use an inventory name like",
    ),
    "name that looks like a bad address": (
        "198.18.1.300", {"thunderbolt_ip": "198.19.0.3"},
        "198.18.1.300: inventory name", "not a valid IPv4 address", "four numbers 0-255",
    ),
    "ansible_host as an ssh option": (
        "mac2", {"ansible_host": "-oProxyCommand=x"},
        "mac2: ansible_host '-oProxyCommand=x'", "starts with '-'", "IPv4 or IPv6 address",
    ),
    "ansible_host with a space": (
        "mac2", {"ansible_host": "mac 2.local"},
        "mac2: ansible_host 'mac 2.local'", "contains a space", "e.g. mac-2.local",
    ),
    "ansible_host with a newline": (
        "mac2", {"ansible_host": "198.18.1.22\nProxyCommand x"},
        "mac2: ansible_host '198.18.1.22\\nProxyCommand x'", "line break", "host name of letters",
    ),
    "ansible_host with a quote": (
        "mac2", {"ansible_host": "mac2'.local"},
        "mac2: ansible_host \"mac2'.local\"", "contains a quote", "e.g. mac2.local",
    ),
    "ansible_host with a comma (a from= list separator)": (
        "mac2", {"ansible_host": "a.local,b.local"},
        "mac2: ansible_host 'a.local,b.local'", "contains ','", "IPv4 or IPv6 address",
    ),
    "ansible_host with a wildcard": (
        "mac2", {"ansible_host": "*.local"},
        "mac2: ansible_host '*.local'", "contains '*'", "IPv4 or IPv6 address",
    ),
    "ansible_host IPv6 with a zone": (
        "mac2", {"ansible_host": "fe80::1%en0"},
        "mac2: ansible_host 'fe80::1%en0'", "contains '%' ':'", "IPv4 or IPv6 address",
    ),
    "ansible_host a bad IPv4 address": (
        "mac1", {"ansible_host": "198.18.1.256"},
        "mac1: ansible_host 198.18.1.256", "not a valid IPv4 address", "four numbers 0-255",
    ),
    "ansible_user with a space": (
        "mac1", {"ansible_user": "Jane Doe"},
        "mac1: ansible_user 'Jane Doe'", "contains a space", "`whoami` on that Mac",
    ),
    "ansible_user as an ssh option": (
        "mac1", {"ansible_user": "-oProxyCommand=x"},
        "mac1: ansible_user '-oProxyCommand=x'", "starts with '-'", "short user name",
    ),
    "ansible_user with a newline": (
        "mac2", {"ansible_user": "jane\nHost *"},
        "mac2: ansible_user 'jane\\nHost *'", "line break", "short user name",
    ),
    "ansible_user with a quote": (
        "mac2", {"ansible_user": 'ja"ne'},
        "mac2: ansible_user 'ja\"ne'", "contains a quote", "short user name",
    ),
    "ansible_user with a shell character": (
        "mac2", {"ansible_user": "jane;id"},
        "mac2: ansible_user 'jane;id'", "contains ';'", "short user name",
    ),
    "ansible_user empty": (
        "mac2", {"ansible_user": ""},
        "mac2: ansible_user ''", "is empty", "short user name",
    ),
    "huge mpi_slots": (
        "mac2", {"mpi_slots": 1000000000},
        "mac2: mpi_slots 1000000000", "more than 256", "0 to 256",
    ),
    "mpi_slots just above the bound": (
        "mac1", {"mpi_slots": "257"},
        "mac1: mpi_slots 257", "more than 256", "0 to 256",
    ),
    "ansible_port out of range": (
        "mac2", {"ansible_port": 70000},
        "mac2: ansible_port 70000", "not a port number", "1 to 65535",
    ),
    "ansible_port not a number": (
        "mac2", {"ansible_port": "22 -oProxyCommand=x"},
        "mac2: ansible_port '22 -oProxyCommand=x'", "not a port number", "1 to 65535",
    ),
    "interface name with a space, on every host": (
        "all", {"thunderbolt_interface": "Thunderbolt Bridge"},
        "cluster: thunderbolt_interface 'Thunderbolt Bridge'", "not an interface name",
        "e.g. bridge0",
    ),
    "interface name as an option, on every host": (
        "all", {"thunderbolt_interface": "-x"},
        "cluster: thunderbolt_interface '-x'", "not an interface name", "ip link",
    ),
    "interface name too long, on every host": (
        "all", {"thunderbolt_interface": "thunderbolt0bridge0"},
        "cluster: thunderbolt_interface 'thunderbolt0bridge0'", "not an interface name",
        "up to 15",
    ),
    "thunderbolt_prefix on the first host only": (
        "mac1", {"thunderbolt_prefix": 16},
        "mac1: thunderbolt_prefix 16", "is set for this host only, while mac2 use the default",
        "set it once under `cluster: vars:`",
    ),
    "thunderbolt_prefix on another host only": (
        "mac2", {"thunderbolt_prefix": 24},
        "mac2: thunderbolt_prefix 24", "is set for this host only, while mac1 use the default",
        "set it once under `cluster: vars:`",
    ),
    "mlx_wired_limit_mb in GB": (
        "mac2", {"mlx_wired_limit_mb": "24GB"},
        "mac2: mlx_wired_limit_mb '24GB'", "not a whole number of megabytes",
        "below the Mac's memory (e.g. 24576 on a 32 GB Mac",
    ),
    "mlx_wired_limit_mb negative": (
        "mac1", {"mlx_wired_limit_mb": -1},
        "mac1: mlx_wired_limit_mb -1", "not a whole number of megabytes", "set 0 to leave",
    ),
    "mlx_wired_limit_mb true": (
        "mac1", {"mlx_wired_limit_mb": True},
        "mac1: mlx_wired_limit_mb True", "not a whole number of megabytes", "set 0 to leave",
    ),
    "macos_pmset as a command line": (
        "mac2", {"macos_pmset": "-a sleep 0"},
        "mac2: macos_pmset '-a sleep 0'", "is not a mapping", "{sleep: 0, disksleep: 0",
    ),
    "macos_pmset with a word for a value": (
        "mac1", {"macos_pmset": {"sleep": "never"}},
        "mac1: macos_pmset 'sleep': 'never'", "not a pmset setting and a whole number",
        "as `pmset -g custom` names them",
    ),
    "macos_pmset setting that is an option": (
        "mac1", {"macos_pmset": {"-b": 0}},
        "mac1: macos_pmset '-b': 0", "not a pmset setting", "mapping of pmset settings",
    ),
    "thunderbolt_interface on one host only": (
        "mac2", {"thunderbolt_interface": "en5"},
        "mac2: thunderbolt_interface en5", "is set for this host only",
        "applies to the whole cluster",
    ),
}


@pytest.mark.parametrize(("host", "values", "subject", "why", "fix"), BAD.values(), ids=BAD)
def test_bad_inventory_names_the_host_the_field_and_the_fix(host, values, subject, why, fix):
    hostvars = two_macs()
    if host == "all":
        for hv in hostvars.values():
            hv.update(values)
    else:
        hostvars.setdefault(host, {}).update(values)
        hostvars[host] = {k: v for k, v in hostvars[host].items() if v is not None}
    [message] = errors(hostvars)
    assert message.startswith(subject), message
    problem, _, remedy = message.partition(" — ")
    assert why in problem, message
    assert fix in remedy, message
    assert "\n" not in message  # one line each, whatever the value


GOOD = {
    "IPv6 ansible_host": {"ansible_host": "2001:db8::22"},
    "unique-local IPv6": {"ansible_host": "fd00::22"},
    "DNS ansible_host": {"ansible_host": "Janes-MacBook-Pro.local"},
    "fully qualified": {"ansible_host": "mac2.lab.example.org"},
    "dotted user": {"ansible_user": "jane.doe"},
    "user with underscore and digits": {"ansible_user": "_mlx_2"},
    "256 slots": {"mpi_slots": 256},
    "port": {"ansible_port": 2222},
    "wired limit": {"mlx_wired_limit_mb": 24576},
    "wired limit from extra vars": {"mlx_wired_limit_mb": "24576"},
    "wired limit left alone": {"mlx_wired_limit_mb": 0},
    "sleep settings": {"macos_pmset": {"sleep": 0, "disksleep": "0", "powernap": 0}},
    "no sleep settings": {"macos_pmset": {}},
}


@pytest.mark.parametrize("values", GOOD.values(), ids=GOOD)
def test_good_values_pass(values):
    assert errors(two_macs(mac2=values)) == []


def test_group_settings_on_every_host_are_fine():
    hostvars = two_macs()
    for hv in hostvars.values():
        hv.update(thunderbolt_prefix=16, thunderbolt_interface="thunderbolt0")
    assert errors(hostvars, prefix=24) == []
    assert inv.cluster_inventory_errors(hostvars, list(hostvars), 24, "bridge0") == []


def test_default_interface_is_checked_when_no_host_sets_one():
    [message] = inv.cluster_inventory_errors(two_macs(), ["mac1", "mac2"], 24, "bad name")
    assert message.startswith("cluster: thunderbolt_interface 'bad name' is not an interface name")


def test_every_bad_value_at_once_one_line_each_in_inventory_order():
    hostvars = {
        "Jane's Mac": {"ansible_user": "jane doe", "mpi_slots": 10**9},
        "mac2": {"ansible_host": "-oProxyCommand=x", "thunderbolt_prefix": 16},
    }
    found = errors(hostvars)
    assert [e.split(" — ")[0].split(" (")[0] for e in found] == [
        "\"Jane's Mac\": inventory name \"Jane's Mac\" is not a valid host name",
        "\"Jane's Mac\": ansible_user 'jane doe' is not a user name",
        "\"Jane's Mac\": mpi_slots 1000000000 is more than 256",
        "mac2: thunderbolt_prefix 16 is set for this host only, while \"Jane's Mac\" use the "
        "default",
        "mac2: ansible_host '-oProxyCommand=x' is neither an IP address nor a DNS name",
    ]

