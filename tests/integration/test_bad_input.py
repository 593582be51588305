"""Bad input never reaches a host: one table of bad train.yml requests and bad inventories.

Every row runs in-process through the checks the plays make before they contact any host, in
their order and with their messages: train.yml's (roles/launch/tasks/validate.yml: the launcher's
options and the extra vars' names, then `python -m train --check` itself, then the request table)
and setup.yml's (roles/validate: cluster_inventory_errors). Each row must stop there, with a
message that names the field and says what to do instead.

A few rows (REAL: one per kind of check) also run as real playbooks, whose every host is a closed
port on the loopback (127.0.0.x:9): had a play tried to reach one, the run would show it as
unreachable. They prove that the plays make those checks before anything else, with the same
message as in-process.
"""

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from tests.unit.plugins import REQUEST_SPEC, ROOT, load
from tools.playbook import run_playbook
from train.__main__ import main as train_main

launch = load("roles/launch/filter_plugins/launch.py")
inventory_filters = load("roles/cluster/filter_plugins/inventory.py")
cables_filters = load("roles/cluster/filter_plugins/cables.py")
topology_filters = load("roles/cluster/filter_plugins/topology.py")
networks_filters = load("roles/cluster/filter_plugins/networks.py")
DEFAULTS = yaml.safe_load((ROOT / "roles/cluster/defaults/main.yml").read_text())


def nowhere(i, **hostvars):
    return {"ansible_host": f"127.0.0.{i}", "ansible_port": 9, **hostvars}


# Two hosts, 4 slots: each request row shows only its own problem.
CLUSTER = {"m1": nowhere(1, mpi_slots=2), "m2": nowhere(2, mpi_slots=2)}


def request(extra, expected, id):
    return pytest.param("train.yml", CLUSTER, extra, expected, id=id)


def cabled(cables, slots=(1, 1, 1), **hostvars):
    """Three hosts with thunderbolt_topology cables (a, b, c) and the given cables."""
    return {h: nowhere(i + 1, mpi_slots=n, thunderbolt_topology="cables",
                       thunderbolt_cable_pool="198.19.0.0/24", thunderbolt_cables=cables,
                       **hostvars)
            for i, (h, n) in enumerate(zip("abc", slots, strict=True))}


CHAIN = [["a", "en2", "b", "en2"], ["b", "en3", "c", "en2"]]
RING = [*CHAIN, ["c", "en3", "a", "en3"]]


def cabled_request(hosts, extra, expected, id):
    return pytest.param("train.yml", hosts, {"batch_size": "48", **extra}, expected, id=id)


def inventory(hosts, expected, id):
    return pytest.param("setup.yml", hosts, {}, expected, id=id)


