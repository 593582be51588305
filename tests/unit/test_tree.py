"""roles/cluster/filter_plugins/tree.py and files/tree_checksums.py: is a host's train package
the controller's."""

import hashlib
import json
import subprocess
import sys

from tests.unit.plugins import ROOT, load

tree = load("roles/cluster/filter_plugins/tree.py")
SCRIPT = str(ROOT / "roles" / "cluster" / "files" / "tree_checksums.py")


def checksums(*args, cwd=None):
    return json.loads(subprocess.run([sys.executable, "-I", SCRIPT, *map(str, args)], check=True,
                                     capture_output=True, text=True, cwd=cwd).stdout)


def sha1(data):
    return hashlib.sha1(data).hexdigest()  # noqa: S324 (find's checksum)


def test_tree_digest_and_diff_name_the_edited_file():
    files = [{"path": "__init__.py", "checksum": "1"}, {"path": "loop.py", "checksum": "2"},
             {"path": "__pycache__", "isdir": True},
             {"path": "__pycache__/loop.cpython-311.pyc", "checksum": "3"}]
    digest = tree.tree_digest(files)
    assert digest == {"__init__.py": "1", "loop.py": "2"}
    reference = {"__init__.py": "1", "loop.py": "9", "data.py": "4"}
    assert tree.tree_diff(digest, reference) == ["data.py missing", "loop.py modified"]
    assert tree.tree_diff(reference, reference) == []
    assert tree.tree_diff(tree.tree_digest(None), {"a.py": "1"}) == ["a.py missing"]


def test_the_checksums_of_a_directory_a_file_and_nothing(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "loop.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\0")
    assert tree.tree_digest(checksums(tmp_path / "pkg")) == {"loop.py": sha1(b"x = 1\n")}
    assert checksums(tmp_path / "none") == []
    assert checksums(tmp_path / "pkg" / "loop.py") == [
        {"path": ".", "isdir": False, "checksum": sha1(b"x = 1\n")}]


def test_the_package_python_imports_is_found_without_importing_it(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (tmp_path / "cwd" / "pkg").mkdir(parents=True)  # -I: the current directory does not count
    (tmp_path / "cwd" / "pkg" / "__init__.py").write_text("")
    found = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
         f"sys.argv = ['x', '--module', 'pkg']; exec(open({SCRIPT!r}).read())"],
        check=True, capture_output=True, text=True, cwd=tmp_path / "cwd").stdout
    assert tree.tree_digest(json.loads(found)) == {
        "__init__.py": sha1(b"raise SystemExit('imported')\n")}
    assert checksums("--module", "no_such_package_here") == []
