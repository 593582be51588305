"""The launch plan (roles/launch/filter_plugins/launch_plan.py): what train.yml runs where, for
each backend and topology, from the inputs tasks/main.yml gathers and the answers preflight's
probe brings back; and every error that keeps a job from starting, with its fix."""

import hashlib
import json

import pytest

from tests.unit.plugins import REQUEST_SPEC, ROOT, load

plans = load("roles/launch/filter_plugins/launch_plan.py")
launch = load("roles/launch/filter_plugins/launch.py")
inventory = load("roles/cluster/filter_plugins/inventory.py")
cables = load("roles/cluster/filter_plugins/cables.py")
topologies = load("roles/cluster/filter_plugins/topology.py")
networks = load("roles/cluster/filter_plugins/networks.py")
trees = load("roles/cluster/filter_plugins/tree.py")

SUPERVISOR_SHA1 = hashlib.sha1((ROOT / "roles/launch/files/supervisor.py").read_bytes()).hexdigest()
OPENMPI = {"mpirun_path": "/opt/homebrew/bin/mpirun", "prefix": "/opt/homebrew",
           "version": "5.0.8", "libmpi_path": "/opt/homebrew/lib/libmpi.40.dylib"}


def host(name, slots, tb=None, address=None):
    address = address or tb
    return {"name": name, "slots": slots, "thunderbolt_ip": tb, "mpi_address": address,
            "management_ip": address if not tb else address.replace("198.19", "198.18")}


def work(name, home="/Users/alice"):
    return {"name": name, "home": home, "user": "alice", "work_dir": f"{home}/mlx-cluster",
            "python_env": f"{home}/mlx-cluster/venv"}


BRIDGE = [host("a", 2, tb="198.19.0.1"), host("b", 1, tb="198.19.0.2"),
          host("c", 0, tb="198.19.0.3")]
MANAGEMENT = [host("a", 2, address="198.18.0.1"), host("b", 1, address="198.18.0.2")]
# Four Macs cabled as a ring a - c - b - d - a: MLX's ring visits a, c, b, d.
NAMES = ["a", "b", "c", "d"]
RING = [["a", "en2", "c", "en2"], ["c", "en3", "b", "en2"], ["b", "en3", "d", "en2"],
        ["d", "en3", "a", "en3"]]
POOL = "198.19.128.0/24"
CABLED = [host(n, 1, address=f"198.18.0.{i + 1}") for i, n in enumerate(NAMES)]


def given(hosts, on="a", topology="bridge", cabling=()):
    """tasks/main.yml's inputs, with the cluster role's definitions (roles/cluster/defaults)."""
    cable_topology = topologies.cable_topology(
        hosts, cables.cable_plan([list(c) for c in cabling], [h["name"] for h in hosts],
                                 POOL))
    default = networks.cluster_default_network(hosts, topology)
    ring = topology == "cables" and cable_topology["backends"]["ring"]
    names = {default: "hosts.json"}
    if default == "thunderbolt":
        names["management"] = "hosts-management.json"
    ranked = [h for h in hosts if h["slots"] > 0]
    return {
        "host": on, "this": work(on), "hosts": hosts, "topology": topology,
        "cables": cable_topology, "default_network": default,
        "mpi_interface": (cable_topology["mpi"].get("include", "") if topology == "cables"
                          else "bridge0" if any(h["thunderbolt_ip"] for h in hosts) else ""),
        "mpi_exclude": cable_topology["mpi"].get("exclude", "") if topology == "cables" else "",
        "mlx_hostfile": inventory.mlx_hostfile(hosts, "ring", cable_topology if ring else None),
        "mlx_hostfile_names": names,
        "facts": {h["name"]: {"interfaces": ["en0"], "en0": {"ipv4": {
            "address": h["management_ip"], "network": "198.18.0.0"}}} for h in ranked},
        "thunderbolt_interface": "bridge0",
        "probes": [{"item": "versions", "argv": ["python", "versions.py"]}],
        "tree_checksums_code": "print('checksums')", "results_dir": "/ctl/runs",
        "exit_grace": 60,
    }