ROWS = [
    # train.yml: what python -m train would refuse on every rank, asked on the controller.
    request({"model": "mlpp"}, "unknown model 'mlpp'; choices: mlp, cnn, gpt", "model typo"),
    request({"dataset": "nope"}, "unknown dataset 'nope' for model 'mlp'; choices: digits",
            "dataset typo"),
    request({"model": "gpt", "dataset": "digits"}, "unknown dataset 'digits' for model 'gpt'",
            "dataset of another model"),
    request({"lr": "inf"}, "lr: 'inf' is not a finite number > 0 (e.g. 0.001)", "lr inf"),
    request({"lr": "nan"}, "lr: 'nan' is not a finite number > 0", "lr nan"),
    request({"lr": "-0.1"}, "lr: '-0.1' is not a finite number > 0", "negative lr"),
    request({"seed": "1" + "0" * 30}, "is not an integer from 0 to 4294967295", "huge seed"),
    request({"seed": "-1"}, "seed: '-1' is not an integer from 0 to 4294967295",
            "negative seed"),
    request({"steps": "0"}, "steps: '0' is not an integer from 1 to 1000000000", "zero steps"),
    request({"steps": "ten"}, "steps: 'ten' is not an integer from 1 to 1000000000",
            "steps in words"),
    request({"batch_size": "0"}, "batch_size: '0' is not an integer from 1 to 65536", "zero batch"),
    request({"batch_size": "3"}, "batch_size 3 leaves some of the 4 ranks without an example; "
            "choose at least 4", "batch smaller than the world"),
    request({"eval_every": "-1"}, "eval_every: '-1' is not an integer from 0 to 1000000000",
            "eval_every"),
    request({"log_every": "0"}, "log_every: '0' is not an integer from 1 to 1000000000",
            "log_every"),
    request({"grad_bucket_bytes": "-5"}, "grad_bucket_bytes: '-5' is not an integer from 0",
            "bucket size"),
    request({"model": "-x"}, "model: '-x' is not a name or path", "model like a flag"),
    request({"dataset": "--help"}, "dataset: '--help' is not a name or path",
            "dataset like a flag"),
    request({"model": "gpt", "data": "-rf"}, "data: '-rf' is not a name or path",
            "data like a flag"),
    request({"model": "gpt", "data": "~/no-such-corpus.txt"},
            "/no-such-corpus.txt' does not exist", "~ path resolved on the controller"),
    request({"model": "gpt"}, "dataset 'text' needs data PATH", "text without data"),
    request({"model": "./no-such-model"}, "no-such-model'; choices: mlp, cnn, gpt",
            "missing model directory"),
    request({"model_source": "controller", "model": "gpt", "dataset": "text"},
            "model_source: controller fetches a Hugging Face model (model=owner/name), not 'gpt'",
            "model_source for a built-in"),
    request({"model_source": "laptop"}, "model_source: 'laptop' is not one of launch_host, "
            "controller", "model_source typo"),
    # Misspelt names: Ansible keeps any variable, nothing would read these.
    request({"batch-size": "32"}, "batch-size: not a train.yml option — did you mean "
            "batch_size?", "batch-size"),
    request({"batchsize": "32"}, "did you mean batch_size?", "batchsize"),
    request({"check_point_every": "10"}, "did you mean checkpoint_every?", "check_point_every"),
    request({"learning_rate": "0.1"}, "did you mean lr?", "learning_rate"),
    request({"step": "10"}, "did you mean steps?", "step"),
    # The launcher's own options.
    request({"np": "5"}, "np: 5 ranks but the cluster has only 4 slots (m1: 2, m2: 2)",
            "too many ranks"),
    request({"np": "0"}, "np: '0' is not a positive integer", "zero ranks"),
    request({"backend": "nccl"}, "backend: 'nccl' is not one of mpi, ring", "backend"),
    request({"network": "wifi"}, "network: 'wifi' is not one of thunderbolt, management",
            "network"),
    request({"network": "thunderbolt"}, "network: thunderbolt needs a thunderbolt_ip on every "
            "host with slots (none on m1, m2)", "thunderbolt network without addresses"),
    request({"width": "0"}, "width: '0' is not an integer from 1 to 65536", "mlp width"),
    request({"backend": "ring", "np": "2"}, "np: the ring backend starts one rank per slot",
            "ring with fewer ranks"),
    request({"backend": "ring", "mpi_extra_args": "-v"},
            "mpi_extra_args: only the mpi backend runs mpirun", "mpirun flags for ring"),
    request({"mpi_extra_args": '"unbalanced'}, "cannot be split like a shell would",
            "unbalanced quote"),
    request({"backend": "ring", "elastic": "true"}, "elastic: only the mpi backend",
            "elastic ring"),
    request({"parallel": "pipeline", "model": "models/llm", "elastic": "true"},
            "elastic: a pipeline cannot go on without a host", "elastic pipeline"),
    request({"run_name": "../x"}, "run_name: '../x' is not a plain directory name",
            "run name with a path"),
    request({"time_limit": "1h"}, "time_limit: '1h' is not an integer from 1 to 31536000",
            "time limit"),
    request({"stall_timeout": "5"}, "stall_timeout: '5' is not auto or a number of seconds from 10",
            "stall timeout"),
    request({"startup_timeout": "30m"},
            "startup_timeout: '30m' is not an integer from 10 to 86400", "startup timeout"),
    request({"stop_grace": "5"}, "stop_grace: '5' is not an integer from 10 to 86400",
            "stop grace"),
    request({"max_restarts": "-1"}, "max_restarts: '-1' is not an integer from 0 to 100",
            "max restarts"),
    request({"restart_backoff": "-1"}, "restart_backoff: '-1' is not an integer from 0 to 300",
            "restart back-off"),
    request({"restart_backoff": "301"}, "restart_backoff: '301' is not an integer from 0 to 300",
            "restart back-off over the cap"),
    request({"resume": "maybe"}, "resume: 'maybe' is not true or false", "resume"),
    request({"attach": "a", "stop": "b"}, "attach, stop and status: give one of them at a time",
            "attach and stop"),
    request({"attach": "../etc"}, "attach: '../etc' is not a run name", "attach a path"),
    # Values Ansible split at their spaces (-e "command=python -m ..." without inner quotes): the
    # option keeps its first word, the rest lands in _raw_params.
    request({"command": "python", "_raw_params": "-m mlx_lm lora --train"},
            "_raw_params: Ansible split '-m mlx_lm lora --train' off an -e value with spaces",
            "command split at its spaces"),
    request({"run_name": "my", "_raw_params": "run"}, "quote the value inside the -e: -e "
            "\"command='python -m mlx_lm lora --train'\"", "run_name split at its space"),
    # Line breaks in names, huge values, numbers out of their stated range.
    request({"run_name": "my-run\n"}, "run_name: 'my-run\\n' is not a plain directory name",
            "run_name with a line break"),
    request({"attach": "my-run\n"}, "attach: 'my-run\\n' is not a run name",
            "attach with a line break"),
    request({"model": "my\nmodel"}, "model: 'my\\nmodel' is not a name or path",
            "model with a line break"),
    request({"model": "m" * 100_000}, "model: 100000 characters, more than a value can have "
            "(4096)", "huge model"),
    request({"steps": "1e23"}, "steps: '1e23' is not an integer from 1 to 1000000000",
            "steps 1e23"),
    request({"width": "1000000000"}, "width: '1000000000' is not an integer from 1 to 65536",
            "width 1e9"),
    request({"time_limit": "1000000000"}, "time_limit: '1000000000' is not an integer from 1 "
            "to 31536000", "time limit of 31 years"),
    request({"notify": " "}, "notify: ' ' is an empty command — e.g. -e notify='ntfy publish",
            "empty notify"),
    request({"notify": "curl -d 'done"}, "notify: \"curl -d 'done\" cannot be split like a shell "
            "would (No closing quotation)", "notify with an unbalanced quote"),
    # Near misses of an option that Ansible would keep as variables nothing reads.
    request({"epochs": "3"}, "epochs: not a train.yml option — did you mean steps?", "epochs"),
    request({"restarts": "3"}, "restarts: not a train.yml option — did you mean max_restarts?",
            "restarts"),
    request({"limit": "60"}, "limit: not a train.yml option — did you mean time_limit?",
            "limit"),
    # A python -m train settings file (-e @run.yaml) with a flag train.yml sets itself.
    request({"steps": 50, "out": "runs/mine"}, "out: python -m train's, not a train.yml option "
            "— train.yml writes the run to runs/<run_name>/: give run_name instead",
            "out in a settings file"),
    # Over cables (thunderbolt_topology: cables): what the cables cannot carry (topology.py:
    # cable_backend_errors), named with the cable to add.
    cabled_request(cabled(CHAIN), {"backend": "ring"},
                   "ring: the cables between a, b, c form a chain, and ring needs a ring through "
                   "every host that runs ranks — add a cable a - c", "ring over a chain"),
    cabled_request(cabled(RING, slots=(1, 2, 1)), {"backend": "ring", "batch_size": "64"},
                   "b: mpi_slots > 1 — over cables MLX's ring backend runs one rank per host",
                   "ring with two ranks on a host"),
    cabled_request(cabled(CHAIN), {"backend": "jaccl"},
                   "jaccl needs a cable between every two hosts — add the cable(s) a - c",
                   "jaccl over a chain"),
    request({"backend": "jaccl"}, "backend: jaccl runs over RDMA between Macs cabled point to "
            "point", "jaccl over the bridge"),
    # Inventories: nothing of them is rendered into ssh config, known_hosts, authorized_keys,
    # hostfiles or shell scripts unless validation allowed it.
    inventory({"a": nowhere(1, thunderbolt_ip="198.19.200.1"),
               "b": nowhere(2, thunderbolt_ip="198.19.200.1")},
              "b: thunderbolt_ip 198.19.200.1 is also the thunderbolt_ip of a",
              "two hosts claim one Thunderbolt address"),
    inventory({"a": nowhere(1, mpi_slots=-1), "b": nowhere(2)},
              "a: mpi_slots -1 is not a non-negative integer", "negative slots"),
    inventory({"a": nowhere(1, mpi_slots=1000000000), "b": nowhere(2)},
              "a: mpi_slots 1000000000 is more than 256", "huge slots"),
    inventory({"Jane's MacBook Pro": {"ansible_port": 9}, "b": nowhere(2)},
              "use an inventory name like janes-macbook-pro with ansible_host: "
              "Janes-MacBook-Pro.local", "a Mac's computer name as inventory name"),
    inventory({"a\nProxyCommand touch /tmp/pwned": nowhere(1), "b": nowhere(2)},
              "is not a valid host name", "a newline in a name"),
    inventory({"a": nowhere(1), "b": nowhere(2, ansible_host="-oProxyCommand=touch /tmp/pwned")},
              "b: ansible_host '-oProxyCommand=touch /tmp/pwned' is neither an IP address nor a "
              "DNS name", "ansible_host as an ssh option"),
    inventory({"a": nowhere(1, ansible_user="jane doe"), "b": nowhere(2)},
              "a: ansible_user 'jane doe' is not a user name", "user name with a space"),
    inventory({"a": nowhere(1, ansible_user="-oProxyCommand=x"), "b": nowhere(2)},
              "a: ansible_user '-oProxyCommand=x' is not a user name", "user name like a flag"),
    inventory({"a": nowhere(1, ansible_port=70000), "b": nowhere(2)},
              "a: ansible_port 70000", "port out of range"),
    inventory({"a": nowhere(1, thunderbolt_ip="198.19.300.1"), "b": nowhere(2)},
              "a: thunderbolt_ip '198.19.300.1' is not a valid IPv4 address",
              "impossible address"),
    inventory({"a": nowhere(1), "b": nowhere(1)},
              "ansible_host 127.0.0.1", "two names for one machine"),
    inventory({"a": nowhere(1, thunderbolt_ip="198.19.1.1", thunderbolt_prefix=16),
               "b": nowhere(2, thunderbolt_ip="198.19.2.2")},
              "a: thunderbolt_prefix 16 is set for this host only, while b use the default",
              "thunderbolt_prefix on one host only"),
    # The `cables` topology (roles/cluster/filter_plugins/inventory.py: cable_errors).
    inventory({"a": nowhere(1, thunderbolt_topology="ring"),
               "b": nowhere(2, thunderbolt_topology="ring")},
              "cluster: thunderbolt_topology 'ring' is not a topology", "topology typo"),
    inventory({"a": nowhere(1, thunderbolt_topology="cables"), "b": nowhere(2)},
              "a: thunderbolt_topology cables is set for this host only",
              "topology on one host only"),
    inventory({h: nowhere(i, thunderbolt_topology="cables", thunderbolt_ip=f"198.19.0.{i}")
               for i, h in ((1, "a"), (2, "b"))},
              "a: thunderbolt_ip 198.19.0.1 is set while thunderbolt_topology is cables",
              "thunderbolt_ip with cables"),
    inventory({h: nowhere(i, thunderbolt_topology="cables", thunderbolt_cable_pool="198.18.0.0/30",
                          thunderbolt_cables=[["a", "en2", "b", "en2"], ["b", "en2", "c", "en3"]])
               for i, h in ((1, "a"), (2, "b"))},
              "cluster: thunderbolt_cables entry 2 names 'c', which is not in the inventory",
              "cable to an unknown host"),
    # A cable port is a Thunderbolt port: never a bridge or loopback (en0 and the management
    # interface are judged at setup, from the hosts' ports and facts: tests/unit); the pool is
    # address space no one routes.
    inventory(cabled([["a", "bridge0", "b", "en2"], ["b", "en3", "c", "en2"]]),
              "a: thunderbolt_cables entry 1 interface bridge0 is a loopback or bridge interface, "
              "not a cable port", "bridge0 as a cable port"),
    inventory(cabled([["a", "en2", "b", "en2"], ["b", "lo0", "c", "en2"]]),
              "b: thunderbolt_cables entry 2 interface lo0 is a loopback or bridge interface",
              "lo0 as a cable port"),
    inventory({h: {**v, "thunderbolt_cable_pool": "8.8.8.0/24"} for h, v in cabled(CHAIN).items()},
              "cluster: thunderbolt_cable_pool 8.8.8.0/24 is public address space — use private "
              "(10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16), shared (100.64.0.0/10) or benchmark "
              "(198.18.0.0/15) space", "public cable pool"),
]


