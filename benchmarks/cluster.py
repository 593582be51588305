"""What the virtual-cluster benchmarks share: a cluster set up with setup.yml, and the report."""

import contextlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load
from tools.playbook import ROOT, run_playbook
from tools.vcluster import VirtualCluster
from tools.wheelhouse import offline_pip_args

bench = load("roles/bench/filter_plugins/bench.py")  # bench.yml's reading of iperf3 and floor
IPERF3_PORT = 5201


@contextlib.contextmanager
def set_up_cluster(**cluster_args):
    """(virtual cluster set up with setup.yml from the offline wheelhouse, a work directory the
    hosts' users can read), both removed afterwards."""
    extra_vars = {"python_env_pip_extra_args": offline_pip_args(),
                  **cluster_args.pop("extra_vars", {})}
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, VirtualCluster(
        extra_vars=extra_vars, **cluster_args,
    ) as vc:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        setup = run_playbook("setup.yml", vc.inventory, workdir / "setup")
        if setup.status != "successful":
            raise SystemExit(f"setup.yml failed:\n{setup.stdout[-4000:]}")
        yield vc, workdir


def write_results(path: Path, lines: list[str]) -> None:
    """Save a benchmark's markdown report (committed in benchmarks/results/) and print it."""
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())


def train_yml(vc, workdir, run, extra_args, env=None):
    """(wall seconds, stdout) of `ansible-playbook train.yml -e run_name=<run> <extra_args>` as a
    user types it, results under workdir/runs/<run>; env: more environment variables."""
    argv = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(vc.inventory),
            str(ROOT / "train.yml"), "-e", f"run_name={run}",
            "-e", f"launch_results_dir={workdir / 'runs'}", *extra_args]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **(env or {})}
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800,
                          stdin=subprocess.DEVNULL)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"train.yml failed:\n{done.stdout[-4000:]}")
    return wall, done.stdout


def iperf3_gbps(vc, client, server, seconds=5):
    """Gbit/s that one TCP stream moves from host client to host server over bridge0 (iperf3, as
    bench.yml measures a link: what the link gives, the floor's rate)."""
    server_ip = vc.host(server).thunderbolt_ip
    vc.run(server, ["iperf3", "-s", "-1", "-D", "-B", server_ip, "-p", str(IPERF3_PORT)])
    argv = ["iperf3", "-J", "-c", server_ip, "-B", vc.host(client).thunderbolt_ip,
            "-p", str(IPERF3_PORT), "-t", str(seconds)]
    for _ in range(20):  # until the server listens
        done = vc.run(client, argv, check=False, timeout=seconds + 30)
        link = bench.bench_iperf3_link(
            {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr})
        if "gbps" in link:
            return link["gbps"]
        time.sleep(0.5)
    raise SystemExit(f"iperf3 from {client} to {server} failed: {link['error']}")
