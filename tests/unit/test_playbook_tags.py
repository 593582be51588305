"""--tags: setup.yml has one tag per role, check.yml one per check group (docs/setup.md: Tags).

ansible-playbook --list-tags parses the playbooks and contacts no host."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Gathering facts is tagged always by Ansible itself; validate and reach are always by choice.
SETUP_PLAYS = [{"always", "validate"}] + [
    {"always", role}
    for role in ("openmpi", "thunderbolt", "ssh_mesh", "python_env", "macos", "hostfiles")]
CHECK_PLAYS = [
    {"always", "inventory", "reach", "openmpi", "hostfiles", "thunderbolt", "cables", "ssh",
     "python", "mpi", "macos"},
    {"always"},  # the report, written for whichever groups ran
]


def play_tags(playbook):
    # stdin: an earlier in-process ansible import can leave the inherited one non-blocking
    run = subprocess.run(
        [Path(sys.executable).parent / "ansible-playbook", "-i", "inventory/hosts.yml", playbook,
         "--list-tags"],
        cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    return [set(filter(None, tags.split(", "))) for tags in re.findall(r"TASK TAGS: \[(.*)\]", out)]


@pytest.mark.parametrize(("playbook", "expected"), [("setup.yml", SETUP_PLAYS),
                                                    ("check.yml", CHECK_PLAYS)])
def test_list_tags_shows_one_tag_per_role_or_check_group(playbook, expected):
    assert play_tags(playbook) == expected
