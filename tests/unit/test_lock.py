"""requirements.lock, the one lock every install uses, and the host share python_env takes from it.

roles/python_env/filter_plugins/lock.py reads the lock for the hosts (and tools/wheelhouse.py
through it); requirements.yml pins the collections the locked `ansible` package bundles.
"""

import json
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from packaging.requirements import Requirement

from tests.unit.plugins import load

ROOT = Path(__file__).resolve().parents[2]
LOCK = (ROOT / "requirements.lock").read_text()
lock = load("roles/python_env/filter_plugins/lock.py")


def default_packages(system):
    """python_env_packages as the role's defaults render them on `system` (Linux, Darwin)."""
    defaults = yaml.safe_load((ROOT / "roles/python_env/defaults/main.yml").read_text())
    facts = {"ansible_facts": {"system": system}}
    return [jinja2.Template(item).render(facts) for item in defaults["python_env_packages"]]


def pins():
    return {lock.normalize(e["name"]): e["version"] for e in lock.parse_lock(LOCK)}


def test_every_requirement_is_pinned_with_hashes_at_a_version_it_allows():
    locked = pins()
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            wanted = Requirement(line)
            name = lock.normalize(wanted.name)
            assert name in locked, f"{wanted.name} is not in requirements.lock: run make lock"
            assert wanted.specifier.contains(locked[name], prereleases=True), (wanted, locked[name])
    assert all(entry["hashes"] for entry in lock.parse_lock(LOCK))


def test_one_version_of_each_package_for_every_python_and_platform():
    names = [lock.normalize(entry["name"]) for entry in lock.parse_lock(LOCK)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("system", ["Linux", "Darwin"])
def test_a_host_gets_its_packages_and_their_dependencies_pinned_and_hashed(system):
    share = lock.python_env_locked(LOCK, default_packages(system))
    by_name = {lock.normalize(entry["name"]): entry for entry in share}
    locked = pins()
    # The roots, what mlx pulls in on each platform, and dependencies of dependencies.
    for name in ("mlx", "mlx-lm", "mpi4py", "mlx-cpu", "mlx-metal", "transformers", "numpy",
                 "scipy", "tokenizers"):
        assert by_name[name]["version"] == locked[name], name
    mlx = "mlx[cpu]" if system == "Linux" else "mlx"
    assert by_name["mlx"]["requirement"].startswith(f"{mlx}=={locked['mlx']}")
    assert by_name["mlx-cpu"]["requirement"].endswith("; sys_platform == 'linux'")
    # The controller's tools stay on the controller.
    assert not {"ansible-core", "ansible-lint", "pytest", "uv", "ruff"} & set(by_name)
    for entry in share:
        assert entry["line"].startswith(entry["requirement"] + " --hash=sha256:"), entry["name"]
        # What missing_requirements.py parses on the host: a pin, with the lock's marker.
        assert str(Requirement(entry["requirement"]).specifier) == f"=={entry['version']}"


def test_a_package_the_lock_does_not_pin_is_refused():
    with pytest.raises(AnsibleFilterError, match="no-such-package .*not in requirements.lock"):
        lock.python_env_locked(LOCK, ["mlx-lm", "no-such-package"])


def test_a_version_the_lock_does_not_pin_is_refused():
    with pytest.raises(AnsibleFilterError, match="mlx-lm<0.1.*requirements.lock pins mlx-lm=="):
        lock.python_env_locked(LOCK, ["mlx-lm<0.1"])
    assert lock.python_env_locked(LOCK, [f"tqdm=={pins()['tqdm']}"])[-1]["name"] == "tqdm"


def test_requirements_yml_pins_the_collections_the_locked_ansible_bundles():
    """Equal versions: `make collections` changes nothing, and ansible-lint, which installs
    requirements.yml, finds them installed without asking galaxy.ansible.com."""
    wanted = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    # The `ansible` package's (the project's root has its own collection, mlx_cluster).
    site = Path(next(p for p in sys.path if (Path(p) / "ansible_collections/community").is_dir()))
    for collection in wanted:
        namespace, name = collection["name"].split(".")
        manifest = site / "ansible_collections" / namespace / name / "MANIFEST.json"
        bundled = json.loads(manifest.read_text())["collection_info"]["version"]
        assert collection["version"] == bundled, collection["name"]
