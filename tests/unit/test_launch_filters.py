"""The train.yml command builder and verdict (roles/launch/filter_plugins/launch.py).

The mpirun part comes from mpi.py's mpirun_argv, fed by launch_mpi_options exactly as
filter_plugins/launch_plan.py does, so these tests cover the whole command line.
"""

import importlib.metadata
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.unit.plugins import REQUEST_SPEC, ROOT, load
from train import cli

launch = load("roles/launch/filter_plugins/launch.py")
supervisor = load("roles/launch/files/supervisor.py")
layout = load("roles/cluster/filter_plugins/layout.py")
mpi = load("roles/cluster/filter_plugins/mpi.py")


def host(name, slots=1, tb=None, address=None):
    return {"name": name, "slots": slots, "thunderbolt_ip": tb,
            "mpi_address": tb or address or name}


def info(name, home, user=None, work_dir=None, version="4.1.4", prefix="/usr"):
    work_dir = work_dir or f"{home}/mlx-cluster"
    return {"name": name, "home": home, "user": user or Path(home).name, "work_dir": work_dir,
            "python_env": f"{work_dir}/venv", "train_diff": [], "openmpi_version": version,
            "openmpi_prefix": prefix, "versions": versions()}


def versions(python="3.11.7", mlx="0.32.4"):
    """cluster_host_versions as roles/cluster/files/versions.py prints it."""
    return {"python": python, "packages": {"mlx": mlx, "mlx-lm": "0.32.2", "mpi4py": "4.1.2"}}


MACS = [host("m1", tb="198.19.0.1"), host("m2", tb="198.19.0.2")]
MAC_INFOS = [info("m1", "/Users/alice"), info("m2", "/Users/alice")]


def command(hosts, infos, version, libmpi, mpirun="/usr/bin/mpirun", np=None, run="runs/r",
            exclude=None, interface=None):
    """The full argv the role builds for the mpi backend; interface: launch_mpi_interface, by
    default the cluster's (cluster_mpi_interface: bridge0 with Thunderbolt addresses)."""
    np = np or sum(h["slots"] for h in hosts)
    if interface is None:
        interface = "bridge0" if any(h["thunderbolt_ip"] for h in hosts) else ""
    options = launch.launch_mpi_options(hosts, infos, np, "/w/hostfile", version, libmpi,
                                        interface, exclude=exclude)
    program = launch.launch_rank_program(layout.cluster_layout(infos), run)
    return mpi.mpirun_argv(mpirun, **options) + program + launch.launch_train_args(
        {"model": "mlp", "steps": "5"})


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize(
    ("version", "oob"),
    [("4.1.4", ["--mca", "oob_tcp_if_include", "bridge0"]),
     ("5.0.8", ["--prtemca", "oob_tcp_if_include", "bridge0"])],
)
def test_open_mpi_4_and_5_keep_both_channels_on_thunderbolt(version, oob):
    argv = command(MACS, MAC_INFOS, version, "/opt/homebrew/lib/libmpi.40.dylib")
    joined = " ".join(argv)
    assert " ".join(oob) in joined
    assert "--mca btl_tcp_if_include bridge0" in joined
    assert "--bind-to none --map-by slot" in joined


def test_macos_command_passes_the_dylib_and_runs_from_the_same_home():
    argv = command(MACS, MAC_INFOS, "5.0.8", "/opt/homebrew/lib/libmpi.40.dylib",
                   mpirun="/opt/homebrew/bin/mpirun")
    assert argv[0] == "/opt/homebrew/bin/mpirun"
    assert argv[argv.index("-x") + 1] == "MLX_MPI_LIBNAME=/opt/homebrew/lib/libmpi.40.dylib"
    script = argv[argv.index("/bin/sh") + 2]
    assert script.startswith("umask 077 && cd /Users/alice/mlx-cluster && ")
    assert "--allow-run-as-root" not in argv


def test_linux_hosts_with_different_homes_run_python_relative_to_each_home():
    infos = [info("a", "/home/alice"), info("b", "/home/bob")]
    argv = command([host("a", tb="198.19.0.1"), host("b", tb="198.19.0.2")], infos, "4.1.4",
                   "/usr/lib/x86_64-linux-gnu/libmpi.so.40")
    assert argv[argv.index("-x") + 1] == "MLX_MPI_LIBNAME=/usr/lib/x86_64-linux-gnu/libmpi.so.40"
    script = argv[argv.index("/bin/sh") + 2]
    assert script.startswith('umask 077 && cd "$HOME"/mlx-cluster && ')
    assert "exec venv/bin/python -m train" in script


@pytest.mark.parametrize(("users", "as_root"), [(["root", "root"], True),
                                                (["alice", "bob"], False),
                                                (["alice", "root"], True)])
def test_allow_run_as_root_only_when_a_host_logs_in_as_root(users, as_root):
    infos = [dict(info(f"h{i}", f"/home/{u}"), user=u) for i, u in enumerate(users)]
    for i in infos:  # same work dir everywhere, as with root on Linux
        i.update(work_dir="/srv/mlx", python_env="/srv/mlx/venv")
    argv = command([host("h0", tb="198.19.0.1"), host("h1", tb="198.19.0.2")], infos, "4.1.4",
                   "/usr/lib/libmpi.so.40")
    assert ("--allow-run-as-root" in argv) is as_root


@pytest.mark.parametrize("tb", [None, "198.19.0.1"])
def test_single_host_has_no_interface_flags(tb):
    hosts = [host("localhost", slots=2, tb=tb)]
    argv = command(hosts, [dict(info("localhost", "/root"), user="root")], "4.1.4",
                   "/usr/lib/libmpi.so.40")
    assert "btl_tcp_if_include" not in argv and "oob_tcp_if_include" not in argv
    assert argv[argv.index("-np") + 1] == "2"
    assert "--allow-run-as-root" in argv


def test_cluster_without_thunderbolt_addresses_leaves_interfaces_to_open_mpi():
    hosts = [host("a", address="198.18.0.1"), host("b", address="198.18.0.2")]
    argv = command(hosts, [info("a", "/home/u"), info("b", "/home/u")], "4.1.4", "/l.so")
    assert "btl_tcp_if_include" not in argv


