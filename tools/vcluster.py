"""A virtual Thunderbolt cluster: N test hosts on one Linux machine, built from namespaces.

Each host is a network namespace plus a persistent mount + UTS namespace, so it has its own
hostname, its own /home/<user>, /etc/ssh (own host keys), /etc/hosts and /dev/shm, and its own
sshd. `en0` sits on a management bridge in the root namespace (the controller, 198.18.<k>.1);
`bridge0` is a Linux bridge whose port `thunderbolt0` is cabled to a switch namespace the
controller is not on. With cables (chain, ring, mesh or given pairs of hosts) there is no bridge0
and no shared segment: each cable is a point-to-point link between two hosts' ports en2, en3, ...
(numbered per host in the order of its cables), up and without addresses. Everything is recorded
in DIR/state.json before it is created, so `down` removes exactly what `up` made, even after a
crash halfway.

    python -m tools.vcluster up --hosts 2 [--slots 1,2] [--distinct-users]
        [--cables chain|ring|mesh|0-1,1-2,...] [--shape bridge0=10gbit,en0=1gbit,en2=10gbit]
        [--cpus 0.2] [--var key=value ...] --dir DIR
    python -m tools.vcluster run --dir DIR [--user] HOST -- CMD...
    python -m tools.vcluster down --dir DIR
    python -m tools.vcluster list

Inside a host: /etc/ssh, /home/<user> (a tmpfs), /etc/hosts, /tmp and /dev/shm are the host's own,
/root is a per-host copy-on-write overlay, everything else (/usr, /etc, /opt) is the machine's; DIR
stays at its path. Hosts have no default route (only 198.18.<k>.0/24 on en0), so nothing they send
can leave the machine.
With --cpus, each host (its sshd and all it starts) runs in its own CPU cgroup capped at that
many CPUs, so hosts keep a fixed speed however many share this machine, as separate Macs do.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import fcntl
import grp
import ipaddress
import itertools
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

MGMT_SUPERNET = ipaddress.ip_network("198.18.0.0/16")
TB_SUPERNET = ipaddress.ip_network("198.19.0.0/16")
LOCK_FILE = Path("/run/lock/vcluster.lock")
REGISTRY = Path("/run/vcluster")  # <id> -> DIR of every cluster that is up
SUDOERS_DIR = Path("/etc/sudoers.d")
CABLE_TOPOLOGIES = ("chain", "ring", "mesh")
HOST_KEY_TYPES = ("ed25519", "ecdsa")
RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit)$")
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


class ClusterError(RuntimeError):
    """The virtual cluster could not be built, used or removed."""


class CommandError(subprocess.CalledProcessError):
    """A command failed; unlike CalledProcessError, str() shows its output."""

    def __str__(self) -> str:
        cmd = self.cmd if isinstance(self.cmd, str) else shlex.join(self.cmd)
        return (
            f"command exited {self.returncode}: {cmd}\n"
            f"stdout: {(self.stdout or '').strip()}\nstderr: {(self.stderr or '').strip()}"
        )


@dataclasses.dataclass
class Host:
    name: str  # inventory name == hostname
    netns: str
    user: str
    home: str  # /home/<user> as seen inside the host
    en0_ip: str
    thunderbolt_ip: str | None  # bridge0's, for the inventory (it starts without); None: cables
    slots: int
    index: int  # 1-based
    workdir: str  # DIR/<name> on the controller: home, etc-ssh, sshd.log

    @property
    def mnt_ns(self) -> str:
        return str(Path(self.workdir).parent / "ns" / f"{self.name}.mnt")

    @property
    def uts_ns(self) -> str:
        return str(Path(self.workdir).parent / "ns" / f"{self.name}.uts")


@dataclasses.dataclass
class Cable:
    """A Thunderbolt cable: host a's port a_if joined to host b's port b_if, nothing else.
    Each port is a veth whose other end, c<index>a or c<index>b, is a port of bridge c<index>
    in the wiring namespace (vc.switch_netns): the wire, which tests can cut or shape."""

    index: int  # 0-based position in vc.cables
    a: str  # inventory name of a host
    a_if: str  # its port: en2, en3, ...
    b: str
    b_if: str

    @property
    def ends(self) -> list[tuple[str, str]]:
        return [(self.a, self.a_if), (self.b, self.b_if)]

    def __str__(self) -> str:
        return f"cable {self.index}: {self.a} {self.a_if} <-> {self.b} {self.b_if}"


def sh(argv: list[str], check: bool = True, timeout: float = 60, **kw):
    """Run argv, capture text output; raise CommandError (showing the output) on failure."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode:
        raise CommandError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def cable_pairs(spec: str | list | None, hosts: int) -> list[tuple[int, int]]:
    """The hosts (0-based positions) each cable joins: 'chain', 'ring', 'mesh', or explicit pairs,
    '0-1,1-2' or [(0, 1), (1, 2)]. Two cables may join the same two hosts, as on real Macs."""
    if not spec:
        return []
    if spec in CABLE_TOPOLOGIES:
        need = 3 if spec == "ring" else 2
        if hosts < need:
            raise ClusterError(f"cables={spec} needs at least {need} hosts, not {hosts}")
        if spec == "mesh":
            return list(itertools.combinations(range(hosts), 2))
        return [(i, i + 1) for i in range(hosts - 1)] + ([(hosts - 1, 0)] if spec == "ring" else [])
    usage = (f"cables={spec!r}: use {', '.join(CABLE_TOPOLOGIES)}, or pairs of 0-based host "
             "positions such as 0-1,1-2")
    if isinstance(spec, str):
        items = [item.split("-") for item in spec.split(",") if item]
        if not all(len(item) == 2 and all(x.isdigit() for x in item) for item in items):
            raise ClusterError(usage)
        spec = [[int(x) for x in item] for item in items]
    pairs = [tuple(pair) for pair in spec]
    if not pairs or not all(
        len(p) == 2 and all(type(x) is int for x in p) and p[0] != p[1] for p in pairs
    ):
        raise ClusterError(f"{usage} (two different hosts per cable)")
    if any(not 0 <= x < hosts for p in pairs for x in p):
        raise ClusterError(f"cables={spec!r}: host positions go from 0 to {hosts - 1}")
    return pairs


