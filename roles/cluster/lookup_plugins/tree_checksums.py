"""The controller's side of files/tree_checksums.py: the same entries for a directory on the
controller, computed in the play's own process (a pipe lookup starts a Python for it, once per
host and task).

    {{ query('tree_checksums', cluster_train_src) | first | tree_digest }}
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

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

class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        script = load("roles/cluster/files/tree_checksums.py")
        return [list(script.entries(str(term))) for term in terms]