def test_cables_over_the_management_network_keep_open_mpi_off_the_pool():
    hosts = [host("a", address="198.18.0.1"), host("b", address="198.18.0.2"), host("c")]
    argv = command(hosts, [info(n, "/home/u") for n in "abc"], "5.0.8", "/l.so",
                   exclude="198.19.0.0/24")
    joined = " ".join(argv)
    assert "--prtemca oob_tcp_if_exclude 198.19.0.0/24" in joined
    assert "--mca btl_tcp_if_exclude 127.0.0.1/8,sppp,198.19.0.0/24" in joined
    alone = command(hosts[:1], [info("a", "/home/u")], "5.0.8", "/l.so", exclude="198.19.0.0/24")
    assert "btl_tcp_if_exclude" not in alone  # one host: no traffic between hosts


def test_the_named_network_carries_both_channels_and_the_hostfile_stays():
    argv = command(MACS, MAC_INFOS, "5.0.8", "/l.dylib", interface="198.18.1.0/24")
    joined = " ".join(argv)
    assert "--prtemca oob_tcp_if_include 198.18.1.0/24" in joined
    assert "--mca btl_tcp_if_include 198.18.1.0/24" in joined and "bridge0" not in joined
    assert argv[argv.index("--hostfile") + 1] == "/w/hostfile"  # mpirun logs in as before


def test_ring_backend_runs_mlx_launch_with_hosts_json():
    argv = launch.launch_mlx_argv("/Users/a/mlx-cluster/venv/bin/mlx.launch", "/w/hosts.json")
    assert argv == ["/Users/a/mlx-cluster/venv/bin/mlx.launch", "--hostfile", "/w/hosts.json",
                    "--backend", "ring", "--"]


