"""What the virtual-cluster benchmarks share: a cluster set up with setup.yml, and the report."""

import contextlib
import tempfile
from pathlib import Path

from tools.playbook import run_playbook
from tools.vcluster import VirtualCluster
from tools.wheelhouse import offline_pip_args


@contextlib.contextmanager
def set_up_cluster(**cluster_args):
    """(virtual cluster set up with setup.yml from the offline wheelhouse, a work directory the
    hosts' users can read), both removed afterwards."""
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, VirtualCluster(
        extra_vars={"python_env_pip_extra_args": offline_pip_args()}, **cluster_args,
    ) as vc:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        setup = run_playbook("setup.yml", vc.inventory, workdir / "setup")
        if setup.status != "successful":
            raise SystemExit(f"setup.yml failed:\n{setup.stdout[-4000:]}")
        yield vc, workdir


def write_results(path: Path, lines: list[str]) -> None:
    """Save a benchmark's markdown report (committed in benchmarks/results/) and print it."""
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
