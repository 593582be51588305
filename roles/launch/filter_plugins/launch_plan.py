"""The launch plan of train.yml (roles/launch), as one function: what runs where, from what the
play was given and what the hosts answered. The role's YAML gathers the inputs, calls it and
carries the plan out. Unit-tested in tests/unit/test_launch_plan.py.

launch_plan(request, given) is the plan before any host is asked (tasks/main.yml: what to ask
them, where this host keeps things, a run attach or stop names); launch_plan(request, given,
answers) is the whole plan after preflight's probe (tasks/preflight.yml): the run's name, the
launcher's argv, the hostfile, which host runs each rank, the supervisor's argv, and every error
that keeps the job from starting, each with its fix.
"""

import hashlib
import json
import os
import struct

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import ROOT, load

launch = load("roles/launch/filter_plugins/launch.py")
staging = load("roles/launch/filter_plugins/staging.py")
inventory = load("roles/cluster/filter_plugins/inventory.py")
layouts = load("roles/cluster/filter_plugins/layout.py")
mpi = load("roles/cluster/filter_plugins/mpi.py")
networks = load("roles/cluster/filter_plugins/networks.py")
topologies = load("roles/cluster/filter_plugins/topology.py")
probes = load("roles/cluster/filter_plugins/probes.py")
hostfile_check = load("roles/cluster/filter_plugins/hostfile_check.py")
command_result = load("roles/cluster/filter_plugins/command_result.py")
rdma = load("roles/cluster/filter_plugins/rdma.py")
trees = load("roles/cluster/filter_plugins/tree.py")
openmpis = load("roles/openmpi/filter_plugins/openmpi.py")
split = load("train/split.py")

FILES = ROOT / "roles/launch/files"
JACCL = ("jaccl", "jaccl-ring")
# Backends whose ranks follow the ring's order over cables (as cluster_mlx_hostfile and
# mlx_hostfile write them), so the supervisor asks the right host about each rank.
RING_ORDERED = ("ring", "jaccl-ring")
SSH_TIMEOUT = 5
# Where the host's environment imports train from (-I: whatever the directory holds), without
# importing it: train's Open MPI rules are there (launch.launch_openmpi_rules).
TRAIN_DIR = ("import importlib.util as u; "
             "print(u.find_spec('train').submodule_search_locations[0])")


def _source(name):
    """A script of files/, as its text: run with `python -c` on the hosts."""
    return (FILES / name).read_text(encoding="utf-8")


def launch_action(request):
    """What this play does: start a new run (launch), or list, follow or stop existing ones."""
    return ("status" if request["status"] else "attach" if request["attach"]
            else "stop" if request["stop"] else "launch")


def launch_request_problems(request, given):
    """Every problem with the launcher's options and the extra vars' names, one message each
    with its fix, before any host is contacted (tasks/validate.yml; the training options are
    python -m train's to judge).

    given: hosts (cluster_host_list), topology (thunderbolt_topology), cables
    (cluster_cable_topology), names (every variable the play sees), spec (the `request` table),
    raw_params (what Ansible split off an -e value, '' when nothing).
    """
    backend, topology = request["backend"], given["topology"]
    cabled = (topology == "cables" and launch_action(request) == "launch"
              and backend in launch.MLX_LAUNCHED)
    return (launch.launch_request_errors(request, given["hosts"], topology)
            + networks.network_errors(request["network"], given["hosts"], topology, backend,
                                      given["cables"])
            + (topologies.cable_backend_errors(given["cables"], backend) if cabled else [])
            + launch.launch_unknown_options(given["names"], given["spec"])
            + launch.launch_split_value_errors(given["raw_params"]))


