"""Print the files and directories under a directory as JSON, in the shape of
ansible.builtin.find's results with get_checksum ([{path, isdir, checksum}]; [] when it is
missing), for the tree_digest filter. train.yml's preflight runs it beside its other probes, in
one module run per host. Standard library only.
"""

import hashlib
import json
import os
import sys


def entries(root):
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            yield {"path": os.path.join(parent, name), "isdir": True}
        for name in files:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                checksum = hashlib.sha1(f.read()).hexdigest()  # noqa: S324 (find's checksum)
            yield {"path": path, "isdir": False, "checksum": checksum}


print(json.dumps(list(entries(sys.argv[1]))))