def request(**extra_vars):
    """The request as tasks/validate.yml leaves it: the table's, with the supervisor's
    defaults."""
    values = [extra_vars.get(name, "") for name in REQUEST_SPEC]
    settled = launch.launch_request(REQUEST_SPEC, values)
    return {**settled, **launch.launch_supervisor_settings(settled)}


VERSIONS = {"python": "3.11.7", "packages": {"mlx": "0.32.4", "mpi4py": "4.1.2"}}
TREE = [{"path": "loop.py", "checksum": "1" * 40}]
TRAIN_DIR = "/Users/alice/mlx-cluster/venv/lib/python3.11/site-packages/train"
RULES = ('export OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_dynamic_rules_filename'
         '="$PWD"/venv/lib/python3.11/site-packages/train/openmpi-allreduce.rules && ')


def probed(**changed):
    """What one ranked host's probe answers when nothing is wrong (tasks/probe.yml), each item's
    result updated by changed[item]."""
    answered = {"mpirun_version": {"rc": 0, "stdout": "mpirun (Open MPI) 5.0.8\n"},
                "versions": {"rc": 0, "stdout": json.dumps(VERSIONS)},
                "train_tree": {"rc": 0, "stdout": json.dumps(TREE)},
                "train_dir": {"rc": 0, "stdout": TRAIN_DIR + "\n"},
                "ibv_devices": {"rc": 0, "stdout": "device  node GUID\n------  ----\n"
                                                   "rdma_en2  1\nrdma_en3  2\n"},
                "rsync": {"rc": 0, "stdout": "rsync  version 3.2.7"}}
    return [{"item": item, "stderr": "", **result, **changed.get(item, {})}
            for item, result in answered.items()]


def answers(plan, inputs, runs=(), run_dirs="", **changed):
    """What the hosts answered: every ranked host's probe and the launch host's questions, for
    a cluster as setup.yml left it (the hostfile it rendered, this checkout's supervisor)."""
    ranked = [h for h in inputs["hosts"] if h["slots"] > 0]
    hosts_json = (inventory.mlx_hostfile(inputs["hosts"], "ring", network="management")
                  if plan["over_management"] else inputs["mlx_hostfile"])
    hostfile = ("".join(f"{h['mpi_address']} slots={h['slots']}\n" for h in ranked)
                if plan["hostfile"].endswith("/hostfile") else json.dumps(hosts_json))
    launch_host = [{"item": "hostfile", "rc": 0, "stdout": hostfile, "stderr": ""},
                   {"item": "runs", "rc": 0, "stdout": json.dumps(list(runs)), "stderr": ""},
                   {"item": "supervisor", "rc": 0, "stderr": "",
                    "stdout": json.dumps([{"checksum": SUPERVISOR_SHA1}])},
                   {"item": "run_dirs", "rc": 0, "stdout": run_dirs, "stderr": ""},
                   {"item": "mlx_launch", "rc": 0, "stdout": "", "stderr": ""}]
    launch_host += [{"item": h, "rc": 0, "stdout": h["name"], "stderr": ""} for h in ranked[1:]]
    return {"results": [probed() + launch_host] + [probed() for _ in ranked[1:]],
            "infos": [work(h["name"]) for h in ranked], "stamp": "20260101-120000", **changed}


def judged(found, backend="mpi"):
    """The answers as preflight passes them to the plan: each ranked host's launch_host_check
    of its probe's results (Homebrew's Open MPI on macOS), the launch host's results."""
    names = [i["name"] for i in found["infos"]]
    checks = [plans.launch_host_check(results, name, "/opt/homebrew/bin", "package", "Darwin",
                                      backend, trees.tree_digest(TREE))
              for results, name in zip(found["results"], names, strict=True)]
    return {**found, "checks": checks, "results": found["results"][0]}


def plan_of(req, inputs, **answered):
    """The whole plan, as preflight sets it on the launch host."""
    early = plans.launch_plan(req, inputs)
    return plans.launch_plan(req, inputs, judged(answers(early, inputs, **answered),
                                                 req["backend"]))


