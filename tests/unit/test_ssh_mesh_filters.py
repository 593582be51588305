"""roles/ssh_mesh/filter_plugins/ssh_mesh.py: names, known_hosts entries, the ~/.ssh/config
block (checked with the real `ssh -G` / `ssh-keygen -F`) and the verification report."""

import subprocess
from pathlib import Path

import pytest

from tests.unit.plugins import load

mesh = load("roles/ssh_mesh/filter_plugins/ssh_mesh.py")

ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
ECDSA = (
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy"
    "7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w5WIZNBw3rqbg0Gc="
)
MARKER = "mlx-cluster-ssh-mesh"


def peer(name, ssh_host, tb=None, user="alice", port=22, nodename=None):
    return {
        "name": name,
        "names": mesh.ssh_mesh_names(name, ssh_host, tb),
        "ssh_host": ssh_host,
        "mpi_address": tb or ssh_host,
        "port": port,
        "user": user,
        "nodename": nodename or name,
        "host_keys": [ED, ECDSA],
        "public_key": "",
    }


PEERS = [
    peer("m1", "198.18.0.11", "198.19.0.1", user="alice"),
    peer("m2", "198.18.0.12", "198.19.0.2", user="bob"),
]


def test_names_are_inventory_name_then_addresses_without_duplicates_or_blanks():
    assert mesh.ssh_mesh_names("m1", "198.18.0.11", "198.19.0.1") == [
        "m1", "198.18.0.11", "198.19.0.1",
    ]  # fmt: skip
    assert mesh.ssh_mesh_names("m1.local", "m1.local", None) == ["m1.local"]
    assert mesh.ssh_mesh_names("m1", None, "") == ["m1"]


def test_host_keys_come_from_facts_in_the_wanted_order_and_types():
    facts = {
        "ssh_host_key_ed25519_public": ED.split()[1],
        "ssh_host_key_ed25519_public_keytype": "ssh-ed25519",
        "ssh_host_key_rsa_public": "AAAAB3Nza",
        "ssh_host_key_rsa_public_keytype": "ssh-rsa",
    }
    assert mesh.ssh_mesh_host_keys(facts, ["ed25519", "ecdsa"]) == [ED]
    assert mesh.ssh_mesh_host_keys(facts, ["rsa", "ed25519"]) == ["ssh-rsa AAAAB3Nza", ED]
    assert mesh.ssh_mesh_host_keys({}, ["ed25519"]) == []


def test_known_hosts_has_one_marked_entry_per_name_and_key_type():
    entries = mesh.ssh_mesh_known_hosts(PEERS, MARKER)
    assert len(entries) == 2 * 3 * 2
    assert {"name": "198.19.0.2", "key": f"198.19.0.2 {ED} {MARKER}"} in entries
    assert all(e["key"].startswith(e["name"] + " ") for e in entries)


def test_known_hosts_names_are_lowercase_and_bracketed_for_other_ports():
    entries = mesh.ssh_mesh_known_hosts([peer("Mac-A", "198.18.0.11", port=2222)], MARKER)
    assert [e["name"] for e in entries] == ["[mac-a]:2222"] * 2 + ["[198.18.0.11]:2222"] * 2


def test_known_hosts_entries_are_found_by_ssh_keygen(tmp_path):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        "".join(e["key"] + "\n" for e in mesh.ssh_mesh_known_hosts(PEERS, MARKER))
    )
    for name in ("m2", "198.18.0.12", "198.19.0.2"):
        found = subprocess.run(
            ["ssh-keygen", "-F", name, "-f", str(known_hosts)], capture_output=True, text=True
        )
        assert found.returncode == 0
        assert ED.split()[1] in found.stdout and ECDSA.split()[1] in found.stdout


def ssh_settings(config: Path, host: str) -> dict:
    """What the real ssh client would use for `host` with this config file."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True
    ).stdout
    settings = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        settings.setdefault(key, []).append(value)
    return settings


@pytest.fixture
def config(tmp_path):
    """The block at the top of a user's config that has global lines before any Host."""
    path = tmp_path / "config"
    block = mesh.ssh_mesh_config_block(PEERS, "/home/carol/.ssh/mlx_cluster_ed25519")
    path.write_text(block + "\nServerAliveInterval 42\nUser someone\n\nHost other\n    Port 2200\n")
    return path