def parse_shape(shape: str | dict | None, ifaces: tuple[str, ...]) -> dict[str, str]:
    """'bridge0=10gbit,en0=1gbit' -> {'bridge0': '10gbit', 'en0': '1gbit'}, validated against the
    interfaces the cluster's hosts have."""
    if not shape:
        return {}
    if isinstance(shape, str):
        pairs = [item.split("=", 1) for item in shape.split(",") if item]
        if any(len(p) != 2 for p in pairs):
            raise ClusterError(f"--shape {shape!r}: use IFACE=RATE,..., e.g. en0=1gbit")
        shape = dict(pairs)
    for iface, rate in shape.items():
        if iface not in ifaces:
            raise ClusterError(f"--shape: unknown interface {iface!r}; use one of {ifaces}")
        if not RATE_RE.match(rate):
            raise ClusterError(f"--shape {iface}={rate!r}: rate must look like 10gbit, 500mbit")
    return dict(shape)


def rate_bits_per_second(rate: str) -> float:
    """tc's rate ('10gbit', '500mbit') in bits per second."""
    value, unit = RATE_RE.match(rate).groups()
    return float(value) * RATE_UNITS[unit]


def tbf_args(rate: str) -> list[str]:
    """tc tbf with a bucket of ~4 ms of traffic (at least two 64 KiB GSO packets)."""
    bytes_per_s = rate_bits_per_second(rate) / 8
    burst = max(128 * 1024, int(bytes_per_s * 0.004))
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "20ms"]


def _ns_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _pids_in(ns_keys: set[tuple[int, int]], uids: set[int]) -> list[int]:
    """Processes inside any of the given namespaces or owned by any of the given uids."""
    own = {_ns_key(f"/proc/self/ns/{kind}") for kind in ("net", "mnt", "uts")}
    ns_keys = ns_keys - own  # never the controller's own namespaces
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid in uids or any(
                _ns_key(f"/proc/{entry}/ns/{kind}") in ns_keys for kind in ("net", "mnt", "uts")
            ):
                found.append(int(entry))
        except OSError:
            continue
    return found


