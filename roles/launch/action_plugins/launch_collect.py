"""Unpack the archives train.yml fetched from the hosts into the run's directory on the
controller, judge the run and write result.json, all in this controller process: as tasks, the
unpacking, the judging and the writing cost a module run (a Python start) each.

Each archive holds RUN/... as one host had it. The launch host's (the one with RUN/job.json)
gives everything; the other hosts give their rank logs only (a program may write the same
outputs on every rank: rank 0's are the run's). When the launch host's archive is among them,
what an earlier launch of the run left on the controller is removed first, so that nothing of
it is judged as this launch's; without it, nothing is removed. The archives (and their
directory, once empty) are deleted once unpacked.

Returns job (job.json, else the follower's last view of it), summary, report (why the run
failed, None when it did not: the launch filters' launch_verdict) and outcome (result.json).
"""

import json
import os
import re
import shutil
import tarfile
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

# What every launch writes afresh (rank logs from each host, the latest checkpoint only).
STALE = ("checkpoints", "logs", "summary.json", "stopped.json", "job.json", "result.json")
RANK_LOG = re.compile(r"^rank\.(\d+)\.log$")


def extract_private(tar, members, dest):
    """Extract members under dest, their modes made the user's alone. tarfile's "data" filter
    (Python >= 3.11.4) refuses anything outside dest and device files; an older Python takes
    only files and directories with relative names (and would keep the archive's modes)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, members=members, filter="data")
    else:
        members = [m for m in members if (m.isfile() or m.isdir()) and not m.name.startswith("/")
                   and ".." not in Path(m.name).parts]
        tar.extractall(dest, members=members)
    for member in members:
        if member.isfile() or member.isdir():
            path = Path(dest, member.name)
            path.chmod(path.stat().st_mode & 0o700)


def unpack(run_dir, archives):
    """Unpack the hosts' archives into run_dir (see the module's docstring)."""
    run_dir = Path(run_dir)
    umask = os.umask(0o077)  # the run's files are the user's alone, as on the hosts
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        tars = [tarfile.open(archive) for archive in archives]  # noqa: SIM115 (closed below)
        launch_host = [f"{run_dir.name}/job.json" in tar.getnames() for tar in tars]
        if any(launch_host):
            for name in STALE:
                stale = run_dir / name
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:
                    stale.unlink(missing_ok=True)
        for tar, archive, everything in zip(tars, archives, launch_host, strict=True):
            wanted = f"{run_dir.name}/" if everything else f"{run_dir.name}/logs/"
            with tar:
                mine = [m for m in tar.getmembers() if m.name.startswith(wanted)]
                extract_private(tar, mine, run_dir.parent)
            Path(archive).unlink()
        for incoming in {Path(archive).parent for archive in archives}:
            if not any(incoming.iterdir()):
                incoming.rmdir()
    finally:
        os.umask(umask)


def _json(path):
    return json.loads(path.read_text()) if path.is_file() else None


def rank_logs(run_dir):
    """{rank: text} of the rank logs unpacked into run_dir."""
    logs = Path(run_dir) / "logs"
    return {int(m[1]): p.read_text(errors="replace")
            for p in sorted(logs.glob("rank.*.log")) if (m := RANK_LOG.match(p.name))}


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("archives", "results", "followed_job", "rank_hosts", "unreachable",
                             "lost_contact"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        if "results" not in args:
            raise AnsibleActionFail("launch_collect needs results (the run's directory)")
        run_dir = Path(args["results"])
        archives = list(args.get("archives") or [])
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="nothing is fetched in check mode")
            return result
        unpack(run_dir, archives)

        # The launch role's filters (verdict and outcome): one definition for play and plugin.
        launch = load("roles/launch/filter_plugins/launch.py")
        followed = args.get("followed_job") or {}
        job = _json(run_dir / "job.json") or followed
        if followed.get("state") == "lost":  # job.json still says what it was when it was lost
            job = {**job, **followed}
        summary = _json(run_dir / "summary.json") or {}
        # The supervisor's plan names each rank's host as the job ran (ring order over cables,
        # hosts left out by elastic), also when this play only attached to the run.
        rank_hosts = [h["host"] for h in job.get("rank_hosts") or []] or args.get("rank_hosts")
        report = launch.launch_verdict(job, rank_logs(run_dir), rank_hosts or [],
                                       args.get("unreachable") or [],
                                       bool(args.get("lost_contact")))
        outcome = launch.launch_outcome(summary, job, str(run_dir), report)
        write_private(run_dir / "result.json", json.dumps(outcome) + "\n")
        result.update(changed=bool(archives), job=job, summary=summary, report=report,
                      outcome=outcome)
        return result
