"""check.yml and train.yml over Thunderbolt cables (thunderbolt_topology: cables) on a virtual
3-host ring: no bridge0, no shared segment, one point-to-point link per cable (en2, en3).

The session's cable ring (tests/integration/conftest.py: cable_ring, set up once with setup.yml
in cables mode, as test_cables.py checks) serves the module. The training results are compared
with the same job on the shared bridge-topology cluster (conftest.py: train_cluster).
"""

import contextlib
import json
import os
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.integration.conftest import own_reports
from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Bounds small enough that a dead cable shows up as a failed row well before the test times out.
CHECK_VARS = {"doctor_timeout": 60, "doctor_mpi_timeout": 60}
# mlp on digits: 64*128+128 + 128*128+128 + 128*10+10 float32 parameters.
MLP_GRADIENT_BYTES = 26122 * 4
# World size 3 on both clusters: the cables cluster runs one rank per host (what MLX's ring over
# cables allows), the bridge cluster (slots 1, 2, 1) its first three slots (np=3). The same
# global batch split over three ranks and the same seed: the same data on every rank.
JOB = {"model": "mlp", "steps": 150, "batch_size": 48, "seed": 7, "eval_every": 0,
       "checkpoint_every": 0}


@pytest.fixture
def cables_cluster(cable_ring):
    return cable_ring.vc


def run_check(vc, tmp_path, name, **extravars):
    run = run_playbook("check.yml", vc.inventory, tmp_path / name,
                       extravars={**CHECK_VARS, **own_reports(tmp_path), **extravars})
    collected = run.facts_set_by("Collect the rows of every host")
    return run, collected["doctor_all_rows"], Path(collected["doctor_run_dir"])


def train(vc, tmp_path, name, **extravars):
    results = tmp_path / "runs"
    extravars = {"launch_results_dir": str(results), "run_name": name, **extravars}
    run = run_playbook("train.yml", vc.inventory, tmp_path / f"runner-{name}", extravars)
    return run, results / name


def rows_of(rows, check):
    return {r["target"]: r for r in rows if r["check"] == check}


def cable_ends(vc):
    """Both directions of every cable, as the ping rows name them: 'a en2 -> b en2'."""
    return {f"{c.a} {c.a_if} -> {c.b} {c.b_if}" for c in vc.cables} | {
        f"{c.b} {c.b_if} -> {c.a} {c.a_if}" for c in vc.cables}


def cable_label(vc, cable):
    """How check.yml names a cable: both ends, the host earlier in the inventory first."""
    ends = sorted(cable.ends, key=lambda end: vc.host(end[0]).index)
    return " - ".join(f"{host} {port}" for host, port in ends)


def cable_labels(vc):
    return {cable_label(vc, c) for c in vc.cables}


def port_bytes(vc):
    """{(host, port): (rx, tx)} for every cable port and en0."""
    ports = {(c.a, c.a_if) for c in vc.cables} | {(c.b, c.b_if) for c in vc.cables}
    ports |= {(h.name, "en0") for h in vc.hosts}
    return {(host, port): vc.iface_bytes(host, port) for host, port in ports}


def final_weights(out):
    [latest] = sorted((Path(out) / "checkpoints").glob("step_*"))[-1:]
    return {k: np.array(v) for k, v in mx.load(str(latest / "model.safetensors")).items()}


# --- check.yml --------------------------------------------------------------------------------


