"""roles/bench/filter_plugins/bench.py: sizes, parsing, table and recommendation."""

import base64
import json
from pathlib import Path

import pytest
import yaml

from tests.unit.plugins import load

bench = load("roles/bench/filter_plugins/bench.py")
# Results reach bench_parse_run read through the shared filter, as sweep.yml does.
read = load("roles/cluster/filter_plugins/command_result.py").command_result

MiB = 1 << 20


def test_sizes():
    assert bench.bench_sizes(4096, 1 * MiB) == [4096, 16384, 65536, 262144, MiB]
    assert bench.bench_sizes(4096, 100000, 4)[-1] == 100000
    with pytest.raises(ValueError):
        bench.bench_sizes(4096, 1024)


def test_mpirun_variants_and_ring_hostfile():
    assert bench.bench_mpirun_variants(["mpi", "ring", "mpi4py"], [4, 1]) == [
        {"backend": "mpi4py", "links": 1, "dtype": "float32"},
        {"backend": "mpi", "links": 1, "dtype": "float32"},
        {"backend": "mpi", "links": 4, "dtype": "float32"}]
    both = bench.bench_mpirun_variants(["mpi", "mpi4py"], [], ["float32", "bfloat16"])
    assert [(v["backend"], v["dtype"]) for v in both] == [
        ("mpi4py", "float32"), ("mpi", "float32"), ("mpi", "bfloat16")]
    assert bench.bench_mpirun_variants(["ring"], [4], ["float32", "bfloat16"]) == []
    assert bench.bench_ring_hostfile(["198.19.1.11", "198.19.1.12"], 5670) == [
        ["198.19.1.11:5670"], ["198.19.1.12:5670"]]


NET = {"label": "thunderbolt", "interface": "bridge0"}


def test_parse_run_reads_the_json_line():
    line = json.dumps({"backend": "mpi", "ranks": 2, "sizes": [4096], "seconds": [1e-4],
                       "median_seconds": [2e-4], "rounds": [9]})
    entry = bench.bench_parse_run(read({"rc": 0, "stdout": f"noise\n{line}\n"}), NET, "mpi", 4)
    assert entry == {"network": "thunderbolt", "interface": "bridge0", "backend": "mpi",
                     "links": 4, "dtype": "float32", "ranks": 2, "sizes": [4096], "seconds": [1e-4],
                     "median_seconds": [2e-4], "rounds": [9]}


def test_parse_run_failure_explains_with_the_failing_peer():
    rank0 = {"rc": 1, "stderr": "[ring] connection reset"}
    peer = {"rc": 1, "stderr": "Traceback\nModuleNotFoundError: No module named 'mlx'"}
    entry = bench.bench_parse_run(read(rank0), NET, "ring", 1,
                                  [read(rank0 | {"rc": None}), read(peer)])
    assert entry["error"] == "ModuleNotFoundError: No module named 'mlx'"
    hung = bench.bench_parse_run(read({"failed": True, "msg": "Timeout exceeded"}), NET, "mpi")
    assert "time bound" in hung["error"]
    # allreduce.py's --deadline: the kernel ended the rank (SIGALRM)
    ended = bench.bench_parse_run(read({"rc": -14, "stderr": ""}), NET, "ring")
    assert ended["error"] == "hung, stopped at the time bound"


def test_busbw():
    assert bench.bench_busbw_gbps(MiB, 1e-3, 2) == pytest.approx(MiB * 8 / 1e-3 / 1e9)
    assert bench.bench_busbw_gbps(MiB, 1e-3, 1) == 0.0


def run(network, backend, seconds, links=1):
    return {"network": network, "interface": "bridge0" if network == "thunderbolt" else "en0",
            "backend": backend, "links": links, "ranks": 2,
            "sizes": [4096, 65536, MiB, 16 * MiB], "seconds": seconds}


