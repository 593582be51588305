"""Jinja filters for bench.yml: message sizes, results table, recommendation (the networks to
compare are the cluster's: cluster_networks in roles/cluster/filter_plugins/networks.py).

A result is {"network", "interface", "backend", "links", "ranks", "sizes", "seconds"} (or with
"error" instead of sizes/seconds); an iperf3 link is {"network", "a", "b", "gbps"} (or "error");
a trial is {"index" (its candidate's), "round", "samples_per_s", "comm_time_share"} (or "error").
Pure functions, unit-tested in tests/unit/test_bench_filters.py.
"""

import base64
import itertools
import json
import math
import signal
import statistics

MLX_BACKENDS = ("mpi", "ring")  # what train.yml can launch; mpi4py is the reference
# The networks of the Thunderbolt ports: the bridge, or the cables of thunderbolt_topology cables.
THUNDERBOLT = ("thunderbolt", "cables")


def bench_networks_for(networks, backends):
    """The networks on which any of `backends` runs (a network without "backends" runs all)."""
    return [n for n in networks if set(n.get("backends", backends)) & set(backends)]


def bench_iperf3_pairs(networks, names, cables=None):
    """What iperf3 measures: every pair of hosts on each network, and each cable on its own.

    networks: bench_networks; names: the ranked hosts, whose ips the networks list (unless a
    network gives its own order); cables: cable_plan's cables ([] or None without). Returns
    [{"network", "link", "a" (the client), "b" (the server), "a_ip", "b_ip"}]."""
    pairs = []
    for network in networks:
        if network["label"] == "cables":
            continue  # the cables' pairs are the cables themselves, below
        order = network.get("order") or names
        for i, j in itertools.combinations(range(len(network["ips"])), 2):
            pairs.append({"network": network["label"], "link": f"{order[i]} -> {order[j]}",
                          "a": order[i], "b": order[j],
                          "a_ip": network["ips"][i], "b_ip": network["ips"][j]})
    for cable in cables or []:
        (a, b), (a_ip, b_ip) = cable["hosts"], cable["addresses"]
        pairs.append({"network": "cables", "link": cable["label"], "a": a, "b": b,
                      "a_ip": a_ip, "b_ip": b_ip})
    return pairs


def bench_sizes(min_bytes, max_bytes, factor=4):
    """Message sizes from min_bytes, times factor, up to max_bytes (both included)."""
    low, high, factor = int(min_bytes), int(max_bytes), int(factor)
    if low < 4 or high < low or factor < 2:
        raise ValueError(f"sizes {min_bytes}..{max_bytes} x{factor}: need 4 <= min <= max, x >= 2")
    sizes = []
    size = low
    while size <= high:
        sizes.append(size)
        size *= factor
    if sizes[-1] != high:
        sizes.append(high)
    return sizes


def bench_mpirun_variants(backends, tcp_links, grad_dtypes=("float32",)):
    """The runs mpirun starts: each of mpi4py and MLX mpi once, MLX mpi again per btl_tcp_links
    and per other gradient wire dtype (bfloat16)."""
    runs = [{"backend": b, "links": 1, "dtype": "float32"} for b in ("mpi4py", "mpi")
            if b in backends]
    if "mpi" in backends:
        runs += [{"backend": "mpi", "links": int(n), "dtype": "float32"}
                 for n in tcp_links or [] if int(n) > 1]
        runs += [{"backend": "mpi", "links": 1, "dtype": d} for d in grad_dtypes
                 if d != "float32"]
    return runs


def bench_ring_hostfile(ips, port):
    """MLX ring backend's MLX_HOSTFILE content: one ["ip:port"] per rank."""
    return [[f"{ip}:{int(port)}"] for ip in ips]


def _why(result):
    """Short reason a run failed: its time bound, or the gist of what it printed (result read
    through the shared `command_result` filter)."""
    if result["timed_out"] or result.get("rc") == -signal.SIGALRM:  # allreduce.py --deadline
        return "hung, stopped at the time bound"
    return result["gist"] or str(result.get("msg") or f"rc={result.get('rc')}")


def bench_hostfile_hosts(ips):
    """templates/hostfile.j2 entries for one rank per host at these addresses."""
    return [{"mpi_address": ip, "slots": 1} for ip in ips]


