"""Load an Ansible plugin file (filter plugin, module, ...) of this project as a Python module.

Plugin files are not in a package, so unit tests load them by path:

    doctor = load("roles/doctor/filter_plugins/doctor.py")

Loading the same file twice returns the same module object.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tools.option_table import request_options

ROOT = Path(__file__).resolve().parents[2]
# The one table of train.yml's options (roles/launch/tasks/validate.yml reads the same file).
REQUEST_SPEC = request_options()

_loaded: dict[Path, ModuleType] = {}


def load(relative_path: str) -> ModuleType:
    """The module in ROOT / relative_path, executed once and cached by path."""
    path = (ROOT / relative_path).resolve()
    if path not in _loaded:
        if not path.is_file():
            raise FileNotFoundError(f"no plugin file {relative_path} under {ROOT}")
        name = "plugin_" + "_".join(path.relative_to(ROOT).with_suffix("").parts)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[path] = module
    return _loaded[path]