@pytest.mark.parametrize("name", ["m2", "198.18.0.12", "198.19.0.2"])
def test_config_maps_every_name_to_the_peers_user_and_dedicated_key(config, name):
    settings = ssh_settings(config, name)
    assert settings["user"] == ["bob"]
    assert settings["identityfile"] == ["/home/carol/.ssh/mlx_cluster_ed25519"]
    assert settings["identitiesonly"] == ["yes"]
    assert settings["stricthostkeychecking"] == ["true"]


def test_config_inventory_name_goes_to_ansible_host_and_addresses_stay_themselves(config):
    assert ssh_settings(config, "m1")["hostname"] == ["198.18.0.11"]
    assert ssh_settings(config, "198.19.0.1")["hostname"] == ["198.19.0.1"]


def test_users_global_lines_after_the_block_still_apply_everywhere(config):
    other = ssh_settings(config, "other")
    assert other["serveraliveinterval"] == ["42"]
    assert other["user"] == ["someone"]
    assert other["port"] == ["2200"]
    assert ssh_settings(config, "m1")["serveraliveinterval"] == ["42"]


def test_config_quotes_paths_with_spaces_and_sets_other_ports(tmp_path):
    path = tmp_path / "config"
    block = mesh.ssh_mesh_config_block(
        [peer("m3.local", "m3.local", port=2222)], "/Users/Jane Doe/.ssh/mlx_cluster_ed25519"
    )
    path.write_text(block + "\n")
    assert "HostName" not in block  # the inventory name is already the address
    settings = ssh_settings(path, "m3.local")
    assert settings["identityfile"] == ["/Users/Jane Doe/.ssh/mlx_cluster_ed25519"]
    assert settings["port"] == ["2222"]


def probe(item, rc, stdout="", stderr=""):
    return {"item": item, "rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}


def test_probe_failures_name_each_pair_with_the_last_error_line():
    m1, m2 = PEERS
    probes = {
        "m1": {"results": [probe(m2, 255, stderr="@@@ WARNING\nHost key verification failed.\n")]},
        "m2": {"results": [probe(m1, 0, stdout="m1\n")]},
    }
    assert mesh.ssh_mesh_probe_failures(probes) == [
        "m1 -> m2 (198.19.0.2): Host key verification failed."
    ]


def test_probe_that_reaches_the_wrong_host_fails():
    m1, m2 = PEERS
    probes = {"m1": {"results": [probe(m2, 0, stdout="m1\n")]}}
    assert mesh.ssh_mesh_probe_failures(probes) == [
        "m1 -> m2 (198.19.0.2): logged in to 'm1', expected 'm2'"
    ]


def test_skipped_and_successful_probes_are_not_failures():
    m1, m2 = PEERS
    probes = {
        "m1": {"results": [probe(m2, 0, stdout="M2\n")]},
        "m2": {"results": [{"item": m1, "skipped": True}]},
        "m3": {"skipped": True},
    }
    assert mesh.ssh_mesh_probe_failures(probes) == []


def test_authorized_keys_entries_skip_peers_without_a_key_yet():
    with_key = dict(PEERS[0], public_key=ED)
    entries = mesh.ssh_mesh_authorized_keys([with_key, PEERS[1]], MARKER)
    assert entries == [{"name": "m1", "line": f"{ED} {MARKER}@m1"}]


def test_missing_keeps_only_entries_whose_line_is_not_in_the_file():
    entries = mesh.ssh_mesh_known_hosts(PEERS[:1], MARKER)
    text = "# user's own\n" + entries[0]["key"] + "  \n" + entries[2]["key"] + "\n"
    missing = mesh.ssh_mesh_missing(entries, text, "key")
    assert missing == [e for i, e in enumerate(entries) if i not in (0, 2)]
    assert mesh.ssh_mesh_missing(entries, "", "key") == entries

