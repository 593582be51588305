"""The virtual clusters the integration tests share, each built and set up once per session and
torn down at its end, also on failure (setting one up takes minutes on a shared 2-core machine):
train_cluster, the bridge cluster train.yml's and check.yml's tests run on, and cable_ring, the
3-host cable ring of test_cables.py and test_cables_run.py. A test that breaks something on one
undoes it before it ends."""

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import cluster_unavailable
from tools.playbook import PlaybookRun, run_playbook
from tools.vcluster import VirtualCluster
from tools.wheelhouse import offline_pip_args

TRAIN_SLOTS = [1, 2, 1]


@pytest.fixture(scope="session")
def train_cluster(tmp_path_factory):
    """3 hosts (slots 1, 2, 1: world size 4) after a green setup.yml."""
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


@dataclasses.dataclass
class CableRing:
    vc: VirtualCluster
    workdir: Path  # for the runner directories of the playbooks run on it
    check: PlaybookRun  # setup.yml --check --diff --tags thunderbolt, before any setup
    setup: PlaybookRun  # the setup.yml that set the ring up


@pytest.fixture(scope="session")
def cable_ring(tmp_path_factory):
    """3 hosts cabled in a ring (thunderbolt_topology: cables; no bridge0, one point-to-point
    link per cable, en2 and en3 on each host) after a --check --diff run of the thunderbolt role
    and a green setup.yml."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("cable-ring")
    with VirtualCluster(hosts=3, cables="ring", workdir=workdir / "vc",
                        extra_vars={"python_env_pip_extra_args": offline_pip_args()}) as vc:
        check = run_playbook("setup.yml", vc.inventory, workdir / "check",
                             cmdline="--check --diff --tags thunderbolt")
        setup = run_playbook("setup.yml", vc.inventory, workdir / "setup")
        assert setup.status == "successful", setup.stdout[-6000:]
        yield CableRing(vc, workdir, check, setup)