def test_check_passes_with_the_topology_rows_and_draws_the_cables(cables_cluster, tmp_path):
    vc = cables_cluster
    run, rows, report_dir = run_check(vc, tmp_path, "healthy", doctor_backend="ring")
    failed = [r for r in rows if r["status"] == "failed"]
    assert run.status == "successful" and failed == [], (failed, run.stdout[-4000:])
    names = [h.name for h in vc.hosts]

    [topology] = rows_of(rows, "topology").values()
    assert topology["detail"].startswith("mesh: 3 hosts, 3 cable(s)")  # 3 hosts in a ring
    ring = ", ".join(names)
    assert topology["detail"].endswith(f"ring order (ranks of ring, jaccl-ring): {ring}")
    assert rows_of(rows, "backend")["ring"]["status"] == "ok"
    assert set(rows_of(rows, "bridge_off")) == set(names)
    assert {r["detail"] for r in rows_of(rows, "bridge_off").values()} == {"no bridge0"}
    assert set(rows_of(rows, "cable_port")) == {f"{h} {p}" for h in names for p in ("en2", "en3")}
    assert set(rows_of(rows, "cable_ping")) == cable_ends(vc)
    links = rows_of(rows, "cable_link")
    assert set(links) == cable_labels(vc)
    assert all("Gbit/s" in r["detail"] for r in links.values())
    # Linux hosts: the macOS-only rows say so.
    assert {(r["check"], r["status"]) for r in rows if r["check"] in ("rdma", "macos_build")} == {
        ("rdma", "skipped"), ("macos_build", "skipped")}
    # Open MPI over the management network, off the pool, still works across the hosts.
    assert {r["check"] for r in rows if r["status"] == "ok"} >= {"mpirun_all", "mlx_mpi", "link"}
    assert run.changed() == []

    dot = (report_dir / "cables.dot").read_text()
    assert dot.startswith("graph cables {") and dot.count(" -- ") == 3
    assert (report_dir / "cables.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((report_dir / "cables.json").read_text())["failed"] == []
    assert "## Cables (mesh: 3 hosts" in (report_dir / "report.md").read_text()


def test_a_cable_taken_down_is_named_by_both_ends_and_a_slow_one_measured_again(
        cables_cluster, tmp_path):
    """One cable unplugged, another at 1 Gbit/s (a cable that negotiated a low rate), the third
    fine: the dead one is named by both ends, the slow one measured a second time before it is
    called slow (a host busy during its first run is not a bad cable: unit-tested)."""
    vc = cables_cluster
    cable, slow_cable = vc.cables[1], vc.cables[0]
    label, slow_label = cable_label(vc, cable), cable_label(vc, slow_cable)
    slow_host, slow_port = slow_cable.ends[0]
    with contextlib.ExitStack() as undo:
        undo.enter_context(vc.shaped(f"{slow_port}=1gbit", hosts=[vc.host(slow_host)]))
        vc.cable_down(cable)
        undo.callback(vc.cable_up, cable)
        run, rows, report_dir = run_check(vc, tmp_path, "unplugged")

    assert run.status == "failed"
    failed = {(r["check"], r["target"]) for r in rows if r["status"] == "failed"}
    pings = {("cable_ping", f"{cable.a} {cable.a_if} -> {cable.b} {cable.b_if}"),
             ("cable_ping", f"{cable.b} {cable.b_if} -> {cable.a} {cable.a_if}")}
    assert pings <= failed, failed
    assert ("cable_link", label) in failed
    # Both ports lost their carrier: each end's port row says it is down.
    ports = {("cable_port", f"{host} {port}") for host, port in cable.ends}
    assert ports <= failed, failed
    assert {r["reason"] for r in rows if (r["check"], r["target"]) in ports} == {"down"}
    # The shaped cable: slow at its second run too; the third cable, and everything over the
    # management network, fine.
    [slow] = [r for r in rows if (r["check"], r["target"]) == ("cable_link", slow_label)]
    assert slow["reason"] == "slow", slow
    again = run.stdout.split("Ping-pong again across each cable measured slow")[1]
    assert f"(item={slow_label})" in again.split("TASK [")[0]
    assert failed == pings | ports | {("cable_link", label), ("cable_link", slow_label)}, [
        (r["check"], r["target"], r["detail"]) for r in rows if r["status"] == "failed"]
    assert "No reply across this cable" in run.stdout
    assert json.loads((report_dir / "cables.json").read_text())["failed"]


# --- train.yml --------------------------------------------------------------------------------


def train_counting(vc, tmp_path, backend):
    """train.yml's JOB with `backend` on the ring; (its results, bytes moved per (host, port))."""
    before = port_bytes(vc)
    run, out = train(vc, tmp_path, backend, backend=backend, **JOB)
    assert run.status == "successful", run.stdout[-6000:]
    after = port_bytes(vc)
    assert json.loads((out / "summary.json").read_text())["world_size"] == 3
    return out, {port: sum(after[port]) - sum(before[port]) for port in after}


def test_ring_over_the_cables_and_mpi_off_the_pool_train_alike(cables_cluster, tmp_path):
    vc = cables_cluster
    gradient = MLP_GRADIENT_BYTES * JOB["steps"]

    ring, moved = train_counting(vc, tmp_path, "ring")
    assert "--backend ring" in (ring / "command.sh").read_text()
    job = json.loads((ring / "job.json").read_text())
    assert [h["host"] for h in job["rank_hosts"]] == [h.name for h in vc.hosts]  # the ring's order
    # MLX's ring: each rank sends to its neighbour over the cable between them (the other way
    # carries TCP's acknowledgements), every all-reduce 2(n-1)/n of the gradient per link: more
    # than the whole gradient per step over every cable (measured: 1.37 x on each).
    for (host, port), count in moved.items():
        if port != "en0":
            assert count >= gradient, (host, port, count, gradient)
    # en0 carries the control traffic only: the controller's Ansible modules and ssh, mlx.launch's
    # ssh to each rank, the supervisor's polls; none of it grows with the steps (measured: 0.9 MB
    # on the launch host, 0.2 MB on the others, for 15.7 MB of gradients). Had the gradients gone
    # over en0, it would have carried 4/3 of them.
    for host in vc.hosts:
        assert moved[(host.name, "en0")] < gradient / 4, (host.name, moved, gradient)

    mpi, moved = train_counting(vc, tmp_path, "mpi")
    pool = vc.thunderbolt_subnet
    command = " ".join((mpi / "command.sh").read_text().replace("\\\n", " ").split())
    assert f"--mca btl_tcp_if_exclude 127.0.0.1/8,sppp,{pool}" in command
    assert f"--mca oob_tcp_if_exclude {pool}" in command  # Open MPI 4 here (5: --prtemca)
    # Three hosts: no cable joins all of them, so the gradients go over en0, none over the cables.
    for (host, port), count in moved.items():
        if port == "en0":
            assert count >= gradient, (host, count, gradient)
        else:
            assert count < gradient / 10, (host, port, count, gradient)

    # The same job, two backends, two networks: the same training.
    assert json.loads((ring / "summary.json").read_text())["train_loss"] == pytest.approx(
        json.loads((mpi / "summary.json").read_text())["train_loss"], rel=1e-4)
    by_ring, by_mpi = final_weights(ring), final_weights(mpi)
    assert by_ring.keys() == by_mpi.keys()
    for name in by_ring:  # as tests/train/test_distributed.py compares 2 ranks with 1
        np.testing.assert_allclose(by_ring[name], by_mpi[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_a_model_fans_out_over_the_cables(cables_cluster, tmp_path):
    """-e model=DIR: the launch host sends each other host its copy over the cable between them
    (the mesh logs in over the cables too), none of it over en0."""
    vc = cables_cluster
    size = 4 << 20
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "weights.bin").write_bytes(os.urandom(size))  # incompressible
    before = port_bytes(vc)
    run, _ = train(vc, tmp_path, "staged", model=str(model), command="python -c pass")
    assert run.status == "successful", run.stdout[-6000:]
    after = port_bytes(vc)
    received = {port: after[port][0] - before[port][0] for port in after}
    launch = vc.hosts[0].name
    for host in vc.hosts[1:]:
        [port] = [port for c in vc.cables if {c.a, c.b} == {launch, host.name}
                  for name, port in c.ends if name == host.name]
        assert received[host.name, port] > 0.9 * size, received
        assert received[host.name, "en0"] < 0.1 * size, received


# --- bench.yml --------------------------------------------------------------------------------

# A short sweep: the machine has two cores.
BENCH_VARS = {"bench_min_bytes": 65536, "bench_max_bytes": 1 << 20, "bench_size_factor": 16,
              "bench_seconds_per_size": 0.2, "bench_iperf3_seconds": 1, "bench_timeout": 300,
              "bench_tcp_links": [], "bench_grad_dtypes": ["float32"],
              "bench_trial_width": 256, "bench_trial_steps": 3, "bench_trial_rounds": 1}


def test_bench_compares_the_cables_with_the_management_network(cables_cluster, tmp_path):
    vc = cables_cluster
    run = run_playbook("bench.yml", vc.inventory, tmp_path / "bench",
                       extravars={**BENCH_VARS, **own_reports(tmp_path)})
    assert run.status == "successful", run.stdout[-6000:]
    run_dir = run.facts_set_by("Collect the results of the launch host")["bench_run_dir"]
    results = json.loads(Path(run_dir, "results.json").read_text())

    iperf = {(link["network"], link["link"]): link for link in results["iperf3"]}
    names = [h.name for h in vc.hosts]
    assert set(iperf) == {("cables", label) for label in cable_labels(vc)} | {
        ("management", f"{a} -> {b}") for i, a in enumerate(names) for b in names[i + 1:]}
    assert all(link.get("gbps", 0) > 0 for link in iperf.values()), iperf
    # What train.yml can run over cables: MLX's ring over them, Open MPI over the management
    # network (with mpi4py as the reference); no ring over the management network.
    runs = {(r["backend"], r["network"]): r for r in results["allreduce"]}
    assert set(runs) == {("ring", "cables"), ("mpi", "management"), ("mpi4py", "management")}
    assert [r for r in runs.values() if r.get("error")] == []
    assert runs[("ring", "cables")]["ranks"] == 3
    assert results["recommendation"]["backend"] in ("ring", "mpi")
    assert "| cables |" in Path(run_dir, "results.md").read_text()
    # The training trial trains as train.yml would: the defaults (Open MPI off the cables),
    # Open MPI's best and the ring over the cables, its ranks in the ring's order.
    assert [(c["backend"], c["label"], c["vars"].get("network")) for c in results["candidates"]] \
        == [("mpi", "management", None), ("mpi", "management", "management"),
            ("ring", "cables", "thunderbolt")], results["candidates"]
    assert [t.get("error") for t in results["trials"]] == [None] * 3, results["trials"]