RESULTS = [
    run("thunderbolt", "mpi", [1e-4, 3e-4, 2e-3, 30e-3]),
    run("thunderbolt", "mpi", [1e-4, 2e-4, 1e-3, 20e-3], links=4),
    run("thunderbolt", "ring", [1e-4, 3e-4, 2e-3, 25e-3]),
    run("thunderbolt", "mpi4py", [1e-5, 1e-4, 1e-3, 10e-3]),  # reference only, never picked
    run("management", "mpi", [1e-4, 2e-3, 20e-3, 300e-3]),
    {"network": "management", "interface": "en0", "backend": "ring", "links": 1,
     "error": "hung, stopped at the time bound"},
]


def test_recommend_picks_the_fastest_mlx_configuration_at_the_largest_size():
    rec = bench.bench_recommend(RESULTS)
    assert (rec["backend"], rec["network"], rec["interface"], rec["btl_tcp_links"]) == (
        "mpi", "thunderbolt", "bridge0", 4)
    # busbw of links=4: 4 KiB 0.33, 64 KiB 2.6, 1 MiB 8.4, 16 MiB 6.7 Gbit/s -> 80% of 8.4 first
    # reached at 1 MiB.
    assert rec["bucket_bytes"] == MiB
    assert bench.bench_launch_vars(rec) == {
        "backend": "mpi", "network": "thunderbolt",
        "mpi_extra_args": ["--mca", "btl_tcp_links", "4"], "grad_bucket_bytes": MiB,
        "grad_dtype": "float32"}


def test_recommend_picks_what_is_fastest_for_the_users_gradient():
    ring_large = run("thunderbolt", "ring", [1e-4, 3e-4, 3e-3, 15e-3])
    mpi_small = run("thunderbolt", "mpi", [1e-4, 2e-4, 1e-3, 20e-3])
    assert bench.bench_recommend([ring_large, mpi_small])["backend"] == "ring"
    rec = bench.bench_recommend([ring_large, mpi_small], size=2 * MiB)  # nearest: 1 MiB
    assert rec["backend"] == "mpi" and "shortest all-reduce at 1 MiB (1.00 ms" in rec["why"]


def test_recommend_sends_bfloat16_only_when_the_winner_was_clearly_faster_so():
    fp32 = run("thunderbolt", "ring", [1e-4, 3e-4, 2e-3, 30e-3])
    bf16 = {**run("thunderbolt", "ring", [1e-4, 2e-4, 1e-3, 15e-3]), "dtype": "bfloat16"}
    other = {**run("thunderbolt", "mpi", [1e-4, 2e-4, 1e-3, 10e-3]), "dtype": "bfloat16"}
    rec = bench.bench_recommend([fp32, bf16, other])
    # bfloat16 rows never pick the configuration; they only decide how its gradients travel.
    assert (rec["backend"], rec["grad_dtype"]) == ("ring", "bfloat16"), rec
    assert "sent as bfloat16 the same gradient took 15.00 ms" in rec["why"]
    assert bench.bench_launch_vars(rec)["grad_dtype"] == "bfloat16"
    bf16["median_seconds"] = [1e-4, 2e-4, 1e-3, 28e-3]  # once faster, not every round
    assert bench.bench_recommend([fp32, bf16])["grad_dtype"] == "float32"
    md = bench.bench_markdown([fp32, bf16], [], rec)
    assert "| MLX ring bfloat16 @ thunderbolt (bridge0) |" in md
    assert "gradients on the wire: **bfloat16**" in md


def test_recommend_drops_extra_tcp_links_that_do_not_help():
    slower = [r for r in RESULTS if r.get("links", 1) == 1 and r["backend"] != "ring"]
    slower.append(run("thunderbolt", "mpi", [1e-4, 3e-4, 2e-3, 29e-3], links=4))
    rec = bench.bench_recommend(slower)
    assert rec["btl_tcp_links"] == 1
    assert bench.bench_launch_vars(rec)["mpi_extra_args"] == []


