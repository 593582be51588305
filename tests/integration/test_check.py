"""check.yml on a 3-host virtual cluster: all green when healthy, and each injected fault is
reported by the right check naming the right host or pair.

The tests run on the session's train_cluster (tests/integration/conftest.py): setting up a cluster
takes minutes. Faults that concern different hosts and checks are injected together, every fault
is undone before the next run, and after each test a health check proves the cluster whole again
for the tests that share it.
"""

import contextlib
import json
import os
import re
import shlex
import signal
import time
from pathlib import Path

import pytest

from tests.integration.conftest import own_reports
from tests.integration.test_train_playbook import job_processes, vc_pids
from tools.playbook import ROOT, run_playbook
from tools.vcluster import sh

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Bounds small enough that a hang shows up as a failed row well before the test times out.
CHECK_VARS = {"doctor_timeout": 60, "doctor_mpi_timeout": 120}
# doctor_mpi_timeout where mpirun across the cluster hangs (waits out the bound).
HUNG_BOUND = 10


@pytest.fixture
def cluster(train_cluster):
    yield train_cluster
    assert_whole(train_cluster)


def assert_whole(vc):
    """What the faults below (and test_bench's shaped links) break is as setup left it: logins
    with the pinned host keys, bridge0 up with its address, bridge0 and en0 unshaped at both ends,
    Open MPI's programs and the installed train package, and no Open MPI process left on any
    host."""
    nothing = {h.name: [] for h in vc.hosts}
    deadline = time.monotonic() + 20  # a probe's processes end a moment after it
    while (left := job_processes(vc)) != nothing and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == nothing, left
    for host in vc.hosts:
        login = sh(vc.ssh_argv(host, "hostname"), check=False)
        assert login.stdout.strip() == host.name, (host.name, login.stderr)
        bridge0 = vc.run(host, "ip -4 addr show dev bridge0").stdout
        assert "state UP" in bridge0 and f"inet {host.thunderbolt_ip}/" in bridge0, bridge0
        for netns, dev in vc.link_ends(host, "bridge0") + vc.link_ends(host, "en0"):
            qdisc = sh(["tc", *(["-n", netns] if netns else []), "qdisc", "show", "dev", dev])
            assert "tbf" not in qdisc.stdout, (host.name, dev, qdisc.stdout)
        mounts = vc.run(host, "findmnt -rn -o TARGET").stdout.split()
        assert [m for m in mounts if m.startswith("/usr/bin/")] == [], host.name
        assert installed_loop_py(vc, host) == (ROOT / "train" / "loop.py").read_text(), host.name


def installed_loop_py(vc, host):
    """The train package's loop.py as the host's environment has it."""
    path = vc.run(host, f"ls {host.home}/mlx-cluster/venv/lib/python3*/site-packages/"
                        "train/loop.py").stdout.strip()
    return vc.run(host, ["cat", path]).stdout


def run_check(vc, tmp_path, name):
    run = run_playbook("check.yml", vc.inventory, tmp_path / name,
                       extravars={**CHECK_VARS, **own_reports(tmp_path)})
    [collected] = [
        e["event_data"]["res"]["ansible_facts"]
        for e in run.events
        if e.get("event") == "runner_on_ok"
        and e["event_data"].get("task") == "Collect the rows of every host"
    ]
    rows = collected["doctor_all_rows"]
    return run, rows, Path(collected["doctor_run_dir"])


def failed(rows):
    return {(r["check"], r["target"]): r for r in rows if r["status"] == "failed"}


