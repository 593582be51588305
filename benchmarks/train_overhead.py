"""What train.yml adds to a job: its wall time minus the same job run by hand (one run).

    sudo .venv/bin/python -m benchmarks.train_overhead [--rounds 3] [--steps 20]

On a warm 3-host virtual cluster (slots 1,2,1, set up once with setup.yml), each round runs
`ansible-playbook train.yml -e model=mlp -e steps=N` and then the command.sh that run wrote,
by hand on the launch host (raw mpirun, the same job into a fresh run directory). The overhead
of a round is the difference; the breakdown comes from ansible.posix.profile_tasks, grouped by
the phase of the play. Writes benchmarks/results/train_overhead.md (min and median).
"""

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from benchmarks.cluster import set_up_cluster, train_yml, write_results

RESULTS = Path(__file__).parent / "results" / "train_overhead.md"
# The first task of each phase, in play order (profile_tasks' recap in execution order).
PHASES = [
    ("check the request (controller)", "Check the request"),
    ("gather facts (when not cached)", "Gather the facts"),
    ("preflight", "launch : Validating arguments against arg spec 'main'"),
    ("start the job", "launch : Prepare the run"),
    ("follow (the job runs)", "launch : Follow rank 0"),
    ("bring the results back, judge the run", "launch : Fetch this host's results"),
    ("report the verdict", "launch : Fail naming the host"),
]
PHASES_BEFORE_JOB = [name for name, _ in PHASES[:4]]
TASK_TIME = re.compile(r"^(?P<name>.*?) -+ (?P<seconds>\d+\.\d+)s$")


def task_times(output):
    """[(phase, task, seconds)] from profile_tasks' recap (tasks in execution order)."""
    times, phase = [], PHASES[0][0]
    for line in output.splitlines():
        if not (match := TASK_TIME.match(line.strip())):
            continue
        for name, first in PHASES:
            if match["name"].startswith(first):
                phase = name
                break
        times.append((phase, match["name"], float(match["seconds"])))
    return times


def profiled_train_yml(vc, workdir, run, steps):
    """(wall seconds, [(phase, task, seconds)]) of one train.yml run under profile_tasks."""
    wall, stdout = train_yml(vc, workdir, run, ["-e", "model=mlp", "-e", f"steps={steps}"], env={
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
        "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all", "PROFILE_TASKS_SORT_ORDER": "none"})
    return wall, task_times(stdout)


def by_hand(vc, run, raw):
    """Seconds of the run's command.sh started by hand on the launch host, into runs/<raw>."""
    host = vc.hosts[0]
    line = (f"cd mlx-cluster/runs && mkdir -p {raw}/logs && "
            f"sed 's#runs/{run}#runs/{raw}#g' {run}/command.sh >{raw}/command.sh && "
            f"cd {raw} && sh command.sh >launch.log 2>&1")
    start = time.monotonic()
    vc.run(host, line, user=host.user, timeout=900)
    wall = time.monotonic() - start
    summary = vc.run(host, f"cat mlx-cluster/runs/{raw}/summary.json", user=host.user).stdout
    assert json.loads(summary)["steps"] > 0, summary
    return wall


def table(rows, header):
    return [header, "|---|" + "---:|" * (header.count("|") - 2),
            *(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + " |"
              for name, values in rows)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    walls, raws, breakdowns = [], [], []
    with set_up_cluster(hosts=3, slots=[1, 2, 1]) as (vc, workdir):
        # First-run costs: supervisor copy, caches.
        profiled_train_yml(vc, workdir, "warm-up", args.steps)
        for n in range(args.rounds):
            wall, phase = profiled_train_yml(vc, workdir, f"bench-{n}", args.steps)
            raw = by_hand(vc, f"bench-{n}", f"raw-{n}")
            print(f"round {n}: train.yml {wall:.1f} s, by hand {raw:.1f} s", flush=True)
            walls.append(wall)
            raws.append(raw)
            breakdowns.append(phase)

    overheads = [w - r for w, r in zip(walls, raws, strict=True)]
    stats = [("ansible-playbook train.yml", walls), ("command.sh by hand (raw mpirun)", raws),
             ("overhead (train.yml - by hand)", overheads)]
    parts = {name: [sum(t for p, _, t in b if p == name) for b in breakdowns] for name, _ in PHASES}
    parts["Ansible itself (start, plugins, exit)"] = [
        w - sum(t for _, _, t in b) for w, b in zip(walls, breakdowns, strict=True)]
    # The tasks of the phases before the job, by name (a task that ran twice: both times summed).
    before_job = {}
    for b in breakdowns:
        for name in {task for phase, task, _ in b if phase in PHASES_BEFORE_JOB}:
            before_job.setdefault(name, []).append(
                sum(t for phase, task, t in b if task == name and phase in PHASES_BEFORE_JOB))
    lines = [
        "# train.yml's overhead over the same job started by hand",
        "",
        f"3 virtual hosts (slots 1,2,1: 4 ranks), mlp on digits, {args.steps} steps; the shared",
        f"2-core machine. {args.rounds} rounds, each train.yml then its command.sh by hand.",
        "",
        f"Command: `sudo .venv/bin/python -m benchmarks.train_overhead --rounds {args.rounds} "
        f"--steps {args.steps}`",
        "",
        "## Wall time, seconds",
        "",
        *table([(n, (min(v), statistics.median(v))) for n, v in stats],
               "| | min | median |"),
        "",
        "## Where train.yml's seconds go (median over rounds)",
        "",
        *table([(n, (statistics.median(v),)) for n, v in parts.items()], "| phase | seconds |"),
        "",
        "The follow phase is the job itself plus up to 0.1 s after it ends (the follower waits "
        "on the launch host for news).",
        "",
        "## The tasks before the job starts (median over rounds, seconds; 0.1 s and more)",
        "",
        *table(sorted(((n, (statistics.median(v),)) for n, v in before_job.items()
                       if statistics.median(v) >= 0.1), key=lambda row: -row[1][0]),
               "| task | seconds |"),
    ]
    write_results(RESULTS, lines)


if __name__ == "__main__":
    main()
