"""setup.yml driven through ansible-runner: check mode, the fresh install from the wheelhouse,
idempotence, a sudo password (-K), on the session's fresh_install (tests/integration/conftest.py:
4 hosts, a login of its own on each, set up from nothing). Bad inventories: test_bad_input.py."""

import textwrap

import pytest

from tests.integration.conftest import BECOME_PASSWORD, SUDO_PASSWORD
from tools.playbook import run_playbook


@pytest.mark.cluster
@pytest.mark.slow
def test_check_mode_then_setup_then_rerun_changes_nothing_also_with_a_sudo_password(
        fresh, tmp_path):
    vc = fresh.vc

    check = fresh.check
    assert check.status == "successful", check.stdout[-6000:]
    for host in vc.hosts:  # check mode left bridge0 without an address
        assert "inet " not in fresh.bridge0_after_check[host.name]

    first = fresh.first
    assert first.status == "successful", first.stdout[-6000:]
    assert first.changed(), "a fresh cluster needs changes"

    second = fresh.second  # with a sudo password, given to -K
    assert second.status == "successful", second.stdout[-6000:]
    assert second.changed() == [], textwrap.indent(str(second.changed()), "  ")
    assert set(second.stats["changed"].values()) <= {0}

    # Without -K a clear error; with it a change that needs sudo: a lost Thunderbolt address
    # put back (the thunderbolt role alone: every become task ran with -K above).
    vc.sudo_password(SUDO_PASSWORD)
    try:
        host = vc.hosts[0]
        vc.run(host.name, "ip addr flush dev bridge0")
        refused = run_playbook("setup.yml", vc.inventory, tmp_path / "no-password",
                               cmdline="--tags thunderbolt")
        assert refused.status == "failed"
        messages = " ".join(refused.failure_messages())
        assert "password" in messages.lower(), messages
        asked = run_playbook("setup.yml", vc.inventory, tmp_path / "ask-become-pass",
                             cmdline="--tags thunderbolt --ask-become-pass",
                             passwords=BECOME_PASSWORD)
        assert asked.status == "successful", asked.stdout[-6000:]
        assert {h for h, _ in asked.changed()} == {host.name}, asked.changed()
        address = vc.run(host.name, "ip -4 addr show dev bridge0").stdout
        assert f"inet {host.thunderbolt_ip}/" in address
    finally:
        vc.sudo_password(None)
