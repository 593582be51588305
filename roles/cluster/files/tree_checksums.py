"""Print the files and directories under a directory (or one file) as JSON for the tree_digest
filter: [{path, isdir, checksum}], paths relative to that directory ('.' for a file), [] when it
is missing. With --module NAME the directory is the package NAME this Python imports (run it
with -I, so that the current directory does not count); the package is not imported. setup,
train.yml's preflight and check.yml run it on the hosts, the controller on its own train/.
Standard library only.
"""

import hashlib
import importlib.util
import json
import os
import sys


def file_entry(path, root):
    with open(path, "rb") as f:
        checksum = hashlib.sha1(f.read()).hexdigest()  # noqa: S324 (find's checksum)
    return {"path": os.path.relpath(path, root), "isdir": False, "checksum": checksum}


def entries(root):
    if root is None:
        return
    if os.path.isfile(root):
        yield file_entry(root, root) | {"path": "."}
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            yield {"path": os.path.relpath(os.path.join(parent, name), root), "isdir": True}
        for name in files:
            yield file_entry(os.path.join(parent, name), root)


def package_dir(name):
    spec = importlib.util.find_spec(name)
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


if __name__ == "__main__":
    args = sys.argv[1:]
    root = package_dir(args[1]) if args[0] == "--module" else args[0]
    print(json.dumps(list(entries(root))))
