"""Print {"python": version, "packages": {name: version or null}} of this Python as JSON.

Run by the environment's own Python (roles/cluster/tasks/versions.yml) with the package names as
arguments. Standard library only.
"""

import importlib.metadata
import json
import platform
import sys


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


print(json.dumps({"python": platform.python_version(),
                  "packages": {name: version(name) for name in sys.argv[1:]}}))