# ---------------------------------------------------------------- each backend and topology


def test_mpi_over_the_bridge_runs_mpirun_on_bridge0_with_setups_hostfile():
    plan = plan_of(request(model="mlp", steps="20"), given(BRIDGE))
    assert plan["errors"] == [] and plan["run"] == "mlp-20260101-120000"
    argv = plan["argv"]
    assert argv[:4] == ["/opt/homebrew/bin/mpirun", "--hostfile",
                        "/Users/alice/mlx-cluster/hostfile", "-np"] and argv[4] == "3"
    assert "--prtemca oob_tcp_if_include bridge0" in " ".join(argv)
    assert "MLX_MPI_LIBNAME=/opt/homebrew/lib/libmpi.40.dylib" in argv
    assert argv[-3:] == ["--model=mlp", "--steps=20",
                         "--heartbeat=runs/mlp-20260101-120000/logs/rank.{rank}.heartbeat"]
    assert plan["rank_hosts"] == ["a", "a", "b"]
    assert [(r["rank"], r["host"], r["address"]) for r in plan["rank_plan"]] == [
        (0, "a", "local"), (1, "a", "local"), (2, "b", "198.19.0.2")]
    assert plan["rank_plan"][2]["run_dir"] == "/Users/alice/mlx-cluster/runs/mlp-20260101-120000"
    # Each rank's Open MPI runs its all-reduce by train's rules, where that host installed them.
    assert RULES in argv[argv.index("/bin/sh") + 2]


@pytest.mark.parametrize(("extra", "rules"), [
    ({"command": "python -m mlx_lm lora --train"}, True),  # the rank's program passes them on
    ({"mpi_allreduce_rules": "false"}, False),
    ({"mpi_extra_args": "--mca coll_tuned_use_dynamic_rules 0"}, False),  # the user's decide
])
def test_every_mpi_job_runs_open_mpis_all_reduce_by_trains_rules_unless_told_not_to(extra, rules):
    inputs = given(BRIDGE)
    assert {"item": "train_dir", "argv": ["/Users/alice/mlx-cluster/venv/bin/python", "-I", "-c",
                                          plans.TRAIN_DIR]} in plans.launch_plan(
        request(**extra), inputs)["probes"]
    plan = plan_of(request(**extra), inputs)
    assert plan["errors"] == []
    assert (RULES in plan["argv"][plan["argv"].index("/bin/sh") + 2]) == rules
    assert ("--mca coll_tuned_use_dynamic_rules 0" in " ".join(plan["argv"])) == bool(
        extra.get("mpi_extra_args"))


def test_the_supervisors_argv_starts_the_plans_command_under_its_lock():
    plan = plan_of(request(model="mlp", elastic="true", time_limit="600"), given(BRIDGE))
    argv = plan["supervisor_argv"]
    assert argv[:5] == ["/Users/alice/mlx-cluster/venv/bin/python",
                        "/Users/alice/mlx-cluster/supervisor.py", "start", "--run-dir",
                        "/Users/alice/mlx-cluster/runs/mlp-20260101-120000"]
    assert argv[argv.index("--lock") + 1] == "/Users/alice/mlx-cluster/runs/.job.lock"
    assert argv[argv.index("--exit-grace") + 1] == "60"
    assert json.loads(argv[argv.index("--rank-hosts") + 1]) == plan["rank_plan"]
    assert "--time-limit=600" in argv and "--stall-timeout=auto" in argv
    elastic = next(a for a in argv if a.startswith("--elastic="))
    assert json.loads(elastic.removeprefix("--elastic=")) == {"argv": plan["argv"],
                                                               "batch_size": None}


