"""Molecule's virtual-cluster scenario, four-users, on the session's fresh_install, which has its
shape (tests/integration/conftest.py): the fixture's fresh setup.yml and its re-run are the
scenario's converge and idempotence (test_setup.py asserts them), and here its verify playbook:
the shared checks (molecule/shared/verify.yml) and the main job on Open MPI 5, which no other
cluster test trains on. `molecule test -s four-users` runs the same on a cluster of its own."""

import pytest

from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_molecule_four_users_verify_passes_on_the_fresh_install(fresh, tmp_path, monkeypatch):
    # verify.yml writes and reads the run where Molecule would keep it.
    monkeypatch.setenv("MOLECULE_EPHEMERAL_DIRECTORY", str(tmp_path))
    verify = run_playbook("molecule/four-users/verify.yml", fresh.vc.inventory, tmp_path / "verify")
    assert verify.status == "successful", verify.stdout[-8000:]
    assert (tmp_path / "runs" / "molecule" / "summary.json").exists()