@pytest.mark.parametrize("backend", ["jaccl", "jaccl-ring"])
def test_jaccl_backends_run_mlx_launch_with_their_own_hostfile(backend, tmp_path):
    """mlx.launch takes the argv and our jaccl hostfile, and hands every rank the RDMA device
    matrix and the coordinator. Two "hosts" at 127.0.0.1, which mlx.launch starts without ssh:
    the ranks print what they were given (opening RDMA devices needs Thunderbolt 5 Macs)."""
    inventory = load("roles/cluster/filter_plugins/inventory.py")
    cables = load("roles/cluster/filter_plugins/cables.py")
    topology = load("roles/cluster/filter_plugins/topology.py")
    hosts = [dict(host(n, address="127.0.0.1"), management_ip="127.0.0.1") for n in ("a", "b")]
    topo = topology.cable_topology(hosts, cables.cable_plan([["a", "en2", "b", "en3"]],
                                                           ["a", "b"], "198.19.0.0/24"))
    hostfile = tmp_path / f"hosts-{backend}.json"
    hostfile.write_text(json.dumps(inventory.mlx_hostfile(hosts, backend, topo)))
    mlx_launch = Path(sys.executable).parent / "mlx.launch"
    argv = launch.launch_mlx_argv(mlx_launch, hostfile, backend)
    assert argv == [str(mlx_launch), "--hostfile", str(hostfile), "--backend", backend, "--"]
    program = ("import os; e = os.environ; print(e['MLX_RANK'], e['MLX_JACCL_COORDINATOR'], "
               "e.get('MLX_JACCL_RING'), open(e['MLX_IBV_DEVICES']).read())")
    done = subprocess.run(argv + [sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    ring = "1" if backend == "jaccl-ring" else "None"
    assert sorted(line for line in done.stdout.splitlines() if line.strip()) == [
        f'{rank} 127.0.0.1:32323 {ring} [[null, "rdma_en2"], ["rdma_en3", null]]'
        for rank in (0, 1)]


def test_paths_that_differ_beyond_the_home_are_refused_naming_the_hosts():
    infos = [info("a", "/home/alice"), info("b", "/home/bob", work_dir="/opt/mlx")]
    plan = layout.cluster_layout(infos)
    assert plan["work_dir"] is None
    assert "a: /home/alice/mlx-cluster" in plan["error"]
    assert "b: /opt/mlx" in plan["error"]
    errors = launch.launch_consistency_errors(infos, plan)
    assert any("cluster_work_dir" in e for e in errors)


def test_rank_program_really_runs_in_each_hosts_home(tmp_path):
    """Run the wrapper with /bin/sh as mpirun would, for two different homes: each rank gets
    its own absolute --out (the supervisor finds the job's processes by it)."""
    infos = [info("a", "/home/alice"), info("b", "/home/bob")]
    plan = layout.cluster_layout(infos)
    train_dirs = [f"{i['work_dir']}/venv/lib/python3.11/site-packages/train" for i in infos]
    rules, errors = launch.launch_openmpi_rules({"mpi_allreduce_rules": True}, train_dirs, infos)
    assert errors == []
    program = launch.launch_rank_program(plan, "runs/r-x", rules)
    for rank, user in enumerate(("alice", "bob")):
        home = tmp_path / user
        python = home / "mlx-cluster" / "venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text('#!/bin/sh\necho "cwd=$PWD args=$*"; printf "%s\\n" "$@"\n'
                          'echo "$OMPI_MCA_coll_tuned_use_dynamic_rules '
                          '$OMPI_MCA_coll_tuned_dynamic_rules_filename"\n')
        python.chmod(0o755)
        env = {"HOME": str(home), "OMPI_COMM_WORLD_RANK": str(rank), "PATH": "/usr/bin:/bin"}
        args = ["--data=data/with space", "--model=-odd"]
        subprocess.run(program + args, env=env, check=True)
        log = home / "mlx-cluster" / "runs" / "r-x" / "logs" / f"rank.{rank}.log"
        lines = log.read_text().splitlines()
        assert lines[0].startswith(f"cwd={home}/mlx-cluster ")
        assert lines[1:-1] == ["-m", "train", "--out", f"{home}/mlx-cluster/runs/r-x", *args]
        # Open MPI's all-reduce by train's rules, this host's copy, whatever the rank's directory.
        assert lines[-1] == (f"1 {home}/mlx-cluster/venv/lib/python3.11/site-packages/train/"
                             "openmpi-allreduce.rules")
        for private in (home / "mlx-cluster" / "runs", log.parent, log):
            assert private.stat().st_mode & 0o077 == 0, private


def test_trains_open_mpi_rules_are_one_absolute_path_where_the_environment_is_shared():
    infos = [info("a", "/home/alice"), info("b", "/home/bob")]
    shared = ["/opt/env/lib/python3.11/site-packages/train"] * 2
    assert launch.launch_openmpi_rules({"mpi_allreduce_rules": True}, shared, infos) == (
        "/opt/env/lib/python3.11/site-packages/train/openmpi-allreduce.rules", [])


def test_on_macos_each_rank_keeps_its_mac_awake_while_it_runs(tmp_path):
    """Where caffeinate exists (macOS) it is started beside the rank, waiting for the rank's
    own pid (the shell's, kept by exec); the rank stays the launcher's child, exit status and
    all. Without it (Linux) nothing else starts. caffeinate here is a stand-in that records how
    it was called: the real one is macOS-only."""
    plan = layout.cluster_layout([info("a", str(tmp_path))])
    program = launch.launch_rank_program(plan, "runs/awake")
    python = tmp_path / "mlx-cluster" / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho $$ >pid; sleep 0.5; exit 3\n")
    python.chmod(0o755)
    tools = tmp_path / "macos-bin"
    tools.mkdir()
    (tools / "caffeinate").write_text(f"#!/bin/sh\necho \"$@\" >{tmp_path}/caffeinate.args\n")
    (tools / "caffeinate").chmod(0o755)
    env = {"HOME": str(tmp_path), "OMPI_COMM_WORLD_RANK": "0"}

    linux = subprocess.run(program, env={**env, "PATH": "/usr/bin:/bin"})
    assert linux.returncode == 3 and not (tmp_path / "caffeinate.args").exists()

    macos = subprocess.run(program, env={**env, "PATH": f"{tools}:/usr/bin:/bin"})
    assert macos.returncode == 3  # the rank's own status reaches the launcher
    rank_pid = (tmp_path / "mlx-cluster" / "pid").read_text().strip()
    called = tmp_path / "caffeinate.args"
    for _ in range(100):  # it runs in the background: give a loaded machine time
        if called.exists() and called.read_text():
            break
        time.sleep(0.1)
    assert called.read_text().split() == ["-i", "-s", "-w", rank_pid]


def test_command_sh_is_the_same_argv_for_the_shell():
    argv = command(MACS, MAC_INFOS, "5.0.8", "/opt/homebrew/lib/libmpi.40.dylib")
    text = launch.launch_shell_command(argv)
    assert shlex.split(text.replace("\\\n", "")) == argv
    out = subprocess.run(["/bin/sh", "-c", f"printf '%s\\n' {text}"], capture_output=True,
                         text=True, check=True).stdout
    assert out.splitlines() == argv


def test_the_launch_command_shown_is_command_sh_s_exec_line():
    start = load("roles/launch/action_plugins/launch_start.py")
    argv = command(MACS, MAC_INFOS, "5.0.8", "/opt/homebrew/lib/libmpi.40.dylib")
    text = launch.launch_shell_command(argv)
    command_sh = f'#!/bin/sh\n# Run r: comments\n# more\nexec {text} "$@"\n'
    shown = start.launch_command(command_sh)
    assert shown == text
    assert shlex.split(shown.replace("\\\n", "")) == argv


def request(**given):
    """launch_request as tasks/validate.yml builds it from these extra vars."""
    return launch.launch_request(REQUEST_SPEC, [given.get(name, "") for name in REQUEST_SPEC])


def test_train_args_only_carry_what_the_user_gave():
    assert launch.launch_train_args(request()) == []
    args = launch.launch_train_args(
        request(model="/ctl/tiny", data="/ctl/d", batch_size=8, lr="0.01", resume="true",
                grad_bucket_bytes=0, checkpoint_every="5", np="2", backend="mpi"),
        data="data/d", model="models/tiny")
    assert args == ["--model=models/tiny", "--data=data/d", "--batch-size=8", "--lr=0.01",
                    "--grad-bucket-bytes=0", "--checkpoint-every=5", "--resume"]
    assert "--resume" not in launch.launch_train_args(request(resume="false"))
    # a list (-e @run.yml) as the flag's comma-separated names; a string as given
    for given in (["wandb", "trackio"], "wandb,trackio"):
        assert launch.launch_train_args(request(report_to=given)) == [
            "--report-to=wandb,trackio"]


def test_request_takes_the_tables_defaults_and_the_supervisors():
    assert request()["backend"] == "mpi" and request()["follow_reconnect"] == 600
    settled = launch.launch_supervisor_settings(request())
    assert settled["time_limit"] == 86400 and settled["startup_timeout"] == 1800
    assert settled["restart_backoff"] == 10 and settled["stall_timeout"] == "auto"
    assert "elastic" not in settled and request()["elastic"] is False
    assert "time_limit" not in launch.launch_supervisor_settings(request(time_limit="60"))
    assert request(backend="ring")["backend"] == "ring"
    assert request(resume="yes")["resume"] is True
    assert request(resume="maybe")["resume"] == "maybe"  # left for launch_request_errors


def flag(name):
    return "--" + name.replace("_", "-")


def test_every_train_option_of_the_table_is_a_setting_of_python_m_train_and_back():
    """A settings file means the same to both (-e @run.yml, --config run.yml): each setting is a
    train option of the table, or one train.yml sets itself and refuses with its fix."""
    train_options = {n for n in REQUEST_SPEC if n not in launch.LAUNCHER_OPTIONS}
    assert "grad_bucket_bytes" in train_options and "checkpoint_every" in train_options
    settings = set(vars(cli.DEFAULT))  # one per flag (and --config)
    assert train_options - settings == set(), "request options without a python -m train flag"
    assert set(launch.SET_BY_TRAIN_YML) == settings - train_options | {"config"}


def test_every_option_of_the_table_reaches_exactly_one_consumer():
    """python -m train (one of its flags), the supervisor (a flag of supervisor.py start) or the
    play itself (PLAY_OPTIONS); and the play's flags for each consumer carry exactly its rows."""
    train_flags = {o for action in cli.parser()._actions for o in action.option_strings}
    start = supervisor.parser()._subparsers._group_actions[0].choices["start"]
    supervisor_flags = {o for action in start._actions for o in action.option_strings}
    consumers = {name: [who for who, takes in (("train", flag(name) in train_flags),
                                               ("supervisor", flag(name) in supervisor_flags),
                                               ("play", name in launch.PLAY_OPTIONS)) if takes]
                 for name in REQUEST_SPEC}
    assert {name: who for name, who in consumers.items() if len(who) != 1} == {}
    assert {"grad_bucket_bytes", "stall_timeout", "follow_reconnect"} <= set(REQUEST_SPEC)
    assert set(launch.SUPERVISOR_OPTIONS) <= set(REQUEST_SPEC)  # each job option has its row
    every = request(**{name: "true" if spec["type"] == "bool" else "12"
                       for name, spec in REQUEST_SPEC.items()})
    for who, args in (("train", launch.launch_train_args(every)),
                      ("supervisor", launch.launch_supervisor_args(every, elastic="{}"))):
        assert {a.split("=")[0] for a in args} == {
            flag(name) for name, takes in consumers.items() if takes == [who]}, who


def test_each_supervisor_option_has_one_default_the_supervisors():
    defaults = supervisor.settle([])
    assert defaults["stall_timeout"] == "auto" and defaults["max_restarts"] == 2
    assert [name for name, value in defaults.items()
            if value is not None and "default" in REQUEST_SPEC[name]] == []


def test_ranks_fill_hosts_in_hostfile_order():
    hosts = [host("a", 2), host("b", 0), host("c", 1)]
    assert launch.launch_rank_hosts(hosts, 3) == ["a", "a", "c"]
    assert launch.launch_rank_hosts(hosts, 1) == ["a"]


def test_over_cables_the_ranks_follow_the_ring_as_hosts_json_does():
    inventory = load("roles/cluster/filter_plugins/inventory.py")
    cables = load("roles/cluster/filter_plugins/cables.py")
    topology = load("roles/cluster/filter_plugins/topology.py")
    names = ["a", "b", "c", "d"]
    # a ring a - c - b - d - a: MLX's ring visits a, c, b, d
    ring = [["a", "en2", "c", "en2"], ["c", "en3", "b", "en2"], ["b", "en3", "d", "en2"],
            ["d", "en3", "a", "en3"]]
    hosts = [dict(host(n, address=f"198.18.0.{i + 1}"), management_ip=f"198.18.0.{i + 1}")
             for i, n in enumerate(names)]
    topo = topology.cable_topology(hosts, cables.cable_plan(ring, names, "198.19.0.0/24"))
    assert topo["ring"] == ["a", "c", "b", "d"]
    ranks = launch.launch_rank_hosts(hosts, 4, topo["ring"])
    hosts_json = inventory.mlx_hostfile(hosts, "ring", topo)
    address = {h["mpi_address"]: h["name"] for h in hosts}
    assert ranks == [address[e["ssh"]] for e in hosts_json["hosts"]] == ["a", "c", "b", "d"]
    plan = launch.launch_rank_plan(ranks, hosts, [info(n, "/home/u") for n in names], "a",
                                   "runs/r")
    assert [(p["rank"], p["host"], p["address"]) for p in plan] == [
        (0, "a", "local"), (1, "c", "198.18.0.3"), (2, "b", "198.18.0.2"), (3, "d", "198.18.0.4")]


def test_jaccl_refuses_hosts_without_the_rdma_devices_of_their_cables():
    inventory = load("roles/cluster/filter_plugins/inventory.py")
    cables = load("roles/cluster/filter_plugins/cables.py")
    topology = load("roles/cluster/filter_plugins/topology.py")
    names = ["a", "b", "c"]
    mesh = [["a", "en2", "b", "en2"], ["a", "en3", "c", "en2"], ["b", "en3", "c", "en3"]]
    hosts = [dict(host(n, address=f"198.18.0.{i + 1}"), management_ip=f"198.18.0.{i + 1}")
             for i, n in enumerate(names)]
    topo = topology.cable_topology(hosts, cables.cable_plan(mesh, names, "198.19.0.0/24"))
    hostfile = inventory.mlx_hostfile(hosts, "jaccl", topo)
    ranks = launch.launch_rank_hosts(hosts, 3)
    ready = [{"name": n, "rdma_devices": ["rdma_en2", "rdma_en3", "rdma_en4"]} for n in names]
    assert launch.launch_rdma_errors(ready, hostfile, ranks) == []
    unready = [ready[0], {"name": "b", "rdma_devices": ["rdma_en2"]},
               {"name": "c", "rdma_devices": None}]
    errors = launch.launch_rdma_errors(unready, hostfile, ranks)
    assert errors[0].startswith("b: no RDMA device rdma_en3 for its cables (ibv_devices lists "
                                "rdma_en2) — jaccl needs RDMA over Thunderbolt 5")
    assert errors[1].startswith("c: no RDMA device rdma_en2, rdma_en3 for its cables "
                                "(ibv_devices could not run)")
    assert "check.yml -e doctor_backend=jaccl" in errors[0] and len(errors) == 2


# ---------------------------------------------------------------- request and preflight

CLUSTER = [host("a", 2, tb="198.19.0.1"), host("b", 1, tb="198.19.0.2"), host("c", 0)]


def test_good_request_has_no_errors():
    request = {"model": "mlp", "steps": "20", "batch_size": "60", "np": "3", "lr": "1e-3",
               "seed": "0", "resume": "false", "run_name": "run-1", "backend": "mpi",
               "mpi_extra_args": "--mca btl ^openib", "time_limit": "600",
               "restart_backoff": "0"}
    assert launch.launch_request_errors(request, CLUSTER) == []


@pytest.mark.parametrize(
    ("request_", "start"),
    [({"time_limit": 0}, "time_limit: 0 is not an integer from 1 to 31536000"),
     ({"time_limit": "1e9"}, "time_limit: '1e9' is not an integer from 1 to 31536000"),
     ({"follow_reconnect": 10**6}, "follow_reconnect: 1000000 is not an integer from 0 to 86400"),
     ({"stall_timeout": "999999"}, "stall_timeout: '999999' is not auto or a number of seconds "
                                   "from 10 to 86400"),
     # A line break in a name: `$` alone let a trailing one through, into command.sh.
     ({"run_name": "my-run\n"}, "run_name: 'my-run\\n' is not a plain directory name"),
     ({"run_name": "my run"}, "run_name: 'my run' is not a plain directory name"),
     ({"attach": "my-run\n"}, "attach: 'my-run\\n' is not a run name"),
     ({"stop": "a\nb"}, "stop: 'a\\nb' is not a run name"),
     ({"status": "a b"}, "status: 'a b' is not true, false or a run name"),
     ({"status": "r1", "stop": "r1"}, "attach, stop and status: give one of them at a time"),
     # A huge value: named with its length, never echoed (one line, no traceback).
     ({"model": "m" * 100_000}, "model: 100000 characters, more than a value can have (4096)"),
     ({"run_name": "r" * 5000}, "run_name: 5000 characters, more than a value can have"),
     ({"mpi_extra_args": ["-v"] * 2000}, "mpi_extra_args: 12000 characters"),
     ({"max_restarts": "x"}, "max_restarts: 'x' is not an integer from 0 to 100"),
     ({"max_restarts": "1000000"}, "max_restarts: '1000000' is not an integer from 0 to 100"),
     ({"restart_backoff": "301"}, "restart_backoff: '301' is not an integer from 0 to 300"),
     ({"restart_backoff": "0.5"}, "restart_backoff: '0.5' is not an integer from 0 to 300"),
     ({"resume": "maybe"}, "resume: 'maybe' is not true or false"),
     ({"run_name": "../x"}, "run_name: '../x' is not a plain directory name"),
     ({"backend": "nccl"}, "backend: 'nccl' is not one of mpi, ring"),
     ({"np": "4"}, "np: 4 ranks but the cluster has only 3 slots (a: 2, b: 1)"),
     ({"np": "-1"}, "np: '-1' is not a positive integer"),
     ({"backend": "ring", "np": "2"}, "np: the ring backend starts one rank per slot"),
     ({"backend": "ring", "mpi_extra_args": "-v"}, "mpi_extra_args: only the mpi backend"),
     ({"backend": "jaccl"}, "backend: jaccl runs over RDMA between Macs cabled point to point"),
     ({"time_limit": "1h"}, "time_limit: '1h' is not an integer from 1 to 31536000"),
     ({"startup_timeout": "5"}, "startup_timeout: '5' is not an integer from 10 to 86400"),
     ({"startup_timeout": "30m"}, "startup_timeout: '30m' is not an integer from 10 to 86400")],
)
def test_bad_request_names_the_variable(request_, start):
    errors = launch.launch_request_errors(request_, CLUSTER)
    assert len(errors) == 1 and errors[0].startswith(start), errors
    assert "\n" not in errors[0] and len(errors[0]) < 300
    assert "—" in errors[0]  # every message carries its fix


@pytest.mark.parametrize(
    ("request_", "start"),
    [({"backend": "jaccl", "np": "2"}, "np: the jaccl backend starts one rank per slot"),
     ({"backend": "jaccl-ring", "elastic": "true"}, "elastic: only the mpi backend"),
     ({"backend": "ring", "mpi_extra_args": "-v"}, "mpi_extra_args: only the mpi backend")],
)
def test_over_cables_the_mlx_backends_are_checked_like_ring(request_, start):
    errors = launch.launch_request_errors(request_, CLUSTER, "cables")
    assert len(errors) == 1 and errors[0].startswith(start), errors
    assert launch.launch_request_errors({"backend": "jaccl"}, CLUSTER, "cables") == []


def test_np_defaults_to_every_slot():
    assert launch.launch_np(None, CLUSTER) == 3
    assert launch.launch_np("2", CLUSTER) == 2


def test_hosts_must_share_open_mpi_and_the_train_package():
    infos = [info("a", "/home/u"), info("b", "/home/u", version="5.0.8", prefix="/opt/ompi")]
    infos[1]["train_diff"] = ["loop.py modified"]
    plan = layout.cluster_layout(infos)
    errors = launch.launch_consistency_errors(infos, plan)
    assert any(e.startswith("Open MPI version differs") and "b: 5.0.8" in e for e in errors)
    assert any(e.startswith("Open MPI prefix differs") for e in errors)
    assert any(e.startswith("train/ package on b differs") and "loop.py modified" in e
               for e in errors)
    assert launch.launch_consistency_errors(infos[:1], plan) == []
    # The ring backend does not run Open MPI.
    assert len(launch.launch_consistency_errors(infos, plan, backend="ring")) == 1


def test_a_host_whose_mpirun_failed_is_named_instead_of_a_version_difference():
    infos = [info("a", "/home/u"), info("b", "/home/u", version=None, prefix=None)]
    infos[1]["openmpi_error"] = "openmpi: `/usr/bin/mpirun --version` failed on b (...)"
    errors = launch.launch_consistency_errors(infos, layout.cluster_layout(infos))
    assert errors == [infos[1]["openmpi_error"]]
    # The ring backend does not run Open MPI: nothing to say about it.
    assert launch.launch_consistency_errors(infos, layout.cluster_layout(infos), "ring") == []


def test_default_run_name_is_the_model_and_a_timestamp():
    assert launch.launch_run_name("mlp", "20250101-000000") == "mlp-20250101-000000"
    assert launch.launch_run_name("/ctl/models/Tiny Llama/", "t") == "Tiny-Llama-t"
    assert launch.launch_run_name(None, "t") == "train-t"


# ---------------------------------------------------------------- verdict

# Captured from Open MPI 4.1.4 (Debian) and 5.0.x (PyPI), and mlx.launch 0.29+.
OMPI4_SIGNAL = """--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 0 on node h3 exited on signal 9 (Killed).
--------------------------------------------------------------------------"""
OMPI4_EXIT = """mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[8778,1],2]
  Exit code:    3
"""
OMPI5_SIGNAL = """prterun noticed that process rank 1 with PID 20447 on node vm exited on
signal 9 (Killed)."""
OMPI5_EXIT = """prterun detected that one or more processes exited with non-zero status,
thus causing the job to be terminated. The first process to do so was:

   Process name: [prterun-vm-20508@1,2]
   Exit code:    3
"""
RING = ("\x1b[33m[WARN] Node with rank 1 exited with code 255 \x1b[0m\n"
        "\x1b[33m[WARN] Node with rank 0 was killed \x1b[0m\n")


@pytest.mark.parametrize(
    ("log", "found"),
    [(OMPI4_SIGNAL, (2, "killed by signal 9" + supervisor.KILLED_HINT)),
     (OMPI4_EXIT, (2, "exited with code 3")),
     (OMPI5_SIGNAL, (1, "killed by signal 9" + supervisor.KILLED_HINT)),
     (OMPI5_EXIT, (2, "exited with code 3")),
     (RING, (1, "exited with code 255")),
     ("[train] step 10/10 loss 0.1\n", None)],
)
def test_the_supervisor_reads_the_failed_rank_from_the_launcher_output(log, found):
    # mlx.launch exits 0 when a rank fails: its words are what tells a failure from a success.
    assert supervisor.failed_rank(log) == found


def test_verdict_names_host_rank_restarts_and_last_lines():
    job = {"run": "r", "state": "failed", "reason": "rank_failed", "restarts": [{}, {}],
           "suspect": "rank 2 on b: killed by signal 9"}
    logs = {"0": "[train] step 10\n", "2": "line 1\nTraceback\nRuntimeError: boom\n"}
    report = launch.launch_verdict(job, logs, ["a", "a", "b"])
    assert report.startswith("Training failed: a rank failed; suspect: rank 2 on b: killed by "
                             "signal 9; 2 automatic restart(s).")
    assert "Last lines of rank 2 (b):\n    line 1\n    Traceback\n    RuntimeError: boom" in report
    stalled = launch.launch_verdict({**job, "reason": "stall", "suspect": "rank 1 on a: process "
                                     "7 is stopped"}, {}, ["a", "a"], unreachable=["c"])
    assert "the job stalled" in stalled and "stopped answering Ansible: c" in stalled
    cut = launch.launch_verdict({**job, "reason": "summary_unreadable", "suspect": None}, {}, [])
    assert cut.startswith("Training failed: rank 0's summary.json is unreadable (cut short: a "
                          "full disk or a disk fault), so the run is not counted as completed; "
                          "suspect: no rank named;")


def test_finished_and_stopped_runs_are_not_failures_but_a_lost_launch_host_is():
    assert launch.launch_verdict({"state": "finished", "reason": "hung_at_exit"}, {}, []) is None
    assert launch.launch_verdict({"state": "stopped", "reason": "time_limit"}, {}, []) is None
    lost = launch.launch_verdict({"run": "r", "state": "running"}, {}, [], lost_contact=True)
    assert "the job goes on under its supervisor" in lost and "-e attach=r" in lost
    assert "last known state: unknown" in launch.launch_verdict({}, {}, [])


def test_a_lost_job_says_why_and_what_to_do():
    lost = {"run": "r", "state": "lost", "reason": "the launch host restarted since (another "
            "boot id)", "last_step": 40, "launcher_running": False}
    assert launch.launch_verdict(lost, {}, []) == (
        "Training lost at step 40: the launch host restarted since (another boot id), so nothing "
        "watches it any more; what it wrote was fetched; continue it with -e resume=true "
        "-e run_name=r.")
    orphan = {**lost, "reason": "its supervisor is gone", "launcher_running": True}
    assert launch.launch_verdict(orphan, {}, []).endswith(
        "its launcher still runs: stop it with -e stop=r.")


def test_summary_lines():
    summary = {"train_loss": 0.2, "eval_loss": 0.15, "eval_accuracy": 0.956, "world_size": 4,
               "steps": 60, "samples_per_s": 1234.5, "wall_time_s": 10.04}
    lines = launch.launch_summary_lines(summary, "/p/runs/r")
    assert lines == ["final loss 0.2000, eval loss 0.1500, eval accuracy 95.6%",
                     "world size 4, steps 60, 1234 samples/s, 10.0 s wall time",
                     "results: /p/runs/r"]


def test_summary_lines_of_a_restarted_and_of_a_stopped_run():
    job = {"run": "r", "state": "finished", "restarts": [
        {"reason": "stall", "from_step": 300, "lost_s": 12.4}]}
    lines = launch.launch_summary_lines({"steps": 60}, "/p/runs/r", job)
    assert "1 automatic restart(s) (stall at step 300), 12 s of work redone" in lines
    stopped = {"run": "r", "state": "stopped", "reason": "time_limit", "last_step": 700,
               "checkpoint_step": 700, "steps": 1500, "restarts": []}
    lines = launch.launch_summary_lines({}, "/p/runs/r", stopped)
    assert lines[0] == "stopped at step 700 of 1500 (time_limit) with a checkpoint there"
    # Stopped in a restart's back-off: the step it failed at has no checkpoint.
    lines = launch.launch_summary_lines({}, "/p/runs/r", {**stopped, "checkpoint_step": 600})
    assert lines[0] == ("stopped at step 700 of 1500 (time_limit); its latest checkpoint is at "
                        "step 600")
    lines = launch.launch_summary_lines({}, "/p/runs/r", {**stopped, "checkpoint_step": None})
    assert lines[0].endswith("(time_limit); no checkpoint: a resume starts from step 0")
    assert "ansible-playbook train.yml -e resume=true -e run_name=r" in lines[1]


def test_controller_paths_are_resolved_where_the_user_typed_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "my-model").mkdir()
    given = request(data="~/corpus.txt", model="./my-model")
    assert given["data"] == str(tmp_path / "home" / "corpus.txt")
    assert given["model"] == str(tmp_path / "my-model")
    assert request(model="my-model")["model"] == str(tmp_path / "my-model")
    assert request(data="d/x.txt")["data"] == str(tmp_path / "d" / "x.txt")
    # Names and repo ids stay names; a value like a flag is left for the train CLI to refuse.
    assert request(model="mlp")["model"] == "mlp"
    assert request(model="mlx-community/tiny")["model"] == "mlx-community/tiny"
    assert request(data="-x")["data"] == "-x"


