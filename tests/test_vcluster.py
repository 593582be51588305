"""The virtual Thunderbolt cluster harness builds isolated hosts and removes every trace."""

import json
import os
import pwd
import re
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
    cable_links = {name for c in vc.cables for name in (c.a_if, c.b_if, f"c{c.index}a")}
    found += [f"cable link {link['ifname']}" for link in links if link["ifname"] in cable_links]
    for user in {h.user for h in vc.hosts}:
        if user in {entry.pw_name for entry in pwd.getpwall()}:
            found.append(f"user {user}")
        if Path("/home", user).exists():
            found.append(f"home /home/{user}")
    routes = subprocess.run(["ip", "route", "show", "type", "unreachable"], capture_output=True)
    subnets = {str(vc.thunderbolt_subnet), str(vc.mgmt_subnet)}
    found += [f"route {r}" for r in routes.stdout.decode().splitlines()
              if subnets & set(r.split())]
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
    """Capped after it was built (set_cpus, as a test of the shared clusters does): what the
    host runs from then on, its ssh logins included, runs under the cap until it is lifted."""
    busy = "timeout 3 sh -c 'while :; do :; done'"

    def throttled(host) -> int:  # periods in which the cap stopped the host (v1 and v2)
        stat = (cpu_cgroup_dirs(host.name)[0] / "cpu.stat").read_text().split()
        return int(stat[stat.index("nr_throttled") + 1])

    with VirtualCluster(hosts=1, workdir=tmp_path / "vc") as vc:
        host = vc.hosts[0]
        vc.set_cpus(0.2)
        start = vc.cpu_seconds(host)
        controller_ssh(vc, host, busy)  # what an ssh login starts runs under the cap
        assert 0.3 < vc.cpu_seconds(host) - start < 0.9  # 0.2 CPU for 3 s
        assert throttled(host) > 10
        vc.set_cpus(None)
        before = throttled(host)
        controller_ssh(vc, host, busy)
        assert throttled(host) == before
    assert leftovers(vc) == []


# ----- cables -------------------------------------------------------------------------------
def links(vc, host) -> dict[str, dict]:
    return {link["ifname"]: link for link in json.loads(vc.run(host, "ip -j addr").stdout)}


def cable_addresses(vc) -> dict[tuple[str, str], str]:
    """(host, port) -> a test address: a /30 per cable from the cluster's own 198.19.k.0/24."""
    nets = vc.thunderbolt_subnet.subnets(new_prefix=30)
    return {end: str(ip) for cable, net in zip(vc.cables, nets, strict=False)
            for end, ip in zip(cable.ends, net.hosts(), strict=True)}


def address_cables(vc) -> dict[tuple[str, str], str]:
    addresses = cable_addresses(vc)
    for (host, port), ip in addresses.items():
        vc.run(host, f"ip addr add {ip}/30 dev {port}")
    return addresses


def received(vc, host, port, address, count=3, size=56, wait=3) -> int:
    out = vc.run(host, f"ping -c {count} -s {size} -i 0.05 -W {wait} -I {port} {address}",
                 check=False).stdout
    found = re.search(r"(\d+) received", out)
    return int(found.group(1)) if found else 0


def neighbours_off_cable(vc, addresses) -> list[str]:
    """From every port, ask (ARP) for every address of the hosts that are not on its cable, with a
    route for the whole pool through each port (ping -I picks the port's) so that routing cannot
    stop the question, only the wiring: the addresses that answered."""
    peers = {}
    for c in vc.cables:
        peers[c.a, c.a_if], peers[c.b, c.b_if] = c.b, c.a
    answered = []
    for h in vc.hosts:
        asks = {port: [ip for (other, _), ip in addresses.items() if other not in (h.name, peer)]
                for (host, port), peer in peers.items() if host == h.name}
        routes = [f"{vc.thunderbolt_subnet} dev {port} metric {900 + n}"
                  for n, port in enumerate(asks)]
        vc.run(h, "".join(f"ip route add {route}; " for route in routes)
               + "".join(f"ping -c 1 -W 1 -I {port} {ip} >/dev/null & "
                         for port, ips in asks.items() for ip in ips)
               + "wait; " + "".join(f"ip route del {route}; " for route in routes))
        for port, ips in asks.items():
            neighbours = json.loads(vc.run(h, f"ip -j neigh show dev {port}").stdout)
            answered += [f"{h.name} {port} -> {n['dst']}" for n in neighbours
                         if n["dst"] in ips and "lladdr" in n]
    return answered


RING_3 = ["1 en2 2 en2", "2 en3 3 en2", "3 en3 1 en3"]
MESH_4 = ["1 en2 2 en2", "1 en3 3 en2", "1 en4 4 en2", "2 en3 3 en3", "2 en4 4 en3", "3 en4 4 en4"]


@pytest.mark.parametrize(("topology", "hosts", "expected"),
                         [("ring", 3, RING_3), ("mesh", 4, MESH_4)], ids=["ring-3", "mesh-4"])
