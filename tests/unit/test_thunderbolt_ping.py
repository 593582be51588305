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
