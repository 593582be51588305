"""The same training job with bench.yml's recommended.yml and without it, on a shaped cluster.

    sudo .venv/bin/python -m benchmarks.recommended [--shape bridge0=10gbit,en0=1gbit ...]
        [--rounds 3] [--steps 30] [--width 4096] [--cpus 0.6]

For each --shape (default: the issue's bridge0=10gbit,en0=1gbit, and the other way round), a
3-host virtual cluster (one rank each) is shaped with tc tbf and set up with setup.yml; bench.yml
runs with its defaults (its training trial included) and writes recommended.yml; then, in
alternating order, rounds of `ansible-playbook train.yml -e model=mlp -e width=W -e steps=N
-e batch_size=48` run with and without `-e @recommended.yml`. mlp at width 4096 has a 65 MiB
gradient, so that the gradients' average is a large part of a step, as it is for a real model
on real Macs. Per run: the job's samples/s over its steps, its wall time (both from
summary.json) and train.yml's wall time; best and median over rounds, and the median of the
per-round ratios.
Writes benchmarks/results/recommended.md (named by the shapes and --cpus when given).
"""

import argparse
import json
import statistics
import subprocess
from pathlib import Path

import yaml

from benchmarks.cluster import set_up_cluster, train_yml, write_results
from tools.playbook import run_playbook

RESULTS = Path(__file__).parent / "results" / "recommended.md"
SHAPES = ["bridge0=10gbit,en0=1gbit", "bridge0=1gbit,en0=10gbit"]
BATCH = 48  # splits over 3 ranks