@pytest.mark.parametrize(("model", "repo"), [
    ("mlx-community/Qwen2.5-0.5B-Instruct-4bit", "mlx-community/Qwen2.5-0.5B-Instruct-4bit"),
    ("./tiny", None), ("~/tiny", None), ("/abs/ann/tiny", None), ("../x/y", None),
    ("a--b/c", None), ("a/b..c", None), ("gpt", None), ("a/b/c", None), ("ann/tiny\n", None),
    (None, None),
])
def test_a_hub_model_is_a_repo_id_that_is_no_path(model, repo):
    assert launch.launch_hub_repo(model) == repo


def test_a_directory_named_like_a_repo_id_on_the_controller_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ann" / "tiny").mkdir(parents=True)
    assert launch.launch_hub_repo(request(model="ann/tiny")["model"]) is None


def test_the_model_sources_are_the_request_tables():
    assert tuple(REQUEST_SPEC["model_source"]["choices"]) == launch.MODEL_SOURCES
    assert REQUEST_SPEC["model_source"]["default"] == "launch_host"
    errors = launch.launch_request_errors(request(model="ann/tiny", model_source="controller"),
                                          [])
    assert errors == []


@pytest.mark.parametrize(
    ("name", "meant"),
    [("batch-size", "batch_size"), ("batchsize", "batch_size"), ("Batch_Size", "batch_size"),
     ("check_point_every", "checkpoint_every"), ("step", "steps"), ("learning_rate", "lr"),
     ("iters", "steps"), ("runname", "run_name"), ("max-restarts", "max_restarts"),
     # Near misses that used to pass without a word: an alias, one word of an option, one edit.
     ("epochs", "steps"), ("restarts", "max_restarts"), ("limit", "time_limit"),
     ("timeout", "stall_timeout or startup_timeout"), ("stpes", "steps"), ("widht", "width"),
     ("seeds", "seed"), ("bacth_size", "batch_size"), ("backoff", "restart_backoff"),
     ("every", "eval_every, checkpoint_every or log_every"),
     # mlx-lm's names (its lora config file's keys)
     ("steps_per_eval", "eval_every"), ("save_every", "checkpoint_every"),
     ("val_batches", "eval_batches"),
     ("steps_per_report", "log_every")],
)
def test_misspelt_options_name_the_one_meant(name, meant):
    names = [name, "steps", "ansible_host", "cluster_work_dir", "mpi_slots", "playbook_dir",
             "launch_exit_grace", "thunderbolt_ip", "inventory_hostname", "groups", "omit"]
    first = meant.split(",")[0].split()[0]
    assert launch.launch_unknown_options(names, REQUEST_SPEC) == [
        f"{name}: not a train.yml option — did you mean {meant}? (-e {first}=...)"]