def settings(hosts):
    """The cluster-wide settings a run_once task reads: the first host's, else the defaults."""
    first = next(iter(hosts.values()))
    return {name: first.get(name, DEFAULTS[name]) for name in (
        "thunderbolt_prefix", "thunderbolt_interface", "thunderbolt_topology",
        "thunderbolt_cable_pool", "thunderbolt_cables")}


def setup_refusal(hosts):
    """roles/validate's message for the inventory, or None."""
    tb = settings(hosts)
    errors = inventory_filters.cluster_inventory_errors(
        hosts, list(hosts), tb["thunderbolt_prefix"], tb["thunderbolt_interface"],
        topology=tb["thunderbolt_topology"], pool=tb["thunderbolt_cable_pool"],
        cables=tb["thunderbolt_cables"])
    if errors:
        return "\n  ".join([f"The inventory has {len(errors)} problem(s):", *errors])
    return None


def train_refusal(hosts, extra):
    """roles/launch/tasks/validate.yml's message for the request, or None."""
    tb, names = settings(hosts), list(hosts)
    host_list = inventory_filters.cluster_hosts(hosts, names)
    cable_topology = topology_filters.cable_topology(host_list, cables_filters.cable_plan(
        tb["thunderbolt_cables"], names, tb["thunderbolt_cable_pool"]))
    request = launch.launch_request(REQUEST_SPEC, [extra.get(name, "") for name in REQUEST_SPEC])
    action = ("status" if request["status"] else "attach" if request["attach"]
              else "stop" if request["stop"] else "launch")
    topology, backend = tb["thunderbolt_topology"], request["backend"]
    varnames = {*extra, *DEFAULTS, *(name for host in hosts.values() for name in host)}
    errors = (
        launch.launch_request_errors(request, host_list, topology)
        + networks_filters.network_errors(request["network"], host_list, topology, backend,
                                          cable_topology)
        + (topology_filters.cable_backend_errors(cable_topology, backend)
           if topology == "cables" and action == "launch"
           and backend in ("ring", "jaccl", "jaccl-ring") else [])
        + launch.launch_unknown_options(varnames, REQUEST_SPEC)
        + launch.launch_split_value_errors(extra.get("_raw_params", "")))
    if errors:
        return "\n  - ".join(["train.yml: fix these values and run it again:", *errors])
    if action == "launch":
        np = launch.launch_np(request["np"], host_list)
        stderr = io.StringIO()
        try:
            with redirect_stderr(stderr), redirect_stdout(io.StringIO()):
                train_main(["--check", str(np), *launch.launch_train_args(request)])
        except SystemExit as e:
            if e.code:
                return (f"train.yml: {launch.launch_train_check_error(stderr.getvalue())} — "
                        "fix that value and run it again")
    given = {name: value for name, value in request.items() if value is not None}
    table = ArgumentSpecValidator(REQUEST_SPEC).validate(given).error_messages
    return "Validation of arguments failed:\n" + "\n".join(table) if table else None


