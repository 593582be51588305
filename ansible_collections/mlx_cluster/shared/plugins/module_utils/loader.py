"""Load a file of the roles (a plugin, a module, a script of files/) as a Python module.

Plugin files are in no package, and Ansible's controller plugins cannot import one another or a
role's module_utils/ (Ansible sends those to modules only). What every plugin can import is a
collection on ansible.cfg's collections_path: this one, in the project's root, which also makes
it a plain import for tests and tools run from there:

    from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load
    staging = load("roles/launch/files/staging.py")

Loading the same file twice returns the same module object.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[5]

_loaded = {}


def load(path):
    """The module in the file at path (relative paths from the project's root), executed once
    and kept by its resolved path."""
    path = (ROOT / path).resolve()
    if path not in _loaded:
        if not path.is_file():
            raise FileNotFoundError(f"no file {path} to load")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[path] = module
    return _loaded[path]