def launch_plan(request, given, answers=None):
    """The plan of this play on this host: {field: value}.

    request: launch_request; given (tasks/main.yml): host (inventory_hostname), this
    (cluster_this_host), hosts (cluster_host_list), topology (thunderbolt_topology), cables
    (cluster_cable_topology), default_network, mpi_interface, mpi_exclude, mlx_hostfile,
    mlx_hostfile_names (the cluster role's), facts (the ranked hosts' facts, by name),
    thunderbolt_interface, probes (the cluster role's probes of every host), tree_checksums_code,
    results_dir (launch_results_dir), exit_grace (launch_exit_grace).
    answers (launch_answers, tasks/preflight.yml): checks (each ranked host's launch_host_check,
    in rank order), infos (their cluster_host_info), results (the launch host's probe results),
    stamp (when the request was read: a new run's default name), tensors (a fetched Hugging Face
    model's, as train's split.py reads them, for a pipeline: tasks/fetch_hub.yml plans again
    with them; None before).
    """
    plan = _paths(request, given)
    plan.update(_inputs(request))
    if plan["model_hub"] and request["parallel"] == "pipeline":
        # What prints the fetched model's tensors (tasks/fetch_hub.yml): train's split.py.
        plan["split_argv"] = [plan["python"], "-c", (ROOT / "train/split.py").read_text(
            encoding="utf-8")]
    plan.update(_stages(request, plan, given["host"], (answers or {}).get("tensors")))
    plan["probes"] = _probes(request, plan, given)
    if answers is not None:
        plan.update(_answered(request, given, plan, answers))
    return plan


def _paths(request, given):
    """Who this host is in the job, and where the job's files are on it."""
    hosts, backend = given["hosts"], request["backend"]
    ranked = [h for h in hosts if h["slots"] > 0]
    np = launch.launch_np(request["np"], hosts)
    work_dir, env = given["this"]["work_dir"], given["this"]["python_env"]
    network = request["network"] or given["default_network"]
    jaccl = backend in JACCL
    name = ("hostfile" if backend == "mpi" else f"hosts-{backend}.json" if jaccl
            else given["mlx_hostfile_names"].get(network))
    setup_name = "hostfile" if backend == "mpi" else given["mlx_hostfile_names"].get(network)
    cabled_ring = given["topology"] == "cables" and backend in RING_ORDERED
    plan = {
        "action": launch_action(request),
        "has_ranks": given["host"] in [h["name"] for h in ranked],
        # The launch host (rank 0's, the first host with slots) runs the launcher, keeps the run.
        "on_launch_host": bool(ranked) and given["host"] == ranked[0]["name"],
        "launch_host": ranked[0]["name"] if ranked else None,
        "np": np,
        "network": network,
        # Over management Open MPI keeps to that network's interface and mlx.launch reads
        # hosts-management.json; over Thunderbolt both go where the topology puts them.
        "over_management": network == "management" and given["default_network"] != "management",
        "mlx_launched": backend in launch.MLX_LAUNCHED,
        "jaccl": jaccl,
        "python": f"{env}/bin/python",
        "mlx_launch": f"{env}/bin/mlx.launch",
        "supervisor": f"{work_dir}/supervisor.py",
        "lock": f"{work_dir}/runs/.job.lock",
        "runs_dir": f"{work_dir}/runs",
        # The launcher's hostfile: setup's Open MPI hostfile, its hosts.json or
        # hosts-management.json (ring, by the job's network), or for jaccl and jaccl-ring one
        # with the RDMA device matrix, written by this play (tasks/prepare.yml).
        "hostfile": f"{work_dir}/{name}",
        # What setup wrote, which preflight compares with the inventory.
        "setup_hostfile": f"{work_dir}/{setup_name}",
        "jaccl_hostfile": inventory.mlx_hostfile(hosts, backend, given["cables"]) if jaccl
        else None,
        "rank_hosts": launch.launch_rank_hosts(ranked, np, given["cables"]["ring"] if cabled_ring
                                               else None),
    }
    plan["staging_argv"] = [plan["python"], "-c", _source("staging.py")]
    # attach and stop name their run; a new run's name is preflight's (answers).
    plan.update(_run(request["attach"] or request["stop"] or None, work_dir, given))
    return plan


def _run(run, work_dir, given):
    """The run: runs/<name> under each host's work dir, its results on the controller."""
    rel = f"runs/{run}" if run else None
    return {"run": run, "run_rel": rel, "run_dir": f"{work_dir}/{rel}" if run else None,
            "results": f"{given['results_dir']}/{run}" if run else None}


