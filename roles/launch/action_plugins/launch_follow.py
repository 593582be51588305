"""Follow a supervised training job: stream rank 0's new log lines into the play's output.

Ansible prints a task's result only when the task ends, so progress would appear all at once.
This action polls the launch host with one cheap shell command per interval (the supervisor's
job.json, then rank 0's new log bytes) and shows each new line immediately. The job belongs to
the supervisor on the launch host (files/supervisor.py), not to this play: the action never stops
it. It returns once job.json says the job ended, or when it has not reached the launch host for
`reconnect` seconds (a laptop asleep or on another network): then the job goes on and
`-e attach=<run>` follows it again.

A poll over a dead connection ends within ssh's ServerAliveInterval x ServerAliveCountMax
(ansible.cfg); the action then drops the connection and retries until `reconnect` runs out.
"""

import json
import shlex
import time

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

ENDED = ("finished", "failed", "stopped")
SEPARATOR = b"--- mlx-cluster log ---"


def _attempt(job):
    """0 for the first launch of the job, n after its n-th automatic restart."""
    return len((job or {}).get("restarts") or [])


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("log", "job", "interval", "label", "reconnect"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in ("log", "job") if k not in args]
        if missing:
            raise AnsibleActionFail(f"launch_follow needs {', '.join(missing)}")
        interval = float(args.get("interval", 2))
        reconnect = float(args.get("reconnect", 600))
        label = args.get("label") or task_vars.get("inventory_hostname")

        start = time.monotonic()
        offset, pending, lines, job, shown = 0, b"", 0, {}, None
        last_contact = time.monotonic()
        while True:
            try:
                job, size, data = self._poll(args["job"], args["log"], offset)
            except (AnsibleConnectionFailure, OSError) as error:
                lost = time.monotonic() - last_contact
                if lost > reconnect:
                    display.warning(f"no contact with {label} for {lost:.0f} s: leaving the job "
                                    "running; follow it again with -e attach=<run>")
                    result.update(changed=False, job=job, lost_contact=True, lines=lines)
                    return result
                display.warning(f"lost the connection to {label} ({to_text(error).strip()[:120]}"
                                f"); retrying for {reconnect - lost:.0f} s, the job goes on")
                self._connection.reset()
                time.sleep(min(interval * 2, 10))
                continue
            last_contact = time.monotonic()
            if size < offset:  # a restarted job's rank 0 starts its log afresh: read it whole
                offset, pending, data = 0, b"", b""
            offset += len(data)
            *complete, pending = (pending + data).split(b"\n")
            for line in complete:
                display.display(f"[{label}] {to_text(line, errors='surrogate_or_replace')}")
            lines += len(complete)
            self._announce(label, shown, job)
            shown = job
            if job.get("state") in ENDED:
                break
            time.sleep(interval)
        if pending:
            display.display(f"[{label}] {to_text(pending, errors='surrogate_or_replace')}")
        result.update(changed=False, job=job, lost_contact=False, lines=lines,
                      elapsed=round(time.monotonic() - start, 1))
        return result

    def _poll(self, job_path, log_path, offset):
        """(job.json as a dict, the log's size, new log bytes after offset) in one command.

        job.json is read before the log, so once it says the job ended the log read after it
        is complete.
        """
        log = shlex.quote(log_path)
        command = (
            f"cat {shlex.quote(job_path)} 2>/dev/null; echo; echo {SEPARATOR.decode()}; "
            f"wc -c <{log} 2>/dev/null || echo 0; tail -c +{offset + 1} {log} 2>/dev/null; true"
        )
        res = self._low_level_execute_command(command, sudoable=False)
        if res["rc"] == 255:  # ssh itself failed
            raise AnsibleConnectionFailure(res.get("stderr") or "ssh exited 255")
        if res["rc"] != 0:
            raise AnsibleActionFail(f"could not read the job's state: {res.get('stderr', '')}")
        out = to_bytes(res["stdout"], errors="surrogate_or_strict")
        head, _, rest = out.partition(b"\n" + SEPARATOR + b"\n")
        size, _, data = rest.partition(b"\n")
        try:
            job = json.loads(head) if head.strip() else {}
        except ValueError:
            job = {}  # mid-replace: the next poll reads it whole
        return job, int(size.strip() or 0), data

    @staticmethod
    def _announce(label, before, job):
        """One line per change of the job's state that the rank log does not show."""
        if not job or (before and before.get("state") == job.get("state")
                       and _attempt(before) == _attempt(job)):
            return
        words = [f"job {job.get('state')}"]
        if job.get("reason"):
            words.append(f"({job['reason']})")
        if job.get("suspect") and job.get("state") in ("restarting", "stopping", "failed"):
            words.append(f"suspect: {job['suspect']}")
        if _attempt(job):
            words.append(f"attempt {_attempt(job) + 1}")
        display.display(f"[{label}] [supervisor] {' '.join(words)}")