def test_ring_over_the_bridge_runs_mlx_launch_with_setups_hosts_json():
    plan = plan_of(request(model="mlp", backend="ring"), given(BRIDGE))
    assert plan["errors"] == []
    assert plan["argv"][:6] == ["/Users/alice/mlx-cluster/venv/bin/mlx.launch", "--hostfile",
                                "/Users/alice/mlx-cluster/hosts.json", "--backend", "ring", "--"]
    assert plan["argv"][6:8] == ["/bin/sh", "-c"] and "OMPI_MCA" not in plan["argv"][8]
    assert "train_dir" not in [p["item"] for p in plans.launch_plan(
        request(model="mlp", backend="ring"), given(BRIDGE))["probes"]]
    assert plan["jaccl_hostfile"] is None and plan["rank_hosts"] == ["a", "a", "b"]


@pytest.mark.parametrize("backend", ["mpi", "ring"])
def test_the_management_network_moves_the_job_off_thunderbolt(backend):
    plan = plan_of(request(model="mlp", backend=backend, network="management"), given(BRIDGE))
    assert plan["errors"] == [] and plan["over_management"]
    if backend == "ring":
        assert plan["hostfile"] == "/Users/alice/mlx-cluster/hosts-management.json"
    else:
        assert "--mca btl_tcp_if_include en0" in " ".join(plan["argv"])
        assert "bridge0" not in " ".join(plan["argv"])


def test_without_thunderbolt_addresses_mpirun_leaves_the_interfaces_to_open_mpi():
    plan = plan_of(request(model="mlp"), given(MANAGEMENT))
    assert plan["errors"] == [] and plan["network"] == "management"
    assert "if_include" not in " ".join(plan["argv"]) and plan["setup_hostfile"].endswith(
        "/hostfile")


@pytest.mark.parametrize("backend", ["ring", "jaccl-ring"])
def test_over_cables_the_ring_backends_rank_the_hosts_in_the_rings_order(backend):
    inputs = given(CABLED, topology="cables", cabling=RING)
    plan = plan_of(request(model="mlp", backend=backend), inputs)
    assert plan["errors"] == [] and plan["rank_hosts"] == ["a", "c", "b", "d"]
    assert [r["host"] for r in plan["rank_plan"]] == ["a", "c", "b", "d"]
    if backend == "jaccl-ring":
        assert plan["hostfile"] == "/Users/alice/mlx-cluster/hosts-jaccl-ring.json"
        assert plan["jaccl_hostfile"]["backend"] == "jaccl-ring"
        assert plan["setup_hostfile"] == "/Users/alice/mlx-cluster/hosts.json"


def test_jaccl_over_cables_writes_its_own_hostfile_and_asks_for_the_rdma_devices():
    mesh = [["a", "en2", "b", "en2"], ["a", "en3", "c", "en2"], ["b", "en3", "c", "en3"]]
    inputs = given(CABLED[:3], topology="cables", cabling=mesh)
    early = plans.launch_plan(request(model="mlp", backend="jaccl"), inputs)
    assert {"item": "ibv_devices", "argv": ["ibv_devices"]} in early["probes"]
    assert early["jaccl_hostfile"] == inventory.mlx_hostfile(CABLED[:3], "jaccl", inputs["cables"])
    found = answers(early, inputs)
    plan = plans.launch_plan(request(model="mlp", backend="jaccl"), inputs,
                             judged(found, "jaccl"))
    assert plan["errors"] == [] and plan["argv"][4] == "jaccl"
    _on(found, 1, "ibv_devices", stdout="rdma_en2  1\n")
    plan = plans.launch_plan(request(model="mlp", backend="jaccl"), inputs,
                             judged(found, "jaccl"))
    assert plan["errors"][0].startswith("b: no RDMA device rdma_en3 for its cables")
    assert "argv" not in plan  # a plan with errors has no command


def test_mpi_over_cables_between_three_hosts_keeps_off_the_pool():
    plan = plan_of(request(model="mlp"), given(CABLED, topology="cables", cabling=RING))
    assert plan["errors"] == []
    assert f"oob_tcp_if_exclude {POOL}" in " ".join(plan["argv"])


# ---------------------------------------------------------------- before the hosts answer


