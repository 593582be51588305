"""Molecule's virtual-cluster scenario, four-users: converge, idempotence, verify. It is the one:
test_setup.py proves setup and its re-run on 2 hosts, and four-users' verify.yml includes the
shared checks (molecule/shared/verify.yml)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_molecule_scenario_four_users():
    venv_bin = Path(sys.executable).parent  # molecule calls ansible-config and friends by name
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    # The scenarios' shared base config, named: Molecule finds it by itself only in a VCS checkout.
    base = ["--base-config", str(ROOT / ".config/molecule/config.yml")]
    result = subprocess.run(
        [str(venv_bin / "molecule"), *base, "test", "--scenario-name", "four-users"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1400,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    # The idempotence step ran and found nothing to change on the second converge.
    assert "idempotence" in output.lower()
