"""The virtual cluster train.yml's tests share (test_train_playbook.py, test_long_runs.py)."""

import pytest

from tests.conftest import cluster_unavailable
from tools.playbook import run_playbook
from tools.vcluster import VirtualCluster
from tools.wheelhouse import offline_pip_args

TRAIN_SLOTS = [1, 2, 1]


@pytest.fixture(scope="session")
def train_cluster(tmp_path_factory):
    """3 hosts (slots 1, 2, 1: world size 4) after a green setup.yml, built once for every
    train.yml test (setting one up takes minutes on a shared 2-core machine) and torn down at
    the end of the session, also on failure."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("train-cluster")
    with VirtualCluster(
        hosts=3,
        slots=TRAIN_SLOTS,
        extra_vars={"python_env_pip_extra_args": offline_pip_args()},
        workdir=workdir / "vc",
    ) as vc:
        setup = run_playbook("setup.yml", vc.inventory, workdir / "setup")
        assert setup.status == "successful", setup.stdout[-6000:]
        yield vc
