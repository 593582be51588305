"""roles/python_env/filter_plugins/python_env.py: syncing the train package without caches.

The plan compares two tree_digest maps (roles/cluster/filter_plugins/tree.py), built here from
ansible.builtin.find entries as roles/cluster/tasks/train_tree.yml builds them.
"""

import hashlib

import pytest

from tests.unit.plugins import load

python_env = load("roles/python_env/filter_plugins/python_env.py")
tree_digest = load("roles/cluster/filter_plugins/tree.py").tree_digest

SRC = "/ctl/train"
DEST = "/home/u/mlx-cluster/src/train"


def found(root, relpath, text=None):
    """One ansible.builtin.find entry for root/relpath (a directory when text is None)."""
    entry = {"path": f"{root}/{relpath}", "isdir": text is None}
    if text is not None:
        entry["checksum"] = hashlib.sha1(text.encode()).hexdigest()
    return entry


@pytest.fixture
def reference():
    """The controller's package as train_tree.yml digests it, caches included in the listing."""
    entries = [found(SRC, "models"), found(SRC, "__pycache__"), found(SRC, "__init__.py", ""),
               found(SRC, "loop.py", "print('loop')\n"), found(SRC, "models/mlp.py", "MLP = 1\n"),
               found(SRC, "__pycache__/loop.cpython-311.pyc", "bytecode")]
    return tree_digest(entries, SRC)


def plan(reference, remote, missing=False):
    return python_env.python_env_sync_plan(reference, tree_digest(remote, DEST), SRC, DEST,
                                           missing)


def test_fresh_host_gets_everything_but_caches(reference):
    result = plan(reference, [], missing=True)
    assert result["directories"] == [DEST, f"{DEST}/models"]
    assert [item["dest"] for item in result["files"]] == [
        f"{DEST}/__init__.py",
        f"{DEST}/loop.py",
        f"{DEST}/models/mlp.py",
    ]
    assert result["files"][1]["src"] == f"{SRC}/loop.py"
    assert result["obsolete"] == []


def test_up_to_date_host_needs_nothing_even_with_its_own_caches(reference):
    remote = [
        found(DEST, "models"),
        found(DEST, "__init__.py", ""),
        found(DEST, "loop.py", "print('loop')\n"),
        found(DEST, "models/mlp.py", "MLP = 1\n"),
        found(DEST, "__pycache__"),
        found(DEST, "__pycache__/loop.cpython-311.pyc", "other bytecode"),
    ]
    assert plan(reference, remote) == {"directories": [], "files": [], "obsolete": []}


def test_changed_file_is_copied_and_removed_file_is_deleted(reference):
    remote = [
        found(DEST, "models"),
        found(DEST, "__init__.py", ""),
        found(DEST, "loop.py", "print('old loop')\n"),
        found(DEST, "models/mlp.py", "MLP = 1\n"),
        found(DEST, "old.py", "gone\n"),
    ]
    result = plan(reference, remote)
    assert result["files"] == [{"src": f"{SRC}/loop.py", "dest": f"{DEST}/loop.py"}]
    assert result["obsolete"] == [f"{DEST}/old.py"]
    assert result["directories"] == []
