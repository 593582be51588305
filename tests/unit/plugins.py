"""Load an Ansible plugin file (filter plugin, module, ...) of this project as a Python module,
with the loader the plugins themselves use:

    doctor = load("roles/doctor/filter_plugins/doctor.py")

Loading the same file twice returns the same module object.
"""

from pathlib import Path

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load
from tools.option_table import request_options

__all__ = ["REQUEST_SPEC", "ROOT", "load"]

ROOT = Path(__file__).resolve().parents[2]
# The one table of train.yml's options (roles/launch/tasks/validate.yml reads the same file).
REQUEST_SPEC = request_options()
