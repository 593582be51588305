"""Hosts set up on different days get the same versions: python_env installs requirements.lock's,
and train.yml's preflight (and check.yml) names a host whose versions differ anyway.

On the session's cable_ring (3 hosts set up from the wheelhouse; the train cluster's worker is
the busier of `make test`'s two), newer releases of tqdm and mlx-lm are "published"
next to the wheelhouse; then a host is set up again ("next month", a fresh environment) from the
wheelhouse plus those releases. It gets the locked versions, the same as the hosts set up before;
a host whose environment drifted to the newer release is put back by the next run.
"""

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import own_reports
from tests.integration.test_train_playbook import START_TASK, failure_message, train
from tests.unit.plugins import load
from tools.playbook import run_playbook
from tools.wheelhouse import LOCK, ensure_wheelhouse, offline_pip_args

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NEWER = "99.0"
PUBLISHED = ("tqdm", "mlx-lm")  # pure Python, in the lock, installed on every host
LATE_ENV = "{{ cluster_work_dir }}/venv-late"
VERSIONS = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")


def _digest(text: str) -> str:
    """A wheel RECORD's hash: urlsafe base64 of the sha256, without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def publish(directory: Path, name: str, version: str) -> None:
    """A valid (empty) wheel of `name` `version`, as a new release on an index would be."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={_digest(text)},{len(text.encode())}\n"
                     for path, text in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as wheel:
        for path, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            wheel.writestr(path, text)
    (directory / f"{dist}-py3-none-any.whl").chmod(0o644)


def versions(vc, host, env: str) -> dict[str, str]:
    done = vc.run(host, [f"{env}/bin/python", "-c", VERSIONS, *PUBLISHED], user=host.user)
    return json.loads(done.stdout)


def test_a_host_set_up_after_a_newer_release_gets_the_locked_versions(cable_ring, tmp_path):
    vc = cable_ring.vc
    early, late = vc.hosts[0], vc.hosts[-1]
    lock = load("roles/python_env/filter_plugins/lock.py")
    locked = {e["name"]: e["version"] for e in lock.parse_lock(LOCK.read_text())}
    newer = Path(ensure_wheelhouse()).parent / "newer-releases"  # readable by every host
    shutil.rmtree(newer, ignore_errors=True)
    newer.mkdir(mode=0o755)
    for name in PUBLISHED:
        assert locked[name] != NEWER
        publish(newer, name, NEWER)
    late_env = f"{late.home}/mlx-cluster/venv-late"
    pip = f"{late_env}/bin/pip install --no-index --no-deps --find-links={newer}"
    playbook = tmp_path / "python_env.yml"
    playbook.write_text("- name: Set up the late host's environment\n  hosts: cluster\n"
                        "  roles: [python_env]\n")

    def set_up(name):
        extravars = {"cluster_python_env": LATE_ENV,
                     "python_env_pip_extra_args": f"{offline_pip_args()} --find-links={newer}"}
        return run_playbook(str(playbook), vc.inventory, tmp_path / name,
                            extravars=extravars, cmdline=f"--limit {late.name}")

    try:
        first = set_up("first")
        assert first.status == "successful", first.stdout[-4000:]
        assert versions(vc, late, late_env) == {name: locked[name] for name in PUBLISHED}
        assert versions(vc, late, late_env) == versions(vc, early, f"{early.home}/mlx-cluster/venv")
        # The published wheel is a release pip takes when nothing pins it.
        dry = vc.run(late, f"{pip} --dry-run --upgrade tqdm", user=late.user).stdout
        assert f"Would install tqdm-{NEWER}" in dry, dry

        # A host that drifted (someone ran pip install -U there) is put back by the next run.
        vc.run(late, f"{pip} 'tqdm=={NEWER}'", user=late.user)
        assert versions(vc, late, late_env)["tqdm"] == NEWER
        again = set_up("again")
        assert again.status == "successful", again.stdout[-4000:]
        assert (late.name, "Install the locked packages into the virtual environment") \
            in again.changed()
        assert versions(vc, late, late_env)["tqdm"] == locked["tqdm"]
    finally:
        vc.run(late, f"rm -rf {late_env}", user=late.user)
        shutil.rmtree(newer, ignore_errors=True)


def test_preflight_names_a_host_with_another_version_of_a_shared_package(cable_ring, tmp_path):
    """mlx-lm one release older on one host (a host set up on another day): the job is not
    started, and the message names that host and its version."""
    vc = cable_ring.vc
    odd = vc.hosts[2]
    pip = "mlx-cluster/venv/bin/pip install --no-index --no-deps --force-reinstall"
    installed = vc.run(odd, "mlx-cluster/venv/bin/python -c 'import importlib.metadata as m; "
                       "print(m.version(\"mlx-lm\"))'", user=odd.user).stdout.strip()
    older = Path(ensure_wheelhouse()).parent / "older-releases"  # readable by every host
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--dest", str(older), f"mlx-lm<{installed}"],
                   check=True, timeout=300)
    for path in (older, *older.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    vc.run(odd, f"{pip} --find-links={older} 'mlx-lm<{installed}'", user=odd.user)
    try:
        run, _ = train(vc, tmp_path, "odd-version", steps=5)
        check = run_playbook("check.yml", vc.inventory, tmp_path / "check", cmdline="--tags python",
                             extravars=own_reports(tmp_path))
    finally:
        vc.run(odd, f"{pip} --find-links={ensure_wheelhouse()} 'mlx-lm=={installed}'",
               user=odd.user)
    assert run.status == "failed"
    message = failure_message(run)
    assert re.search(rf"mlx-lm differs between hosts \({odd.name}: [0-9.]+; the others: "
                     rf"{re.escape(installed)}\)", message), message
    assert [e for e in run.task_results() if e.get("task") == START_TASK] == []
    # check.yml names the same host and package in report.json
    [facts] = [e["event_data"]["res"]["ansible_facts"] for e in check.events
               if e.get("event") == "runner_on_ok"
               and e["event_data"].get("task") == "Collect the rows of every host"]
    report = json.loads((Path(facts["doctor_run_dir"]) / "report.json").read_text())
    differs = [r for r in report if r["check"] == "python_env" and not r["ok"]]
    assert [r["host"] for r in differs] == [odd.name], report
    assert "+mlx-lm==" in differs[0]["detail"] and f"-mlx-lm=={installed}" in differs[0]["detail"]
    assert "setup.yml" in differs[0]["fix"]