def test_the_settings_train_yml_sets_itself_are_refused_with_what_to_give_instead():
    names = ["out", "heartbeat", "check", "config", "steps"]
    assert launch.launch_unknown_options(names, REQUEST_SPEC) == [
        "check: python -m train's, not a train.yml option — train.yml runs the check itself: "
        "leave it out",
        "config: python -m train's, not a train.yml option — give train.yml the file itself: "
        "-e @run.yml",
        "heartbeat: python -m train's, not a train.yml option — train.yml gives each rank its "
        "own for the supervisor: leave it out",
        "out: python -m train's, not a train.yml option — train.yml writes the run to "
        "runs/<run_name>/: give run_name instead"]


def test_the_settings_file_of_the_docs_means_the_same_to_python_m_train_and_train_yml(tmp_path):
    """docs/training.md's run.yaml, given to train.yml (-e @run.yaml: extra vars, typed as YAML
    has them) and to python -m train --config: the same settings."""
    block = (ROOT / "docs/training.md").read_text().partition("\n    # run.yaml\n")[2]
    text = "\n".join(line[4:] for line in block.partition("\n\n")[0].splitlines())
    values = yaml.safe_load(text)
    assert len(values) >= 5
    assert launch.launch_unknown_options(values, REQUEST_SPEC) == []
    request = launch.launch_request(REQUEST_SPEC, [values.get(n, "") for n in REQUEST_SPEC])
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert cli.parse(launch.launch_train_args(request)) == cli.parse(["-c", str(path)])