def assert_report_json_matches_md(report_dir):
    """report.json holds the rows of report.md, row for row; returns them."""
    report = json.loads((report_dir / "report.json").read_text())
    md_rows = [
        [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in (report_dir / "report.md").read_text().splitlines()
        if line.startswith("| ") and not line.startswith("| check |")
    ]
    md_rows = md_rows[:len(report) + 1]  # the link matrices below are tables too
    assert [[r["title"], r["host"], r["status"], r["detail"], r["fix"] or ""] for r in report] \
        == md_rows[:len(report)]
    assert not md_rows[len(report):] or md_rows[len(report)][0].startswith("latency")
    assert all(r["ok"] == (r["status"] != "failed") for r in report)
    return report


def names(vc):
    return [h.name for h in vc.hosts]


def test_healthy_cluster_passes_every_check(cluster, tmp_path):
    run, rows, report_dir = run_check(cluster, tmp_path, "healthy")
    assert run.status == "successful", run.stdout[-6000:]
    assert failed(rows) == {}
    a, b, c = names(cluster)
    checks = {(r["check"], r["target"]) for r in rows if r["status"] == "ok"}
    for pair in ((a, b), (a, c), (b, a), (b, c), (c, a), (c, b)):
        assert ("ssh", f"{pair[0]} -> {pair[1]}") in checks
        assert ("ping", f"{pair[0]} -> {pair[1]}") in checks
    for host in (a, b, c):
        for check in ("openmpi", "openmpi_same", "mpirun_local", "tb_iface", "python_env",
                      "train_pkg", "mlx_import"):
            assert (check, host) in checks, check
    for check in ("inventory", "mpirun_all", "mlx_mpi"):
        assert (check, "cluster") in checks, check
    assert {("link", f"{x} <-> {y}") for x, y in ((a, b), (a, c), (b, c))} <= checks
    # Three bridged hosts: a warning, which does not fail the play.
    assert [r["check"] for r in rows if r["status"] == "warn"] == ["tb_loop"]
    # check.yml changed nothing.
    assert run.changed() == []
    # The table and the link heatmap are saved on the controller.
    report = (report_dir / "report.md").read_text()
    assert f"| ssh over MPI address | {a} -> {b} | ok |" in report
    links = json.loads((report_dir / "links.json").read_text())
    assert len(links["pairs"]) == 3 and all(p["gbps"] > 0 for p in links["pairs"])
    assert (report_dir / "links.png").read_bytes()[:4] == b"\x89PNG"
    report_json = assert_report_json_matches_md(report_dir)
    assert {(r["check"], r["host"]) for r in report_json} == {
        (r["check"], r["target"]) for r in rows}


def test_bridge_down_train_edited_and_open_mpi_missing(cluster, tmp_path):
    a, b, c = names(cluster)
    host_b = cluster.host(b)
    loop_py = cluster.run(b, f"ls {host_b.home}/mlx-cluster/venv/lib/python3*/site-packages/"
                             "train/loop.py").stdout.strip()  # the installed train package
    original = cluster.run(b, ["cat", loop_py]).stdout
    empty = Path(host_b.workdir) / "not-mpirun"
    empty.write_text("")  # not executable: running mpirun fails as if it were gone
    with contextlib.ExitStack() as undo:
        cluster.run(c, "ip link set bridge0 down")
        undo.callback(cluster.run, c, "ip link set bridge0 up")
        cluster.run(b, f"echo '# edited by hand' >> {shlex.quote(loop_py)}", user=host_b.user)
        undo.callback(cluster.run, b, f"cat > {shlex.quote(loop_py)}", user=host_b.user,
                      input=original)
        cluster.run(b, ["mount", "--bind", str(empty), "/usr/bin/mpirun"])
        undo.callback(cluster.run, b, ["umount", "/usr/bin/orterun"])

        run, rows, report_dir = run_check(cluster, tmp_path, "faults")

    assert run.status == "failed"
    bad = failed(rows)
    assert bad[("tb_iface", c)]["reason"] == "down"
    assert ("ping", f"{a} -> {c}") in bad and ("ping", f"{b} -> {c}") in bad
    assert ("ping", f"{a} -> {b}") not in bad
    assert bad[("train_pkg", b)]["detail"] == "loop.py modified"
    assert ("train_pkg", a) not in bad and ("train_pkg", c) not in bad
    assert bad[("openmpi", b)]["reason"] == "missing"
    assert ("openmpi", a) not in bad and ("openmpi", c) not in bad
    assert "fix: Bring the interface up on " + c in run.stdout
    report_json = {(r["check"], r["host"]): r for r in assert_report_json_matches_md(report_dir)}
    assert report_json[("tb_iface", c)]["ok"] is False
    assert report_json[("tb_iface", c)]["fix"].startswith("Bring the interface up on " + c)
    assert report_json[("ping", f"{a} -> {b}")]["ok"] is True
    assert report_json[("ping", f"{a} -> {b}")]["fix"] is None


def test_sshd_stopped_and_host_key_changed(cluster, tmp_path):
    a, b, c = names(cluster)
    keys = Path(cluster.host(b).workdir, "etc-ssh")
    saved = {p.name: p.read_bytes() for p in keys.glob("ssh_host_*")}
    with contextlib.ExitStack() as undo:
        # b gets new host keys (a reinstalled machine); sshd reloads them on SIGHUP.
        undo.callback(restore_host_keys, cluster, b, keys, saved)
        for kind in ("ed25519", "ecdsa"):
            (keys / f"ssh_host_{kind}_key").unlink()
            (keys / f"ssh_host_{kind}_key.pub").unlink()
            cluster.run(b, ["ssh-keygen", "-q", "-t", kind, "-N", "", "-f",
                            f"/etc/ssh/ssh_host_{kind}_key"])
        reload_sshd(cluster, b)
        # c's sshd stops.
        stop_sshd(cluster, c)
        undo.callback(start_sshd, cluster, c)

        run, rows, _ = run_check(cluster, tmp_path, "ssh")

    assert run.status == "failed"
    bad = failed(rows)
    assert bad[("ssh", f"{a} -> {b}")]["reason"] == "host_key_changed"
    assert "CHANGED" in bad[("ssh", f"{a} -> {b}")]["detail"]
    assert bad[("ssh", f"{a} -> {c}")]["reason"] == "unreachable"
    assert "pins every host's current key in ~/.ssh/mlx_cluster_known_hosts" in run.stdout


@pytest.mark.speed
def test_one_slow_link_is_named(cluster, tmp_path):
    a, b, c = names(cluster)
    # Shape both directions of c's Thunderbolt cable: its own port and the switch's port to it.
    with cluster.shaped("bridge0=50mbit", hosts=[c]):
        run, rows, _ = run_check(cluster, tmp_path, "slow")

    assert run.status == "failed"
    bad = failed(rows)
    assert {key for key in bad if key[0] == "link"} == {("link", f"{a} <-> {c}"),
                                                        ("link", f"{b} <-> {c}")}
    assert f"every slow pair includes {c}" in bad[("link", f"{a} <-> {c}")]["detail"]
    assert ("ping", f"{a} -> {c}") not in bad  # slow, not broken
    # Slow in the first ping-pong, so measured again (and slow again: its row says so).
    again = run.stdout.split("Ping-pong again between every pair of hosts when one measured slow")
    assert "ok: [" in again[1].split("TASK [")[0]


def test_hung_mpirun_becomes_a_failed_row_at_its_bound(cluster, tmp_path):
    a, b, c = names(cluster)
    host_c = cluster.host(c)
    # c's Open MPI daemon never reports back: mpirun across the cluster waits forever.
    stuck = Path(host_c.workdir) / "stuck-orted"
    stuck.write_text("#!/bin/sh\nexec sleep 600\n")
    stuck.chmod(0o755)
    with contextlib.ExitStack() as undo:
        cluster.run(c, ["mount", "--bind", str(stuck), "/usr/bin/orted"])
        undo.callback(cluster.run, c, ["umount", "/usr/bin/orted"])
        # The stuck daemons outlive the probes that started them (and so do those probes' ssh
        # clients on the launch host, until the daemons end).
        undo.callback(kill_stuck_daemons, cluster, c)

        run = run_playbook("check.yml", cluster.inventory, tmp_path / "hang",
                           extravars={**CHECK_VARS, **own_reports(tmp_path),
                                      "doctor_mpi_timeout": HUNG_BOUND})
        rows = [r for e in run.events if e.get("event") == "runner_on_ok"
                and e["event_data"].get("task") == "Collect the rows of every host"
                for r in e["event_data"]["res"]["ansible_facts"]["doctor_all_rows"]]

    assert run.status == "failed"
    bad = failed(rows)
    assert bad[("mpirun_all", "cluster")]["reason"] == "timeout"
    assert bad[("mpirun_all", "cluster")]["detail"] == f"hung, stopped after {HUNG_BOUND}s"
    assert ("mpirun_local", c) not in bad  # mpirun alone on c works: the hang is across hosts
    assert "mpirun across the cluster hangs" in run.stdout
    # The MLX group and the ping-pong start as that mpirun does: not left to hang a bound each.
    skipped = {(r["check"], r["target"]): r["detail"] for r in rows
               if r["check"] in ("mlx_mpi", "link") and r["status"] == "skipped"}
    assert ("mlx_mpi", "cluster") not in bad and ("link", "all pairs") not in bad
    assert skipped == dict.fromkeys([("mlx_mpi", "cluster"), ("link", "all pairs")],
                                    "not run: mpirun across the cluster hangs (the mpirun_all row)")


# ----- helpers that break and repair one virtual host ------------------------------------------
def sshd_pid(vc, host):
    return int(Path(vc.host(host).workdir, "sshd.pid").read_text())


def reload_sshd(vc, host):
    os.kill(sshd_pid(vc, host), signal.SIGHUP)
    vc._wait_for_sshd(vc.host(host))


def stop_sshd(vc, host):
    os.kill(sshd_pid(vc, host), signal.SIGTERM)


def start_sshd(vc, host):
    vc.start_sshd(host)


def kill_stuck_daemons(vc, host):
    for pid in vc_pids(vc.host(host).netns):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00":
                os.kill(pid, signal.SIGKILL)


def restore_host_keys(vc, host, keys, saved):
    for name, content in saved.items():
        (keys / name).write_bytes(content)
    reload_sshd(vc, host)
