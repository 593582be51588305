"""The code passes its linters: ruff, and ansible-lint with the production profile."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_linter(*argv: str) -> subprocess.CompletedProcess:
    tool = BIN / argv[0]
    if not tool.exists() and not shutil.which(argv[0]):
        pytest.fail(f"{argv[0]} is not installed: pip install -r requirements.txt")
    # stdin from /dev/null: ansible refuses a non-blocking stdin, and an earlier in-process
    # import of ansible (tests/unit/test_templates.py) can leave pytest's stdin that way.
    return subprocess.run(
        [str(tool) if tool.exists() else argv[0], *argv[1:]],
        cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )


def test_ruff_is_clean():
    result = run_linter("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_production_profile_is_clean():
    result = run_linter("ansible-lint", "--profile", "production", "--nocolor")
    assert result.returncode == 0, result.stdout + result.stderr
