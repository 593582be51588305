"""The thunderbolt role's report of the ping matrix."""

from tests.unit.plugins import load

ping = load("roles/thunderbolt/filter_plugins/ping.py")


def peer(name, thunderbolt_ip):
    return {"name": name, "thunderbolt_ip": thunderbolt_ip, "mpi_address": thunderbolt_ip}


def test_failures_name_each_pair_with_the_reason():
    results = [
        {"item": peer("mac2", "198.19.0.2"), "rc": 0, "stdout": "1 received"},
        {
            "item": peer("mac3", "198.19.0.3"),
            "rc": 1,
            "cmd": ["ping", "-c", "1", "-W", "2", "-I", "bridge0", "198.19.0.3"],
            "stdout": "PING 198.19.0.3 (198.19.0.3) from 198.19.0.1 bridge0: 56(84) bytes of data."
            "\n\n--- 198.19.0.3 ping statistics ---\n"
            "1 packets transmitted, 0 received, 100% packet loss, time 0ms\n",
            "stderr": "",
        },
        {"item": peer("mac4", "198.19.0.4"), "skipped": True},
    ]
    failures = ping.thunderbolt_ping_failures(results, "mac1")
    assert failures == ["mac1 -> mac3 (198.19.0.3): no reply"]


def test_macos_no_reply():
    # macOS ping exits 2 when nothing came back before -t ran out.
    results = [
        {
            "item": peer("mac2", "198.19.0.2"),
            "rc": 2,
            "cmd": ["ping", "-c", "1", "-t", "2", "-b", "bridge0", "198.19.0.2"],
            "stdout": "PING 198.19.0.2 (198.19.0.2): 56 data bytes\n\n"
            "--- 198.19.0.2 ping statistics ---\n"
            "1 packets transmitted, 0 packets received, 100.0% packet loss\n",
            "stderr": "",
        }
    ]
    failures = ping.thunderbolt_ping_failures(results, "mac1")
    assert failures == ["mac1 -> mac2 (198.19.0.2): no reply"]


def test_other_ping_errors_keep_the_message():
    results = [
        {
            "item": peer("mac2", "198.19.0.2"),
            "rc": 2,
            "cmd": ["ping", "-c", "1", "-W", "2", "-I", "bridge0", "198.19.0.2"],
            "stdout": "",
            "stderr": "ping: SO_BINDTODEVICE bridge0: No such device",
        }
    ]
    assert ping.thunderbolt_ping_failures(results, "mac1") == [
        "mac1 -> mac2 (198.19.0.2): ping: SO_BINDTODEVICE bridge0: No such device"
    ]


def test_no_failures():
    assert ping.thunderbolt_ping_failures([], "mac1") == []


def test_a_ping_the_module_gave_up_on_is_a_failure():
    results = [{"item": peer("mac2", "198.19.0.2"), "rc": -1, "stdout": "", "stderr": "",
                "msg": "no answer within 8 s", "timed_out": True}]
    assert ping.thunderbolt_ping_failures(results, "mac1") == [
        "mac1 -> mac2 (198.19.0.2): no answer within 8 s"
    ]


# --- the cables topology: a ping across each cable ----------------------------------------------


def end(peer, interface, address, peer_interface, peer_address, network):
    return {"interface": interface, "address": address, "prefix": 30, "network": network,
            "peer": peer, "peer_interface": peer_interface, "peer_address": peer_address}


# vc-3's en2 unplugged: iputils on Linux, out of a port without carrier (captured here, in a
# network namespace whose veth peer was down).
NO_CARRIER = {"rc": 1, "stdout": "PING 198.19.3.6 (198.19.3.6) from 198.19.3.5 en3: 56(84) bytes "
              "of data.\n\n--- 198.19.3.6 ping statistics ---\n1 packets transmitted, 0 received, "
              "100% packet loss, time 0ms\n", "stderr": ""}


def test_cable_failures_and_report_name_the_cable_by_both_ends_once():
    vc1 = ping.cable_ping_failures([
        {"item": end("vc-2", "en2", "198.19.3.1", "en2", "198.19.3.2", "198.19.3.0/30"), "rc": 0,
         "stdout": "1 received"},
        {"item": end("vc-3", "en3", "198.19.3.5", "en2", "198.19.3.6", "198.19.3.4/30"),
         **NO_CARRIER},
    ], "vc-1")
    vc3 = ping.cable_ping_failures([
        {"item": end("vc-1", "en2", "198.19.3.6", "en3", "198.19.3.5", "198.19.3.4/30"),
         "rc": 2, "stdout": "", "stderr": "ping: connect: Network is unreachable"},
    ], "vc-3")
    assert vc1 == [{"network": "198.19.3.4/30",
                    "ends": [["vc-1", "en3", "198.19.3.5"], ["vc-3", "en2", "198.19.3.6"]],
                    "direction": "vc-1 -> vc-3", "reason": "no reply"}]
    assert vc3[0]["ends"] == vc1[0]["ends"]  # the same cable seen from its other end
    assert ping.cable_ping_report(vc3 + vc1) == [
        "vc-1 en3 198.19.3.5 - vc-3 en2 198.19.3.6 (198.19.3.4/30): vc-1 -> vc-3: no reply; "
        "vc-3 -> vc-1: ping: connect: Network is unreachable"
    ]


def test_cable_report_lists_cables_in_address_order():
    broken = [
        {"network": net, "ends": [["a", "en2", f"{net[:-4]}{int(net.split('.')[3][:-3]) + 1}"],
                                  ["b", "en2", "x"]],
         "direction": "a -> b", "reason": "no reply"}
        for net in ("198.19.3.100/30", "198.19.3.8/30")
    ]
    assert [line.split("(")[1].split(")")[0] for line in ping.cable_ping_report(broken)] == [
        "198.19.3.8/30", "198.19.3.100/30"]


def test_no_cable_failures():
    assert ping.cable_ping_failures([], "vc-1") == []
    assert ping.cable_ping_report([]) == []