def _kill_all(ns_keys: set[tuple[int, int]], uids: set[int]) -> None:
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        pids = _pids_in(ns_keys, uids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = _pids_in(ns_keys, uids)
        if not pids:
            return
    raise ClusterError(f"processes survived SIGKILL: {pids}")


def cpu_cgroup_dirs(name: str) -> list[Path]:
    """The cgroup directories that limit and count a host's CPU: one on cgroup v2, v1's cpu
    and cpuacct hierarchies otherwise (the same directory where they are mounted together)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / name]
    return list(dict.fromkeys((CGROUP_ROOT / kind).resolve() / name for kind in ("cpu", "cpuacct")))


def write_cpu_quota(path: Path, quota: int | None) -> None:
    """Let a CPU cgroup's processes run `quota` microseconds of each period (None: no cap)."""
    if (path / "cpu.max").exists():
        (path / "cpu.max").write_text(f"{quota or 'max'} {CPU_PERIOD_US}")
    else:
        (path / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(quota or -1))


def memory_cgroup_dir(name: str) -> Path:
    """The cgroup directory that caps a host's memory (cgroup v2's is also its CPU one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return CGROUP_ROOT / name
    return (CGROUP_ROOT / "memory").resolve() / name


def _retry_locked(argv: list[str]) -> None:
    """useradd/userdel fail while another process holds /etc/passwd's lock: retry a little."""
    for _ in range(40):
        proc = sh(argv, check=False)
        if proc.returncode == 0 or "lock" not in proc.stderr.lower():
            break
        time.sleep(0.25)
    if proc.returncode:
        raise CommandError(proc.returncode, argv, proc.stdout, proc.stderr)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if (point + "/").startswith(prefix):
            points.append(point)
    return points


class VirtualCluster:
    """`with VirtualCluster(hosts=2) as vc:` builds the cluster, and tears it down on exit.
    `cables` ('chain', 'ring', 'mesh', '0-1,1-2' or [(0, 1), (1, 2)]) cables the hosts point to
    point instead of bridging them (see Cable)."""

    def __init__(
        self,
        hosts: int = 2,
        slots: list[int] | None = None,
        distinct_users: bool = False,
        cables: str | list | None = None,
        shape: str | dict | None = None,
        cpus: float | None = None,
        extra_vars: dict | None = None,
        workdir: str | os.PathLike | None = None,
    ) -> None:
        if not 1 <= hosts <= 200:
            raise ClusterError(f"hosts={hosts}: use 1..200")
        self.slots = list(slots) if slots else [1] * hosts
        if len(self.slots) != hosts or any(int(s) < 0 for s in self.slots):
            raise ClusterError(f"slots={slots}: give {hosts} non-negative integers, e.g. 1,2")
        self.n_hosts = hosts
        self.distinct_users = distinct_users
        self.cable_pairs = cable_pairs(cables, hosts)
        ports = max(collections.Counter(itertools.chain(*self.cable_pairs)).values(), default=0)
        self.shape = parse_shape(shape, ("en0", *(f"en{2 + n}" for n in range(ports)))
                                 if self.cable_pairs else ("bridge0", "en0"))
        if cpus is not None and not 0.01 <= cpus <= os.cpu_count():
            raise ClusterError(f"cpus={cpus}: give a share of this machine, 0.01..{os.cpu_count()}")
        self.cpus = cpus
        self.extra_vars = dict(extra_vars or {})
        self.dir = Path(workdir).resolve() if workdir else None
        self.id = ""
        self.k = 0
        self.hosts: list[Host] = []
        self.cables: list[Cable] = []
        self.resources: list[dict] = []
        self.created_dir = False
        self.owns_state = False

    # ----- names and paths -------------------------------------------------------------
    @property
    def prefix(self) -> str:
        return f"vc{self.id}"

    @property
    def mgmt_bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def switch_netns(self) -> str:
        return f"{self.prefix}-tb"

    @property
    def controller_ip(self) -> str:
        return str(self.mgmt_subnet[1])

    @property
    def mgmt_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.18.{self.k}.0/24")

    @property
    def thunderbolt_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_network(f"198.19.{self.k}.0/24")

    @property
    def inventory(self) -> str:
        return str(self.dir / "inventory.yml")

    @property
    def controller_key(self) -> str:
        return str(self.dir / "controller_key")

    @property
    def known_hosts(self) -> str:
        return str(self.dir / "known_hosts")

    @property
    def users(self) -> list[str]:
        return sorted({h.user for h in self.hosts})

    @property
    def ssh_common_args(self) -> str:
        return (
            f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
            " -o IdentitiesOnly=yes"
        )

    def host(self, host: Host | str | int) -> Host:
        """A host by Host, inventory name, or 0-based position."""
        if isinstance(host, Host):
            return host
        if isinstance(host, int):
            return self.hosts[host]
        for h in self.hosts:
            if h.name == host:
                return h
        raise ClusterError(f"no host {host!r} in cluster {self.id}: {[h.name for h in self.hosts]}")

    def cable(self, cable: Cable | int) -> Cable:
        """A cable by Cable or 0-based position."""
        if isinstance(cable, Cable):
            return cable
        if not 0 <= cable < len(self.cables):
            raise ClusterError(f"no cable {cable} in cluster {self.id}: it has {len(self.cables)}")
        return self.cables[cable]

    # ----- state ----------------------------------------------------------------------
    def _save(self) -> None:
        state = {
            "id": self.id,
            "k": self.k,
            "created_dir": self.created_dir,
            "cpus": self.cpus,
            "hosts": [dataclasses.asdict(h) for h in self.hosts],
            "cables": [dataclasses.asdict(c) for c in self.cables],
            "resources": self.resources,
        }
        self.owns_state = True
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.dir / "state.json")

    def _record(self, kind: str, **what) -> None:
        """Note a resource *before* creating it, so an interrupted `up` is still cleaned."""
        self.resources.append({"kind": kind, **what})
        self._save()

    @classmethod
    def load(cls, workdir: str | os.PathLike) -> VirtualCluster:
        """The cluster described by DIR/state.json (to run commands in it or take it down)."""
        workdir = Path(workdir).resolve()
        state = json.loads((workdir / "state.json").read_text())
        vc = cls(hosts=max(1, len(state["hosts"])), workdir=workdir)
        vc.id, vc.k, vc.created_dir = state["id"], state["k"], state["created_dir"]
        vc.cpus = state.get("cpus")
        vc.hosts = [Host(**h) for h in state["hosts"]]
        vc.cables = [Cable(**c) for c in state.get("cables", [])]
        vc.resources = state["resources"]
        return vc

    # ----- up -------------------------------------------------------------------------
    def __enter__(self) -> VirtualCluster:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> VirtualCluster:
        if os.geteuid() != 0:
            raise ClusterError("the virtual cluster needs root (network and mount namespaces)")
        try:
            self._allocate()
            self._make_users()
            for host in self.hosts:
                self._make_host(host)
            for cable in self.cables:
                self._make_cable(cable)
            for host in self.hosts:
                self._wait_for_sshd(host)
            self._write_controller_files()
        except BaseException:
            if self.owns_state:  # never tear down a cluster another `up` left in DIR
                self.down()
            raise
        return self

    def _prepare_dir(self) -> None:
        if self.dir and not re.fullmatch(r"[\w./+-]+", str(self.dir)):
            raise ClusterError(f"--dir {self.dir}: use a path of letters, digits and ._+-/ only")
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="vcluster-"))
            self.created_dir = True
        elif not self.dir.exists():
            self.dir.mkdir(parents=True)
            self.created_dir = True
        elif (self.dir / "state.json").exists():
            raise ClusterError(f"a cluster is already up in {self.dir}; run `down --dir` first")
        elif any(self.dir.iterdir()):
            raise ClusterError(f"--dir {self.dir} is not empty; give a new or empty directory")
        self.dir.chmod(0o755)

    def _taken(self) -> tuple[set[str], list[ipaddress.IPv4Network]]:
        """Names and 198.18.0.0/15-relevant networks already in use on this machine."""
        netns = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        links = {link["ifname"] for link in json.loads(sh(["ip", "-j", "link"]).stdout)}
        nets = []
        for ns in [None, *netns]:
            prefix = ["ip", "-n", ns] if ns else ["ip"]
            addrs = json.loads(sh([*prefix, "-j", "-4", "addr"], check=False).stdout or "[]")
            for link in addrs:
                for a in link.get("addr_info", []):
                    nets.append(ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network)
        for route in json.loads(sh(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout):
            dst = route.get("dst", "default")
            if dst[0].isdigit():
                nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        return netns | links, nets

    def _allocate(self) -> None:
        """Pick a free id and subnet index k, and claim them (bridge, route) under a lock."""
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        with open(LOCK_FILE, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            names, nets = self._taken()
            names |= {u.pw_name for u in pwd.getpwall()} | set(os.listdir("/home"))
            names |= {g.gr_name for g in grp.getgrall()}
            for _ in range(100):
                self.id = secrets.token_hex(2)
                if not any(n.startswith(self.prefix) for n in names) and not Path(
                    SUDOERS_DIR, f"vcluster-{self.id}"
                ).exists():
                    break
            else:
                raise ClusterError("could not find a free cluster id")
            start = int(self.id, 16) % 254
            for step in range(254):
                self.k = (start + step) % 254 + 1
                if not any(
                    n.overlaps(self.mgmt_subnet) or n.overlaps(self.thunderbolt_subnet)
                    for n in nets
                    if n.prefixlen > 0
                ):
                    break
            else:
                raise ClusterError("no free /24 left in 198.18.0.0/15 for another cluster")
            self._prepare_dir()
            self.hosts = [self._host_spec(i) for i in range(1, self.n_hosts + 1)]
            self.cables = self._cable_specs()
            self._save()
            # A machine-wide list of clusters, so forgotten ones can be found (`list`).
            entry = REGISTRY / self.id
            self._record("file", path=str(entry))
            REGISTRY.mkdir(exist_ok=True)
            entry.write_text(f"{self.dir}\n")
            self._make_networks()

    def _host_spec(self, i: int) -> Host:
        user = f"{self.prefix}u{i}" if self.distinct_users else f"{self.prefix}u"
        return Host(
            name=f"{self.prefix}-{i}",
            netns=f"{self.prefix}-{i}",
            user=user,
            home=f"/home/{user}",
            en0_ip=str(self.mgmt_subnet[10 + i]),
            thunderbolt_ip=None if self.cable_pairs else str(self.thunderbolt_subnet[10 + i]),
            slots=int(self.slots[i - 1]),
            index=i,
            workdir=str(self.dir / f"{self.prefix}-{i}"),
        )

    def _cable_specs(self) -> list[Cable]:
        """Ports are numbered per host from en2 (en0 is management, en1 Wi-Fi on a Mac) in the
        order of the host's cables."""
        next_port = [2] * self.n_hosts
        cables = []
        for index, pair in enumerate(self.cable_pairs):
            ends = []
            for i in pair:
                ends += [self.hosts[i].name, f"en{next_port[i]}"]
                next_port[i] += 1
            cables.append(Cable(index, *ends))
        return cables

    def _make_networks(self) -> None:
        br = self.mgmt_bridge
        self._record("link", name=br)
        sh(["ip", "link", "add", br, "type", "bridge"])
        sh(["ip", "addr", "add", f"{self.controller_ip}/24", "dev", br])
        sh(["ip", "link", "set", br, "up"])
        # The controller is not on the Thunderbolt segment: fail fast instead of routing
        # its addresses to the default gateway.
        self._record("route", dst=str(self.thunderbolt_subnet))
        sh(["ip", "route", "add", "unreachable", str(self.thunderbolt_subnet)])
        # Nor to the hosts' management addresses while the bridge has no address of the
        # controller's (a test takes it away): below the bridge's own route, in its place.
        self._record("route", dst=str(self.mgmt_subnet))
        sh(["ip", "route", "add", "unreachable", str(self.mgmt_subnet), "metric", "4096"])
        # The Thunderbolt wiring: one switch all bridge0s are cabled to, or one wire per cable.
        self._record("netns", name=self.switch_netns)
        sh(["ip", "netns", "add", self.switch_netns])
        if not self.cables:
            sh(["ip", "-n", self.switch_netns, "link", "add", "switch0", "type", "bridge"])
            sh(["ip", "-n", self.switch_netns, "link", "set", "switch0", "up"])
        # ns files for the persistent mount/UTS namespaces must sit on a private mount.
        ns_dir = self.dir / "ns"
        ns_dir.mkdir()
        self._record("mount", path=str(ns_dir))
        sh(["mount", "--bind", str(ns_dir), str(ns_dir)])
        sh(["mount", "--make-private", str(ns_dir)])

    def _make_users(self) -> None:
        for user in self.users:
            home = Path(f"/home/{user}")
            self._record("user", name=user)
            _retry_locked(
                ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                 "--user-group", user]
            )
            # '*' (sudo_password) = no password but not locked, so sshd accepts key logins.
            self._record("homedir", path=str(home))
            home.mkdir(mode=0o755)
            shutil.chown(home, user, user)
        self._record("file", path=str(SUDOERS_DIR / f"vcluster-{self.id}"))
        self.sudo_password(None)

    def sudo_password(self, password: str | None) -> None:
        """None: passwordless sudo for the login users (as on a Mac set up for it); a password:
        sudo asks for it (as by default on Linux and macOS), and it is the users' password."""
        for user in self.users:
            _retry_locked(["usermod", "--password", "*", user] if password is None else
                          ["sh", "-c", f"echo {shlex.quote(f'{user}:{password}')} | chpasswd"])
        tag = "NOPASSWD: " if password is None else ""
        rules = "".join(f"{u} ALL=(ALL:ALL) {tag}ALL\n" for u in self.users)
        draft = self.dir / "sudoers"
        draft.write_text(f"# virtual cluster {self.id}\n{rules}")
        draft.chmod(0o440)
        sh(["visudo", "-cf", str(draft)])
        shutil.copy2(draft, SUDOERS_DIR / f"vcluster-{self.id}")

    def _make_host_files(self, host: Host) -> None:
        hdir = Path(host.workdir)
        home, etc_ssh = hdir / "home", hdir / "etc-ssh"
        hdir.mkdir()
        home.mkdir()
        # In RAM: setup installs tens of thousands of files there, which this machine's disk
        # takes minutes to write and to delete; `down` drops them all at once with the mount.
        self._record("mount", path=str(home))
        sh(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(home)])
        shutil.copytree("/etc/skel", home, dirs_exist_ok=True)
        (home / ".ssh").mkdir(mode=0o700)
        pub = Path(self.controller_key + ".pub").read_text()
        (home / ".ssh" / "authorized_keys").write_text(pub)
        (home / ".ssh" / "authorized_keys").chmod(0o600)
        home.chmod(0o755)
        for path in [home, *home.rglob("*")]:
            shutil.chown(path, host.user, host.user)
        etc_ssh.mkdir()
        for item in ("ssh_config", "ssh_config.d", "moduli"):
            src = Path("/etc/ssh") / item
            if src.is_dir():
                shutil.copytree(src, etc_ssh / item)
            elif src.exists():
                shutil.copy2(src, etc_ssh / item)
        for kind in HOST_KEY_TYPES:
            sh(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"root@{host.name}",
                "-f", str(etc_ssh / f"ssh_host_{kind}_key")])
        (etc_ssh / "sshd_config").write_text(
            f"# sshd of virtual host {host.name}\n"
            "Port 22\nListenAddress 0.0.0.0\n"
            + "".join(f"HostKey /etc/ssh/ssh_host_{kind}_key\n" for kind in HOST_KEY_TYPES)
            + f"PidFile {hdir}/sshd.pid\n"
            "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin no\nPubkeyAuthentication yes\n"
            "AuthorizedKeysFile .ssh/authorized_keys\n"
            f"AllowUsers {host.user}\n"
            # Ansible forks and mpirun open many sessions at once.
            "MaxStartups 200\nMaxSessions 100\n"
            "PrintMotd no\nAcceptEnv LANG LC_*\n"
            # The hosts share this machine's cores, which a Mac has to itself: an Open MPI
            # rank waiting for its peers yields its core rather than spinning on it, or the
            # ranks' polling starves the ranks doing the work (a 4-rank job 5 times slower).
            "SetEnv OMPI_MCA_mpi_yield_when_idle=1\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        )
        for layer in ("upper", "work"):
            (hdir / "root" / layer).mkdir(parents=True, mode=0o700)
        (hdir / "tmp").mkdir()
        (hdir / "tmp").chmod(0o1777)
        if self.dir.is_relative_to("/tmp"):
            (hdir / "tmp" / self.dir.relative_to("/tmp")).mkdir(parents=True)
        hosts = Path("/etc/hosts").read_text()
        (hdir / "hosts").write_text(f"{hosts.rstrip()}\n127.0.1.1\t{host.name}\n")

    def _make_host(self, host: Host) -> None:
        if not Path(self.controller_key).exists():
            sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"controller@vc{self.id}",
                "-f", self.controller_key])
        self._make_host_files(host)
        ns, i = host.netns, host.index
        self._record("netns", name=ns)
        sh(["ip", "netns", "add", ns])
        # en0: management link to the controller's bridge.
        root_end = f"{self.prefix}e{i}"
        self._record("link", name=root_end)
        sh(["ip", "link", "add", root_end, "type", "veth", "peer", "name", "en0", "netns", ns])
        sh(["ip", "link", "set", root_end, "addrgenmode", "none"])
        sh(["ip", "link", "set", root_end, "master", self.mgmt_bridge, "up"])
        sh(["ip", "-n", ns, "addr", "add", f"{host.en0_ip}/24", "dev", "en0"])
        for link in ("lo", "en0"):
            sh(["ip", "-n", ns, "link", "set", link, "up"])
        if "en0" in self.shape:
            self._shape(self.link_ends(host, "en0"), self.shape["en0"])
        # With cables there is no bridge0 at all, as on Macs with the Thunderbolt Bridge off
        # (cables mode requires it off): a bridge without ports could only mislead a test.
        if not self.cables:
            self._make_bridge0(host)
        self._make_mount_ns(host)
        if self.cpus is not None:
            self._make_cpu_cgroup(host)
        self._start_sshd(host)

    @staticmethod
    def _shape(ends: list[tuple[str | None, str]], rate: str | None) -> None:
        """Shape the egress of both ends of a link: both directions (rate None: unshape)."""
        for netns, dev in ends:
            tc = ["tc", *(["-n", netns] if netns else []), "qdisc"]
            sh([*tc, "replace", "dev", dev, "root", *tbf_args(rate)] if rate else
               [*tc, "del", "dev", dev, "root"])

    def _make_bridge0(self, host: Host) -> None:
        """bridge0: a bridge with one port, "cabled" to the Thunderbolt switch namespace."""
        ns, i, tb = host.netns, host.index, self.switch_netns
        sh(["ip", "-n", tb, "link", "add", f"port{i}", "type", "veth", "peer", "name",
            "thunderbolt0", "netns", ns])
        # Bridge ports carry no addresses, not even IPv6 link-local ones.
        sh(["ip", "-n", tb, "link", "set", f"port{i}", "addrgenmode", "none"])
        sh(["ip", "-n", tb, "link", "set", f"port{i}", "master", "switch0", "up"])
        sh(["ip", "-n", ns, "link", "add", "bridge0", "type", "bridge"])
        sh(["ip", "-n", ns, "link", "set", "thunderbolt0", "addrgenmode", "none"])
        sh(["ip", "-n", ns, "link", "set", "thunderbolt0", "master", "bridge0", "up"])
        sh(["ip", "-n", ns, "link", "set", "bridge0", "up"])
        if "bridge0" in self.shape:
            self._shape(self.link_ends(host, "bridge0"), self.shape["bridge0"])

    def _make_cable(self, cable: Cable) -> None:
        """A cable's wire is a two-port bridge in the wiring namespace rather than one veth pair
        from port to port: then unplugging it (cable_down) takes the carrier from both ports and
        leaves their own settings alone, so nothing on a host (`ip link set up` in setup) can
        plug it back, as with a real cable."""
        wiring, wire = self.switch_netns, f"c{cable.index}"
        self._record("link", netns=wiring, name=wire)
        sh(["ip", "-n", wiring, "link", "add", wire, "type", "bridge"])
        for side, (name, port) in zip("ab", cable.ends, strict=True):
            host, end = self.host(name), f"{wire}{side}"
            self._record("link", netns=wiring, name=end)  # its peer, the port, goes with it
            sh(["ip", "-n", wiring, "link", "add", end, "type", "veth", "peer", "name", port,
                "netns", host.netns])
            # The wire carries frames of any size: only the ports' own MTUs limit them.
            sh(["ip", "-n", wiring, "link", "set", end, "addrgenmode", "none", "mtu", "65535"])
            sh(["ip", "-n", wiring, "link", "set", end, "master", wire, "up"])
            sh(["ip", "-n", host.netns, "link", "set", port, "up"])
            if port in self.shape:
                self._shape(self.link_ends(host, port), self.shape[port])
        sh(["ip", "-n", wiring, "link", "set", wire, "up"])

    def _make_mount_ns(self, host: Host) -> None:
        for path in (host.mnt_ns, host.uts_ns):
            self._record("nsfile", path=path)
            Path(path).touch()
        hdir = host.workdir
        script = "; ".join([
            "set -e",
            f"hostname {host.name}",
            # sysfs must be the host's netns view (Ansible facts read /sys/class/net).
            "umount -l /sys", "mount -t sysfs sysfs /sys",
            f"mount --bind {hdir}/home {host.home}",
            f"mount --bind {hdir}/etc-ssh /etc/ssh",
            f"mount --bind {hdir}/hosts /etc/hosts",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
            # Root's files stay visible (pyenv lives there) but writes stay on this host.
            f"mount -t overlay overlay -o lowerdir=/root,upperdir={hdir}/root/upper,"
            f"workdir={hdir}/root/work /root",
            # Its own /tmp, as a separate machine has: MLX's CPU kernel cache there belongs to
            # whoever made it first. The cluster's directory stays at its path inside.
            *([f"mount --bind {self.dir} {hdir}/tmp/{self.dir.relative_to('/tmp')}"]
              if self.dir.is_relative_to("/tmp") else []),
            f"mount --rbind {hdir}/tmp /tmp",
        ])
        sh(["nsenter", f"--net=/run/netns/{host.netns}", "unshare", f"--mount={host.mnt_ns}",
            f"--uts={host.uts_ns}", "--propagation", "private", "sh", "-c", script])

    def _make_cgroups(self, paths: list[Path], controller: str) -> bool:
        """Make cgroup directories of a controller unless they exist (on cgroup v2 one
        directory has every controller: enable this one); True if made."""
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            (CGROUP_ROOT / "cgroup.subtree_control").write_text(f"+{controller}")
        if paths[0].exists():
            return False
        for path in paths:
            self._record("cgroup", path=str(path))
            path.mkdir()
        return True

    def _join_cgroups(self, host: Host, paths: list[Path]) -> None:
        """Move everything the host runs now (its sshd, so every login after) into the cgroups."""
        for pid in sh(["ip", "netns", "pids", host.netns]).stdout.split():
            for path in paths:
                with contextlib.suppress(ProcessLookupError):  # one that ended meanwhile
                    (path / "cgroup.procs").write_text(pid)

    def _make_cpu_cgroup(self, host: Host) -> None:
        self._make_cgroups(cpu_cgroup_dirs(host.name), "cpu")
        self.set_cpus(self.cpus, host)

    def set_cpus(self, cpus: float | None, host: Host | str | int | None = None) -> None:
        """Cap a host (default: every host) at `cpus` CPUs; None lifts the cap. On a cluster built
        without cpus=, everything running in the host now (its sshd, so every login after) joins
        a CPU cgroup of its own first, as with set_memory."""
        quota = round(cpus * CPU_PERIOD_US) if cpus is not None else None
        for h in [self.host(host)] if host is not None else self.hosts:
            paths = cpu_cgroup_dirs(h.name)
            if self._make_cgroups(paths, "cpu"):
                self._join_cgroups(h, paths)
            write_cpu_quota(paths[0], quota)

    def cap_processes(self, host: Host | str | int, pids: list[int], cpus: float) -> None:
        """Cap these processes of a host (and the threads and children they start after) at
        `cpus` CPUs together, in a CPU cgroup of their own: the rest of what the host runs (its
        sshd, so a play's tasks) keeps its speed. Until the cluster is removed."""
        h = self.host(host)
        paths = cpu_cgroup_dirs(f"{h.name}-capped")
        self._make_cgroups(paths, "cpu")
        for pid in pids:
            for path in paths:
                (path / "cgroup.procs").write_text(str(pid))
        write_cpu_quota(paths[0], round(cpus * CPU_PERIOD_US))

    def set_memory(self, limit: int | None, host: Host | str | int | None = None) -> None:
        """Cap a host (default: every host) at `limit` bytes of memory, as a Mac has its RAM:
        everything running in it now (its sshd, so every login after) joins the host's memory
        cgroup; past the cap the kernel kills a process. None lifts the cap."""
        v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        for h in [self.host(host)] if host is not None else self.hosts:
            path = memory_cgroup_dir(h.name)
            self._make_cgroups([path], "memory")
            (path / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(
                str(limit) if limit is not None else ("max" if v2 else "-1"))
            self._join_cgroups(h, [path])

    def cpu_seconds(self, host: Host | str | int) -> float:
        """CPU time the host's processes have used (needs its CPU cgroup: cpus= or set_cpus)."""
        account = cpu_cgroup_dirs(self.host(host).name)[-1]
        if (account / "cpuacct.usage").exists():
            return int((account / "cpuacct.usage").read_text()) / 1e9
        usage = (account / "cpu.stat").read_text().split("\n", 1)[0].split()
        return int(usage[1]) / 1e6

    def start_sshd(self, host: Host | str | int) -> None:
        """(Re)start a host's sshd, e.g. after a test powered the host off, and wait for it."""
        h = self.host(host)
        self._start_sshd(h)
        self._wait_for_sshd(h)

    def _start_sshd(self, host: Host) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep dir, shared
        self._exec(host, ["/usr/sbin/sshd", "-f", "/etc/ssh/sshd_config",
                          "-E", f"{host.workdir}/sshd.log"])

    def _wait_for_sshd(self, host: Host, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((host.en0_ip, 22), timeout=2) as conn:
                    if conn.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                log = Path(host.workdir, "sshd.log")
                raise ClusterError(
                    f"sshd of {host.name} not answering on {host.en0_ip}:22: "
                    f"{log.read_text() if log.exists() else 'no log'}"
                )
            time.sleep(0.05)

    def _write_controller_files(self) -> None:
        lines = []
        for host in self.hosts:
            for kind in HOST_KEY_TYPES:
                pub = Path(host.workdir, "etc-ssh", f"ssh_host_{kind}_key.pub")
                keytype, key = pub.read_text().split()[:2]
                lines.append(f"{host.en0_ip} {keytype} {key}\n")
        Path(self.known_hosts).write_text("".join(lines))
        group_vars = {
            "ansible_ssh_private_key_file": self.controller_key,
            "ansible_ssh_common_args": self.ssh_common_args,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        if self.cables:  # the cables' /30s come from the cluster's own 198.19.k.0/24
            group_vars |= {
                "thunderbolt_topology": "cables",
                "thunderbolt_cables": [[c.a, c.a_if, c.b, c.b_if] for c in self.cables],
                "thunderbolt_cable_pool": str(self.thunderbolt_subnet),
            }
        group_vars |= self.extra_vars
        inventory = {
            "cluster": {
                "hosts": {
                    h.name: {
                        "ansible_host": h.en0_ip,
                        "ansible_user": h.user,
                        **({"thunderbolt_ip": h.thunderbolt_ip} if h.thunderbolt_ip else {}),
                        "mpi_slots": h.slots,
                    }
                    for h in self.hosts
                },
                "vars": group_vars,
            }
        }
        Path(self.inventory).write_text(
            f"# virtual cluster {self.id}; remove: python -m tools.vcluster down --dir {self.dir}\n"
            + yaml.safe_dump(inventory, sort_keys=False)
        )

    # ----- use ------------------------------------------------------------------------
    def nsenter_argv(self, host: Host | str | int) -> list[str]:
        """Prefix that runs a command (as root) inside the host's net, mount and UTS namespaces."""
        h = self.host(host)
        return ["nsenter", f"--net=/run/netns/{h.netns}", f"--mount={h.mnt_ns}",
                f"--uts={h.uts_ns}", "--"]

    def _exec(self, host, argv, **kw) -> subprocess.CompletedProcess:
        if self.cpus is not None:  # everything a host runs counts against its CPU cap
            procs = [d / "cgroup.procs" for d in cpu_cgroup_dirs(self.host(host).name)]
            kw["preexec_fn"] = lambda: [p.write_text(str(os.getpid())) for p in procs]
        return sh([*self.nsenter_argv(host), *argv], **kw)

    def run(
        self,
        host: Host | str | int,
        cmd: str | list[str],
        user: str | None = None,
        check: bool = True,
        timeout: float = 300,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run cmd (shell string or argv) in the host, as root or as `user` in a login shell
        (HOME, PATH and cwd of that user, like an ssh session). Output is captured as text."""
        if user:
            line = cmd if isinstance(cmd, str) else shlex.join(cmd)
            argv = ["runuser", "-l", user, "-c", line]
        else:
            argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return self._exec(host, argv, check=check, timeout=timeout, input=input)

    def ssh_argv(self, host: Host | str | int, *cmd: str, user: str | None = None) -> list[str]:
        """ssh from the controller as Ansible does (key, pinned host keys, no prompts)."""
        h = self.host(host)
        return ["ssh", "-F", "none", "-i", self.controller_key, *shlex.split(self.ssh_common_args),
                "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                f"{user or h.user}@{h.en0_ip}", *cmd]

    def cable_down(self, cable: Cable | int) -> None:
        """Unplug a cable: both its ports lose their carrier, their own settings stay."""
        self._set_wire(self.cable(cable), "down")

    def cable_up(self, cable: Cable | int, timeout: float = 10) -> None:
        """Plug a cable back in; return once frames cross it.

        The kernel turns a regained carrier into a working link asynchronously (its link watch,
        rate-limited to about once a second, starts the ports' queues and the wire's forwarding):
        until then the ports show LOWER_UP yet drop what they send."""
        cable = self.cable(cable)
        self._set_wire(cable, "up")
        wire = [(self.switch_netns, f"c{cable.index}{side}") for side in "ab"]
        ports = [(self.host(host).netns, port) for host, port in cable.ends]
        deadline = time.monotonic() + timeout
        while not (all(self._operstate(*end) == "UP" for end in wire + ports)
                   and all(self._bridge_port_state(*end) == "forwarding" for end in wire)):
            if time.monotonic() > deadline:
                raise ClusterError(f"cable {cable.index} not up after {timeout:.0f}s")
            time.sleep(0.05)

    def _set_wire(self, cable: Cable, state: str) -> None:
        for side in "ab":
            sh(["ip", "-n", self.switch_netns, "link", "set", f"c{cable.index}{side}", state])

    @staticmethod
    def _operstate(netns: str, ifname: str) -> str:
        return json.loads(sh(["ip", "-n", netns, "-j", "link", "show", ifname]).stdout)[0][
            "operstate"]

    @staticmethod
    def _bridge_port_state(netns: str, ifname: str) -> str:
        return json.loads(sh(["bridge", "-n", netns, "-j", "link", "show", "dev", ifname]).stdout)[
            0]["state"]

    def iface_bytes(self, host: Host | str | int, ifname: str) -> tuple[int, int]:
        """(rx_bytes, tx_bytes) of an interface inside the host, from its /sys/class/net."""
        stats = f"/sys/class/net/{ifname}/statistics"
        out = self.run(host, ["cat", f"{stats}/rx_bytes", f"{stats}/tx_bytes"]).stdout.split()
        return int(out[0]), int(out[1])

    def link_ends(self, host: Host | str | int, iface: str) -> list[tuple[str | None, str]]:
        """Both ends of a host's link on en0, bridge0 or a cable port, as (netns, device), netns
        None for the root namespace: their egresses are the link's two directions."""
        h = self.host(host)
        if iface == "en0":
            return [(None, f"{self.prefix}e{h.index}"), (h.netns, "en0")]
        if iface == "bridge0" and not self.cables:
            return [(self.switch_netns, f"port{h.index}"), (h.netns, "thunderbolt0")]
        for cable in self.cables:
            for side, end in zip("ab", cable.ends, strict=True):
                if end == (h.name, iface):
                    return [(self.switch_netns, f"c{cable.index}{side}"), (h.netns, iface)]
        raise ClusterError(f"{h.name} has no link {iface!r} to shape")

    @contextlib.contextmanager
    def shaped(self, shape: str | dict, hosts: list | None = None):
        """Shape links of the running cluster as shape= does when it is built (e.g. 'en0=1gbit'),
        on every host or the given ones, for a with block; unshaped after it, also on failure."""
        ports = {port for cable in self.cables for _, port in cable.ends} or {"bridge0"}
        shape = parse_shape(shape, ("en0", *sorted(ports)))
        with contextlib.ExitStack() as undo:
            for iface, rate in shape.items():
                for end in (e for h in hosts or self.hosts for e in self.link_ends(h, iface)):
                    self._shape([end], rate)
                    undo.callback(self._shape, [end], None)
            yield self

    # ----- down -----------------------------------------------------------------------
    def down(self) -> None:
        """Remove everything state.json records; safe to repeat and on a half-built cluster."""
        if self.dir is None or not (self.dir / "state.json").exists():
            return
        res = self.resources
        ns_keys = {_ns_key(f"/run/netns/{r['name']}") for r in res if r["kind"] == "netns"}
        ns_keys |= {_ns_key(r["path"]) for r in res if r["kind"] == "nsfile"}
        uids = set()
        for r in res:
            if r["kind"] == "user":
                with contextlib.suppress(KeyError):
                    uids.add(pwd.getpwnam(r["name"]).pw_uid)
        _kill_all(ns_keys - {None}, uids - {0})
        errors = []
        for r in reversed(res):
            try:
                self._undo(r)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{r}: {exc}")
        if errors:
            raise ClusterError("down left things behind:\n" + "\n".join(errors))
        left = _mounts_under(self.dir)
        if left:
            raise ClusterError(f"refusing to delete {self.dir}: still mounted: {left}")
        if self.created_dir:
            shutil.rmtree(self.dir)
        else:
            for child in self.dir.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()

    @staticmethod
    def _undo(r: dict) -> None:
        kind = r["kind"]
        if kind == "link":
            where = ["-n", r["netns"]] if r.get("netns") else []
            if sh(["ip", *where, "link", "show", r["name"]], check=False).returncode == 0:
                sh(["ip", *where, "link", "del", r["name"]])
        elif kind == "netns":
            if os.path.exists(f"/run/netns/{r['name']}"):
                sh(["ip", "netns", "del", r["name"]])
        elif kind == "route":
            if sh(["ip", "route", "show", "type", "unreachable", r["dst"]]).stdout.strip():
                sh(["ip", "route", "del", "unreachable", r["dst"]])
        elif kind in ("mount", "nsfile"):
            if r["path"] in _mounts_under(Path(r["path"]).parent) or os.path.ismount(r["path"]):
                sh(["umount", r["path"]])
        elif kind == "user":
            with contextlib.suppress(KeyError):
                pwd.getpwnam(r["name"])
                _retry_locked(["userdel", r["name"]])
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"/run/sudo/ts/{r['name']}")
        elif kind == "homedir":
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(r["path"])
        elif kind == "file":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(r["path"])
        elif kind == "cgroup":
            # A killed process leaves its cgroup a moment after it is reaped.
            for _ in range(100):
                try:
                    os.rmdir(r["path"])
                    return
                except FileNotFoundError:
                    return
                except OSError:
                    time.sleep(0.05)
            os.rmdir(r["path"])


# ----- command line ---------------------------------------------------------------------
def _parse_var(item: str) -> tuple[str, object]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--var {item!r}: use key=value")
    return key, ("" if value == "" else yaml.safe_load(value))


def up_options(argv: list[str]) -> dict:
    """VirtualCluster's keyword arguments from `up`'s options (all but --dir), e.g. a Molecule
    scenario's VCLUSTER_ARGS, so that a test can build the scenario's cluster itself."""
    return _options(_parser().parse_args(["up", *argv, "--dir", "-"]))


def _options(args: argparse.Namespace) -> dict:
    return {"hosts": args.hosts, "distinct_users": args.distinct_users, "cables": args.cables,
            "slots": [int(s) for s in args.slots.split(",")] if args.slots else None,
            "shape": args.shape, "cpus": args.cpus, "extra_vars": dict(args.var)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.vcluster", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="build a cluster and write DIR/inventory.yml")
    up.add_argument("--hosts", type=int, required=True)
    up.add_argument("--slots", help="mpi_slots per host, e.g. 1,2,1 (default 1 each)")
    up.add_argument("--distinct-users", action="store_true", help="a different user name per host")
    up.add_argument("--cables", help="point-to-point cables instead of bridge0: chain, ring, mesh,"
                    " or pairs of 0-based host positions, e.g. 0-1,1-2,0-2")
    up.add_argument("--shape", help="tc tbf rates per interface, both directions, e.g. "
                    "bridge0=10gbit,en0=1gbit (with --cables: en2=10gbit, every host's en2)")
    up.add_argument("--cpus", type=float, help="cap each host at this many CPUs, e.g. 0.2")
    up.add_argument("--var", action="append", type=_parse_var, default=[], metavar="KEY=VALUE",
                    help="group var for the inventory (value parsed as YAML); repeatable")
    up.add_argument("--dir", required=True, help="new or empty directory for the cluster's files")
    down = sub.add_parser("down", help="remove everything `up` made (idempotent)")
    down.add_argument("--dir", required=True)
    sub.add_parser("list", help="clusters on this machine: id, DIR and cables")
    run = sub.add_parser("run", help="run a command inside a host")
    run.add_argument("--dir", required=True)
    run.add_argument("--user", action="store_true", help="as the host's login user")
    run.add_argument("host")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    try:
        if args.action == "up":
            vc = VirtualCluster(**_options(args), workdir=args.dir)
            start = time.monotonic()
            vc.up()
            print(f"cluster {vc.id} up in {time.monotonic() - start:.1f}s: {vc.inventory}")
            for h in vc.hosts:
                tb = f"thunderbolt_ip={h.thunderbolt_ip}  " if h.thunderbolt_ip else ""
                print(f"  {h.name}  {h.user}@{h.en0_ip}  {tb}slots={h.slots}")
            for cable in vc.cables:
                print(f"  {cable}")
        elif args.action == "list":
            for entry in sorted(REGISTRY.glob("*")) if REGISTRY.is_dir() else []:
                workdir = entry.read_text().strip()
                ok = Path(workdir, "state.json").exists()
                print(f"{entry.name}  {workdir}{'' if ok else '  (state.json gone!)'}")
                for cable in VirtualCluster.load(workdir).cables if ok else []:
                    print(f"  {cable}")
        elif args.action == "down":
            if (Path(args.dir) / "state.json").exists():
                VirtualCluster.load(args.dir).down()
        else:
            vc = VirtualCluster.load(args.dir)
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            cmd = cmd[0] if len(cmd) == 1 else cmd  # one word: a shell command line
            h = vc.host(args.host)
            proc = vc.run(h, cmd, user=h.user if args.user else None, check=False)
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            return proc.returncode
    except (ClusterError, subprocess.CalledProcessError) as exc:
        print(f"vcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