def test_recommend_keeps_thunderbolt_unless_another_network_is_clearly_faster():
    tb = run("thunderbolt", "mpi", [1e-4, 3e-4, 2e-3, 30e-3])
    en0 = run("management", "ring", [1e-4, 3e-4, 2e-3, 28e-3])  # fastest once...
    en0["median_seconds"] = [1e-4, 3e-4, 2e-3, 29e-3]  # ...but not clearly: noise
    rec = bench.bench_recommend([tb, en0])
    assert (rec["network"], rec["backend"]) == ("thunderbolt", "mpi"), rec
    assert "not clearly faster" in rec["why"] and "Thunderbolt stays" in rec["why"]
    en0["median_seconds"] = [1e-4, 3e-4, 2e-3, 20e-3]  # every round well below Thunderbolt's best
    assert bench.bench_recommend([tb, en0])["network"] == "management"


def test_over_cables_the_ring_over_them_stays_unless_mpi_is_clearly_faster():
    cabled_ring = run("cables", "ring", [1e-4, 3e-4, 2e-3, 30e-3])
    en0 = run("management", "mpi", [1e-4, 3e-4, 2e-3, 28e-3])
    en0["median_seconds"] = [1e-4, 3e-4, 2e-3, 29e-3]
    rec = bench.bench_recommend([cabled_ring, en0])
    assert (rec["network"], rec["backend"]) == ("cables", "ring"), rec
    assert bench.bench_launch_vars(rec)["backend"] == "ring"  # hosts.json runs over the cables


def test_recommend_without_results_is_empty():
    assert bench.bench_recommend([RESULTS[-1]]) == {}
    assert bench.bench_launch_vars({}) == {}


def test_markdown_has_links_sizes_failures_and_verdict():
    links = [{"network": "thunderbolt", "a": "a", "b": "b", "gbps": 9.31},
             {"network": "cables", "link": "a en2 - b en3", "a": "a", "b": "b", "gbps": 12.5},
             {"network": "management", "a": "a", "b": "b", "error": "iperf3 not installed on b"}]
    md = bench.bench_markdown(RESULTS, links, bench.bench_recommend(RESULTS))
    assert "| thunderbolt | a -> b | 9.31 |" in md
    assert "| cables | a en2 - b en3 | 12.50 |" in md
    assert "failed: iperf3 not installed on b" in md
    assert "| configuration | ranks | 4 KiB | 64 KiB | 1 MiB | 16 MiB |" in md
    assert "| MLX mpi links=4 @ thunderbolt (bridge0) | 2 | 0.100 / 0.100, 0.33 |" in md
    assert "MLX ring @ management (en0) | - | failed: hung" in md
    assert "backend: **mpi**, network: **thunderbolt**" in md


def test_markdown_sets_each_configuration_against_the_floor_of_its_networks_slowest_link():
    links = [{"network": "thunderbolt", "a": "a", "b": "b", "gbps": 2.0},
             {"network": "thunderbolt", "a": "b", "b": "a", "gbps": 1.0},
             {"network": "management", "a": "a", "b": "b", "error": "iperf3 not installed on b"}]
    bf16 = {**run("thunderbolt", "ring", [1e-4, 2e-4, 1e-3, 0.1]), "dtype": "bfloat16"}
    md = bench.bench_markdown([*RESULTS, bf16], links, bench.bench_recommend(RESULTS))
    # 2 ranks: each sends the whole 16 MiB at 1 Gbit/s, 134.2 ms; bfloat16 half of it.
    assert bench.bench_floor_seconds(16 * MiB, 2, 1.0) == pytest.approx(0.1342, rel=1e-3)
    assert "| MLX mpi @ thunderbolt (bridge0) | 16 MiB | 30.0 | 134.2 | 0.22x |" in md
    assert "| MLX ring bfloat16 @ thunderbolt (bridge0) | 16 MiB | 100.0 | 67.1 | 1.49x |" in md
    assert "management (en0) | 16 MiB" not in md  # no iperf3 figure: no floor
    assert "Against the wire" not in bench.bench_markdown(RESULTS, [], {})
    # recommended.yml's comment: the MLX configurations on the network it sets.
    assert bench.bench_efficiency_note([*RESULTS, bf16], links, "thunderbolt") == (
        "recommended: MLX mpi @ thunderbolt (bridge0), 0.22x the wire's floor for a 16 MiB "
        "gradient (30.0 ms against 134.2 ms); the 16 MiB all-reduce against the wire's floor: "
        "MLX mpi @ thunderbolt (bridge0) 0.22x, "
        "MLX mpi links=4 @ thunderbolt (bridge0) 0.15x, MLX ring @ thunderbolt (bridge0) 0.19x, "
        "MLX ring bfloat16 @ thunderbolt (bridge0) 1.49x")
    assert "no floor" in bench.bench_efficiency_note(RESULTS, links, "management")
    # The configuration recommended.yml sets, for the user's gradient (the size nearest it).
    ring_bf16 = {"backend": "ring", "grad_dtype": "bfloat16", "mpi_extra_args": []}
    assert bench.bench_efficiency_note([*RESULTS, bf16], links, "thunderbolt", ring_bf16,
                                       12 * MiB).startswith(
        "recommended: MLX ring bfloat16 @ thunderbolt (bridge0), 1.49x the wire's floor for a "
        "16 MiB gradient (100.0 ms against 67.1 ms); the 16 MiB")
    links4 = {"backend": "mpi", "mpi_extra_args": ["--mca", "btl_tcp_links", "4"]}
    assert bench.bench_efficiency_note(RESULTS, links, "thunderbolt", links4, MiB).startswith(
        "recommended: MLX mpi links=4 @ thunderbolt (bridge0), 0.12x the wire's floor for a "
        "1 MiB gradient (1.0 ms against 8.4 ms); the 1 MiB")