def _inputs(request):
    """What is staged: a controller path given as data or model is copied to <work
    dir>/data|models/<name> on every host; a Hugging Face repo id (model_hub) is fetched once and
    staged like a directory (tasks/stage_inputs.yml, filter_plugins/staging.py). Each staged
    input: rel, its path under the work dir; src, the controller's (a fetched model's is the
    fetch's, None here; the launch host stages the one it fetches itself); dir, whether it is
    one."""
    data, model = request["data"], request["model"]
    data_copied = bool(data) and os.path.exists(data)
    model_copied = bool(model) and os.path.isdir(model)
    hub = launch.launch_hub_repo(model)
    data_rel = f"data/{launch.launch_path_name(data)}" if data_copied else None
    model_rel = (f"models/{launch.launch_path_name(model)}" if model_copied
                 else staging.staging_hub_rel(hub) if hub else None)
    staged = ([{"rel": data_rel, "src": data, "dir": os.path.isdir(data)}] if data_copied else [])
    staged += [{"rel": model_rel, "src": model, "dir": True}] if model_copied else []
    staged += [{"rel": model_rel, "src": None, "dir": True, "hub": True}] if hub else []
    return {"data_rel": data_rel, "model_rel": model_rel, "model_hub": hub, "staged": staged}


def _stages(request, plan, host, fetched):
    """A pipeline's split of a model whose weights are in several files: stages, its layers per
    stage as train's split.py counts them from the files' headers (passed on as --stages: a host
    holding some of the files cannot count them), and skipped, {model_rel: the weight files no
    stage of this host's ranks reads}, which this host is not sent (but the launch host, which
    relays every file to the others). The headers: a controller directory's, read here, or a
    Hugging Face model's once fetched (fetched: their tensors; None before the fetch). Otherwise
    stages as given and nothing skipped, as for a model that python -m train refuses to split."""
    given = {"stages": request["stages"], "skipped": {}}
    if request["parallel"] != "pipeline" or not plan["model_rel"]:
        return given
    try:
        files = fetched if plan["model_hub"] else split.tensors(request["model"])
        stages, replicas = split.layout(request["stages"], plan["np"])
        counts = split.counts(files or {}, request["stages"], stages)
    except (OSError, ValueError, KeyError, struct.error):  # not mlx-lm's safetensors, or no split
        return given
    if len(files or ()) < 2 or stages * replicas != plan["np"] or min(counts) < 1:
        return given
    mine = {rank % stages for rank, name in enumerate(plan["rank_hosts"]) if name == host}
    read = set().union(*(split.stage_files(files, counts, k) for k in mine))
    skipped = [] if plan["on_launch_host"] else sorted(set(files) - read)
    return {"stages": ",".join(map(str, counts)),
            "skipped": {plan["model_rel"]: skipped} if skipped else {}}


def _probes(request, plan, given):
    """What preflight asks this host besides its Open MPI (tasks/probe.yml): the cluster's
    probes, the RDMA devices for jaccl, the staged inputs' copies, python -m train's own check of
    report_to in its environment (a tracker's package; -I: the installed train, whatever the
    directory holds), for mpi where that train is; and the launch host the
    hostfile, the cluster's runs (read by this checkout's supervisor), the installed
    supervisor's checksum, whether mlx.launch is there, and an ssh login to every other ranked
    host."""
    commands = list(given["probes"])
    commands += [{"item": "ibv_devices", "argv": ["ibv_devices"]}] if plan["jaccl"] else []
    if request["backend"] == "mpi":
        commands += [{"item": "train_dir", "argv": [plan["python"], "-I", "-c", TRAIN_DIR]}]
    if plan["staged"]:
        rels = json.dumps([s["rel"] for s in plan["staged"]])
        commands += [{"item": "staged", "argv": [*plan["staging_argv"], "report",
                                                 given["this"]["work_dir"], rels]},
                     {"item": "rsync", "argv": ["rsync", "--version"]}]
    if request["report_to"]:
        commands += [{"item": "trackers", "argv": [
            plan["python"], "-I", "-m", "train", "--check", "1",
            *launch.launch_train_args({"report_to": request["report_to"]})]}]
    if not plan["on_launch_host"]:
        return commands
    others = [h for h in given["hosts"] if h["slots"] > 0 and h["name"] != given["host"]]
    return commands + [
        {"item": "hostfile", "argv": ["cat", plan["setup_hostfile"]]},
        {"item": "runs", "argv": [plan["python"], "-c", _source("supervisor.py"), "status",
                                  "--runs-dir", plan["runs_dir"], "--json"]},
        {"item": "supervisor", "argv": [plan["python"], "-c", given["tree_checksums_code"],
                                        plan["supervisor"]]},
        {"item": "run_dirs", "argv": ["ls", "-1", plan["runs_dir"]]},
        {"item": "mlx_launch", "argv": ["test", "-e", plan["mlx_launch"]]},
    ] + probes.ssh_commands(others, SSH_TIMEOUT)


