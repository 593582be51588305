"""Pack a host's part of a run for the controller: RUN_DIR as the host has it (so a program's own
outputs come back too), without rank heartbeats, checkpoints older than the latest, or ARCHIVE.

    python - RUN_DIR ARCHIVE < pack_results.py

Read from stdin by the launch_fetch action: nothing of ours needs to be on the host first.
"""

import os
import sys
import tarfile
from pathlib import Path


def main(run_dir, archive):
    run_dir, archive = Path(run_dir), Path(archive)
    if not run_dir.is_dir():  # no rank ran here: nothing to bring back
        print("no run directory")
        return
    skipped = {f"{run_dir.name}/checkpoints/{p.name}"
               for p in sorted((run_dir / "checkpoints").glob("step_*"))[:-1]}
    skipped.add(f"{run_dir.name}/{archive.name}")

    def keep(member):
        # A heartbeat's temporary file too: a rank killed while writing one leaves it.
        if member.name.endswith((".heartbeat", ".heartbeat.tmp")) or member.name in skipped:
            return None  # a skipped directory's files are skipped with it
        return member

    os.umask(0o077)  # the run's files are the user's alone
    archive.unlink(missing_ok=True)  # a resumed run's last archive: not reopened with its mode
    # Uncompressed: checkpoints barely compress, and ssh compresses the transfer.
    with tarfile.open(archive, "w") as tar:
        tar.add(run_dir, arcname=run_dir.name, filter=keep)


if __name__ == "__main__":
    main(*sys.argv[1:])