def bench_parse_run(result, network, backend, links=1, peers=None, dtype="float32"):
    """One result from a command result whose stdout has allreduce.py's JSON line.

    peers: the same run's results on the other ranks (ring); a failure there explains a rank 0
    that only saw its neighbour vanish.
    """
    entry = {"network": network["label"], "interface": network["interface"],
             "backend": backend, "links": int(links), "dtype": dtype}
    for line in str(result.get("stdout", "")).splitlines():
        if line.startswith("{") and result.get("rc") == 0:
            data = json.loads(line)
            return {**entry, "ranks": data["ranks"], "sizes": data["sizes"],
                    "seconds": data["seconds"], "median_seconds": data["median_seconds"],
                    "rounds": data["rounds"]}
    failed = [p for p in peers or [] if p and p.get("rc") not in (0, None)] or [result]
    return {**entry, "error": _why(failed[0])}


def bench_iperf3_link(run):
    """{"gbps": received Gbit/s} from an `iperf3 -J` client's registered result, else {"error":
    what went wrong}: iperf3's own error, or its output missing (seen once: exit 0 and nothing
    printed), which must not fail the play and leave the other hosts' runs waiting for it."""
    try:
        printed = json.loads(run.get("stdout") or "{}")
    except ValueError:
        printed = {}
    if run.get("rc", 1) == 0 and "end" in printed:
        return {"gbps": printed["end"]["sum_received"]["bits_per_second"] / 1e9}
    return {"error": printed.get("error") or run.get("stderr") or run.get("msg")
            or f"iperf3 printed no result (exit code {run.get('rc')})"}


def bench_busbw_gbps(nbytes, seconds, ranks):
    """All-reduce bus bandwidth in Gbit/s: what each link carries, 2(n-1)/n of the message."""
    if not seconds or int(ranks) < 2:
        return 0.0
    return 2 * (int(ranks) - 1) / int(ranks) * int(nbytes) * 8 / float(seconds) / 1e9


def bench_floor_seconds(nbytes, ranks, gbps):
    """The least time an all-reduce of nbytes on the wire can take over links of gbps: a ring
    moves 2(n-1)/n of the message through each rank's link, and no algorithm moves less."""
    return 2 * (int(ranks) - 1) / int(ranks) * int(nbytes) * 8 / (float(gbps) * 1e9)


def bench_efficiency(results, links, size=0):
    """Each finished configuration's all-reduce of the gradient size (the measured size nearest
    it; 0: the largest) against its floor at its network's slowest link (iperf3): [{config,
    backend, dtype, links, network, size, seconds, floor}], what the backend leaves of the
    wire's speed; none without an iperf3 figure for the network."""
    slowest = {}
    for link in (link for link in links if "gbps" in link):
        slowest[link["network"]] = min(link["gbps"], slowest.get(link["network"], link["gbps"]))
    rows = []
    for r in results:
        if r.get("error") or r["network"] not in slowest or int(r["ranks"]) < 2:
            continue
        at = _at(r, size)
        nbytes, seconds = r["sizes"][at], r["seconds"][at]
        wire = nbytes // 2 if _dtype(r) == "bfloat16" else nbytes
        rows.append({"config": _config(r), "backend": r["backend"], "dtype": _dtype(r),
                     "links": int(r.get("links", 1)), "network": r["network"], "size": nbytes,
                     "seconds": seconds,
                     "floor": bench_floor_seconds(wire, r["ranks"], slowest[r["network"]])})
    return rows


