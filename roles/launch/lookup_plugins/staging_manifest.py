"""The controller's side of files/staging.py: the manifest of a data or model path on the
controller, which every host's copy must match. Each manifest is kept in a cache directory, so a
launch reads again only the files that changed since the last one (a stat of the others).

    {{ query('staging_manifest', launch_request.data, cache=launch_staging_cache) }}
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

DOCUMENTATION = r"""
name: staging_manifest
short_description: The manifest (size, mtime, sha256 of each file) of paths on the controller
description:
  - For each term, the manifest that files/staging.py writes on the hosts for a staged input
    (each file's relative path, size, mtime and sha256), computed on the controller.
options:
  _terms:
    description: Paths on the controller (a file or a directory).
    required: true
  cache:
    description: Directory of the manifests computed before (one per path), created 0700.
    type: path
    required: true
"""

staging = load("roles/launch/files/staging.py")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, cache=None, **kwargs):
        return [staging.cached(term, cache) for term in terms]