def machine_load():
    """What else runs on this machine: load average, other virtual-cluster namespaces, and the
    pytest / ansible-playbook processes that are not ours."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    pytests = sum("pytest" in line and "python" in line for line in procs.splitlines())
    return (f"load average {' '.join(load)}, {len(netns.splitlines())} network namespaces, "
            f"{pytests} pytest processes")


def bench(vc, workdir):
    """recommended.yml and bench.yml's reason for it (its training trial's advice), from
    bench.yml with its defaults."""
    results_dir = workdir / "bench-results"
    run = run_playbook("bench.yml", vc.inventory, workdir / "bench",
                       extravars={"bench_results_dir": str(results_dir)})
    if run.status != "successful":
        raise SystemExit(f"bench.yml failed:\n{run.stdout[-4000:]}")
    [recommended] = results_dir.glob("*/recommended.yml")
    results = json.loads((recommended.parent / "results.json").read_text())
    return recommended, results["advice"]


def train(vc, workdir, run, args, recommended=None):
    """(train.yml's wall time, summary.json) of one job, with -e @recommended.yml if given."""
    wall, _ = train_yml(vc, workdir, run, [
        "-e", "model=mlp", "-e", f"width={args.width}", "-e", f"steps={args.steps}",
        "-e", f"batch_size={BATCH}", "-e", "eval_every=0", "-e", "checkpoint_every=0",
        *(["-e", f"@{recommended}"] if recommended else [])])
    return wall, json.loads((workdir / "runs" / run / "summary.json").read_text())


def averaging(wall, summary):
    """Seconds a step of the job spent averaging gradients (summary.json's share of step time)."""
    return summary["comm_time_share"] * BATCH / summary["samples_per_s"]


def one_shape(shape, args):
    """Rows of the report for one shaped cluster."""
    with set_up_cluster(hosts=3, slots=[1, 1, 1], shape=shape, cpus=args.cpus) as (vc, workdir):
        before = machine_load()
        recommended, why = bench(vc, workdir)
        chosen = yaml.safe_load(recommended.read_text())
        print(f"{shape}: recommended {chosen}", flush=True)
        # First-run costs (supervisor copy, caches) go to neither side.
        train_yml(vc, workdir, "warm-up", ["-e", "model=mlp", "-e", "steps=2",
                                           "-e", f"batch_size={BATCH}"])
        runs, order_run = {"without": [], "with": []}, []
        for n in range(args.rounds):
            order = ["without", "with"] if n % 2 == 0 else ["with", "without"]
            for kind in order:
                wall, summary = train(vc, workdir, f"{kind}-{n}", args,
                                          recommended if kind == "with" else None)
                runs[kind].append((wall, summary))
                order_run.append((n, kind, wall, summary))
                print(f"{shape} round {n} {kind}: train.yml {wall:.1f} s, job "
                      f"{summary['wall_time_s']:.1f} s, {summary['samples_per_s']:.1f} samples/s, "
                      f"sync {summary['comm_time_share']:.0%}", flush=True)
        after = machine_load()

    def stats(kind, pick, best):
        values = [pick(wall, summary) for wall, summary in runs[kind]]
        return best(values), statistics.median(values)

    # (row, value of a run, the best of several: other load only ever makes a run slower)
    measures = [
        ("samples/s of the job", lambda w, s: s["samples_per_s"], max, "{:.1f}"),
        ("job wall time, s (summary.json)", lambda w, s: s["wall_time_s"], min, "{:.1f}"),
        ("train.yml wall time, s", lambda w, s: w, min, "{:.1f}"),
        ("share of a step spent averaging gradients", lambda w, s: s["comm_time_share"], min,
         "{:.0%}"),
        ("seconds a step spends averaging gradients", averaging, min, "{:.2f}"),
    ]
    speedups = [b[1]["samples_per_s"] / a[1]["samples_per_s"]
                for a, b in zip(runs["without"], runs["with"], strict=True)]
    walls = [a[0] / b[0] for a, b in zip(runs["without"], runs["with"], strict=True)]
    lines = [
        f"## Shaped {shape}",
        "",
        f"recommended.yml: `{json.dumps(chosen, sort_keys=True)}`",
        "",
        f"bench.yml's reason: {why.get('why', '-')}",
        "",
        "| | without: best | without: median | with: best | with: median |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, pick, best, fmt in measures:
        cells = [*stats("without", pick, best), *stats("with", pick, best)]
        lines.append(f"| {name} | " + " | ".join(fmt.format(v) for v in cells) + " |")
    lines += ["", "Every run, in the order it ran:", "",
              "| round | recommended.yml | samples/s | averaging, s/step | job, s | train.yml, s |",
              "|---|---|---:|---:|---:|---:|"]
    for n, kind, wall, summary in order_run:
        lines.append(f"| {n} | {kind} | {summary['samples_per_s']:.1f} | "
                     f"{averaging(wall, summary):.2f} | {summary['wall_time_s']:.1f} | "
                     f"{wall:.1f} |")
    lines += [
        "",
        f"With recommended.yml, per round: **{statistics.median(speedups):.2f}x** the samples/s "
        f"(median; min {min(speedups):.2f}x, max {max(speedups):.2f}x); train.yml's wall "
        f"time without / with: {statistics.median(walls):.2f}x (median).",
        "",
        f"Machine before: {before}; after: {after}.",
        "",
    ]
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help=f"tc tbf rates (default: {SHAPES})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--cpus", type=float, help="cap each host at this many CPUs, so that "
                        "one host's communication threads do not slow another's computation")
    args = parser.parse_args()
    shapes = args.shape or SHAPES
    cpus = f" --cpus {args.cpus}" if args.cpus else ""
    command = " ".join(
        ["sudo .venv/bin/python -m benchmarks.recommended", *(f"--shape {s}" for s in shapes),
         f"--rounds {args.rounds} --steps {args.steps} --width {args.width}{cpus}"])
    lines = [
        "# A job with bench.yml's recommended.yml against the same job without it",
        "",
        f"3 virtual hosts, one rank each, links shaped with tc tbf; mlp at width {args.width} "
        f"on digits, {args.steps} steps, global batch {BATCH}, no evaluation or checkpoint "
        "until the end; the shared 2-core machine. Per shape: setup.yml, bench.yml (defaults), "
        f"then {args.rounds} rounds of train.yml without and with `-e @recommended.yml`, in "
        "alternating order.",
        "",
        f"Command: `{command}`",
        "",
    ]
    if args.cpus:
        lines += [f"Each host is capped at {args.cpus} CPUs (its own CPU cgroup), as separate "
                  "Macs do not share cores.", ""]
    for shape in shapes:
        lines += one_shape(shape, args)
    write_results(results_path(shapes, args.cpus), lines)


def results_path(shapes, cpus=None):
    """recommended.md for the default shapes; else named by the shapes (and the CPU cap)."""
    name = "recommended"
    if shapes != SHAPES:
        name += "-" + "_".join(s.replace("=", "-").replace(",", "_") for s in shapes)
    return RESULTS.with_name(f"{name}{f'-cpus{cpus}' if cpus else ''}.md")


if __name__ == "__main__":
    main()