NETWORKS = [{"label": "thunderbolt", "interface": "bridge0", "ips": ["a", "b"]},
            {"label": "management", "interface": "en0", "ips": ["c", "d"]}]


def test_candidates_are_the_defaults_and_each_backends_best():
    candidates = bench.bench_candidates(RESULTS, NETWORKS, "thunderbolt", "mpi")
    assert [(c["name"], c["label"], c["backend"]) for c in candidates] == [
        ("train.yml's defaults (mpi @ thunderbolt)", "thunderbolt", "mpi"),
        ("mpi @ thunderbolt links=4, 1 MiB buckets, float32", "thunderbolt", "mpi"),
        ("ring @ thunderbolt, 16 MiB buckets, float32", "thunderbolt", "ring")]
    defaults, mpi, _ = candidates
    assert (defaults["vars"], defaults["train_args"], defaults["mpi_extra_args"]) == ({}, [], [])
    assert mpi["vars"] == bench.bench_launch_vars(bench.bench_recommend(RESULTS))
    assert mpi["train_args"] == ["--grad-bucket-bytes", str(MiB), "--grad-dtype", "float32"]
    assert mpi["mpi_extra_args"] == ["--mca", "btl_tcp_links", "4"]
    # Without Thunderbolt train.yml's mpi runs over the management network; over a ring of
    # cables too (Open MPI is kept off the cables there).
    cabled = [{"label": "cables", "interface": "198.18.64.0/24", "backends": ["ring"]},
              {"label": "management", "interface": "en0", "backends": ["mpi", "mpi4py"]}]
    for networks, default in ((NETWORKS[1:], "management"), (cabled, "thunderbolt")):
        [defaults] = bench.bench_candidates([], networks, default, "mpi")
        assert defaults["label"] == "management", defaults


def trials(speeds):
    """Trials from {candidate index: [samples/s per round or an error]}."""
    return [{"index": i, "round": r, **({"samples_per_s": s, "comm_time_share": 0.3}
                                         if isinstance(s, float) else {"error": s})}
            for i, rounds in speeds.items() for r, s in enumerate(rounds)]


