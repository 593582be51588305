"""Bring one host's part of a run to the controller as one archive: packed on the host by
files/pack_results.py (sent on stdin to the host's Python), then fetched over the play's
connection. Two connection round trips, no module run: an archive module plus a fetch task
cost four, with a module start on the host for each.

Returns dest (the archive on the controller), none when the host has no run directory (no rank
ran there). A host that cannot be reached is reported unreachable, as a module task would be.
"""

import shlex
from pathlib import Path

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False  # no remote temporary directory: the archive goes in the run directory
    _VALID_ARGS = frozenset(("run_dir", "archive", "dest", "python"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in sorted(self._VALID_ARGS) if not args.get(k)]
        if missing:
            raise AnsibleActionFail(f"launch_fetch needs {', '.join(missing)}")
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="nothing is fetched in check mode")
            return result
        script = Path(self._find_needle("files", "pack_results.py")).read_bytes()
        command = " ".join(shlex.quote(str(a)) for a in (args["python"], "-", args["run_dir"],
                                                           args["archive"]))
        packed = self._low_level_execute_command(command, sudoable=False, in_data=script)
        if packed["rc"] == 255:  # ssh itself failed
            raise AnsibleConnectionFailure(packed.get("stderr") or "ssh exited 255")
        if packed["rc"] != 0:
            result.update(failed=True, msg=f"packing {args['run_dir']} failed: "
                          f"{to_text(packed.get('stderr')).strip()[-400:]}")
            return result
        if to_text(packed.get("stdout")).strip() == "no run directory":
            result.update(changed=False, msg=f"{args['run_dir']} does not exist")
            return result
        dest = Path(args["dest"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._connection.fetch_file(args["archive"], str(dest))
        result.update(changed=True, dest=str(dest))
        return result