def test_before_the_answers_the_plan_says_what_to_ask_each_host():
    inputs = given(BRIDGE)
    first = plans.launch_plan(request(model="mlp"), inputs)
    assert first["has_ranks"] and first["on_launch_host"] and first["run"] is None
    asked = [p["item"] for p in first["probes"]]
    assert asked[:2] == ["versions", "train_dir"] and asked[2:7] == [
        "hostfile", "runs", "supervisor", "run_dirs", "mlx_launch"]
    assert [p["item"]["name"] for p in first["probes"][7:]] == ["b"]  # ssh to the others
    other = plans.launch_plan(request(model="mlp"), {**inputs, "host": "b", "this": work("b")})
    assert [p["item"] for p in other["probes"]] == ["versions", "train_dir"]
    idle = plans.launch_plan(request(model="mlp"), {**inputs, "host": "c", "this": work("c")})
    assert not idle["has_ranks"] and not idle["on_launch_host"]


@pytest.mark.parametrize("action", ["attach", "stop"])
def test_attach_and_stop_name_their_run_before_any_answer(action):
    plan = plans.launch_plan(request(**{action: "r1"}), given(BRIDGE))
    assert plan["action"] == action and plan["run"] == "r1"
    assert plan["run_dir"] == "/Users/alice/mlx-cluster/runs/r1"
    assert plan["results"] == "/ctl/runs/r1"
    assert plans.launch_plan(request(status="true"), given(BRIDGE))["action"] == "status"


def test_the_controllers_data_and_model_are_staged_and_passed_by_their_host_paths(tmp_path):
    (tmp_path / "corpus.txt").write_text("text")
    (tmp_path / "tiny").mkdir()
    req = request(data=str(tmp_path / "corpus.txt"), model=str(tmp_path / "tiny") + "/")
    plan = plan_of(req, given(BRIDGE))
    assert plan["staged"] == [
        {"rel": "data/corpus.txt", "src": str(tmp_path / "corpus.txt"), "dir": False},
        {"rel": "models/tiny", "src": str(tmp_path / "tiny"), "dir": True}]
    assert "--data=data/corpus.txt" in plan["argv"] and "--model=models/tiny" in plan["argv"]
    staged = next(p for p in plan["probes"] if p["item"] == "staged")
    assert staged["argv"][3:] == ["report", "/Users/alice/mlx-cluster",
                                  '["data/corpus.txt", "models/tiny"]']
    assert {"item": "rsync", "argv": ["rsync", "--version"]} in plan["probes"]


def test_each_host_checks_report_to_with_its_installed_train():
    inputs = given(BRIDGE)
    plan = plans.launch_plan(request(model="mlp", report_to="wandb,trackio"), inputs)
    trackers = next(p for p in plan["probes"] if p["item"] == "trackers")
    assert trackers["argv"] == ["/Users/alice/mlx-cluster/venv/bin/python", "-I", "-m", "train",
                                "--check", "1", "--report-to=wandb,trackio"]
    assert "trackers" not in [p["item"] for p in plans.launch_plan(request(), inputs)["probes"]]
    found = _on(answers(plan, inputs), 1, "versions")
    found["results"][1].append({"item": "trackers", "rc": 2, "stdout": "",
                                "stderr": "train: error: argument --report-to: wandb needs x"})
    errors = plans.launch_plan(request(model="mlp", report_to="wandb"), inputs,
                               judged(found))["errors"]
    assert errors == ["b: report_to: wandb needs x"]


def test_a_hub_model_is_fetched_at_the_revision_a_resumed_run_recorded():
    runs = [{"run": "r1", "state": "stopped", "started": 1, "last_step": 5,
             "hub_model": {"repo": "ann/tiny", "revision": "c" * 40}}]
    plan = plan_of(request(model="ann/tiny", run_name="r1", resume="true"), given(BRIDGE),
                   runs=runs, run_dirs="r1\n")
    assert plan["errors"] == [] and plan["model_rel"] == "models/ann--tiny"
    assert plan["staged"] == [{"rel": "models/ann--tiny", "src": None, "dir": True, "hub": True}]
    # The launch host fetches it into its cache and stages it into its work dir.
    assert plan["hub_model"] == {"repo": "ann/tiny", "revision": "c" * 40,
                                 "work_dir": "/Users/alice/mlx-cluster", "rel": "models/ann--tiny"}
    controller = plan_of(request(model="ann/tiny", model_source="controller"), given(BRIDGE))
    assert controller["hub_model"] == {"repo": "ann/tiny", "revision": ""}
    assert "--model=models/ann--tiny" in plan["argv"] and "--resume" in plan["argv"]


