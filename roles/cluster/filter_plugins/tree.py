"""Is a host's train package the controller's? One answer for setup (python_env installs the
controller's wheel where it differs), train.yml's preflight and check.yml, from what
roles/cluster/files/tree_checksums.py prints. Pure functions, unit-tested in
tests/unit/test_tree.py.
"""


def _is_cache(relpath):
    return "__pycache__" in relpath.split("/") or relpath.endswith((".pyc", ".pyo"))


def tree_digest(files):
    """{relative path: sha1, None for a directory} of tree_checksums.py's entries, bytecode
    caches left out (Python writes its own on every host)."""
    return {entry["path"]: None if entry.get("isdir") else entry.get("checksum")
            for entry in files or [] if not _is_cache(entry["path"])}


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
