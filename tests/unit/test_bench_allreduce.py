"""roles/bench/files/allreduce.py on its own: a rank whose run hangs ends at its deadline."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

from tools.playbook import ROOT

SCRIPT = ROOT / "roles" / "bench" / "files" / "allreduce.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ring_rank_whose_peer_never_comes_ends_at_its_deadline(tmp_path):
    """Rank 0 of two on loopback, rank 1 never started: MLX's ring waits for it for good (bench.yml
    saw such runs outlive Ansible's async bound, left running on their hosts)."""
    hostfile = tmp_path / "ring.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{free_port()}"], [f"127.0.0.1:{free_port()}"]]))
    env = {**os.environ, "MLX_RANK": "0", "MLX_HOSTFILE": str(hostfile)}
    start = time.monotonic()
    run = subprocess.run([sys.executable, str(SCRIPT), "--backend", "ring", "--sizes", "4096",
                          "--deadline", "2"], env=env, capture_output=True, timeout=60, check=False)
    assert run.returncode == -signal.SIGALRM, run.stderr[-2000:]
    assert time.monotonic() - start < 20