# ---------------------------------------------------------------- the run's name


def test_a_run_is_named_by_run_name_else_the_newest_resumed_else_model_and_time():
    runs = [{"run": "old", "state": "finished", "started": 1},
            {"run": "new", "state": "stopped", "started": 2}]
    assert plan_of(request(model="mlp", run_name="mine"), given(BRIDGE))["run"] == "mine"
    plan = plan_of(request(model="mlp", resume="true"), given(BRIDGE), runs=runs,
                   run_dirs="old\nnew\n")
    assert plan["run"] == "new" and plan["errors"] == []
    command = plan_of(request(command="python -c pass"), given(BRIDGE))
    assert command["run"] == "command-20260101-120000"
    assert plan_of(request(), given(BRIDGE))["run"] == "train-20260101-120000"


def test_the_installed_supervisor_is_replaced_only_when_it_differs():
    inputs = given(BRIDGE)
    early = plans.launch_plan(request(model="mlp"), inputs)
    found = answers(early, inputs)
    assert not plans.launch_plan(request(model="mlp"), inputs, judged(found))["supervisor_stale"]
    _on(found, 0, "supervisor", rc=1, stdout="", stderr="missing")
    assert plans.launch_plan(request(model="mlp"), inputs, judged(found))["supervisor_stale"]


# ---------------------------------------------------------------- the errors, each with its fix


def _on(found, rank_host, item, **result):
    """found, with what the probe of the rank_host-th ranked host answered about item changed."""
    results = found["results"]
    results[rank_host] = [dict(r, **result) if r["item"] == item else r
                          for r in results[rank_host]]
    return found


def _broken(found, item, **result):
    return _on(found, 0, item, **result)  # the launch host's