# Ansible's magic variables a train.yml play sees besides ansible_* (query varnames, 2.19).
MAGIC = ["environment", "group_names", "groups", "hostvars", "inventory_dir", "inventory_file",
         "inventory_hostname", "inventory_hostname_short", "play_hosts", "playbook_dir",
         "role_names", "vars", "omit", "role_path", "role_name"]


def test_no_variable_of_ansible_the_inventory_or_the_roles_is_taken_for_an_option():
    names = set(MAGIC)
    for path in ROOT.glob("roles/*/*/main.yml"):
        if path.parent.name in ("defaults", "vars"):
            names |= set(yaml.safe_load(path.read_text()) or {})
    for path in ROOT.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            names |= set(entry.get("options") or {}) - set(REQUEST_SPEC)
    for path in ROOT.glob("inventory/**/*.yml"):
        for group in yaml.safe_load(path.read_text()).values():
            names |= set(group.get("vars") or {})
            for hostvars in (group.get("hosts") or {}).values():
                names |= set(hostvars or {})
    assert len(names) > 150
    assert launch.launch_unknown_options(sorted(names - set(REQUEST_SPEC)), REQUEST_SPEC) == []


@pytest.mark.parametrize("raw", ["-m mlx_lm lora --train", "run"])
def test_a_value_ansible_split_at_its_spaces_is_refused_with_the_quoting_that_works(raw):
    [error] = launch.launch_split_value_errors(raw)
    assert error.startswith(f"_raw_params: Ansible split {raw!r} off an -e value with spaces")
    assert """-e "command='python -m mlx_lm lora --train'\"""" in error
    assert launch.launch_split_value_errors("") == []
    assert launch.launch_split_value_errors(None) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--lr=inf"], "lr: 'inf' is not a finite number > 0 (e.g. 0.001)"),
     (["--batch-size=x"], "batch_size: 'x' is not an integer from 1 to 65536"),
     (["--model=-x"], "model: '-x' is not a name or path"),
     (["--model=gpt"], "dataset 'text' needs data PATH"),
     (["--check=65", "--batch-size=64"],
      "batch_size 64 leaves some of the 65 ranks without an example; choose at least 65")],
)
def test_the_train_programs_errors_keep_the_users_names(argv, message):
    args = [sys.executable, "-m", "train", *argv] + ([] if "--check" in argv[0] else ["--check=2"])
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert launch.launch_train_check_error(done.stderr).startswith(message), done.stderr
    assert launch.launch_train_check_error(f"{done.stderr}exit 2\n").startswith(message)


