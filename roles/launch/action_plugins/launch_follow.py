"""Follow a supervised training job: stream rank 0's new log lines into the play's output.

Ansible prints a task's result only when the task ends, so progress would appear all at once.
This action long-polls the launch host: one cheap shell command waits there until the supervisor's
job.json or rank 0's log changes (or `interval` seconds pass), then answers with both, and each new
line is shown at once. So the play sees the job end within a tenth of a second, not a poll
interval later, and an idle job costs one round trip per interval. The job belongs to
the supervisor on the launch host (files/supervisor.py), not to this play: the action never stops
it. It returns once job.json says the job ended, once a poll that waited in vain finds it lost
(`status`, the supervisor's own judgment: no supervisor runs it any more, e.g. after a reboot),
or when it has not reached the launch host for `reconnect` seconds (a laptop asleep or on
another network): then the job goes on and `-e attach=<run>` follows it again. A run without
job.json that `status` does not list either is refused at once, naming the runs there.

A poll over a dead connection ends within ssh's ServerAliveInterval x ServerAliveCountMax
(ansible.cfg); the action then drops the connection and retries until `reconnect` runs out.

With `page` (the run's directory on the controller), it rewrites the run's page there
(index.html and status.json: filter_plugins/page.py) every page.REFRESH seconds and once the
job ended, from `status` --run on the launch host; a page that cannot be read or written is a
warning, never the job's end.
"""

import json
import posixpath
import shlex
import time

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

display = Display()
page = load("roles/launch/filter_plugins/page.py")

ENDED = ("finished", "failed", "stopped", "lost")
SEPARATOR = b"--- mlx-cluster log ---"
CHECK_EVERY = 0.1  # seconds between two looks on the host while a poll waits for a change


def _job(text, before):
    """job.json's bytes as a dict; `before` while the file is missing or mid-replace."""
    try:
        return json.loads(text) if text.strip() else before
    except ValueError:
        return before  # mid-replace: the next poll reads it whole


def _judged(job, rows, run, label):
    """The job as followed: lost (with the supervisor's reason) when `supervisor.py status`
    says so. No job.json and not among the rows: there is no such run (AnsibleActionFail)."""
    if rows is None:
        return job
    row = next((r for r in rows if r.get("run") == run), None)
    if row is None and not job:
        runs = ", ".join(r["run"] for r in rows) or "none"
        raise AnsibleActionFail(f"there is no run {run} on {label} — its runs: {runs} "
                                "(-e status=true shows their states)")
    if row and row["state"] == "lost":
        return {**job, **row}
    return job


def _attempt(job):
    """0 for the first launch of the job, n after its n-th automatic restart."""
    return len((job or {}).get("restarts") or [])


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("log", "job", "status", "interval", "label", "reconnect", "page"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [k for k in ("log", "job", "status") if k not in args]
        if missing:
            raise AnsibleActionFail(f"launch_follow needs {', '.join(missing)}")
        interval = float(args.get("interval", 2))
        reconnect = float(args.get("reconnect", 600))
        label = args.get("label") or task_vars.get("inventory_hostname")
        run = posixpath.basename(posixpath.dirname(args["job"]))

        start = time.monotonic()
        offset, pending, lines, job, shown, seen = 0, b"", 0, {}, None, b""
        last_contact = paged = time.monotonic()  # a job of seconds gets its final page only
        while True:
            try:
                seen, rows, size, data = self._poll(args["job"], args["log"], args["status"],
                                                    offset, seen, interval)
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
            job = _judged(_job(seen, job), rows, run, label)
            if size < offset:  # a restarted job's rank 0 starts its log afresh: read it whole
                offset, pending, data = 0, b"", b""
            offset += len(data)
            *complete, pending = (pending + data).split(b"\n")
            for line in complete:
                display.display(f"[{label}] {to_text(line, errors='surrogate_or_replace')}")
            lines += len(complete)
            self._announce(label, shown, job)
            shown = job
            ended = job.get("state") in ENDED
            if args.get("page") and (ended or time.monotonic() - paged >= page.REFRESH):
                paged = time.monotonic()
                self._page(args["page"], [*args["status"], "--run", run], label)
            if ended:
                break
        if pending:
            display.display(f"[{label}] {to_text(pending, errors='surrogate_or_replace')}")
        result.update(changed=False, job=job, lost_contact=False, lines=lines,
                      elapsed=round(time.monotonic() - start, 1))
        return result

    def _poll(self, job_path, log_path, status, offset, seen, wait):
        """(job.json's bytes, the supervisor's status rows or None, the log's size, new log
        bytes after offset) in one command, once job.json differs from `seen` or the log's size
        from `offset`, or after `wait` seconds. The rows (a Python start) only when it waited
        in vain or job.json is missing: an idle job may be lost, a missing one unknown.

        job.json is read before the log, so once it says the job ended the log read after it
        is complete.
        """
        job, log = shlex.quote(job_path), shlex.quote(log_path)
        # $(...) drops trailing newlines: compare job.json's text without them.
        known = shlex.quote(to_text(seen, errors="surrogate_or_strict").rstrip("\n"))
        polls = max(1, round(wait / CHECK_EVERY))
        command = (
            f"n=0; while [ $n -lt {polls} ] "
            f"&& [ \"$(cat {job} 2>/dev/null)\" = {known} ] "
            f"&& [ $(($(wc -c <{log} 2>/dev/null || echo 0))) -eq {offset} ]; "
            f"do sleep {CHECK_EVERY}; n=$((n + 1)); done; "
            f"cat {job} 2>/dev/null; echo; echo {SEPARATOR.decode()}; "
            f"if [ $n -ge {polls} ] || [ ! -e {job} ]; then "
            f"{{ {' '.join(map(shlex.quote, status))} 2>/dev/null || echo '[]'; }} "
            "| tr -d '\\n'; fi; "
            f"echo; echo {SEPARATOR.decode()}; "
            f"wc -c <{log} 2>/dev/null || echo 0; tail -c +{offset + 1} {log} 2>/dev/null; true"
        )
        res = self._low_level_execute_command(command, sudoable=False)
        if res["rc"] == 255:  # ssh itself failed
            raise AnsibleConnectionFailure(res.get("stderr") or "ssh exited 255")
        if res["rc"] != 0:
            raise AnsibleActionFail(f"could not read the job's state: {res.get('stderr', '')}")
        out = to_bytes(res["stdout"], errors="surrogate_or_strict")
        head, _, rest = out.partition(b"\n" + SEPARATOR + b"\n")
        rows, _, rest = rest.partition(b"\n" + SEPARATOR + b"\n")
        size, _, data = rest.partition(b"\n")
        return (head[:-1] if head.endswith(b"\n") else head, _job(rows, None),
                int(size.strip() or 0), data)

    def _page(self, run_dir, status, label):
        """Rewrite the run's page from `status` (supervisor.py status --run RUN --json)."""
        try:
            res = self._low_level_execute_command(" ".join(map(shlex.quote, status)),
                                                  sudoable=False)
            rows = json.loads(res["stdout"]) if res["rc"] == 0 else None
            if rows:
                page.write_page(run_dir, rows[0])
        except Exception as error:  # the page is for people: it never ends the follow
            display.warning(f"could not update the run's page from {label}: {error!r}")

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
