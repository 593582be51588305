"""roles/python_env/filter_plugins/python_env.py: syncing the train package without caches."""

import hashlib

import pytest

from tests.unit.plugins import load

python_env = load("roles/python_env/filter_plugins/python_env.py")

DEST = "/home/u/mlx-cluster/src/train"


@pytest.fixture
def tree(tmp_path):
    """A controller package as community.general.filetree lists it, caches included."""
    (tmp_path / "models").mkdir()
    (tmp_path / "__pycache__").mkdir()
    files = {"__init__.py": "", "loop.py": "print('loop')\n", "models/mlp.py": "MLP = 1\n"}
    files["__pycache__/loop.cpython-311.pyc"] = "bytecode"
    items = [
        {"path": name, "state": "directory", "src": str(tmp_path / name)}
        for name in ("models", "__pycache__")
    ]
    for relpath, text in files.items():
        (tmp_path / relpath).write_text(text)
        items.append({"path": relpath, "state": "file", "src": str(tmp_path / relpath)})
    return items


def found(relpath, text=None):
    """One ansible.builtin.find entry for DEST/relpath (a directory when text is None)."""
    entry = {"path": f"{DEST}/{relpath}", "isdir": text is None}
    if text is not None:
        entry["checksum"] = hashlib.sha1(text.encode()).hexdigest()
    return entry


def test_fresh_host_gets_everything_but_caches(tree):
    plan = python_env.python_env_sync_plan(
        tree, {"files": [], "skipped_paths": {DEST: "not a directory"}}, DEST
    )
    assert plan["directories"] == [DEST, f"{DEST}/models"]
    assert [item["dest"] for item in plan["files"]] == [
        f"{DEST}/__init__.py",
        f"{DEST}/loop.py",
        f"{DEST}/models/mlp.py",
    ]
    assert plan["obsolete"] == []


def test_up_to_date_host_needs_nothing_even_with_its_own_caches(tree):
    remote = [
        found("models"),
        found("__init__.py", ""),
        found("loop.py", "print('loop')\n"),
        found("models/mlp.py", "MLP = 1\n"),
        found("__pycache__"),
        found("__pycache__/loop.cpython-311.pyc", "other bytecode"),
    ]
    plan = python_env.python_env_sync_plan(tree, {"files": remote}, DEST + "/")
    assert plan == {"directories": [], "files": [], "obsolete": []}


def test_changed_file_is_copied_and_removed_file_is_deleted(tree):
    remote = [
        found("models"),
        found("__init__.py", ""),
        found("loop.py", "print('old loop')\n"),
        found("models/mlp.py", "MLP = 1\n"),
        found("old.py", "gone\n"),
    ]
    plan = python_env.python_env_sync_plan(tree, {"files": remote}, DEST)
    assert plan["files"] == [{"src": tree[3]["src"], "dest": f"{DEST}/loop.py"}]
    assert plan["obsolete"] == [f"{DEST}/old.py"]
    assert plan["directories"] == []
