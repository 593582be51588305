"""The virtual Thunderbolt cluster harness builds isolated hosts and removes every trace."""

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.vcluster import ClusterError, VirtualCluster, cpu_cgroup_dirs

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[1]


def controller_ssh(vc, host, command):
    return subprocess.run(vc.ssh_argv(host, command), capture_output=True, text=True, timeout=60)


def leftovers(vc) -> list[str]:
    """Everything of this cluster still present on the machine."""
    found = [f"netns {n}" for n in os.listdir("/run/netns") if n.startswith(vc.prefix)]
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True).stdout)
    found += [f"link {link['ifname']}" for link in links if link["ifname"].startswith(vc.prefix)]
    for user in {h.user for h in vc.hosts}:
        if user in {entry.pw_name for entry in pwd.getpwall()}:
            found.append(f"user {user}")
        if Path("/home", user).exists():
            found.append(f"home /home/{user}")
    routes = subprocess.run(["ip", "route", "show", "type", "unreachable"], capture_output=True)
    subnet = str(vc.thunderbolt_subnet)
    found += [f"route {r}" for r in routes.stdout.decode().splitlines() if subnet in r.split()]
    if Path(f"/etc/sudoers.d/vcluster-{vc.id}").exists():
        found.append("sudoers file")
    if vc.dir.exists():
        found.append(f"dir {vc.dir}")
    found += [f"cgroup {d}" for h in vc.hosts for d in cpu_cgroup_dirs(h.name) if d.exists()]
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [f"process {p}" for p in procs.splitlines() if str(vc.dir) in p]
    return found


