"""roles/cluster/filter_plugins/tree.py: is a host's copy of train/ the controller's."""

import hashlib
import json
import subprocess
import sys

from tests.unit.plugins import load

tree = load("roles/cluster/filter_plugins/tree.py")


def test_tree_digest_and_diff_name_the_edited_file():
    root = "/home/u/mlx-cluster/src/train"
    files = [{"path": f"{root}/__init__.py", "checksum": "1"},
             {"path": f"{root}/loop.py", "checksum": "2"},
             {"path": f"{root}/__pycache__/loop.cpython-311.pyc", "checksum": "3"}]
    digest = tree.tree_digest(files, root)
    assert digest == {"__init__.py": "1", "loop.py": "2"}
    reference = {"__init__.py": "1", "loop.py": "9", "data.py": "4"}
    assert tree.tree_diff(digest, reference) == ["data.py missing", "loop.py modified"]
    assert tree.tree_diff(reference, reference) == []


def test_the_host_side_checksums_read_as_find_does(tmp_path):
    """roles/cluster/files/tree_checksums.py prints find's shape, so tree_digest reads both."""
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "loop.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\0")
    script = "roles/cluster/files/tree_checksums.py"
    printed = subprocess.run([sys.executable, script, str(tmp_path / "pkg")], check=True,
                             capture_output=True, text=True).stdout
    assert tree.tree_digest(json.loads(printed), tmp_path / "pkg") == {
        "loop.py": hashlib.sha1(b"x = 1\n").hexdigest()}  # noqa: S324
    missing = subprocess.run([sys.executable, script, str(tmp_path / "none")], check=True,
                             capture_output=True, text=True).stdout
    assert json.loads(missing) == []
    one = subprocess.run([sys.executable, script, str(tmp_path / "pkg" / "loop.py")], check=True,
                         capture_output=True, text=True).stdout
    assert [entry["checksum"] for entry in json.loads(one)] == [
        hashlib.sha1(b"x = 1\n").hexdigest()]  # noqa: S324
