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
KNOWN = "/home/carol/.ssh/mlx_cluster_known_hosts"


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
    # Over cables: its ends of them, where train.yml's inputs reach it.
    assert mesh.ssh_mesh_names("m1", "198.18.0.11", None, ["198.19.0.1", "198.19.0.5"]) == [
        "m1", "198.18.0.11", "198.19.0.1", "198.19.0.5"]


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


def test_known_hosts_has_one_entry_per_name_and_key_type_marked_with_its_host():
    entries = mesh.ssh_mesh_known_hosts(PEERS, MARKER)
    assert len(entries) == 2 * 3 * 2
    assert {"name": "198.19.0.2", "key": f"198.19.0.2 {ED} {MARKER}@m2"} in entries
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
    block = mesh.ssh_mesh_config_block(PEERS, "/home/carol/.ssh/mlx_cluster_ed25519", KNOWN)
    path.write_text(block + "\nServerAliveInterval 42\nUser someone\n\nHost other\n    Port 2200\n")
    return path


@pytest.mark.parametrize("name", ["m2", "198.18.0.12", "198.19.0.2"])
def test_config_maps_every_name_to_the_peers_user_and_dedicated_key(config, name):
    settings = ssh_settings(config, name)
    assert settings["user"] == ["bob"]
    assert settings["identityfile"] == ["/home/carol/.ssh/mlx_cluster_ed25519"]
    assert settings["identitiesonly"] == ["yes"]
    assert settings["stricthostkeychecking"] == ["true"]
    # The mesh's own pins, and nothing that would write to them.
    assert settings["userknownhostsfile"] == [KNOWN]
    assert settings["checkhostip"] == ["no"]
    assert settings["updatehostkeys"] == ["false"]


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
        [peer("m3.local", "m3.local", port=2222, user="Jane Doe")],
        "/Users/Jane Doe/.ssh/mlx_cluster_ed25519",
        "/Users/Jane Doe/.ssh/mlx_cluster_known_hosts",
    )
    path.write_text(block + "\n")
    assert "HostName" not in block  # the inventory name is already the address
    settings = ssh_settings(path, "m3.local")
    assert settings["identityfile"] == ["/Users/Jane Doe/.ssh/mlx_cluster_ed25519"]
    assert settings["userknownhostsfile"] == ["/Users/Jane Doe/.ssh/mlx_cluster_known_hosts"]
    assert settings["user"] == ["Jane Doe"]
    assert settings["port"] == ["2222"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user", 'jane"\nHost *'),
        ("user", "jane\nProxyCommand x"),
        ("name", "m1\nHost *"),
        ("name", "m*"),
        ("ssh_host", "-oProxyCommand=x"),
        ("ssh_host", "a.local,b.local"),
        ("names", ["m1", "m1 evil"]),
        ("mpi_address", "198.19.0.1\nHost *"),
    ],
)
def test_config_block_refuses_what_would_inject_lines_or_patterns(field, value):
    bad = dict(PEERS[0], **{field: value})
    with pytest.raises(mesh.UnsafeValue):
        mesh.ssh_mesh_config_block([bad], "/home/carol/.ssh/k", KNOWN)


def test_config_block_refuses_a_key_path_with_a_quote():
    with pytest.raises(mesh.UnsafeValue):
        mesh.ssh_mesh_config_block(PEERS, '/home/x"y/.ssh/k', KNOWN)


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


ADDRESSES = ["198.19.0.1", "198.19.0.2", "198.18.0.11", "198.18.0.12"]
OPTIONS = (
    'from="198.19.0.1,198.19.0.2,198.18.0.11,198.18.0.12",'
    "no-agent-forwarding,no-port-forwarding,no-X11-forwarding"
)


def test_authorized_keys_lines_are_restricted_to_the_cluster_and_skip_peers_without_a_key():
    with_key = dict(PEERS[0], public_key=ED + " comment@somewhere")
    entries = mesh.ssh_mesh_authorized_keys([with_key, PEERS[1]], MARKER, ADDRESSES)
    assert entries == [{"name": "m1", "line": f"{OPTIONS} {ED} {MARKER}@m1"}]