def refusal(playbook, hosts, extra):
    return train_refusal(hosts, extra) if playbook == "train.yml" else setup_refusal(hosts)


@pytest.mark.parametrize(("playbook", "hosts", "extra", "expected"), ROWS)
def test_bad_input_is_refused_by_the_checks_before_any_host(monkeypatch, playbook, hosts, extra,
                                                            expected):
    monkeypatch.chdir(ROOT)  # where ansible-playbook runs: relative paths resolve there
    message = refusal(playbook, hosts, extra)
    assert message is not None and expected in message, message
    assert "—" in message or "choose" in message, message  # every message says what to do


# The rows that also run as real playbooks: one per check (the launcher's, python -m train's,
# the inventory's); the extra vars as typed on a command line, where Ansible makes _raw_params, or
# as a file of them ({file}: the row's extra vars as YAML, what -e @run.yaml reads).
REAL = {"model typo": "-e @{file}",
        "command split at its spaces": '-e "command=python -m mlx_lm lora --train"',
        "bridge0 as a cable port": None}
REQUEST_CHECKS = {
    "Check the launcher's options, the names of the extra vars and the training options",
    "Check the request against the request table"}


@pytest.mark.parametrize(("playbook", "hosts", "extra", "expected"),
                         [row for row in ROWS if row.id in REAL])
def test_the_plays_check_before_they_contact_any_host(tmp_path, request, playbook, hosts, extra,
                                                      expected):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"cluster": {"hosts": hosts}}, sort_keys=False))
    cmdline = REAL[request.node.callspec.id]
    (tmp_path / "run.yml").write_text(yaml.safe_dump(extra))
    run = run_playbook(playbook, path, tmp_path / "runner",
                       cmdline=cmdline and cmdline.replace("{file}", str(tmp_path / "run.yml")),
                       extravars=None if cmdline else extra)

    assert run.status == "failed"
    assert run.task_results("runner_on_unreachable") == []
    assert run.changed() == []
    [failure] = run.task_results("runner_on_failed")
    checks = REQUEST_CHECKS if playbook == "train.yml" else {"Check the inventory"}
    assert failure["task"] in checks, failure["task"]
    message = str(failure["res"].get("msg", ""))
    assert expected in message, message
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(ROOT)
        assert message == refusal(playbook, hosts, extra)