def launch_host_check(results, name, bindir, install_method, system, backend, reference):
    """What one ranked host answered preflight's probe (results: its concurrent_commands
    results), as the checks across hosts compare it: its Open MPI (openmpi_error, '' when mpirun
    ran; openmpi: mpirun_path, prefix, version, libmpi_path), how its train/ differs from the
    controller's (reference), its Python and shared packages' versions, rsync, report_to's
    trackers, for mpi where its train is (train_dir, None when it could not tell), and the RDMA
    devices ibv_devices lists (None when it could not run)."""
    probed = command_result.results_by_item(results)
    mpi = backend == "mpi"
    error = openmpis.openmpi_probe_error(probed, name, bindir, install_method) if mpi else ""
    found = openmpis.openmpi_found(probed, bindir, system) if mpi and not error else {}
    ibv = probed.get("ibv_devices") or {}
    train_dir = probed.get("train_dir") or {}
    return {"name": name, "openmpi_error": error, "openmpi_version": found.get("version"),
            "openmpi_prefix": found.get("prefix"), "openmpi": found,
            "train_diff": trees.tree_diff(trees.tree_digest(command_result.json_result(
                probed["train_tree"])), reference),
            "versions": command_result.json_result(probed["versions"]),
            "rsync_error": staging.staging_rsync_error(probed.get("rsync"), name),
            "trackers_error": launch.launch_trackers_error(probed.get("trackers"), name),
            "train_dir": train_dir["stdout"].strip() or None if train_dir.get("rc") == 0
            else None,
            "rdma_devices": rdma.ibv_device_names(ibv["stdout"]) if ibv.get("rc", 1) == 0
            else None}


def _answered(request, given, plan, answers):
    """The plan once every ranked host answered: the run, the checks' errors and, when there
    are none, the command and the supervisor's argv."""
    probed = command_result.results_by_item(answers["results"])
    runs = command_result.json_result(probed["runs"]) or []
    run = _run_name(request, runs, answers["stamp"])
    answered = _run(run, given["this"]["work_dir"], given)
    answered["known_runs"] = runs
    # What fetching a Hugging Face model asks for: a resumed run's recorded revision, so that it
    # goes on with the same weights, else the default branch's; the launch host stages it there
    # as it fetches it (the controller's is sent like a directory).
    hub = plan["model_hub"]
    answered["hub_model"] = hub and {"repo": hub, "revision": staging.staging_hub_revision(
        runs, run, hub) if request["resume"] else ""}
    if hub and request["model_source"] != "controller":
        answered["hub_model"].update(work_dir=given["this"]["work_dir"], rel=plan["model_rel"])
    installed = [c["checksum"] for c in command_result.json_result(probed["supervisor"]) or []]
    answered["supervisor_stale"] = (installed or [None])[0] != hashlib.sha1(
        _source("supervisor.py").encode()).hexdigest()
    layout = layouts.cluster_layout(answers["infos"])
    answered["openmpi_rules"], rules_errors = launch.launch_openmpi_rules(
        request, [c["train_dir"] for c in answers["checks"]], answers["infos"]
    ) if request["backend"] == "mpi" else (None, [])
    answered["errors"] = _errors(request, given, {**plan, **answered}, answers, layout,
                                 probed) + rules_errors
    if not answered["errors"]:
        answered.update(_command(request, given, {**plan, **answered}, answers, layout))
    return answered


def _run_name(request, runs, stamp):
    """The run's name: run_name, else for resume the newest run the supervisor started, else
    the model's (or `command`'s) name and the time the request was read."""
    if request["run_name"]:
        return request["run_name"]
    if request["resume"]:
        started = [r["run"] for r in sorted(runs, key=lambda r: r["started"])]
        return started[-1] if started else ""
    model = request["model"] or ("command" if request["command"] else None)
    return launch.launch_run_name(model, stamp)


