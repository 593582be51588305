"""Pipeline-parallel LoRA over a 3-host virtual cluster: tokens/s of 1, 2 and 3 stages, the
bubble against the ideal, bytes per step on the links and peak memory per host.

    sudo .venv/bin/python -m benchmarks.pipeline [--rounds 3] [--steps 12] [--micro-batches 4]
        [--cpus 0.5]

A 3-host virtual cluster (one slot each, each host capped at --cpus CPUs so that each computes
at one speed, as separate Macs do) is set up with setup.yml; a 12-layer float32 llama (the tests'
write_llm) is fine-tuned with `train.yml -e parallel=pipeline -e np=S` for S = 1, 2 and 3 stages,
each twice: 2 steps, then --steps; the second's step time and bridge0 bytes less the first's are
those of the steps in between. The bubble is the share of a step a stage does not compute,
measured as 1 - T1 / (S * TS) (T1: the whole model's step on one host; TS: the S stages' step,
each host computing 1/S of it), against the ideal (S-1)/(M+S-1) of GPipe and 1F1B alike.
Writes benchmarks/results/pipeline.md.
"""

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.cluster import set_up_cluster, train_yml, write_results
from tests.conftest import write_llm

RESULTS = Path(__file__).parent / "results" / "pipeline.md"
MODEL = {"hidden_size": 256, "intermediate_size": 2048, "num_hidden_layers": 12,
         "tie_word_embeddings": False}
BATCH = 8
STAGES = (1, 2, 3)


def stages_run(vc, workdir, model, data, stages, steps, micro_batches, run):
    """(summary.json, bytes received on bridge0 by every host) of one fine-tune."""
    before = sum(vc.iface_bytes(h, "bridge0")[0] for h in vc.hosts)
    train_yml(vc, workdir, run, ["-e", f"model={model}", "-e", f"data={data}",
                                 "-e", "parallel=pipeline", "-e", f"np={stages}",
                                 "-e", f"micro_batches={micro_batches}", "-e", f"steps={steps}",
                                 "-e", f"batch_size={BATCH}", "-e", "eval_every=0",
                                 "-e", "checkpoint_every=0", "-e", f"log_every={steps}"])
    received = sum(vc.iface_bytes(h, "bridge0")[0] for h in vc.hosts) - before
    return json.loads((workdir / "runs" / run / "summary.json").read_text()), received


def measure(vc, workdir, model, data, stages, args, round):
    """(seconds, bytes on the links) of a step, peak memory by rank: a run of 2 steps less a
    run of --steps, so that neither the start nor the first step (allocations) counts."""
    runs = [stages_run(vc, workdir, model, data, stages, steps, args.micro_batches,
                       f"s{stages}-{steps}-r{round}") for steps in (2, args.steps)]
    (short, short_bytes), (long, long_bytes) = runs
    seconds = [summary["steps"] * BATCH / summary["samples_per_s"] for summary, _ in runs]
    steps = args.steps - 2
    print(stages, f"{(seconds[1] - seconds[0]) / steps:.3f} s", long_bytes - short_bytes,
          long["peak_memory_bytes"], flush=True)
    return ((seconds[1] - seconds[0]) / steps, (long_bytes - short_bytes) / steps,
            long["peak_memory_bytes"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--cpus", type=float, default=0.5)
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    with set_up_cluster(hosts=3, cpus=args.cpus) as (vc, workdir):
        model, data = write_llm(workdir / "model", workdir / "data", **MODEL)
        text = json.loads((data / "train.jsonl").read_text().splitlines()[0])["text"]
        # Its words and the end of sequence, less the one a sequence's targets are shifted by.
        tokens = len(text.split())
        # Rounds alternate the stage counts, so that a slow spell of the machine hits all.
        rounds = [[measure(vc, workdir, model, data, stages, args, r) for stages in STAGES]
                  for r in range(args.rounds)]
        model_bytes = (model / "model.safetensors").stat().st_size
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    m = args.micro_batches
    steps = {s: [r[i][0] for r in rounds] for i, s in enumerate(STAGES)}
    fastest = {s: min(t) for s, t in steps.items()}
    median = {s: statistics.median(t) for s, t in steps.items()}
    # Each link carries each micro-batch's activations forward and their gradients back.
    link_bytes = 2 * BATCH * tokens * MODEL["hidden_size"] * 4
    lines = [
        "# Pipeline-parallel LoRA over 3 hosts",
        "",
        f"3 virtual hosts (one slot each), each capped at {args.cpus} CPUs (its own CPU cgroup) "
        "on the shared 2-core machine (its load average below); a "
        f"{model_bytes / 2**20:.0f} MiB float32 llama of {MODEL['num_hidden_layers']} layers "
        f"(hidden {MODEL['hidden_size']}), LoRA, global batch {BATCH} of {tokens} tokens in "
        f"{m} micro-batches (1F1B, the default schedule), through train.yml; stages balanced "
        f"by parameter bytes, one per host, over bridge0. A step: a run of {args.steps} steps "
        f"less a run of 2; {args.rounds} rounds, each of 1, 2 and 3 stages.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.pipeline --rounds {args.rounds} "
        f"--steps {args.steps} --micro-batches {m} --cpus {args.cpus}`",
        "",
        "| stages | tokens/s: fastest | median | bubble: fastest | median | ideal (S-1)/(M+S-1) "
        "| bytes per step on the links (expected) | peak memory by rank (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, stages in enumerate(STAGES):
        # The share of a step a stage does not compute: 1 - T1 / (S x TS).
        bubble = [1 - times[1] / (stages * times[stages]) for times in (fastest, median)]
        per_step = statistics.median(r[i][1] for r in rounds)
        peaks = [max(r[i][2][rank] for r in rounds) for rank in range(stages)]
        lines.append(
            f"| {stages} | {BATCH * tokens / fastest[stages]:.0f} | "
            f"{BATCH * tokens / median[stages]:.0f} | {bubble[0]:.0%} | {bubble[1]:.0%} | "
            f"{(stages - 1) / (m + stages - 1):.0%} | {per_step / 1e3:.0f} kB "
            f"({(stages - 1) * link_bytes / 1e3:.0f} kB) | "
            f"{', '.join(str(n >> 20) for n in peaks)} |")
    lines += [
        "",
        "Bubble: 1 - T1 / (S x TS) from the step times of 1 and S stages (fastest, median), the "
        "share of a step a stage waits; the sends' own time is in it. Bytes: the median of every "
        "host's bridge0 receive counter over a step (headers included), with each step's "
        "all-reduces of the loss and stop flag; expected: the activations and their gradients, "
        "4 bytes a number. Peak memory: summary.json's peak_memory_bytes, by rank (one rank per "
        "host; the largest of the rounds), each rank's python and libraries included.",
        f"Machine load average before: {' '.join(load)}; after: {' '.join(load_after)}.",
    ]
    write_results(RESULTS, lines)


if __name__ == "__main__":
    main()