def test_authorized_keys_lines_parse_as_openssh_reads_them(tmp_path):
    entries = mesh.ssh_mesh_authorized_keys(
        [dict(PEERS[0], public_key=ED), dict(PEERS[1], public_key=ED)], MARKER, ADDRESSES
    )
    path = tmp_path / "authorized_keys"
    path.write_text("".join(e["line"] + "\n" for e in entries))
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line.split()[-2:] for line in listed] == [
        [f"{MARKER}@m1", "(ED25519)"],
        [f"{MARKER}@m2", "(ED25519)"],
    ]


def test_authorized_keys_need_addresses_and_refuse_non_addresses():
    with pytest.raises(mesh.UnsafeValue):
        mesh.ssh_mesh_authorized_keys([dict(PEERS[0], public_key=ED)], MARKER, [])
    with pytest.raises(ValueError):
        mesh.ssh_mesh_authorized_keys([dict(PEERS[0], public_key=ED)], MARKER, ['1.2.3.4"x'])


def test_addresses_are_the_inventory_addresses_and_a_dns_hosts_own_addresses():
    hostvars = {
        "m1": {"ansible_host": "198.18.0.11", "thunderbolt_ip": "198.19.0.1"},
        "m2": {"ansible_host": "2001:DB8::0012"},
        "m3": {
            "ansible_host": "m3.local",
            "ansible_facts": {
                "all_ipv4_addresses": ["198.18.1.13", "127.0.0.1", "169.254.3.3"],
                "all_ipv6_addresses": ["fe80::1", "fd00::13", "::1"],
            },
        },
        "m4.local": {},  # a DNS name without facts (not in this play): nothing to add
        "198.18.0.15": {"thunderbolt_ip": "198.19.0.5"},
    }
    assert mesh.ssh_mesh_addresses(hostvars, list(hostvars)) == [
        "198.19.0.1", "198.18.0.11", "2001:db8::12", "198.18.1.13", "fd00::13",
        "198.19.0.5", "198.18.0.15",
    ]  # fmt: skip


USER_TEXT = "# mine\r\nssh-ed25519 AAAA me@laptop\n\nssh-rsa BBBB no-newline-at-end"


def line(owner, blob="K"):
    return f"{OPTIONS} ssh-ed25519 {blob} {MARKER}@{owner}"


def test_merged_keeps_the_users_lines_byte_for_byte_and_appends_the_mesh():
    merged = mesh.ssh_mesh_merged(USER_TEXT, [line("m1"), line("m2")], MARKER)
    assert merged == USER_TEXT + "\n" + line("m1") + "\n" + line("m2") + "\n"
    # Again with the same lines: nothing changes (a re-run writes nothing).
    assert mesh.ssh_mesh_merged(merged, [line("m1"), line("m2")], MARKER) == merged
    # No mesh lines: exactly the user's text, even without its final newline.
    assert mesh.ssh_mesh_merged(merged, [], MARKER) == USER_TEXT + "\n"
    assert mesh.ssh_mesh_merged(USER_TEXT, [], MARKER) == USER_TEXT


def test_merged_over_the_whole_cluster_drops_gone_and_rekeyed_hosts():
    before = mesh.ssh_mesh_merged(
        "mine\n", [line("m1", "OLD"), line("m2"), line("m3"), f"x {MARKER}"], MARKER
    )
    after = mesh.ssh_mesh_merged(before, [line("m1", "NEW"), line("m2")], MARKER)
    assert after == "mine\n" + line("m1", "NEW") + "\n" + line("m2") + "\n"


def test_merged_under_limit_replaces_only_the_limited_hosts_lines():
    before = mesh.ssh_mesh_merged("", [line("m1", "OLD"), line("m2"), line("m3")], MARKER)
    after = mesh.ssh_mesh_merged(before, [line("m1", "NEW")], MARKER, replace=["m1"])
    assert after.splitlines() == [line("m2"), line("m3"), line("m1", "NEW")]


def test_merged_own_file_has_the_header_and_the_mesh_only():
    text = mesh.ssh_mesh_merged("stray\n", ["h k v " + MARKER + "@m1"], MARKER, header="# ours")
    assert text == f"# ours\nh k v {MARKER}@m1\n"
    assert mesh.ssh_mesh_merged(text, ["h k v " + MARKER + "@m1"], MARKER, header="# ours") == text


def test_merged_refuses_a_mesh_line_with_a_line_break():
    with pytest.raises(mesh.UnsafeValue):
        mesh.ssh_mesh_merged("", ["ssh-ed25519 K x\nssh-ed25519 EVIL y"], MARKER)
