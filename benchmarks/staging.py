"""Staging -e model=DIR: time, the controller's bytes and a second launch's cost, vs the floor.

    sudo flock /tmp/vcluster.lock .venv/bin/python -m benchmarks.staging \\
        [--hosts 3,4] [--sizes 256,2048] [--rounds 2]

On a virtual cluster set up with setup.yml (en0 1 Gbit/s, bridge0 10 Gbit/s) whose controller's
uplink (its side of the management bridge) is shaped to 500 Mbit/s like a laptop's Wi-Fi, each
round makes a directory of S MiB of random bytes (one file of 3/4 S, eight of S/32, a config.json)
and times three launches of `train.yml -e command='python -c pass'`: without a model (the
floor), with `-e model=DIR` (everything sent) and with it again (nothing changed). Staging time is
the second minus the first; its floor S / uplink + S / bridge0; the controller's bytes are what
it sent over its uplink during the staged launch minus during the floor's. Writes
benchmarks/results/staging.md (min and median over the rounds).
"""

import argparse
import os
import statistics
from pathlib import Path

from benchmarks.cluster import set_up_cluster, train_yml, write_results
from tools.vcluster import sh, tbf_args

RESULTS = Path(__file__).parent / "results" / "staging.md"
MIB = 1 << 20
UPLINK, EN0, BRIDGE0 = 500e6, 1e9, 10e9  # bits a second
COMMAND = ["-e", "command='python -c pass'"]


def make_model(path, size):
    """A directory of `size` bytes of random bytes: one large file and eight small ones."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    parts = [("weights.safetensors", size * 3 // 4)]
    parts += [(f"shard-{i}.bin", size // 32) for i in range(8)]
    for name, length in parts:
        with open(path / name, "wb") as f:
            for start in range(0, length, 64 * MIB):
                f.write(os.urandom(min(64 * MIB, length - start)))
    path.chmod(0o755)
    for child in path.iterdir():
        child.chmod(0o644)
    return sum(p.stat().st_size for p in path.iterdir())


def sent(vc):
    """Bytes the controller has sent over its uplink."""
    return int(Path(f"/sys/class/net/{vc.mgmt_bridge}/statistics/tx_bytes").read_text())


# Each launch's slowest tasks, printed for the log: where a staging's time goes.
PROFILE = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
           "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "8"}


def launch(vc, workdir, run, extra=()):
    """(wall seconds, controller bytes) of one train.yml."""
    before = sent(vc)
    wall, out = train_yml(vc, workdir, run, [*COMMAND, *extra], env=PROFILE)
    print(f"{run}: {wall:.1f} s, slowest tasks:\n{out[out.rfind('=' * 20):].strip()}", flush=True)
    return wall, sent(vc) - before


def rounds_of(vc, workdir, size_mib, rounds):
    """[{floor, first, second: (seconds, bytes)}, size] of each round."""
    measured = []
    for r in range(rounds):
        name = f"model-{size_mib}-{r}"
        model = workdir / name
        size = make_model(model, size_mib * MIB)
        row = {"size": size, "floor": launch(vc, workdir, f"floor-{size_mib}-{r}")}
        row["first"] = launch(vc, workdir, f"first-{size_mib}-{r}", ["-e", f"model={model}"])
        row["second"] = launch(vc, workdir, f"second-{size_mib}-{r}", ["-e", f"model={model}"])
        print(f"{len(vc.hosts)} hosts, {size_mib} MiB, round {r}: {row}", flush=True)
        measured.append(row)
        sh(["rm", "-rf", str(model)])
        for host in vc.hosts:
            vc.run(host, f"rm -rf mlx-cluster/models/{name} mlx-cluster/models/.{name}.*",
                   user=host.user)
    return measured


def summary(hosts, size_mib, rows):
    """A table row: min and median of each measure over the rounds."""
    size = rows[0]["size"]
    floor = size * 8 / UPLINK + size * 8 / BRIDGE0
    staging = [r["first"][0] - r["floor"][0] for r in rows]
    ratio = [(r["first"][1] - r["floor"][1]) / size for r in rows]
    second = [r["second"][0] - r["floor"][0] for r in rows]

    def both(values, digits=1):
        return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f}"

    return (f"| {hosts} | {size_mib} | {floor:.1f} | {both(staging)} | "
            f"{min(staging) / floor:.2f}x / {statistics.median(staging) / floor:.2f}x | "
            f"{both(ratio, 2)} | {both(second)} | "
            f"{both([r['floor'][0] for r in rows])} |")


def report(args, table):
    lines = [
        "# Staging -e model=DIR: time, the controller's bytes, a second launch",
        "",
        "Virtual hosts on the shared 2-core machine, set up with setup.yml; en0 shaped to",
        "1 Gbit/s, bridge0 to 10 Gbit/s, the controller's uplink to 500 Mbit/s (a laptop's",
        "Wi-Fi), with tc tbf. Each round: a new directory of random bytes (one file of 3/4 of it,",
        "eight of 1/32, a config.json), then three launches of",
        "`train.yml -e command='python -c pass'`: without a model (the floor launch), with",
        f"`-e model=DIR`, and with it again, unchanged. {args.rounds} rounds, after one floor",
        "launch untimed (the first launch after setup is slower, which flattered the first",
        "round's staging time).",
        "",
        "Command: `sudo flock /tmp/vcluster.lock .venv/bin/python -m benchmarks.staging "
        f"--hosts {args.hosts} --sizes {args.sizes} --rounds {args.rounds}`",
        "",
        "| hosts | MiB | floor (s): S/uplink + S/bridge0 | staging (s), min / median: "
        "first launch - floor launch | staging / floor: min / median | controller bytes / S | "
        "second launch - floor launch (s) | floor launch (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *table,
        "",
        "Staging includes hashing the input on the controller (once; later launches read only",
        "what changed) before it is sent; the launch host passes each file on to the other hosts",
        "as it arrives (hashed as it is read there and as it is written on each), all on the same",
        "two cores, then runs an rsync only to a host whose copy did not arrive whole.",
    ]
    write_results(RESULTS, lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="3,4", help="cluster sizes, comma-separated")
    parser.add_argument("--sizes", default="256,2048", help="input sizes in MiB")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    table = []
    for hosts in map(int, args.hosts.split(",")):
        with set_up_cluster(hosts=hosts, shape="bridge0=10gbit,en0=1gbit") as (vc, workdir):
            sh(["tc", "qdisc", "replace", "dev", vc.mgmt_bridge, "root", *tbf_args("500mbit")])
            launch(vc, workdir, "warm-up")
            for size_mib in map(int, args.sizes.split(",")):
                rows = rounds_of(vc, workdir, size_mib, args.rounds)
                table.append(summary(hosts, size_mib, rows))
                report(args, table)  # each row as soon as it is measured


if __name__ == "__main__":
    main()
