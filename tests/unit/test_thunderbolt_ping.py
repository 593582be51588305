"""Ping matrix helpers of the thunderbolt role."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

_PLUGIN = Path(__file__).parents[2] / "roles/thunderbolt/filter_plugins/ping.py"
_spec = importlib.util.spec_from_file_location("thunderbolt_ping", _PLUGIN)
ping = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ping)


def test_linux_binds_to_the_interface_and_waits_seconds():
    assert ping.thunderbolt_ping_argv("Linux", "bridge0", "198.19.0.2", 2) == [
        "ping", "-c", "1", "-W", "2", "-I", "bridge0", "198.19.0.2",
    ]  # fmt: skip


def test_macos_binds_with_b_and_times_out_with_t():
    # macOS ping: -b boundif binds the socket, -t is the timeout in seconds, -W is in ms.
    assert ping.thunderbolt_ping_argv("Darwin", "bridge0", "198.19.0.2", "3") == [
        "ping", "-c", "1", "-t", "3", "-b", "bridge0", "198.19.0.2",
    ]  # fmt: skip


def test_unknown_system_is_an_error():
    with pytest.raises(ValueError, match="FreeBSD"):
        ping.thunderbolt_ping_argv("FreeBSD", "bridge0", "198.19.0.2")


def test_linux_argv_is_accepted_by_this_machines_ping():
    # Loopback only: proves the flags parse (a bad flag exits 2 with a usage message).
    argv = ping.thunderbolt_ping_argv("Linux", "lo", "127.0.0.1", 1)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_failures_name_each_pair_with_the_reason():
    results = [
        {"item": "mac2", "rc": 0, "cmd": ["ping", "198.19.0.2"], "stdout": "1 received"},
        {
            "item": "mac3",
            "rc": 1,
            "cmd": ["ping", "-c", "1", "-W", "2", "-I", "bridge0", "198.19.0.3"],
            "stdout": "PING 198.19.0.3 (198.19.0.3) from 198.19.0.1 bridge0: 56(84) bytes of data."
            "\n\n--- 198.19.0.3 ping statistics ---\n"
            "1 packets transmitted, 0 received, 100% packet loss, time 0ms\n",
            "stderr": "",
        },
        {"item": "mac4", "skipped": True},
    ]
    failures = ping.thunderbolt_ping_failures(results, "mac1")
    assert failures == ["mac1 -> mac3 (198.19.0.3): no reply"]


def test_macos_no_reply():
    # macOS ping exits 2 when nothing came back before -t ran out.
    results = [
        {
            "item": "mac2",
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
            "item": "mac2",
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


def test_commands_ping_each_peer_at_its_thunderbolt_ip():
    hostvars = {"mac2": {"thunderbolt_ip": "198.19.0.2"}, "mac3": {"thunderbolt_ip": "198.19.0.3"}}
    commands = ping.thunderbolt_ping_commands(["mac2", "mac3"], hostvars, "Darwin", "bridge0", 2)
    assert commands == [
        {"item": "mac2", "argv": ping.thunderbolt_ping_argv("Darwin", "bridge0", "198.19.0.2", 2)},
        {"item": "mac3", "argv": ping.thunderbolt_ping_argv("Darwin", "bridge0", "198.19.0.3", 2)},
    ]


def test_a_ping_the_module_gave_up_on_is_a_failure():
    results = [{"item": "mac2", "rc": -1, "cmd": ["ping", "198.19.0.2"], "stdout": "",
                "stderr": "", "msg": "no answer within 8 s"}]  # fmt: skip
    assert ping.thunderbolt_ping_failures(results, "mac1") == [
        "mac1 -> mac2 (198.19.0.2): no answer within 8 s"
    ]