def bench_efficiency_note(results, links, network, chosen=None, size=0):
    """recommended.yml's comment on the wire: how far the configuration it sets (chosen: its
    train.yml vars; {} or None: train.yml's defaults, mpi in float32) stays from the floor for
    the gradient size, then each MLX configuration on network, time / floor."""
    rows = [e for e in bench_efficiency(results, links, size)
            if e["network"] == network and e["backend"] != "mpi4py"]
    if not rows:
        return "no iperf3 figure for the network: no floor to compare with"
    chosen = chosen or {}
    extra = [str(a) for a in chosen.get("mpi_extra_args", [])]
    wanted = (chosen.get("backend", "mpi"), chosen.get("grad_dtype", "float32"),
              int(extra[extra.index("btl_tcp_links") + 1]) if "btl_tcp_links" in extra else 1)
    pick = next((e for e in rows if (e["backend"], e["dtype"], e["links"]) == wanted), None)
    head = (f"recommended: {pick['config']}, {pick['seconds'] / pick['floor']:.2f}x the wire's "
            f"floor for a {_size(pick['size'])} gradient ({pick['seconds'] * 1e3:.1f} ms against "
            f"{pick['floor'] * 1e3:.1f} ms); " if pick else "")
    return (head + f"the {_size(rows[0]['size'])} all-reduce against the wire's floor: "
            + ", ".join(f"{e['config']} {e['seconds'] / e['floor']:.2f}x" for e in rows))


def _efficiency_markdown(results, links):
    rows = [f"| {e['config']} | {_size(e['size'])} | {e['seconds'] * 1e3:.1f} | "
            f"{e['floor'] * 1e3:.1f} | {e['seconds'] / e['floor']:.2f}x |"
            for e in bench_efficiency(results, links)]
    if not rows:
        return []
    return ["", "## Against the wire: the largest all-reduce's fastest round and its floor "
            "(2(n-1)/n of the bytes on the wire through each rank's link, at the network's "
            "slowest iperf3 link)", "", "| configuration | size | ms | floor ms | time / floor |",
            "|---|---|---:|---:|---:|", *rows]


def _config(result):
    backend = {"mpi": "MLX mpi", "ring": "MLX ring", "mpi4py": "mpi4py"}[result["backend"]]
    links = f" links={result['links']}" if int(result.get("links", 1)) > 1 else ""
    dtype = f" {result['dtype']}" if _dtype(result) != "float32" else ""
    return f"{backend}{links}{dtype} @ {result['network']} ({result['interface']})"


def _dtype(result):
    """The gradient's wire dtype (results recorded before there was a choice: float32)."""
    return result.get("dtype", "float32")


def _median(result):
    """Median round per size (results recorded before medians were: the fastest)."""
    return result.get("median_seconds") or result["seconds"]


def _at(result, size):
    """Index of result's measured size nearest size (by ratio), its largest when size is 0."""
    sizes = result["sizes"]
    if not int(size):
        return len(sizes) - 1
    return min(range(len(sizes)), key=lambda i: abs(math.log(sizes[i] / int(size))))


