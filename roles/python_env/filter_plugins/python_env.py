"""Filter for the python_env role: what to create, copy and remove so a host's copy of the
train package matches the controller's, from the tree_digest maps of both (roles/cluster
tasks/train_tree.yml).

ansible.builtin.copy can neither exclude __pycache__ nor skip unchanged files without one
remote call per file, so the role compares checksums once and only touches what differs."""

import posixpath


def python_env_sync_plan(reference, present, src, dest, dest_missing=False):
    """reference / present: tree_digest maps ({relpath: sha1, None for a directory}) of the
    controller's package at src and of the host's copy at dest.

    Returns {'directories': [to create], 'files': [{'src', 'dest'} to copy], 'obsolete': [to
    remove]}, with absolute paths."""
    src, dest = src.rstrip("/"), dest.rstrip("/")
    mkdirs = [dest] if dest_missing else []
    mkdirs += [
        posixpath.join(dest, path)
        for path, digest in sorted(reference.items())
        if digest is None and (path not in present or present[path] is not None)
    ]
    copy = [
        {"src": posixpath.join(src, path), "dest": posixpath.join(dest, path)}
        for path, digest in sorted(reference.items())
        if digest is not None and present.get(path) != digest
    ]
    remove = [posixpath.join(dest, path) for path in sorted(present) if path not in reference]
    return {"directories": mkdirs, "files": copy, "obsolete": remove}


class FilterModule:
    def filters(self):
        return {"python_env_sync_plan": python_env_sync_plan}
