"""Start the job under its supervisor on the launch host, then say how to come back to it.

`python supervisor.py start ...` creates the run directory, writes command.sh from its stdin and
starts the daemon that owns the job (files/supervisor.py). It runs over the play's connection
with no module start on the host first (a command task costs one), as launch_fetch does. The
launch command (command.sh's exec line) is shown first, also in check mode, where nothing is
started.

Returns stdout, the supervisor's "started <pid>".
"""

import shlex

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def launch_command(command_sh):
    """The command command.sh runs: its exec line, without exec and the "$@" it passes on."""
    body = command_sh.split("\nexec ", 1)[-1].strip()
    return body.removesuffix('"$@"').rstrip()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("argv", "command_sh", "run"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in sorted(self._VALID_ARGS) if not args.get(k)]
        if missing:
            raise AnsibleActionFail(f"launch_start needs {', '.join(missing)}")
        display.display(launch_command(args["command_sh"]))
        if self._task.check_mode:
            result.update(changed=False, msg="nothing is started in check mode")
            return result
        command = " ".join(shlex.quote(str(a)) for a in args["argv"])
        started = self._low_level_execute_command(command, sudoable=False,
                                                  in_data=to_bytes(args["command_sh"]))
        if started["rc"] == 255:  # ssh itself failed
            raise AnsibleConnectionFailure(started.get("stderr") or "ssh exited 255")
        stdout = to_text(started.get("stdout")).strip()
        if started["rc"] != 0:
            result.update(failed=True, rc=started["rc"], stdout=stdout,
                          msg=to_text(started.get("stderr")).strip()[-2000:]
                          or f"the supervisor exited {started['rc']}")
            return result
        run, host = args["run"], task_vars.get("inventory_hostname")
        display.display(f"Job {run} {stdout} on {host}. Ctrl-C leaves it running; follow it again "
                        f"with ansible-playbook train.yml -e attach={run}, stop it with "
                        f"-e stop={run}.")
        result.update(changed=True, stdout=stdout)
        return result
