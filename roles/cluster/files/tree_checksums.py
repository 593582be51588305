"""Print the files and directories under a directory (or one file) as JSON, in the shape of
ansible.builtin.find's results with get_checksum ([{path, isdir, checksum}]; [] when it is
missing), for the tree_digest filter. train.yml's preflight runs it beside its other probes, in
one module run per host. Standard library only.
"""

import hashlib
import json
import os
import sys


def file_entry(path):
    with open(path, "rb") as f:
        checksum = hashlib.sha1(f.read()).hexdigest()  # noqa: S324 (find's checksum)
    return {"path": path, "isdir": False, "checksum": checksum}


def entries(root):
    if os.path.isfile(root):
        yield file_entry(root)
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            yield {"path": os.path.join(parent, name), "isdir": True}
        for name in files:
            yield file_entry(os.path.join(parent, name))


print(json.dumps(list(entries(sys.argv[1]))))
