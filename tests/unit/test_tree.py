"""roles/cluster/filter_plugins/tree.py: is a host's copy of train/ the controller's."""

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
