"""The ssh_mesh role and its reset on a virtual cluster, driven through ansible-runner.

Asserted for real inside the hosts: logins between every pair with strict host key
checking, the user's own lines surviving setup and reset byte for byte, a changed host
key failing the verification with the pair named."""

import json
import textwrap
from pathlib import Path

import pytest

from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

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
USER_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop"
)
USER_HOST_KEY = " ".join(USER_KEY.split()[:2])
# Global lines before any Host: they must keep applying to every host after setup.
USER_CONFIG = "ServerAliveInterval 42\n\nHost userhost\n    User someone\n"
MODES = {
    ".ssh": "700",
    ".ssh/mlx_cluster_ed25519": "600",
    ".ssh/authorized_keys": "600",
    ".ssh/known_hosts": "600",
    ".ssh/config": "600",
}
STRICT = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5"]


def playbook(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def give_bridge0_addresses(vc):
    """What the thunderbolt role does, so the mesh is checked over the MPI addresses."""
    for host in vc.hosts:
        vc.run(host.name, ["ip", "addr", "add", f"{host.thunderbolt_ip}/24", "dev", "bridge0"])


def seed_user_files(vc):
    """Lines the user had before setup; returns each host's ~/.ssh files as they were."""
    before = {}
    for host in vc.hosts:
        script = f"""
            set -e
            echo '{USER_KEY}' >> ~/.ssh/authorized_keys
            echo 'userhost.example {USER_HOST_KEY}' >> ~/.ssh/known_hosts
            printf '{USER_CONFIG}' > ~/.ssh/config && chmod 600 ~/.ssh/config
            ssh-keygen -q -t ed25519 -N '' -C own-key -f ~/.ssh/id_ed25519
        """
        vc.run(host.name, textwrap.dedent(script), user=host.user)
        before[host.name] = ssh_files(vc, host)
    return before


def ssh_files(vc, host) -> dict:
    names = ["authorized_keys", "known_hosts", "config", "id_ed25519", "id_ed25519.pub"]
    return {n: vc.run(host.name, ["cat", f"{host.home}/.ssh/{n}"]).stdout for n in names}


def login(vc, source, address):
    return vc.run(source.name, ["ssh", *STRICT, address, "hostname"], user=source.user, check=False)


def test_mesh_logs_in_everywhere_keeps_user_lines_and_resets_exactly(vcluster, tmp_path):
    vc = vcluster(hosts=3, distinct_users=True)
    give_bridge0_addresses(vc)
    before = seed_user_files(vc)
    mesh = playbook(tmp_path, "mesh.yml", MESH_PLAY)

    dry = run_playbook(mesh, vc.inventory, tmp_path / "dry", cmdline="--check --diff")
    assert dry.status == "successful", dry.stdout[-6000:]
    assert {h.name: ssh_files(vc, h) for h in vc.hosts} == before

    first = run_playbook(mesh, vc.inventory, tmp_path / "first")
    assert first.status == "successful", first.stdout[-6000:]
    second = run_playbook(mesh, vc.inventory, tmp_path / "second")
    assert second.status == "successful", second.stdout[-6000:]
    assert second.changed() == []
    assert set(second.stats["changed"].values()) <= {0}
    assert set(second.stats["ok"]) == {h.name for h in vc.hosts}

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
        settings = vc.run(source.name, "ssh -G userhost", user=source.user).stdout
        assert "serveraliveinterval 42" in settings and "user someone" in settings

    reset = run_playbook("reset.yml", vc.inventory, tmp_path / "reset", cmdline="--tags ssh_mesh")
    assert reset.status == "successful", reset.stdout[-6000:]
    for host in vc.hosts:
        assert ssh_files(vc, host) == before[host.name]
        left = vc.run(host.name, f"ls {host.home}/.ssh").stdout.split()
        assert not [f for f in left if f.startswith("mlx_cluster")]
        other = vc.hosts[0] if host is not vc.hosts[0] else vc.hosts[1]
        assert login(vc, host, other.thunderbolt_ip).returncode != 0


def test_changed_host_key_fails_the_verification_naming_each_pair(vcluster, tmp_path):
    vc = vcluster(hosts=3)
    give_bridge0_addresses(vc)
    # Reset on hosts that never had the mesh (no ~/.ssh/config yet) changes nothing.
    noop = run_playbook("reset.yml", vc.inventory, tmp_path / "noop", cmdline="--tags ssh_mesh")
    assert noop.status == "successful", noop.stdout[-6000:]
    assert noop.changed() == []
    mesh = playbook(tmp_path, "mesh.yml", MESH_PLAY)
    first = run_playbook(mesh, vc.inventory, tmp_path / "first")
    assert first.status == "successful", first.stdout[-6000:]

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
    assert verify.status == "failed"
    [failure] = verify.task_results("runner_on_failed")
    message = failure["res"]["msg"]
    for source in (vc.hosts[0], vc.hosts[2]):
        pair = f"{source.name} -> {changed.name} ({changed.thunderbolt_ip})"
        assert f"{pair}: Host key verification failed." in message, message
    assert f"{changed.name} -> " not in message  # host 2 itself still reaches the others

    # Setup pins the host's real keys again, and the mesh is whole.
    again = run_playbook(mesh, vc.inventory, tmp_path / "again")
    assert again.status == "successful", again.stdout[-6000:]