def _size(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def bench_recommend(results, min_fraction=0.8, margin=0.1, size=0):
    """Pick backend, network, btl_tcp_links and gradient bucket size from the all-reduce results.

    The winner is the MLX configuration with the shortest all-reduce of the user's gradient
    (size: the measured size nearest it; 0: the largest, where training spends its
    communication time), the one nearest the wire's floor on its network. Thunderbolt stays the
    network unless another one is faster by a clear, repeated margin: its median round more
    than `margin` below Thunderbolt's fastest (on Macs the other network is Wi-Fi or Ethernet,
    and a single fast round is noise). btl_tcp_links > 1 is kept only when it beat one link on
    that network by > 10% (median over sizes). The bucket is the smallest size whose bus
    bandwidth reaches min_fraction of the winner's best: smaller buckets waste time on latency.
    Gradients travel in bfloat16 (grad_dtype) only when the winner's bfloat16 run was clearly
    faster too: its median more than `margin` below the float32 run's fastest at that size.
    """
    done = [r for r in results if not r.get("error") and r.get("seconds")]
    mlx = [r for r in done if r["backend"] in MLX_BACKENDS and _dtype(r) == "float32"]
    if not mlx:
        return {}
    at = _at(mlx[0], size)  # every configuration runs the same sizes
    best = min(mlx, key=lambda r: r["seconds"][at])
    thunderbolt = [r for r in mlx if r["network"] in THUNDERBOLT]
    kept_thunderbolt = ""
    if thunderbolt and best["network"] not in THUNDERBOLT:
        fastest_tb = min(thunderbolt, key=lambda r: r["seconds"][at])
        if _median(best)[at] >= (1 - margin) * fastest_tb["seconds"][at]:
            kept_thunderbolt = (f"; {_config(best)} was not clearly faster (median "
                                f"{_median(best)[at] * 1e3:.2f} ms against Thunderbolt's best "
                                f"{fastest_tb['seconds'][at] * 1e3:.2f} ms), so Thunderbolt stays")
            best = fastest_tb
    links = int(best.get("links", 1))
    if best["backend"] == "mpi":
        one = [r for r in mlx if r["backend"] == "mpi" and r["network"] == best["network"]
               and int(r.get("links", 1)) == 1]
        if links > 1 and one:
            ratios = sorted(a / b for a, b in zip(best["seconds"], one[0]["seconds"], strict=True))
            if ratios[len(ratios) // 2] > 0.9:
                best, links = one[0], 1
    busbw = [bench_busbw_gbps(n, s, best["ranks"]) for n, s in zip(best["sizes"], best["seconds"],
                                                                   strict=True)]
    bucket = next(n for n, bw in zip(best["sizes"], busbw, strict=True)
                  if bw >= min_fraction * max(busbw))
    halved = [r for r in done if _dtype(r) == "bfloat16" and r["backend"] == best["backend"]
              and r["network"] == best["network"] and int(r.get("links", 1)) == links]
    grad_dtype, wire = "float32", ""
    if halved and _median(halved[0])[at] < (1 - margin) * best["seconds"][at]:
        grad_dtype = "bfloat16"
        wire = (f"; sent as bfloat16 the same gradient took {_median(halved[0])[at] * 1e3:.2f} ms "
                "(median), so gradients travel in bfloat16")
    return {
        "backend": best["backend"],
        "network": best["network"],
        "interface": best["interface"],
        "btl_tcp_links": links,
        "bucket_bytes": bucket,
        "grad_dtype": grad_dtype,
        "peak_gbps": round(max(busbw), 3),
        "why": (f"{_config(best)} had the shortest all-reduce at {_size(best['sizes'][at])} "
                f"({best['seconds'][at] * 1e3:.2f} ms, {max(busbw):.2f} Gbit/s bus bandwidth "
                f"at best); it reaches {min_fraction:.0%} of that from {_size(bucket)} messages"
                + kept_thunderbolt + wire),
    }


def bench_launch_vars(recommendation):
    """train.yml extra vars that apply the recommendation, under the names users type with -e
    (so a later -e on the same command line wins over them)."""
    if not recommendation:
        return {}
    links = int(recommendation["btl_tcp_links"])
    return {
        "backend": recommendation["backend"],
        # train.yml's network: the cables are the Thunderbolt network of the cables topology.
        "network": "thunderbolt" if recommendation["network"] in THUNDERBOLT else "management",
        "mpi_extra_args": ["--mca", "btl_tcp_links", str(links)] if links > 1 else [],
        "grad_bucket_bytes": int(recommendation["bucket_bytes"]),
        "grad_dtype": recommendation.get("grad_dtype", "float32"),
    }


def _candidate_name(recommendation, launch_vars):
    links = int(recommendation["btl_tcp_links"])
    return (f"{recommendation['backend']} @ {recommendation['network']}"
            f"{f' links={links}' if links > 1 else ''}, "
            f"{_size(launch_vars['grad_bucket_bytes'])} buckets, {launch_vars['grad_dtype']}")


# recommended.yml's options that python -m train takes, as the flags of the same name (train.yml
# passes them the same way: batch_size -> --batch-size).
TRAIN_OPTIONS = ("grad_bucket_bytes", "grad_dtype")


def bench_candidates(results, networks, default_network, default_backend, size=0):
    """What the training trial compares: train.yml's defaults (no options: default_backend over
    default_network, as train.yml runs it) and, per MLX backend, what bench_recommend picks from
    that backend's all-reduces alone for the gradient size.

    Each: {"name", "label" (the bench network it runs over), "backend", "mpi_extra_args",
    "vars" (train.yml's -e options for recommended.yml; {} for the defaults), "train_args"
    (the matching python -m train flags)}."""
    over = bench_networks_for(networks, [default_backend])
    wanted = THUNDERBOLT if default_network == "thunderbolt" else ("management",)
    # Over a ring of cables Open MPI runs over the management network (cluster_networks).
    home = next((n for n in over if n["label"] in wanted), None) or next(
        (n for n in over if n["label"] == "management"), None)
    candidates = []
    if home:
        candidates.append({"name": f"train.yml's defaults ({default_backend} @ {home['label']})",
                           "label": home["label"], "backend": default_backend,
                           "mpi_extra_args": [], "vars": {}, "train_args": []})
    for backend in MLX_BACKENDS:
        recommendation = bench_recommend([r for r in results if r["backend"] == backend],
                                         size=size)
        if not recommendation:
            continue
        launch = bench_launch_vars(recommendation)
        candidates.append({
            "name": _candidate_name(recommendation, launch),
            "label": recommendation["network"], "backend": backend,
            "mpi_extra_args": launch["mpi_extra_args"], "vars": launch,
            "train_args": [arg for key in TRAIN_OPTIONS
                           for arg in ("--" + key.replace("_", "-"), str(launch[key]))]})
    return candidates


def bench_trial_runs(candidates, rounds):
    """Every candidate once per round, in reverse order every other round (a machine that
    slows down during the trial then slows every candidate alike)."""
    runs = []
    for round_ in range(int(rounds)):
        order = list(enumerate(candidates))
        for index, candidate in order if round_ % 2 == 0 else reversed(order):
            runs.append({**candidate, "index": index, "round": round_})
    return runs


def bench_trial_result(run, summary, results):
    """One trial from rank 0's slurped summary.json, or why it failed from the ranks' command
    results (read through command_result)."""
    entry = {"index": run["index"], "round": run["round"]}
    if summary.get("content"):
        data = json.loads(base64.b64decode(summary["content"]))
        return {**entry, "samples_per_s": data["samples_per_s"],
                "comm_time_share": data["comm_time_share"]}
    failed = [r for r in results if r and r.get("rc") not in (0, None)] or [
        r for r in results if r][:1]
    return {**entry, "error": _why(failed[0]) if failed else "no summary.json written"}


def bench_advice(candidates, trials):
    """recommended.yml from the training trial: of the candidates whose slowest round beat the
    fastest round of train.yml's defaults, the one with the most samples/s (median over its
    rounds); else the defaults themselves ({}: nothing to change). A candidate with a failed
    round is out. Returns {"vars", "name", "why"}, or {} when no trial finished."""
    speeds = {}
    for trial in trials:
        speeds.setdefault(trial["index"], []).append(trial.get("samples_per_s"))
    done = {i: sorted(s) for i, s in speeds.items() if None not in s}
    if not done:
        return {}

    def median(i):
        return statistics.median(done[i])

    defaults = next((i for i, c in enumerate(candidates) if not c["vars"]), None)
    if defaults not in done:
        best = max(done, key=median)
        return {"vars": candidates[best]["vars"], "name": candidates[best]["name"],
                "why": f"{candidates[best]['name']} trained fastest ({median(best):.1f} "
                       "samples/s, median); train.yml's defaults did not finish their trial"}
    base = done[defaults]
    clearly = [i for i in done if i != defaults and done[i][0] > base[-1]]
    if clearly:
        best = max(clearly, key=median)
        return {"vars": candidates[best]["vars"], "name": candidates[best]["name"],
                "why": f"{candidates[best]['name']} trained at {median(best):.1f} samples/s "
                       f"(median; its slowest round {done[best][0]:.1f}) against "
                       f"{median(defaults):.1f} with train.yml's defaults (their fastest round "
                       f"{base[-1]:.1f})"}
    others = "; ".join(f"{candidates[i]['name']}: {median(i):.1f}"
                       for i in sorted(done, key=median, reverse=True) if i != defaults)
    return {"vars": {}, "name": candidates[defaults]["name"],
            "why": f"nothing trained faster than train.yml's defaults in every round "
                   f"({median(defaults):.1f} samples/s, median; {others or 'no other finished'}"
                   "), so recommended.yml changes nothing"}


def _trial_markdown(candidates, trials, advice):
    lines = ["", "## Training trial: the same short job with each configuration", "",
             "| configuration | samples/s per round | median | share of a step averaging |",
             "|---|---|---:|---:|"]
    for index, candidate in enumerate(candidates):
        own = [t for t in trials if t["index"] == index]
        speeds = [t["samples_per_s"] for t in own if "samples_per_s" in t]
        errors = [t["error"] for t in own if "error" in t]
        rounds = ", ".join(f"{s:.1f}" for s in speeds) + (f" failed: {errors[0]}" if errors
                                                          else "")
        share = statistics.median(t["comm_time_share"] for t in own if "comm_time_share" in t) \
            if speeds else None
        lines.append(f"| {candidate['name']} | {rounds} | "
                     f"{f'{statistics.median(speeds):.1f}' if speeds else '-'} | "
                     f"{f'{share:.0%}' if share is not None else '-'} |")
    lines += ["", f"recommended.yml: **{advice['name']}**" if advice else
              "recommended.yml: none (no trial finished)",
              *([f"- why: {advice['why']}"] if advice else [])]
    return lines


def bench_markdown(results, links, recommendation, candidates=None, trials=None, advice=None):
    """The saved report: iperf3 per link, all-reduce per size and configuration, the verdict."""
    lines = ["## Raw TCP per link (iperf3)", "", "| network | link | Gbit/s |", "|---|---|---|"]
    for link in links:
        value = f"{link['gbps']:.2f}" if "gbps" in link else f"failed: {link.get('error')}"
        name = link.get("link") or f"{link['a']} -> {link['b']}"
        lines.append(f"| {link['network']} | {name} | {value} |")
    done = [r for r in results if not r.get("error")]
    sizes = sorted({n for r in done for n in r["sizes"]})
    lines += ["", "## All-reduce (sum of a float32 gradient of each size; bfloat16 rows send it "
              "in half the bytes): fastest / median round in ms, bus bandwidth of the fastest in "
              "Gbit/s (of the float32 bytes)", ""]
    lines.append("| configuration | ranks | " + " | ".join(_size(n) for n in sizes) + " |")
    lines.append("|---" * (len(sizes) + 2) + "|")
    for r in done:
        cells = dict(zip(r["sizes"], zip(r["seconds"], _median(r), strict=True), strict=True))
        row = [f"{cells[n][0] * 1e3:.3f} / {cells[n][1] * 1e3:.3f}, "
               f"{bench_busbw_gbps(n, cells[n][0], r['ranks']):.2f}"
               if n in cells else "-" for n in sizes]
        lines.append(f"| {_config(r)} | {r['ranks']} | " + " | ".join(row) + " |")
    for r in results:
        if r.get("error"):
            lines.append(f"| {_config(r)} | - | failed: {r['error']} |")
    lines += _efficiency_markdown(done, links)
    lines += ["", "## Recommendation from the all-reduces", ""]
    if recommendation:
        lines += [
            f"- backend: **{recommendation['backend']}**, network: **{recommendation['network']}**"
            f" (`{recommendation['interface']}`), btl_tcp_links: "
            f"**{recommendation['btl_tcp_links']}**, gradient bucket: "
            f"**{_size(recommendation['bucket_bytes'])}**, gradients on the wire: "
            f"**{recommendation.get('grad_dtype', 'float32')}**",
            f"- why: {recommendation['why']}",
        ]
    else:
        lines.append("- none: no MLX all-reduce finished (see the failed rows)")
    if candidates:
        lines += _trial_markdown(candidates, trials or [], advice)
    return "\n".join(lines) + "\n"


class FilterModule:
    def filters(self):
        return {
            "bench_advice": bench_advice,
            "bench_busbw_gbps": bench_busbw_gbps,
            "bench_efficiency_note": bench_efficiency_note,
            "bench_floor_seconds": bench_floor_seconds,
            "bench_candidates": bench_candidates,
            "bench_hostfile_hosts": bench_hostfile_hosts,
            "bench_iperf3_link": bench_iperf3_link,
            "bench_iperf3_pairs": bench_iperf3_pairs,
            "bench_launch_vars": bench_launch_vars,
            "bench_markdown": bench_markdown,
            "bench_mpirun_variants": bench_mpirun_variants,
            "bench_networks_for": bench_networks_for,
            "bench_parse_run": bench_parse_run,
            "bench_recommend": bench_recommend,
            "bench_ring_hostfile": bench_ring_hostfile,
            "bench_sizes": bench_sizes,
            "bench_trial_result": bench_trial_result,
            "bench_trial_runs": bench_trial_runs,
        }
