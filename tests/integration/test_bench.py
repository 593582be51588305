"""bench.yml on the session's train_cluster (tests/integration/conftest.py: 3 hosts, one rank each)
with its Thunderbolt links shaped to 10 Gbit/s and its management links to 250 Mbit/s for the test:
the saved results show Thunderbolt faster, for iperf3 on every pair and for every all-reduce
backend, and recommend it; the gradient in bfloat16 is measured on both networks. The training
trial trains with train.yml's defaults and each backend's best configuration, and recommended.yml
is what it measured. train.yml then applies every key of a candidate's settings. After the test the
links are unshaped, the bench's files and that run gone, and test_check's health check proves the
shared cluster whole again."""

import itertools
import json
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import own_reports
from tests.integration.test_check import assert_whole
from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.speed]

MiB = 1 << 20
# One round of the training trial (each trial costs seconds here): the rounds' alternating order
# and the advice over several rounds are tests/unit/test_bench_filters.py's.
TRIAL_ROUNDS = 1
RUN = "advised"  # train.yml's run with a candidate's settings
# Management 40 times slower than Thunderbolt, not 10: the two cores are the ring backend's limit
# before 10 Gbit/s is, and beside make test's other worker its 4 MiB all-reduce over bridge0 once
# took as long as over a 1 Gbit/s en0 (80 ms against 76; the floor there is 45 ms).
SHAPE = "bridge0=10gbit,en0=250mbit"
MANAGEMENT_GBPS = 0.25
# A short sweep: the machine has two cores. Two sizes, the largest the one compared: 4 MiB is
# ~180 ms on a 250 Mbit/s link.
BENCH_VARS = {"bench_min_bytes": 65536, "bench_max_bytes": 4 * MiB, "bench_size_factor": 64,
              "bench_seconds_per_size": 0.2, "bench_iperf3_seconds": 1, "bench_timeout": 300,
              "bench_trial_width": 512, "bench_trial_steps": 5, "bench_trial_rounds": TRIAL_ROUNDS}


@pytest.fixture
def shaped_cluster(train_cluster):
    """train_cluster with SHAPE's links for the test; after it, also on failure, as before."""
    vc = train_cluster
    with vc.shaped(SHAPE):
        yield vc
    for host in vc.hosts:
        vc.run(host, f"rm -rf mlx-cluster/bench mlx-cluster/runs/{RUN}", user=host.user)
    assert_whole(vc)


