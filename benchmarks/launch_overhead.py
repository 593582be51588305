"""Which link carries the gradients, and what launching through Ansible costs (one run).

    sudo .venv/bin/python -m benchmarks.launch_overhead [--mb 8] [--rounds 20]

On a 2-host virtual cluster with shaped links (bridge0 10 Gbit/s, en0 1 Gbit/s, tc tbf):
(a) time of one gradient all-reduce of --mb megabytes (MLX all_sum over MPI, the sync step of
    a training step) with the interface flags on bridge0, on en0, and with no flags;
(b) seconds from starting each launcher to rank 0's first line of training: train.yml
    (ansible-playbook, with its preflight) vs raw mpirun vs mlx.launch (ring).
Writes benchmarks/results/launch_overhead.md.
"""

import argparse
import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load
from benchmarks.cluster import set_up_cluster, write_results
from tools.playbook import ROOT

RESULTS = Path(__file__).parent / "results" / "launch_overhead.md"
mpi = load("roles/cluster/filter_plugins/mpi.py")  # the roles' mpirun_argv
LIBMPI = "/usr/lib/x86_64-linux-gnu/libmpi.so.40"  # Debian's Open MPI 4.1 (the apt install)
VERSION = "4.1.4"
BANNER = "[train] mlp ("  # rank 0's first line once every rank has joined and built the model
ALLSUM = """
import sys, time
import mlx.core as mx
group = mx.distributed.init(strict=True)
grad = mx.ones((int(float(sys.argv[1]) * 2**20 / 4),))
mx.eval(mx.distributed.all_sum(grad, group=group))  # connect
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
    mx.eval(mx.distributed.all_sum(grad, group=group))
if group.rank() == 0:
    print(f"seconds_per_allsum {(time.perf_counter() - start) / int(sys.argv[2]):.5f}")
"""


def as_user(vc, host, line):
    """argv that runs a shell line as the host's login user inside its namespaces."""
    return [*vc.nsenter_argv(host), "runuser", "-l", host.user, "-c", line]


def allreduce_seconds(vc, workdir, interface, mb, rounds):
    """Seconds per all_sum on 2 ranks (one per host) with the flags for `interface`."""
    a, b = vc.hosts
    on_en0 = interface == "en0"
    hostfile = workdir / f"hostfile-{interface}"
    hostfile.write_text("".join(
        f"{h.en0_ip if on_en0 else h.thunderbolt_ip} slots=1\n" for h in (a, b)))
    script = workdir / "allsum.py"
    script.write_text(ALLSUM)
    argv = mpi.mpirun_argv("/usr/bin/mpirun", hostfile, 2, VERSION,
                           interface=interface, env={"MLX_MPI_LIBNAME": LIBMPI})
    argv += ["mlx-cluster/venv/bin/python", str(script), str(mb), str(rounds)]
    out = subprocess.run(as_user(vc, a, shlex.join(argv)), capture_output=True, text=True,
                         timeout=900, stdin=subprocess.DEVNULL)
    for line in out.stdout.splitlines():
        if line.startswith("seconds_per_allsum"):
            print(f"{interface}: {line}", flush=True)
            return float(line.split()[1])
    raise SystemExit(f"all_sum with {interface} failed:\n{out.stdout}\n{out.stderr}")


def seconds_to_banner(argv, log=None, env=None):
    """Start argv; seconds until BANNER appears in its output (or in the file `log` reads)."""
    start = time.monotonic()
    # mlx.launch makes its stdin non-blocking, which Ansible refuses: give each its own.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    found, output = None, []
    try:
        if log is None:
            for line in proc.stdout:
                output.append(line)
                if BANNER in line:
                    found = time.monotonic() - start
                    break
        else:
            threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True).start()
            while found is None and proc.poll() is None:
                if BANNER in log():
                    found = time.monotonic() - start
                time.sleep(0.2)
    finally:
        proc.wait(timeout=900)
    if found is None:
        raise SystemExit(f"no training started: {shlex.join(argv)}\n{''.join(output)[-3000:]}")
    print(f"{argv[0]}: {found:.1f} s to the first training line", flush=True)
    return found


def startup_seconds(vc, workdir):
    a = vc.hosts[0]
    python = "mlx-cluster/venv/bin/python"
    train = "-m train --model mlp --steps 20 --checkpoint-every 0"
    mpirun = mpi.mpirun_argv("/usr/bin/mpirun", "mlx-cluster/hostfile", 2, VERSION,
                             interface="bridge0", env={"MLX_MPI_LIBNAME": LIBMPI})
    raw = f"{shlex.join(mpirun)} {python} {train} --out /tmp/bench-raw-$$"
    ring = (f"mlx-cluster/venv/bin/mlx.launch --hostfile mlx-cluster/hosts.json --backend ring "
            f"-- $HOME/{python} {train} --out /tmp/bench-ring-$$")
    results = {
        "raw mpirun": seconds_to_banner(as_user(vc, a, f"cd && {raw}")),
        "mlx.launch (ring)": seconds_to_banner(as_user(vc, a, f"cd && {ring}")),
    }
    log = "mlx-cluster/runs/bench/logs/rank.0.log"
    playbook = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", vc.inventory,
                str(ROOT / "train.yml"), "-e", "run_name=bench", "-e", "steps=20",
                "-e", f"launch_results_dir={workdir / 'runs'}"]
    results["ansible-playbook train.yml"] = seconds_to_banner(
        playbook, log=lambda: vc.run(a, f"cat {log} 2>/dev/null; true", user=a.user).stdout,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=8, help="gradient size in MB")
    parser.add_argument("--rounds", type=int, default=20, help="all_sums to time")
    args = parser.parse_args()
    with set_up_cluster(hosts=2, shape="bridge0=10gbit,en0=1gbit") as (vc, workdir):
        links = {name: allreduce_seconds(vc, workdir, iface, args.mb, args.rounds)
                 for name, iface in (("bridge0 (10 Gbit/s)", "bridge0"),
                                     ("en0 (1 Gbit/s)", "en0"), ("no flags", None))}
        startup = startup_seconds(vc, workdir)

    base = links["bridge0 (10 Gbit/s)"]
    fastest = min(startup.values())
    lines = [
        "# Launch: which link carries the gradients, and the cost of launching via Ansible",
        "",
        "2 virtual hosts (1 rank each) on the shared 2-core machine; bridge0 shaped to 10 Gbit/s,",
        "en0 to 1 Gbit/s with tc tbf. One run.",
        "",
        "Command: `sudo .venv/bin/python -m benchmarks.launch_overhead "
        f"--mb {args.mb:g} --rounds {args.rounds}`",
        "",
        f"## All-reduce of a {args.mb:g} MB gradient (MLX all_sum over Open MPI {VERSION})",
        "",
        "| interface flags | seconds per all_sum | vs bridge0 |",
        "|---|---:|---:|",
        *(f"| {name} | {s:.4f} | {s / base:.2f}x |" for name, s in links.items()),
        "",
        "## Seconds from start to rank 0's first training line (mlp, digits)",
        "",
        "| launcher | seconds | vs fastest |",
        "|---|---:|---:|",
        *(f"| {name} | {s:.1f} | {s / fastest:.2f}x |" for name, s in startup.items()),
        "",
        "train.yml includes fact gathering and the preflight checks (ssh from the launch host,",
        "Open MPI and train/ hashes on every host) before it starts mpirun.",
    ]
    write_results(RESULTS, lines)


if __name__ == "__main__":
    main()
