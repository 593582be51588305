"""train.yml reads its options under the names users type, in Ansible's extra-vars order.

bench.yml's recommended.yml is loaded with `-e @file`; a later `-e` on the same command line must
win over it (it used to set the role's internal names, which silently beat the user's choice).
The cluster here is one unreachable loopback port: the request is read and shown before any host
is contacted, then the play stops at the first connection.
"""

import subprocess
import sys
from pathlib import Path

import yaml

from tests.unit.plugins import load
from tools.playbook import ROOT

bench = load("roles/bench/filter_plugins/bench.py")
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def shown_request(tmp_path, *extra):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"cluster": {"hosts": {"m1": {
        "ansible_host": "127.0.0.1", "ansible_port": 9, "mpi_slots": 3}}}}))
    run = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "train.yml", *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         stdin=subprocess.DEVNULL)
    out = run.stdout
    assert "UNREACHABLE" in out, out  # the request passed validation; the host was never there
    shown = out.split("Show the request", 1)[1].split("msg:", 1)[1].split("\n\n", 1)[0]
    options, batch = shown.split(" — ")
    # The default batch on 3 ranks: as even a split as there is, and the play says so.
    assert " ".join(batch.split()) == "global batch 64 (22/21/21 per rank)"  # wrapped or not
    request = dict(word.split("=", 1) for word in options.split())
    # ... and the batch it settled on is the request's from here on (every launch and restart).
    assert request["batch_size"] == "64"
    return request


def test_a_later_extra_var_wins_over_recommended_yml(tmp_path):
    rec = bench.bench_launch_vars({"backend": "mpi", "network": "management", "btl_tcp_links": 1,
                                   "bucket_bytes": 1 << 20, "grad_dtype": "bfloat16"})
    path = tmp_path / "recommended.yml"
    path.write_text(yaml.safe_dump(rec))
    request = shown_request(tmp_path, "-e", f"@{path}")
    # Every key of recommended.yml is an option of the request, read under its own name.
    assert {key: request[key] for key in rec if key != "mpi_extra_args"} == {
        "backend": "mpi", "network": "management", "grad_bucket_bytes": str(1 << 20),
        "grad_dtype": "bfloat16"}
    request = shown_request(tmp_path, "-e", f"@{path}", "-e", "backend=ring")
    assert request["backend"] == "ring"
    assert request["grad_bucket_bytes"] == str(1 << 20)
