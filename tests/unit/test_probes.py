"""roles/cluster/filter_plugins/probes.py: the ping and SSH matrices' commands."""

import subprocess

import pytest

from tests.unit.plugins import load

probes = load("roles/cluster/filter_plugins/probes.py")

MAC2 = {"name": "mac2", "thunderbolt_ip": "198.19.0.2", "mpi_address": "198.19.0.2"}
MAC3 = {"name": "mac3", "thunderbolt_ip": "198.19.0.3", "mpi_address": "198.19.0.3"}


def test_linux_binds_to_the_interface_and_waits_seconds():
    assert probes.ping_argv("Linux", "bridge0", "198.19.0.2", 2) == [
        "ping", "-c", "1", "-W", "2", "-I", "bridge0", "198.19.0.2",
    ]  # fmt: skip


def test_macos_binds_with_b_and_times_out_with_t():
    # macOS ping: -b boundif binds the socket, -t is the timeout in seconds, -W is in ms.
    assert probes.ping_argv("Darwin", "bridge0", "198.19.0.2", "3") == [
        "ping", "-c", "1", "-t", "3", "-b", "bridge0", "198.19.0.2",
    ]  # fmt: skip


def test_unknown_system_is_an_error():
    with pytest.raises(ValueError, match="FreeBSD"):
        probes.ping_argv("FreeBSD", "bridge0", "198.19.0.2")


def test_linux_argv_is_accepted_by_this_machines_ping():
    # Loopback only: proves the flags parse (a bad flag exits 2 with a usage message).
    argv = probes.ping_argv("Linux", "lo", "127.0.0.1", 1)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_ping_commands_ping_each_host_at_its_thunderbolt_ip():
    assert probes.ping_commands([MAC2, MAC3], "Darwin", "bridge0", 2) == [
        {"item": MAC2, "argv": probes.ping_argv("Darwin", "bridge0", "198.19.0.2", 2)},
        {"item": MAC3, "argv": probes.ping_argv("Darwin", "bridge0", "198.19.0.3", 2)},
    ]


def test_cable_ping_commands_ping_each_peer_out_of_the_cables_own_port():
    ends = [{"interface": "en2", "address": "10.213.0.1", "peer": "mac2",
             "peer_interface": "en3", "peer_address": "10.213.0.2"},
            {"interface": "en3", "address": "10.213.0.5", "peer": "mac3",
             "peer_interface": "en2", "peer_address": "10.213.0.6"}]
    assert probes.cable_ping_commands(ends, "Linux", 2) == [
        {"item": ends[0], "argv": ["ping", "-c", "1", "-W", "2", "-I", "en2", "10.213.0.2"]},
        {"item": ends[1], "argv": ["ping", "-c", "1", "-W", "2", "-I", "en3", "10.213.0.6"]},
    ]
    assert probes.cable_ping_commands(ends[:1], "Darwin", 2)[0]["argv"] == [
        "ping", "-c", "1", "-t", "2", "-b", "en2", "10.213.0.2"]


def test_ssh_commands_log_in_like_open_mpi_over_the_mpi_address():
    assert probes.ssh_commands([MAC2], "5") == [{"item": MAC2, "argv": [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=2",
        "198.19.0.2", "hostname",
    ]}]  # fmt: skip


def test_ssh_argv_is_accepted_by_this_machines_ssh():
    # ssh -G parses the options and prints the configuration without connecting.
    argv = probes.ssh_commands([MAC2], 5)[0]["argv"]
    done = subprocess.run([argv[0], "-G", *argv[1:-1]], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "batchmode yes" in done.stdout and "stricthostkeychecking true" in done.stdout
