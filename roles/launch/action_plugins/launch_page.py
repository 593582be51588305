"""Write the pages of runs on the controller: runs_dir/<run>/index.html and status.json for each
row of `supervisor.py status --run ... --json` (filter_plugins/page.py), in this controller
process: a copy task per file would cost a module run each."""

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

page = load("roles/launch/filter_plugins/page.py")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("rows", "runs_dir"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if "runs_dir" not in self._task.args:
            raise AnsibleActionFail("launch_page needs runs_dir")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="no page is written in check mode")
            return result
        rows = self._task.args.get("rows") or []
        for row in rows:
            page.write_page(f"{self._task.args['runs_dir']}/{row['run']}", row)
        result.update(changed=bool(rows), pages=[row["run"] for row in rows])
        return result
