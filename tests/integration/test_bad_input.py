"""Bad input never reaches a host: one table of bad train.yml requests and bad inventories.

Every host here is a closed port on the loopback (127.0.0.x:9): had a play tried to reach one,
the run would show it as unreachable. Each row must stop at a validation task, with a message
that names the field and says what to do instead.
"""

import pytest
import yaml

from tools.playbook import run_playbook


def nowhere(i, **hostvars):
    return {"ansible_host": f"127.0.0.{i}", "ansible_port": 9, **hostvars}


# Two hosts, 4 slots: the default global batch (64) splits, so each request row shows only its
# own problem.
CLUSTER = {"m1": nowhere(1, mpi_slots=2), "m2": nowhere(2, mpi_slots=2)}
REQUEST_CHECKS = {
    "Check the launcher's options, the names of the extra vars and the training options",
    "Check the request against the request table"}


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
    request({"run_name": "../x"}, "run_name: '../x' is not a plain directory name",
            "run name with a path"),
    request({"time_limit": "1h"}, "time_limit: '1h' is not a positive integer", "time limit"),
    request({"stall_timeout": "5"}, "stall_timeout: '5' is not auto or a number of seconds >= 10",
            "stall timeout"),
    request({"max_restarts": "-1"}, "max_restarts: '-1' is not an integer >= 0",
            "max restarts"),
    request({"resume": "maybe"}, "resume: 'maybe' is not true or false", "resume"),
    request({"attach": "a", "stop": "b"}, "attach, stop and status: give one of them at a time",
            "attach and stop"),
    request({"attach": "../etc"}, "attach: '../etc' is not a run name", "attach a path"),
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
]


@pytest.mark.parametrize(("playbook", "hosts", "extra", "expected"), ROWS)
def test_bad_input_stops_before_any_host_is_contacted(tmp_path, playbook, hosts, extra,
                                                      expected):
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"cluster": {"hosts": hosts}}, sort_keys=False))
    run = run_playbook(playbook, path, tmp_path / "runner", extravars=extra)

    assert run.status == "failed"
    assert run.task_results("runner_on_unreachable") == []
    assert run.changed() == []
    [failure] = run.task_results("runner_on_failed")
    checks = REQUEST_CHECKS if playbook == "train.yml" else {"Check the inventory"}
    assert failure["task"] in checks, failure["task"]
    message = str(failure["res"].get("msg", ""))
    assert expected in message, message
    assert "—" in message or "choose" in message, message  # every message says what to do

