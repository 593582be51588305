"""The controller's side of files/tree_checksums.py: the same entries for a directory on the
controller, computed in the play's own process (a pipe lookup starts a Python for it, once per
host and task).

    {{ query('tree_checksums', cluster_train_src) | first | tree_digest }}
"""

import importlib.util
from pathlib import Path

from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: tree_checksums
short_description: The files and directories under a controller path, with their checksums
description:
  - For each term, the list of entries (path, isdir, checksum) that files/tree_checksums.py
    prints for that path on a host, for the tree_digest filter.
options:
  _terms:
    description: Paths on the controller.
    required: true
"""

SCRIPT = Path(__file__).resolve().parents[1] / "files" / "tree_checksums.py"


def _script():
    spec = importlib.util.spec_from_file_location("tree_checksums", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        script = _script()
        return [list(script.entries(str(term))) for term in terms]