def test_bench_shows_thunderbolt_faster_than_management(shaped_cluster, tmp_path):
    vc = shaped_cluster
    run = run_playbook("bench.yml", vc.inventory, tmp_path / "bench",
                       extravars={**BENCH_VARS, **own_reports(tmp_path)})
    assert run.status == "successful", run.stdout[-6000:]
    run_dir = run.facts_set_by("Collect the results of the launch host")["bench_run_dir"]
    results = json.loads(Path(run_dir, "results.json").read_text())

    iperf = {(link["network"], link["link"]): link["gbps"] for link in results["iperf3"]}
    gbps = {net: [v for (n, _), v in iperf.items() if n == net]
            for net in ("thunderbolt", "management")}
    assert len(gbps["thunderbolt"]) == len(gbps["management"]) == 3, iperf  # every pair of 3 hosts
    assert min(gbps["thunderbolt"]) > 3 * max(gbps["management"]), iperf
    # The management shaping holds.
    assert all(0.5 < v / MANAGEMENT_GBPS < 1.1 for v in gbps["management"]), iperf

    runs = {(r["backend"], r["links"], r["dtype"], r["network"]): r for r in results["allreduce"]}
    assert [r for r in runs.values() if r.get("error")] == []
    for backend, links in (("mpi", 1), ("mpi", 4), ("ring", 1), ("mpi4py", 1)):
        tb = runs[(backend, links, "float32", "thunderbolt")]
        mgmt = runs[(backend, links, "float32", "management")]
        assert tb["sizes"][-1] == mgmt["sizes"][-1] == 4 * MiB
        assert tb["seconds"][-1] < mgmt["seconds"][-1], (backend, links, tb, mgmt)
    # The gradient sent as bfloat16 is measured on both networks. How much faster it is (half the
    # bytes) is a speed figure: benchmarks/results/grad_sync-1gbit.md, not one round of a test.
    for backend, network in itertools.product(("mpi", "ring"), ("thunderbolt", "management")):
        assert runs[(backend, 1, "bfloat16", network)]["sizes"][-1] == 4 * MiB

    assert results["recommendation"]["network"] == "thunderbolt"
    table = Path(run_dir, "results.md").read_text()
    assert "| thunderbolt |" in table and "network: **thunderbolt**" in table
    # Against the wire: no all-reduce over the management links beats its floor at iperf3's rate
    # by more than iperf3 may read low (above half the shaped rate, as held above; tbf's bucket).
    ratios = [float(line.rsplit("|", 2)[-2].strip().rstrip("x")) for line in table.splitlines()
              if "@ management" in line and "| 4 MiB |" in line]
    assert len(ratios) == 6 and min(ratios) > 0.45, table
    assert Path(run_dir, "allreduce.png").read_bytes()[:4] == b"\x89PNG"

    # The trial: train.yml's defaults and each MLX backend's best configuration, every round.
    candidates = results["candidates"]
    assert [(c["backend"], c["vars"] == {}) for c in candidates] == [
        ("mpi", True), ("mpi", False), ("ring", False)], candidates
    assert {c["label"] for c in candidates} == {"thunderbolt"}
    trials = results["trials"]
    assert sorted((t["index"], t["round"]) for t in trials) == [
        (i, r) for i in range(3) for r in range(TRIAL_ROUNDS)], trials
    assert all(t["samples_per_s"] > 0 and 0 < t["comm_time_share"] < 1 for t in trials), trials
    # recommended.yml is a candidate that beat the defaults in every round, or the defaults ({}).
    speeds = {i: sorted(t["samples_per_s"] for t in trials if t["index"] == i) for i in range(3)}
    rec = yaml.safe_load(Path(run_dir, "recommended.yml").read_text())
    assert rec == results["advice"]["vars"], (rec, results["advice"])
    if rec:
        [i] = [i for i, c in enumerate(candidates) if c["vars"] == rec]
        assert speeds[i][0] > speeds[0][-1], speeds
    else:
        assert "changes nothing" in results["advice"]["why"], results["advice"]
    assert "## Training trial" in table and f"recommended.yml: **{results['advice']['name']}**" \
        in table
    for host in vc.hosts:  # every trial's files (a checkpoint each) are gone again
        left = vc.run(host, "find mlx-cluster/bench -path '*/trial/*'", user=host.user).stdout
        assert left == "", (host.name, left)

    # train.yml applies every key of a backend's settings as recommended.yml would carry them.
    rec = candidates[1 if results["recommendation"]["backend"] == "mpi" else 2]["vars"]
    path = tmp_path / "advised.yml"
    path.write_text(yaml.safe_dump(rec))
    assert sorted(rec) == ["backend", "grad_bucket_bytes", "grad_dtype", "mpi_extra_args",
                           "network"], rec
    assert rec["network"] == "thunderbolt" and rec["backend"] in ("mpi", "ring"), rec
    train = run_playbook("train.yml", vc.inventory, tmp_path / "train", cmdline=f"-e @{path}",
                         extravars={"model": "mlp", "steps": 20, "run_name": RUN,
                                    "launch_results_dir": str(tmp_path / "runs")})
    assert train.status == "successful", train.stdout[-6000:]
    out = tmp_path / "runs" / RUN
    launch = " ".join((out / "command.sh").read_text().replace("\\\n", " ").split())
    if rec["backend"] == "mpi":
        assert "/mpirun " in launch and "--mca btl_tcp_if_include bridge0" in launch, launch
        assert " ".join(rec["mpi_extra_args"]) in launch, launch
    else:
        assert "/mlx.launch --hostfile " in launch and "/hosts.json " in launch, launch
    # What the ranks ran with, in the checkpoint's record of their settings.
    [step] = (out / "checkpoints").iterdir()
    config = json.loads((step / "state.json").read_text())["config"]
    assert (config["grad_bucket_bytes"], config["grad_dtype"]) == (
        rec["grad_bucket_bytes"], rec["grad_dtype"]), config
