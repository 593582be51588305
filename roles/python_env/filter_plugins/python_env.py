"""Filter for the python_env role: what to create, copy and remove so a host's copy of the
train package matches the controller's, bytecode caches aside.

ansible.builtin.copy can neither exclude __pycache__ nor skip unchanged files without one
remote call per file, so the role lists the host's copy once (ansible.builtin.find with
checksums) and only touches what differs."""

import hashlib
import posixpath


def _is_cache(relpath):
    return "__pycache__" in relpath.split("/") or relpath.endswith((".pyc", ".pyo"))


def _sha1(path):
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha1").hexdigest()


def python_env_sync_plan(tree, find_result, dest):
    """tree: community.general.filetree items of the controller's package; find_result: an
    ansible.builtin.find result (recurse, get_checksum) for `dest` on the host.

    Returns {'directories': [to create], 'files': [{'src', 'dest'} to copy], 'obsolete': [to
    remove]}, with absolute paths on the host."""
    dest = dest.rstrip("/")
    wanted = {item["path"]: item for item in tree if not _is_cache(item["path"])}
    present = {
        posixpath.relpath(found["path"], dest): found
        for found in find_result.get("files", [])
        if not _is_cache(posixpath.relpath(found["path"], dest))
    }

    def absolute(relpath):
        return posixpath.join(dest, relpath) if relpath else dest

    mkdirs = [dest] if dest in find_result.get("skipped_paths", {}) else []
    mkdirs += [
        absolute(path)
        for path, item in sorted(wanted.items())
        if item["state"] == "directory" and not present.get(path, {}).get("isdir")
    ]
    copy = [
        {"src": item["src"], "dest": absolute(path)}
        for path, item in sorted(wanted.items())
        if item["state"] == "file" and present.get(path, {}).get("checksum") != _sha1(item["src"])
    ]
    remove = [absolute(path) for path in sorted(present) if path not in wanted]
    return {"directories": mkdirs, "files": copy, "obsolete": remove}


class FilterModule:
    def filters(self):
        return {"python_env_sync_plan": python_env_sync_plan}