def test_hosts_have_own_hostname_home_host_keys_and_ssh_login(vcluster):
    vc = vcluster(hosts=2)
    h1, h2 = vc.hosts
    assert [vc.run(h, "hostname").stdout.strip() for h in vc.hosts] == [h1.name, h2.name]
    assert h1.name != h2.name

    for h in vc.hosts:
        login = controller_ssh(vc, h, "hostname && sudo -n true && id -un && echo $HOME")
        assert login.returncode == 0, login.stderr
        assert login.stdout.split() == [h.name, h.user, h.home]

    vc.run(h1, "echo only-on-1 > ~/marker", user=h1.user)
    assert vc.run(h1, "cat ~/marker", user=h1.user).stdout == "only-on-1\n"
    assert vc.run(h2, "test -e ~/marker", user=h2.user, check=False).returncode == 1

    marker = f"/root/vcluster-{vc.id}-marker"
    vc.run(h1, f"touch {marker}")
    assert vc.run(h2, f"test -e {marker}", check=False).returncode == 1
    assert not Path(marker).exists()

    tmp_marker = f"/tmp/vcluster-{vc.id}-marker"  # each host its own /tmp
    vc.run(h1, f"touch {tmp_marker}", user=h1.user)
    assert vc.run(h1, f"test -e {tmp_marker}", check=False).returncode == 0
    assert vc.run(h2, f"test -e {tmp_marker}", check=False).returncode == 1
    assert not Path(tmp_marker).exists()
    for h in vc.hosts:
        assert vc.run(h, f"cat {h.workdir}/hosts").stdout.endswith(f"\t{h.name}\n")

    keys = [vc.run(h, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for h in vc.hosts]
    own = Path("/etc/ssh/ssh_host_ed25519_key.pub")
    assert len({*keys, own.read_text().split()[1] if own.exists() else ""}) == 3
    pinned = Path(vc.known_hosts).read_text()
    assert f"{h1.en0_ip} ssh-ed25519 {keys[0]}" in pinned
    assert f"{h2.en0_ip} ssh-ed25519 {keys[1]}" in pinned


def test_bridge0_is_a_segment_between_hosts_only(vcluster):
    vc = vcluster(hosts=3, slots=[2, 1, 0])
    h1, h2, _ = vc.hosts
    for h in vc.hosts:
        (link,) = json.loads(vc.run(h, "ip -j addr show dev bridge0").stdout)
        assert "UP" in link["flags"]
        assert [a for a in link["addr_info"] if a["family"] == "inet"] == []

    for h in (h1, h2):
        vc.run(h, f"ip addr add {h.thunderbolt_ip}/24 dev bridge0")
    before = vc.iface_bytes(h2, "bridge0")
    ping = vc.run(h1, f"ping -c 3 -i 0.2 -W 2 -I bridge0 {h2.thunderbolt_ip}", user=h1.user)
    assert "3 received" in ping.stdout
    after = vc.iface_bytes(h2, "bridge0")
    assert after[0] - before[0] >= 3 * 84 and after[1] - before[1] >= 3 * 84

    from_controller = subprocess.run(
        ["ping", "-c", "1", "-W", "1", h2.thunderbolt_ip], capture_output=True, text=True
    )
    assert from_controller.returncode != 0
    over_en0 = subprocess.run(["ping", "-c", "1", "-W", "2", h2.en0_ip], capture_output=True)
    assert over_en0.returncode == 0

    inventory = yaml.safe_load(Path(vc.inventory).read_text())["cluster"]
    assert [inventory["hosts"][h.name]["mpi_slots"] for h in vc.hosts] == [2, 1, 0]
    assert "StrictHostKeyChecking=yes" in inventory["vars"]["ansible_ssh_common_args"]


def test_cli_builds_distinct_users_shaped_links_and_down_removes_everything(tmp_path):
    workdir = tmp_path / "vc"
    cli = [sys.executable, "-m", "tools.vcluster"]
    up = subprocess.run(
        [*cli, "up", "--hosts", "3", "--distinct-users", "--shape", "bridge0=10gbit,en0=1gbit",
         "--var", "python_env_pip_extra_args=--no-index", "--var", "flag=true",
         "--dir", str(workdir)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    vc = VirtualCluster.load(workdir) if (workdir / "state.json").exists() else None
    try:
        assert up.returncode == 0, up.stderr
        inventory = yaml.safe_load(Path(vc.inventory).read_text())["cluster"]
        assert inventory["vars"]["python_env_pip_extra_args"] == "--no-index"
        assert inventory["vars"]["flag"] is True
        assert len({h["ansible_user"] for h in inventory["hosts"].values()}) == 3
        for h in vc.hosts:
            login = controller_ssh(vc, h, "id -un")
            assert login.stdout.strip() == h.user, login.stderr
            for dev in ("en0", "thunderbolt0"):
                assert "tbf" in vc.run(h, f"tc qdisc show dev {dev}").stdout
        assert leftovers(vc)
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(workdir)], cwd=ROOT, capture_output=True)
    assert down.returncode == 0, down.stderr
    assert leftovers(vc) == []
    again = subprocess.run([*cli, "down", "--dir", str(workdir)], cwd=ROOT, capture_output=True)
    assert again.returncode == 0


def test_failed_up_cleans_up_before_raising(tmp_path, monkeypatch):
    vc = VirtualCluster(hosts=2, workdir=tmp_path / "vc")
    real = VirtualCluster._start_sshd

    def fail_on_second_host(self, host):
        if host.index == 2:
            raise ClusterError("injected failure")
        real(self, host)

    monkeypatch.setattr(VirtualCluster, "_start_sshd", fail_on_second_host)
    with pytest.raises(ClusterError, match="injected"):
        vc.up()
    assert vc.id and leftovers(vc) == []


def test_context_manager_tears_down_when_the_body_raises(tmp_path):
    with pytest.raises(RuntimeError), VirtualCluster(hosts=1, workdir=tmp_path / "vc") as vc:
        assert vc.run(vc.hosts[0], "hostname").stdout.strip() == vc.hosts[0].name
        raise RuntimeError("test body failed")
    assert leftovers(vc) == []


def test_cpus_caps_all_a_host_runs_and_down_removes_its_cgroup(tmp_path):
    busy = "timeout 3 sh -c 'while :; do :; done'"

    def throttled(host) -> int:  # periods in which the cap stopped the host (v1 and v2)
        stat = (cpu_cgroup_dirs(host.name)[0] / "cpu.stat").read_text().split()
        return int(stat[stat.index("nr_throttled") + 1])

    with VirtualCluster(hosts=1, cpus=0.2, workdir=tmp_path / "vc") as vc:
        host = vc.hosts[0]
        start = vc.cpu_seconds(host)
        controller_ssh(vc, host, busy)  # what an ssh login starts runs under the cap
        assert 0.3 < vc.cpu_seconds(host) - start < 0.9  # 0.2 CPU for 3 s
        assert throttled(host) > 10
        vc.set_cpus(None)
        before = throttled(host)
        vc.run(host, busy, check=False)
        assert throttled(host) == before
    assert leftovers(vc) == []