def test_a_crash_of_the_train_program_is_shown_without_the_exit_line():
    crash = "Traceback (most recent call last):\nImportError: no numpy\nexit 1\n"
    assert launch.launch_train_check_error(crash) == (
        "Traceback (most recent call last):\nImportError: no numpy")


def test_the_odd_hosts_python_or_package_version_is_named():
    infos = [info(n, "/home/u") for n in ("a", "b", "c")]
    assert launch.launch_consistency_errors(infos, layout.cluster_layout(infos)) == []
    infos[1]["versions"] = versions(mlx="0.31.0")
    infos[2]["versions"] = versions(python="3.12.1")
    infos[2]["versions"]["packages"]["mpi4py"] = None
    errors = launch.launch_consistency_errors(infos, layout.cluster_layout(infos))
    assert [e.split(" — ")[0] for e in errors] == [
        "python differs between hosts (c: 3.12.1; the others: 3.11.7)",
        "mlx differs between hosts (b: 0.31.0; the others: 0.32.4)",
        "mpi4py differs between hosts (c: missing; the others: 4.1.2)"]
    assert errors[1].endswith("on b, re-run ansible-playbook setup.yml, which puts every host "
                              "on requirements.lock's versions"), errors[1]
    infos[0]["versions"] = None  # no environment at all
    assert "the Python environment on a could not be read" in " ".join(
        launch.launch_consistency_errors(infos, layout.cluster_layout(infos)))


def test_the_versions_probe_reads_this_python(tmp_path):
    script = ROOT / "roles/cluster/files/versions.py"
    done = subprocess.run([sys.executable, script, "mlx", "no-such-package"], capture_output=True,
                          text=True, check=True)
    found = json.loads(done.stdout)
    assert found["python"] == platform.python_version()
    assert found["packages"] == {"mlx": importlib.metadata.version("mlx"),
                                 "no-such-package": None}


