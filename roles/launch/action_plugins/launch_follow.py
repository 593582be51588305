"""Follow a running training job: stream rank 0's new log lines into the play's output.

Ansible prints a task's result only when the task ends, so progress would appear all at once.
This action polls the job's log on the launch host with one cheap shell command per interval
and shows each new line immediately (Display messages from a worker reach the terminal and
ansible-runner's event stream as they are made). It returns when the job has written its exit
status, or stops the job when the time limit passes. It also stops a launcher that outlives its
finished job: Open MPI 5's mpirun sometimes never exits after every rank has (openpmix/prrte#1839),
so once the `done` file (rank 0's summary.json) exists, mpirun gets `exit_grace` seconds.
It never fails the task itself: the play decides what a non-zero exit means after fetching every
rank's log.
"""

import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

RUNNING = "running"
FINISHED = "finished"  # the done file exists, the launcher has not exited yet
GRACE_SECONDS = 30  # after the time limit: TERM, then this long before KILL


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("log", "status", "pid", "time_limit", "interval", "label", "done", "exit_grace")
    )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in ("log", "status", "pid", "time_limit") if k not in args]
        if missing:
            raise AnsibleActionFail(f"launch_follow needs {', '.join(missing)}")
        time_limit = float(args["time_limit"])
        interval = float(args.get("interval", 2))
        exit_grace = float(args.get("exit_grace", 60))
        label = args.get("label") or self._task.delegate_to or task_vars.get("inventory_hostname")

        start = time.monotonic()
        offset, pending, lines = 0, b"", 0
        stopped, stop_reason, finished = None, None, None
        while True:
            status, data = self._poll(args["status"], args["log"], offset, args.get("done"))
            offset += len(data)
            *complete, pending = (pending + data).split(b"\n")
            for line in complete:
                display.display(f"[{label}] {to_text(line, errors='surrogate_or_replace')}")
            lines += len(complete)
            if status not in (RUNNING, FINISHED):
                break
            elapsed = time.monotonic() - start
            if status == FINISHED and finished is None:
                finished = elapsed
            if stopped is None:
                if elapsed > time_limit:
                    stop_reason = "time_limit"
                    display.warning(f"time limit of {time_limit:.0f} s reached: stopping the job")
                elif finished is not None and elapsed > finished + exit_grace:
                    stop_reason = "hung_at_exit"
                    display.warning(
                        f"the job finished ({args['done']} written) but the launcher has not "
                        f"exited {exit_grace:.0f} s later: stopping it (Open MPI 5 can hang after "
                        "the application completes, openpmix/prrte#1839)"
                    )
                if stop_reason:
                    self._signal(args["pid"], "TERM")
                    stopped = elapsed
            elif elapsed > stopped + GRACE_SECONDS:
                self._signal(args["pid"], "KILL")
                status = "137"
                break
            time.sleep(interval)
        if pending:
            display.display(f"[{label}] {to_text(pending, errors='surrogate_or_replace')}")
        result.update(
            changed=False,
            exit_status=int(status) if status.lstrip("-").isdigit() else -1,
            timed_out=stop_reason == "time_limit",
            hung_at_exit=stop_reason == "hung_at_exit",
            lines=lines,
            elapsed=round(time.monotonic() - start, 1),
        )
        return result

    def _poll(self, status_path, log_path, offset, done_path=None):
        """(exit status, 'finished' or 'running'; new log bytes after offset) in one command.

        The status is read before the log, so once it exists the log read after it is complete.
        """
        not_exited = f"echo {RUNNING}"
        if done_path:
            done = shlex.quote(done_path)
            not_exited = f"{{ test -e {done} && echo {FINISHED} || {not_exited}; }}"
        command = (
            f"cat {shlex.quote(status_path)} 2>/dev/null || {not_exited}; "
            f"tail -c +{offset + 1} {shlex.quote(log_path)} 2>/dev/null; true"
        )
        res = self._low_level_execute_command(command, sudoable=False)
        if res["rc"] != 0:
            raise AnsibleActionFail(f"could not read the job's log: {res.get('stderr', '')}")
        out = to_bytes(res["stdout"], errors="surrogate_or_strict")
        status, _, data = out.partition(b"\n")
        return to_text(status).strip() or RUNNING, data

    def _signal(self, pid_path, signal):
        """Signal the launcher; KILL also its direct children (mpirun's ssh sessions).

        TERM goes to the launcher alone: mpirun then stops every rank on every host itself.
        """
        pid = f"$(cat {shlex.quote(pid_path)})"
        children = f"pkill -KILL -P {pid} 2>/dev/null; " if signal == "KILL" else ""
        self._low_level_execute_command(
            f"{children}kill -{signal} {pid} 2>/dev/null; true", sudoable=False
        )