ERRORS = [
    # (request, what the hosts answered, the error's start)
    ({}, lambda f: _on(f, 1, "mpirun_version", stdout="mpirun (Open MPI) 4.1.6\n"),
     "Open MPI version differs between hosts (a: 5.0.8, b: 4.1.6)"),
    ({}, lambda f: _on(f, 1, "train_tree", stdout=json.dumps([{"path": "loop.py",
                                                               "checksum": "2" * 40}])),
     "train/ package on b differs from the controller's train/ (b: loop.py modified)"),
    ({}, lambda f: _on(f, 1, "versions", rc=1, stdout=""),
     "the Python environment on b could not be read — re-run setup.yml"),
    ({}, lambda f: _on(f, 1, "versions", stdout=json.dumps({**VERSIONS, "python": "3.12.1"})),
     "python differs between hosts ("),
    ({}, lambda f: _on(f, 1, "rsync", rc=127, stderr="rsync: not found"),
     "b has no rsync (rsync: not found), which -e data and -e model travel with — install it"),
    ({}, lambda f: _on(f, 1, "mpirun_version", rc=127, stderr="not found"),
     "openmpi: `/opt/homebrew/bin/mpirun --version` failed on b (not found; "
     "openmpi_install_method=package)"),
    ({}, lambda f: {**f, "infos": [work("a"), {**work("b"), "work_dir": "/opt/mlx"}]},
     "cluster_work_dir differs between hosts"),
    ({}, lambda f: _on(f, 1, "train_dir", rc=1, stdout=""),
     "the train package on b could not be found — re-run setup.yml"),
    ({}, lambda f: _on(f, 1, "train_dir", stdout="/opt/py/train"),
     "train's Open MPI rules are at different places on the hosts (a: /Users/alice/mlx-cluster/"
     "venv/lib/python3.11/site-packages/train/openmpi-allreduce.rules, b: /opt/py/train/"),
    ({}, lambda f: _broken(f, "hostfile", rc=1, stderr="No such file"),
     "/Users/alice/mlx-cluster/hostfile is missing on a (No such file) — run ansible-playbook "
     "setup.yml"),
    ({}, lambda f: _broken(f, "hostfile", stdout="198.19.0.9 slots=2\n"),
     "/Users/alice/mlx-cluster/hostfile does not match the inventory"),
    ({"backend": "ring"}, lambda f: _broken(f, "hostfile", stdout='{"hosts": []}'),
     "/Users/alice/mlx-cluster/hosts.json does not match the inventory"),
    ({"backend": "ring"}, lambda f: _broken(f, "mlx_launch", rc=1),
     "/Users/alice/mlx-cluster/venv/bin/mlx.launch is missing — re-run setup.yml"),
    ({}, lambda f: _on(f, 0, {"name": "b", "slots": 1, "thunderbolt_ip": "198.19.0.2",
                               "mpi_address": "198.19.0.2", "management_ip": "198.18.0.2"},
                       rc=255, stderr="Connection timed out"),
     "a cannot ssh -o BatchMode=yes to b / 198.19.0.2 / Connection timed out"),
    ({}, lambda f: _broken(f, "runs", stdout=json.dumps([{"run": "r0", "state": "running",
                                                          "started": 1, "last_step": 7}])),
     "run r0 is running on this cluster (step 7): one job at a time"),
    ({"run_name": "r1"}, lambda f: _broken(f, "run_dirs", stdout="r1\n"),
     "run_name: r1 already exists on a — pick another run_name, or pass resume=true to "
     "continue it"),
    ({"run_name": "r1", "resume": "true"}, lambda f: f,
     "resume: there is no run r1 in /Users/alice/mlx-cluster/runs to resume — give the run_name "
     "of an earlier run"),
    ({"resume": "true"}, lambda f: f,
     "resume: there is no run at all in /Users/alice/mlx-cluster/runs to resume"),
]


@pytest.mark.parametrize(("extra", "answered", "start"), ERRORS)
def test_each_error_names_what_and_where_with_its_fix(extra, answered, start):
    req = request(model="mlp", **extra)
    inputs = given(BRIDGE)
    found = answered(answers(plans.launch_plan(req, inputs), inputs))
    plan = plans.launch_plan(req, inputs, judged(found, req["backend"]))
    assert len(plan["errors"]) == 1 and plan["errors"][0].startswith(start), plan["errors"]
    assert "—" in plan["errors"][0] or start.startswith("openmpi:")
    assert "argv" not in plan and "supervisor_argv" not in plan


def test_a_run_whose_results_are_on_the_controller_is_refused(tmp_path):
    (tmp_path / "r1").mkdir()
    inputs = {**given(BRIDGE), "results_dir": str(tmp_path)}
    plan = plan_of(request(model="mlp", run_name="r1"), inputs)
    assert plan["errors"] == [f"run_name: {tmp_path}/r1 already exists on the controller — pick "
                              "another run_name, or move that directory away"]
    assert plan_of(request(model="mlp", run_name="r1", resume="true"), inputs,
                   run_dirs="r1\n")["errors"] == []


def test_the_requests_problems_before_any_host_come_from_every_checker():
    inputs = {"hosts": BRIDGE, "topology": "bridge", "cables": given(BRIDGE)["cables"],
              "names": ["batch-size"], "spec": REQUEST_SPEC, "raw_params": "-m x"}
    problems = plans.launch_request_problems(request(np="9", network="wifi"), inputs)
    assert [p.split(":")[0] for p in problems] == ["np", "network", "batch-size", "_raw_params"]
    cabled = given(CABLED, topology="cables", cabling=RING[:2])  # a chain: no ring
    inputs.update(hosts=CABLED, topology="cables", cables=cabled["cables"], names=[],
                  raw_params="")
    assert plans.launch_request_problems(request(backend="ring"), inputs)[0].startswith("ring")
    assert plans.launch_request_problems(request(backend="ring", attach="r1"), inputs) == []
