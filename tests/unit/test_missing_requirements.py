"""roles/python_env/files/missing_requirements.py against this environment's real packages."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "roles/python_env/files/missing_requirements.py"


def missing(*specs):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text(), *specs],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


def test_installed_packages_are_not_missing():
    assert missing("pytest", "mlx", "jinja2>=3", "PyYAML") == []


def test_absent_package_or_version_is_missing():
    specs = ["no-such-distribution-here", "pytest<1"]
    assert missing(*specs) == specs


def test_an_extra_needs_the_packages_it_adds():
    # mlx[cpu] adds mlx-cpu on Linux (installed here); mlx[cuda13] adds mlx-cuda-13 (not installed).
    assert missing("mlx[cpu]", "mlx[cuda13]") == ["mlx[cuda13]"]


def test_a_requirement_for_another_platform_is_satisfied():
    assert missing('no-such-distribution-here; sys_platform == "win32"') == []


def test_an_environment_without_packaging_installs_everything(tmp_path):
    """A fresh environment (pip only): the script says so by its exit code, no private pip API."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "env"], check=True)
    done = subprocess.run([tmp_path / "env/bin/python", "-c", SCRIPT.read_text(), "mlx"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no packaging" in done.stderr, done
    assert "pip._vendor" not in SCRIPT.read_text()
