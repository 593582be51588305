"""Is a host's copy of a directory tree the controller's? One answer for setup (python_env copies
only what differs), train.yml's preflight and check.yml, from ansible.builtin.find results with
get_checksum. Pure functions, unit-tested in tests/unit/test_tree.py.
"""

import posixpath


def _is_cache(relpath):
    return "__pycache__" in relpath.split("/") or relpath.endswith((".pyc", ".pyo"))


def tree_digest(files, root):
    """{relative path: sha1, None for a directory} of ansible.builtin.find results (get_checksum)
    under root, bytecode caches left out (Python writes its own on every host)."""
    root = str(root).rstrip("/")
    tree = {}
    for entry in files or []:
        rel = posixpath.relpath(entry["path"], root)
        if not _is_cache(rel):
            tree[rel] = None if entry.get("isdir") else entry.get("checksum")
    return tree


def tree_diff(tree, reference):
    """Paths that differ between two tree_digest maps, each with how."""
    diff = []
    for path in sorted(set(tree) | set(reference)):
        if path not in tree:
            diff.append(f"{path} missing")
        elif path not in reference:
            diff.append(f"{path} extra")
        elif tree[path] != reference[path]:
            diff.append(f"{path} modified")
    return diff


class FilterModule:
    def filters(self):
        return {"tree_digest": tree_digest, "tree_diff": tree_diff}