def test_cables_are_point_to_point_links_that_can_be_unplugged(vcluster, topology, hosts,
                                                                expected):
    vc = vcluster(hosts=hosts, cables=topology)
    name = {str(h.index): h.name for h in vc.hosts}
    want = [[name[a], a_if, name[b], b_if] for a, a_if, b, b_if in map(str.split, expected)]
    assert [[c.a, c.a_if, c.b, c.b_if] for c in vc.cables] == want

    inventory = yaml.safe_load(Path(vc.inventory).read_text())["cluster"]
    assert inventory["vars"]["thunderbolt_topology"] == "cables"
    assert inventory["vars"]["thunderbolt_cables"] == want
    assert inventory["vars"]["thunderbolt_cable_pool"] == str(vc.thunderbolt_subnet)
    assert not any("thunderbolt_ip" in h for h in inventory["hosts"].values())

    for h in vc.hosts:  # no bridge0: its ports, up, without IPv4 addresses
        ports = {port for c in vc.cables for host, port in c.ends if host == h.name}
        found = links(vc, h)
        assert set(found) == {"lo", "en0", *ports}
        for port in ports:
            assert {"UP", "LOWER_UP"} <= set(found[port]["flags"])
            assert [a for a in found[port]["addr_info"] if a["family"] == "inet"] == []

    addresses = address_cables(vc)
    for c in vc.cables:
        assert received(vc, c.a, c.a_if, addresses[c.b, c.b_if]) == 3, c
    assert neighbours_off_cable(vc, addresses) == []

    # Bytes are counted on the cable that carries them, at both ends, and not on another one
    # of the same host (20 pings of 1042-byte frames each way).
    first = vc.cables[0]
    other_end, other_far = next((end, far) for c in vc.cables[1:]
                                for end, far in (c.ends, c.ends[::-1]) if end[0] == first.a)
    ends = [*first.ends, other_end]
    before = [vc.iface_bytes(*end) for end in ends]
    assert received(vc, first.a, first.a_if, addresses[first.b, first.b_if], 20, 1000) == 20
    moved = [(rx1 - rx0, tx1 - tx0)
             for (rx0, tx0), (rx1, tx1) in zip(before, [vc.iface_bytes(*e) for e in ends],
                                               strict=True)]
    assert all(20 * 1042 <= n < 30 * 1042 for n in moved[0] + moved[1]), moved
    assert all(n < 5 * 1042 for n in moved[2]), moved

    # Unplugged: both ports lose the carrier and stay so whatever the hosts do; plugged: back.
    vc.cable_down(first)
    for host, port in first.ends:
        vc.run(host, f"ip link set {port} up")
        assert {"UP", "NO-CARRIER"} <= set(links(vc, host)[port]["flags"])
    assert received(vc, first.a, first.a_if, addresses[first.b, first.b_if], 2, wait=1) == 0
    assert received(vc, *other_end, addresses[other_far]) == 3
    vc.cable_up(first.index)
    for host, port in first.ends:
        assert "LOWER_UP" in links(vc, host)[port]["flags"]
    assert received(vc, first.a, first.a_if, addresses[first.b, first.b_if]) == 3

    assert leftovers(vc)
    vc.down()
    assert leftovers(vc) == []


def test_cli_cables_given_as_pairs_shaped_listed_and_removed(tmp_path):
    workdir = tmp_path / "vc"
    cli = [sys.executable, "-m", "tools.vcluster"]
    up = subprocess.run(
        [*cli, "up", "--hosts", "3", "--cables", "0-1,1-2", "--shape", "en2=100mbit,en0=1gbit",
         "--dir", str(workdir)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    vc = VirtualCluster.load(workdir) if (workdir / "state.json").exists() else None
    try:
        assert up.returncode == 0, up.stderr
        h1, h2, h3 = (h.name for h in vc.hosts)
        chain = [[h1, "en2", h2, "en2"], [h2, "en3", h3, "en2"]]
        assert [[c.a, c.a_if, c.b, c.b_if] for c in vc.cables] == chain
        listed = subprocess.run([*cli, "list"], cwd=ROOT, capture_output=True, text=True)
        assert f"{vc.id}  {workdir}\n  cable 0: {h1} en2 <-> {h2} en2\n  cable 1: {h2} en3 <-> " \
            f"{h3} en2\n" in listed.stdout

        # Each en2 is shaped both ways (its own egress and its wire's towards it); en3 is not.
        wiring = ["ip", "netns", "exec", vc.switch_netns, "tc", "qdisc", "show", "dev"]
        for c in vc.cables:
            for side, (host, port) in zip("ab", c.ends, strict=True):
                tbf = [port == "en2"] * 2
                assert ["rate 100Mbit" in vc.run(host, f"tc qdisc show dev {port}").stdout,
                        "rate 100Mbit" in subprocess.run([*wiring, f"c{c.index}{side}"],
                                                         capture_output=True, text=True).stdout
                        ] == tbf, (c, side)
        for h in vc.hosts:
            assert "rate 1Gbit" in vc.run(h, "tc qdisc show dev en0").stdout

        addresses = address_cables(vc)
        for c in vc.cables:
            assert received(vc, c.a, c.a_if, addresses[c.b, c.b_if]) == 3, c
        assert neighbours_off_cable(vc, addresses) == []  # h1 and h3 are not cabled: unreachable
        assert leftovers(vc)
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(workdir)], cwd=ROOT, capture_output=True)
    assert down.returncode == 0, down.stderr
    assert leftovers(vc) == []