def test_the_outcome_holds_the_state_the_numbers_and_the_error():
    job = {"run": "r", "state": "failed", "reason": "rank_failed", "last_step": 7,
           "restarts": [{"reason": "stall"}]}
    summary = {"steps": 10, "eval_accuracy": 0.9, "train_loss": 0.1, "model": "mlp"}
    outcome = launch.launch_outcome(summary, job, "/runs/r", "rank 1 on b: killed by signal 9")
    assert outcome["ok"] is False and outcome["error"] == "rank 1 on b: killed by signal 9"
    assert (outcome["state"], outcome["last_step"], outcome["restarts"]) == ("failed", 7, 1)
    assert (outcome["steps"], outcome["eval_accuracy"], outcome["eval_loss"]) == (10, 0.9, None)
    assert "model" not in outcome and outcome["results"] == "/runs/r"
    assert launch.launch_outcome({}, None, "/runs/x", "")["ok"] is True


def _probe(hostfile_rc=0, mlx_launch_rc=0, ssh=()):
    return ([{"item": "hostfile", "rc": hostfile_rc, "stdout": "",
              "stderr": "cat: x: No such file"},
             {"item": "mlx_launch", "rc": mlx_launch_rc, "stdout": "", "stderr": ""}]
            + [{"item": {"name": name, "mpi_address": address}, "rc": rc, "stderr": f"{err}\n"}
               for name, address, rc, err in ssh])


def test_a_ready_launch_host_has_nothing_to_say():
    runs = [{"run": "old", "state": "finished", "last_step": 9}]
    ssh = [("b", "198.19.0.2", 0, "")]
    errors = launch.launch_host_errors(_probe(ssh=ssh), "a", "/h", [], runs, "/env/bin/mlx.launch")
    assert errors == []


def test_every_problem_of_the_launch_host_is_named_with_its_fix():
    runs = [{"run": "old", "state": "finished"}, {"run": "r1", "state": "running", "last_step": 40}]
    ssh = [("b", "198.19.0.2", 0, ""), ("c", "198.19.0.3", 255, "Connection timed out")]
    errors = launch.launch_host_errors(_probe(mlx_launch_rc=1, ssh=ssh), "a", "/w/hosts.json",
                                       ["2 hosts, inventory has 3"], runs, "/env/bin/mlx.launch")
    assert errors == [
        "/w/hosts.json does not match the inventory (2 hosts, inventory has 3) — re-run setup.yml "
        "to render it again",
        "a cannot ssh -o BatchMode=yes to c / 198.19.0.3 / Connection timed out — check the cable "
        "and that host's bridge0 address, then re-run setup.yml (ssh_mesh)",
        "run r1 is running on this cluster (step 40): one job at a time — follow it with "
        "ansible-playbook train.yml -e attach=r1, or stop it with -e stop=r1",
        "/env/bin/mlx.launch is missing — re-run setup.yml to install mlx in /env"]


def test_a_lost_job_blocks_a_launch_only_while_its_launcher_runs():
    gone = {"run": "r0", "state": "lost", "reason": "the launch host restarted since (another "
            "boot id)", "launcher_running": False, "last_step": 9}
    orphan = {**gone, "run": "r1", "reason": "its supervisor is gone", "launcher_running": True}
    assert launch.launch_host_errors(_probe(), "a", "/h", [], [gone], None) == []
    assert launch.launch_host_errors(_probe(), "a", "/h", [], [gone, orphan], None) == [
        "run r1 is lost (its supervisor is gone) but its launcher still runs on this cluster "
        "(step 9): one job at a time — follow it with ansible-playbook train.yml -e attach=r1, "
        "or stop it with -e stop=r1"]


def test_a_missing_hostfile_is_named_and_mlx_launch_matters_only_for_ring():
    errors = launch.launch_host_errors(_probe(hostfile_rc=1, mlx_launch_rc=1), "a", "/w/hostfile",
                                       [], [], None)
    assert errors == ["/w/hostfile is missing on a (cat: x: No such file) — run ansible-playbook "
                      "setup.yml (with the same inventory) before train.yml"]


# ---------------------------------------------------------------- -e status=...


def status_row(run, state, last_step, steps, step_seconds=None, **more):
    """A row of supervisor.py status --json, as it records a job in job.json."""
    return {"run": run, "state": state, "reason": None, "last_step": last_step, "steps": steps,
            "step_seconds": step_seconds, "restarts": [], "phases": {}, **more}


def test_status_is_true_or_a_run_name():
    assert request(status="true")["status"] is True
    assert request()["status"] is False
    assert request(status="r1")["status"] == "r1"
    assert launch.launch_request_errors({"status": "r1"}, CLUSTER) == []


def test_status_table_has_a_row_per_run_aligned_with_the_eta_of_the_steps_left():
    runs = [status_row("mlp-20261126-0900", "finished", 200, 200, 0.5, reason="completed"),
            status_row("gpt", "running", 40, 1000, 2.5, phases={"0": "evaluating"},
                       restarts=[{"reason": "stalled"}]),
            status_row("new", "starting", None, None)]
    assert launch.launch_status_table(runs) == [
        "RUN                STATE                 STEP     ETA      RESTARTS  REASON",
        "mlp-20261126-0900  finished              200/200  -        0         completed",
        "gpt                running (evaluating)  40/1000  40m 00s  1",
        "new                starting              0/?      -        0"]
    assert launch.launch_status_table([]) == ["no runs yet"]


def test_status_of_a_run_has_a_row_per_rank_and_says_which_has_no_heartbeat():
    ranks = [{"rank": 0, "host": "mac1", "reached": True, "phase": "training", "step": 40,
              "age": 0.4},
             {"rank": 1, "host": "mac1", "reached": True, "phase": None, "step": None,
              "age": None},
             {"rank": 2, "host": "mac2", "reached": False, "phase": None, "step": None,
              "age": None},
             {"rank": 10, "host": "mac3", "reached": True, "phase": "training", "step": 39,
              "age": 12.6}]
    lines = launch.launch_status_table([status_row("gpt", "running", 40, 100, 30, ranks=ranks)],
                                       "gpt")
    assert lines[1] == "gpt  running  40/100  30m 00s  0"
    assert lines[2:] == ["",
                         "RANK  HOST  PHASE     STEP  HEARTBEAT",
                         "0     mac1  training  40    0 s ago",
                         "1     mac1  -         -     no heartbeat",
                         "2     mac2  -         -     host unreachable",
                         "10    mac3  training  39    13 s ago"]
    assert launch.launch_status_table([], "nope") == ["there is no run nope — see -e status=true"]


@pytest.mark.parametrize(("seconds", "shown"),
                         [(0.4, "0 s"), (59, "59 s"), (60, "1m 00s"), (3599, "59m 59s"),
                          (3600, "1h 00m"), (200 * 3600 + 61, "200h 01m")])
def test_durations(seconds, shown):
    assert launch.duration(seconds) == shown
