"""Unpack the archives train.yml fetched from the hosts into the run's directory on the
controller, in one process (each Ansible task on the controller costs a module run).

    python unpack_results.py RUN_DIR ARCHIVE...

Each archive holds RUN/... as one host had it. The launch host's (the one with RUN/job.json)
gives everything; the other hosts give their rank logs only (a program may write the same
outputs on every rank: rank 0's are the run's). When the launch host's archive is among them,
what an earlier launch of the run left on the controller is removed first, so that nothing of
it is judged as this launch's; without it, nothing is removed. The archives (and their
directory, once empty) are deleted once unpacked.
"""

import os
import shutil
import sys
import tarfile
from pathlib import Path

# What every launch writes afresh (rank logs from each host, the latest checkpoint only).
STALE = ("checkpoints", "logs", "summary.json", "stopped.json", "job.json", "result.json")


def private(member, dest):
    """tarfile's "data" filter (nothing outside dest, no device files), with the modes made
    the user's alone."""
    member = tarfile.data_filter(member, dest)
    if member.mode is None:  # a directory: the filter leaves it to the umask (0700 here)
        return member
    return member.replace(mode=member.mode & 0o700, deep=False)


def main(run_dir, *archives):
    os.umask(0o077)  # the run's files are the user's alone, as on the hosts
    run_dir = Path(run_dir)
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
    safe = {"filter": private} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.11.4
    for tar, archive, everything in zip(tars, archives, launch_host, strict=True):
        wanted = f"{run_dir.name}/" if everything else f"{run_dir.name}/logs/"
        with tar:
            mine = [m for m in tar.getmembers() if m.name.startswith(wanted)]
            tar.extractall(run_dir.parent, members=mine, **safe)
        Path(archive).unlink()
    for incoming in {Path(archive).parent for archive in archives}:
        if not any(incoming.iterdir()):
            incoming.rmdir()


if __name__ == "__main__":
    main(*sys.argv[1:])