def test_advice_takes_what_trained_faster_than_the_defaults_in_every_round():
    candidates = bench.bench_candidates(RESULTS, NETWORKS, "thunderbolt", "mpi")
    # ring has the higher median, but its slowest round was no faster than the defaults' fastest.
    advice = bench.bench_advice(candidates, trials({0: [20.0, 21.0], 1: [25.0, 24.0],
                                                    2: [20.5, 29.0]}))
    assert advice["vars"] == candidates[1]["vars"], advice
    assert "24.5 samples/s" in advice["why"] and "their fastest round 21.0" in advice["why"]
    # Faster by the median but not in every round: noise, the defaults stay.
    advice = bench.bench_advice(candidates, trials({0: [20.0, 23.0], 1: [22.0, 25.0],
                                                    2: [10.0, 12.0]}))
    assert advice["vars"] == {} and "changes nothing" in advice["why"], advice
    assert "(21.5 samples/s, median; mpi @ thunderbolt links=4, 1 MiB buckets, float32: 23.5; " \
           "ring @ thunderbolt, 16 MiB buckets, float32: 11.0)" in advice["why"], advice
    # A candidate with a failed round is out; the defaults' failure is said.
    advice = bench.bench_advice(candidates, trials({0: ["hung"], 1: [25.0], 2: ["x", 40.0]}))
    assert advice["vars"] == candidates[1]["vars"] and "did not finish" in advice["why"]
    assert bench.bench_advice(candidates, trials({0: ["hung"]})) == {}


def test_trial_runs_alternate_and_results_read_rank_0s_summary():
    runs = bench.bench_trial_runs([{"name": "a"}, {"name": "b"}], 3)
    assert [(r["round"], r["name"]) for r in runs] == [
        (0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    summary = {"content": base64.b64encode(b'{"samples_per_s": 9.5, "comm_time_share": 0.4}')}
    assert bench.bench_trial_result(runs[2], summary, []) == {
        "index": 1, "round": 1, "samples_per_s": 9.5, "comm_time_share": 0.4}
    failed = bench.bench_trial_result(runs[0], {"failed": True}, [
        read({"rc": 0}), read({"rc": 1, "stderr": "ValueError: bad width"})])
    assert failed == {"index": 0, "round": 0, "error": "ValueError: bad width"}


def test_markdown_shows_the_trial_and_its_verdict():
    candidates = bench.bench_candidates(RESULTS, NETWORKS, "thunderbolt", "mpi")
    done = trials({0: [20.0, 21.0], 1: [25.0, 24.0], 2: ["hung, stopped at the time bound"]})
    md = bench.bench_markdown(RESULTS, [], bench.bench_recommend(RESULTS), candidates, done,
                              bench.bench_advice(candidates, done))
    assert "| train.yml's defaults (mpi @ thunderbolt) | 20.0, 21.0 | 20.5 | 30% |" in md
    assert "| ring @ thunderbolt, 16 MiB buckets, float32 |  failed: hung" in md
    assert "recommended.yml: **mpi @ thunderbolt links=4, 1 MiB buckets, float32**" in md


def test_the_trials_train_options_are_train_ymls():
    """recommended.yml's options the trial passes to python -m train are train.yml's own."""
    table = Path(__file__).parents[2] / "roles/launch/meta/argument_specs.yml"
    spec = yaml.safe_load(table.read_text())
    assert set(bench.TRAIN_OPTIONS) <= set(spec["argument_specs"]["request"]["options"])


def test_an_iperf3_link_is_its_received_rate_or_what_went_wrong():
    """A client's registered result: its rate; iperf3's own error; and exit 0 with nothing printed
    (seen once in make test: the play failed on that host and the others' all-reduces waited out
    their timeouts for its rank) named, not a failure of the play."""
    printed = json.dumps({"start": {"version": "iperf 3.12"},
                          "end": {"sum_received": {"bits_per_second": 9.41e9}}})
    assert bench.bench_iperf3_link({"rc": 0, "stdout": printed}) == {"gbps": 9.41}
    refused = json.dumps({"start": {}, "error": "unable to connect to server: Connection refused"})
    assert bench.bench_iperf3_link({"rc": 1, "stdout": refused, "msg": "non-zero return code"}) \
        == {"error": "unable to connect to server: Connection refused"}
    assert bench.bench_iperf3_link({"rc": 0, "stdout": "", "stderr": ""}) == {
        "error": "iperf3 printed no result (exit code 0)"}
    assert bench.bench_iperf3_link({"failed": True, "msg": "async task did not complete"}) == {
        "error": "async task did not complete"}