def _errors(request, given, plan, answers, layout, probed):
    """What keeps the job from starting, each with its fix: the hosts' Open MPI, packages and
    train/ (their checks), rsync and RDMA devices, the launch host's hostfile, ssh logins, runs
    and mlx.launch, and the run's name."""
    checks, backend = answers["checks"], request["backend"]
    errors = launch.launch_consistency_errors(checks, layout, backend)
    errors += [c["rsync_error"] for c in checks if c["rsync_error"]]
    errors += [c["trackers_error"] for c in checks if c["trackers_error"]]
    if plan["jaccl"]:
        errors += launch.launch_rdma_errors(checks, plan["jaccl_hostfile"], plan["rank_hosts"])
    errors += launch.launch_host_errors(
        answers["results"], plan["launch_host"], plan["setup_hostfile"],
        _hostfile_problems(request, given, plan, probed["hostfile"]), plan["known_runs"],
        plan["mlx_launch"] if plan["mlx_launched"] else None)
    run = plan["run"]
    on_host = run in probed["run_dirs"]["stdout"].splitlines()
    if on_host and not request["resume"]:
        errors.append(f"run_name: {run} already exists on {plan['launch_host']} — pick another "
                      "run_name, or pass resume=true to continue it")
    elif request["resume"] and not on_host:
        errors.append(f"resume: there is no run {run or 'at all'} in {plan['runs_dir']} to resume"
                      " — give the run_name of an earlier run")
    if not request["resume"] and os.path.exists(plan["results"]):
        errors.append(f"run_name: {plan['results']} already exists on the controller — pick "
                      "another run_name, or move that directory away")
    return errors


def _hostfile_problems(request, given, plan, read):
    """How setup's hostfile (read: the probe's `cat`) differs from the inventory's."""
    if read["rc"] != 0:
        return []
    if request["backend"] == "mpi":
        return hostfile_check.hostfile_problems(read["stdout"], given["hosts"])
    expected = (inventory.mlx_hostfile(given["hosts"], "ring", network="management")
                if plan["over_management"] else given["mlx_hostfile"])
    return hostfile_check.hosts_json_problems(read["stdout"], expected)


def _command(request, given, plan, answers, layout):
    """The launcher's argv + the rank program (with train's Open MPI rules for mpi, unless the
    request turns them off) + python -m train's flags, which host runs each
    rank, and the supervisor's argv that starts them (one job per cluster: its lock)."""
    infos, hosts = answers["infos"], given["hosts"]
    if request["backend"] == "mpi":
        openmpi = answers["checks"][0]["openmpi"]  # the launch host's, which runs mpirun
        options = launch.launch_mpi_options(
            hosts, infos, plan["np"], plan["hostfile"], openmpi["version"],
            openmpi["libmpi_path"], _mpi_interface(given, plan), request["mpi_extra_args"],
            "" if plan["over_management"] else given["mpi_exclude"])
        launcher = mpi.mpirun_argv(openmpi["mpirun_path"], **options)
    else:
        launcher = launch.launch_mlx_argv(plan["mlx_launch"], plan["hostfile"],
                                          request["backend"])
    train = launch.launch_train_args(
        {**request, "stages": plan["stages"]},
        heartbeat=f"{plan['run_rel']}/logs/rank.{{rank}}.heartbeat", data=plan["data_rel"],
        model=plan["model_rel"])
    argv = launcher + launch.launch_rank_program(layout, plan["run_rel"],
                                                 plan["openmpi_rules"]) + train
    rank_plan = launch.launch_rank_plan(plan["rank_hosts"], hosts, infos, plan["launch_host"],
                                        plan["run_rel"])
    supervisor = [plan["python"], plan["supervisor"], "start", "--run-dir", plan["run_dir"],
                  "--write-command", "--lock", plan["lock"], "--exit-grace",
                  str(given["exit_grace"]), "--rank-hosts", json.dumps(rank_plan)]
    elastic = json.dumps({"argv": argv, "batch_size": request["batch_size"]})
    return {"argv": argv, "rank_plan": rank_plan,
            "supervisor_argv": supervisor + launch.launch_supervisor_args(request, elastic)}


def _mpi_interface(given, plan):
    """Where Open MPI's traffic goes: the topology's (cluster_mpi_interface), or over the
    management network that network's interface, from the ranked hosts' facts."""
    if not plan["over_management"]:
        return given["mpi_interface"]
    ranked = [h for h in given["hosts"] if h["slots"] > 0]
    return networks.cluster_networks(ranked, given["facts"], given["thunderbolt_interface"],
                                     labels=["management"])[0]["interface"]


class FilterModule:
    def filters(self):
        return {"launch_action": launch_action, "launch_host_check": launch_host_check,
                "launch_plan": launch_plan,
                "launch_request_problems": launch_request_problems}
