"""train.yml on a virtual Thunderbolt cluster: 3 hosts, one with 2 slots (world size 4).

One cluster (set up once with setup.yml) serves every test of this module: setting it up takes
minutes on a shared 2-core machine. Models and step counts are tiny; the assertions are on real
outcomes: files on the controller, summary.json, interface byte counters, processes per host.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.conftest import write_llm
from tests.integration.hf_endpoint import Hub
from tests.train.conftest import long_jsonl
from tools.playbook import run_playbook

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# mlp on digits: 64*128+128 + 128*128+128 + 128*10+10 float32 parameters.
MLP_GRADIENT_BYTES = 26122 * 4
START_TASK = "Start the job under its supervisor"
HUB_REPO = "mlx-cluster-test/tiny-llm"
JOB_PROCESS = re.compile(r"-m\0(train|mlx_lm)\0|orted|prted|prterun|mpirun|mlx\.launch")


@pytest.fixture
def cluster(train_cluster):
    return train_cluster


def train(vc, tmp_path, name, **extravars):
    results = tmp_path / "runs"
    extravars = {"launch_results_dir": str(results), "run_name": name, **extravars}
    run = run_playbook("train.yml", vc.inventory, tmp_path / f"runner-{name}", extravars)
    return run, results / name


def failure_message(run):
    return "\n".join(run.failure_messages())


def job_processes(vc):
    """{host: [cmdline]} of every training-job process left in each host's network namespace."""
    left = {}
    for host in vc.hosts:
        pids = vc_pids(host.netns)
        cmdlines = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except FileNotFoundError:
                continue
            if JOB_PROCESS.search(cmdline):
                cmdlines.append(cmdline.replace("\0", " "))
        left[host.name] = cmdlines
    return left


def vc_pids(netns):
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def bytes_on(vc, ifname):
    return {h.name: vc.iface_bytes(h, ifname) for h in vc.hosts}


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def rank_pids(vc, host, run_name):
    """pids of the training processes of run_name in the host's namespace."""
    found = []
    for pid in vc_pids(vc.host(host).netns):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"-m\0train\0" in cmdline and f"runs/{run_name}".encode() in cmdline:
            found.append(pid)
    return found


def rank_pid(vc, host, run_name):
    """pid of a training process of run_name in the host's namespace, or None."""
    return next(iter(rank_pids(vc, host, run_name)), None)


def kill_rank_mid_run(vc, tmp_path, name, host, **extravars):
    """Start a long run, kill -9 the rank on `host` once rank 0 reports steps; return the run."""
    outcome = {}

    def play():
        outcome["run"], _ = train(vc, tmp_path, name, steps=100000, time_limit=900, **extravars)

    thread = threading.Thread(target=play)
    thread.start()
    launch_host = vc.hosts[0]
    log = f"mlx-cluster/runs/{name}/logs/rank.0.log"

    def training():
        text = vc.run(launch_host, f"cat {log} 2>/dev/null || true", user=launch_host.user).stdout
        return "[train] step" in text

    try:
        wait_for(training, 600, f"rank 0 of {name} to report steps")
        pid = wait_for(lambda: rank_pid(vc, host, name), 30, f"the rank on {host}")
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
    finally:
        thread.join(timeout=900)
    assert not thread.is_alive(), "train.yml did not end after a rank was killed"
    return outcome["run"], time.monotonic() - killed_at


def test_trains_on_every_slot_over_bridge0_then_resumes(cluster, tmp_path):
    vc = cluster
    bridge_before, en0_before = bytes_on(vc, "bridge0"), bytes_on(vc, "en0")
    steps = 150

    run, out = train(vc, tmp_path, "full", model="mlp", steps=steps)
    assert run.status == "successful", run.stdout[-6000:]
    assert [e for e in run.task_results() if e.get("task") == START_TASK]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 4
    assert summary["steps"] == steps
    assert summary["eval_accuracy"] > 0.5
    for name in ("metrics.jsonl", "loss.png", "command.sh"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "launch.log").exists()  # mpirun's own messages: none on success
    [checkpoint] = (out / "checkpoints").iterdir()
    assert (checkpoint / "model.safetensors").stat().st_size > MLP_GRADIENT_BYTES
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == [f"rank.{r}.log" for r in range(4)]
    assert "--bind-to none" in (out / "command.sh").read_text()
    # Every rank's Open MPI ran its all-reduce by train's rules: the file each rank's program
    # gave it is that host's installed copy.
    [rules] = re.findall(r'dynamic_rules_filename="\$PWD"/(\S+) &&',
                         (out / "command.sh").read_text())
    rules_text = (Path(__file__).parents[2] / "train" / "openmpi-allreduce.rules").read_text()
    for host in vc.hosts:
        assert vc.run(host, f"cat mlx-cluster/{rules}", user=host.user).stdout == rules_text
    [line] = (out / "result.json").read_text().splitlines()  # one line of JSON for scripts
    result = json.loads(line)
    assert (result["ok"], result["state"], result["error"]) == (True, "finished", None), result
    assert {k: result[k] for k in ("steps", "eval_accuracy")} == {
        k: summary[k] for k in ("steps", "eval_accuracy")}
    [shown] = [e["event_data"]["res"]["msg"] for e in run.events
               if e.get("event") == "runner_on_ok"
               and e["event_data"].get("task") == "Summarise the run"]
    assert shown[-1] == line, shown  # the play's last line is the same JSON

    # Each host exchanges at least its whole gradient every step, both ways, over bridge0 only.
    gradient_bytes = MLP_GRADIENT_BYTES * steps
    bridge_after, en0_after = bytes_on(vc, "bridge0"), bytes_on(vc, "en0")
    for host in vc.hosts:
        rx = bridge_after[host.name][0] - bridge_before[host.name][0]
        tx = bridge_after[host.name][1] - bridge_before[host.name][1]
        en0 = sum(en0_after[host.name]) - sum(en0_before[host.name])
        assert rx >= gradient_bytes and tx >= gradient_bytes, (host.name, rx, tx, gradient_bytes)
        assert en0 < gradient_bytes, (host.name, en0, gradient_bytes)

    # Rank 0's progress reached the output while the job ran, not only when it ended.
    def created(event):
        return datetime.fromisoformat(event["created"]).timestamp()

    progress = [e for e in run.events if "[train] step" in e.get("stdout", "")]
    [followed] = [e for e in run.events if e.get("event") == "runner_on_ok"
                  and e["event_data"].get("task", "").startswith("Follow rank 0 until")]
    assert progress, "no progress line in the play output"
    assert created(followed) - created(progress[0]) > 2, "progress appeared only at the end"

    resumed, out = train(vc, tmp_path, "full", model="mlp", steps=steps + 30, resume=True)
    assert resumed.status == "successful", resumed.stdout[-6000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == steps and summary["steps"] == steps + 30
    assert "resuming from" in (out / "logs" / "rank.0.log").read_text()


@pytest.mark.parametrize("backend", ["mpi", "ring"])
def test_network_management_moves_the_jobs_traffic_to_en0(cluster, tmp_path, backend):
    """-e network=management: Open MPI keeps to the management interface, the ring backend
    talks to each host's management address; bridge0 carries only the launch's logins."""
    vc = cluster
    width, steps = 512, 40  # mlp's gradient: 301,066 floats, 1.2 MB a step
    gradient_bytes = (64 * width + width + width * width + width + width * 10 + 10) * 4 * steps
    before = {ifname: bytes_on(vc, ifname) for ifname in ("bridge0", "en0")}
    run, out = train(vc, tmp_path, f"en0-{backend}", model="mlp", width=width, steps=steps,
                     backend=backend, network="management")
    assert run.status == "successful", run.stdout[-6000:]
    after = {ifname: bytes_on(vc, ifname) for ifname in ("bridge0", "en0")}
    for host in vc.hosts:
        rx, tx = (after["en0"][host.name][i] - before["en0"][host.name][i] for i in (0, 1))
        bridge0 = sum(after["bridge0"][host.name]) - sum(before["bridge0"][host.name])
        assert rx >= gradient_bytes and tx >= gradient_bytes, (host.name, rx, tx, gradient_bytes)
        assert bridge0 < gradient_bytes / 4, (host.name, bridge0, gradient_bytes)
    launch = " ".join((out / "command.sh").read_text().replace("\\\n", " ").split())
    if backend == "mpi":
        assert "--mca btl_tcp_if_include en0" in launch and "bridge0" not in launch, launch
    else:
        assert "/hosts-management.json" in launch, launch
    assert json.loads((out / "summary.json").read_text())["world_size"] == 4


def test_killed_rank_fails_the_play_naming_its_host(cluster, tmp_path):
    vc = cluster
    victim = vc.hosts[2].name  # rank 3
    run, seconds = kill_rank_mid_run(vc, tmp_path, "killed", victim, max_restarts=0)
    assert run.status == "failed"
    message = failure_message(run)
    assert f"rank 3 on {victim}: killed by signal 9" in message, message
    result = json.loads((tmp_path / "runs" / "killed" / "result.json").read_text())
    assert result["ok"] is False and f"rank 3 on {victim}" in result["error"], result
    assert seconds < 300, f"the play took {seconds:.0f}s to notice"
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_preflight_names_a_host_the_launch_host_cannot_reach(cluster, tmp_path):
    vc = cluster
    victim = vc.hosts[1]
    vc.run(victim, "ip link set bridge0 down")
    try:
        run, _ = train(vc, tmp_path, "unreachable", steps=5)
    finally:
        vc.run(victim, "ip link set bridge0 up")
    assert run.status == "failed"
    message = failure_message(run)
    assert f"{victim.name} / {victim.thunderbolt_ip}" in message, message
    started = [e for e in run.task_results() if e.get("task") == START_TASK]
    assert started == [], "the job started despite the failed preflight"


def test_ring_backend_trains_over_bridge0_and_reports_a_killed_rank(cluster, tmp_path):
    """The ring over bridge0 (hosts.json) forms the 4 ranks and trains; a killed rank ends it,
    named. (A ring job's end: the network=management test's ring run.)"""
    vc = cluster
    victim = vc.hosts[1].name  # ranks 1 and 2
    run, _ = kill_rank_mid_run(vc, tmp_path, "ring-killed", victim, backend="ring",
                               max_restarts=0)
    out = tmp_path / "runs" / "ring-killed"
    launch = " ".join((out / "command.sh").read_text().replace("\\\n", " ").split())
    assert "/mlx.launch --hostfile " in launch and "/hosts.json " in launch, launch
    assert "4 rank(s)" in (out / "logs" / "rank.0.log").read_text()
    assert run.status == "failed"
    message = failure_message(run)
    # mlx.launch reports only the first rank to end, then stops the others: a loaded machine may
    # let a peer of the killed rank end first, on the error that it lost the connection, which
    # the verdict's last lines then show (CI, under make test's two workers).
    assert (re.search(rf"rank [12] on {victim}: ", message)
            or "connection to a peer was lost" in message), message
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_mlx_launch_runs_with_the_hosts_json_setup_rendered(cluster):
    """MLX's own launcher, given our hosts.json and nothing else (the backend is the file's),
    starts a rank per slot over ssh and they all_sum across the hosts."""
    vc = cluster
    host = vc.hosts[0]
    program = ("import sys, mlx.core as mx; g = mx.distributed.init(strict=True); "
               "total = mx.distributed.all_sum(mx.array(1.0)).item(); "
               "sys.stdout.write(f'sum {g.size()} {total}\\n')")
    env = f"{host.home}/mlx-cluster/venv"  # the same path on every host
    done = vc.run(host, [f"{env}/bin/mlx.launch", "--hostfile", "mlx-cluster/hosts.json", "--",
                         f"{env}/bin/python", "-c", program], user=host.user, check=False,
                  timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines().count("sum 4 4.0") == 4, done.stdout


def rx_bytes(vc):
    """{(host, interface): bytes received} of every host's en0 and bridge0."""
    return {(h.name, ifname): vc.iface_bytes(h, ifname)[0]
            for h in vc.hosts for ifname in ("en0", "bridge0")}


def staged_launch(vc, tmp_path, name, corpus, **extravars):
    """A short gpt run on corpus, evaluated on one batch; the run and the bytes each interface
    received during it."""
    before = rx_bytes(vc)
    run, out = train(vc, tmp_path, name, model="gpt", dataset="text", data=str(corpus),
                     steps=4, batch_size=8, eval_batches=1, **extravars)
    assert run.status == "successful", run.stdout[-6000:]
    after = rx_bytes(vc)
    return run, out, {key: after[key] - before[key] for key in after}


def words(text):
    """text with its line breaks and indents as single spaces (YAML folds a long message)."""
    return " ".join(text.split())


def copies(vc, name="corpus.txt"):
    """{host: (sha256, inode and ctime)} of each host's staged corpus."""
    found = {}
    for host in vc.hosts:
        out = vc.run(host, f"sha256sum mlx-cluster/data/{name} && "
                     f"stat -c '%i %Z' mlx-cluster/data/{name}", user=host.user).stdout.split()
        found[host.name] = (out[0], out[2:])
    return found


def transfers(run):
    """(receiving host, sender) of each transfer of the inputs in a train.yml run."""
    return [(r["item"]["host"], r["item"]["from"]) for task in run.task_results()
            if task.get("task", "").startswith("Send the inputs")
            for r in task["res"].get("results", [])]


def hashed_after(run):
    """The hosts whose copies a train.yml run hashed after their transfer (an rsync wrote them)."""
    return [host for task in run.task_results()
            if task.get("task", "").startswith("Send the inputs")
            for host in task["res"].get("recorded", [])]


def test_inputs_are_sent_once_and_fanned_out_over_bridge0(cluster, tmp_path):
    """-e data: the controller sends the corpus once, to the launch host, which sends it on to the
    other hosts over bridge0. At the next launch a copy changed on one host is named and sent
    again, from the launch host, and the unchanged copies are neither sent nor rewritten. Bytes
    counted on every host's interfaces; the second launch, which moves next to nothing, is the
    baseline of the same job's other traffic."""
    vc = cluster
    size = 4 << 20
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(os.urandom(size))  # incompressible
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    launch_host, others = vc.hosts[0].name, [h.name for h in vc.hosts[1:]]
    first, out, staged = staged_launch(vc, tmp_path, "staged", corpus, report_to="tensorboard")
    command = (out / "command.sh").read_text()
    assert "--data=data/corpus.txt" in command and "--eval-batches=1" in command, command
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))  # rank 0's, fetched
    assert json.loads((out / "summary.json").read_text())["world_size"] == 4
    assert words(first.stdout).count("corpus.txt: not there: sending it again") == 3, first.stdout
    sent = copies(vc)
    assert {h: copy[0] for h, copy in sent.items()} == dict.fromkeys(sent, digest)
    for host in vc.hosts:  # private to the user, like the run directories
        modes = vc.run(host, "stat -c %a mlx-cluster/data mlx-cluster/data/corpus.txt "
                       "mlx-cluster/data/.corpus.txt.manifest.json mlx-cluster/runs",
                       user=host.user).stdout.split()
        assert modes == ["700", "600", "600", "700"], host.name

    changed = others[-1]
    vc.run(changed, "head -c 100 /dev/urandom >> mlx-cluster/data/corpus.txt",
           user=vc.host(changed).user)
    second, _, repair = staged_launch(vc, tmp_path, "repaired", corpus)
    named = re.findall(r"\[(\S+)\][^\[]*?corpus\.txt has (\d+) bytes, (\d+) on the controller: "
                       r"sending it again", words(second.stdout))
    assert named == [(changed, str(size + 100), str(size))], second.stdout[-6000:]
    # The others' copies came whole from the launch host's relay: no rsync after it, and every
    # copy was hashed as it arrived, none again after; the repair, rsync's, is hashed after.
    assert transfers(first) == [(launch_host, "the controller")]
    assert transfers(second) == [(changed, launch_host)]
    assert (hashed_after(first), hashed_after(second)) == ([], [changed])
    now = copies(vc)
    assert now[changed][0] == digest
    assert {h: now[h] for h in now if h != changed} == {h: sent[h] for h in sent if h != changed}
    extra = {key: staged[key] - repair[key] for key in staged}
    # The controller sent the corpus once: everything it sends arrives on some host's en0.
    controller = sum(extra[h, "en0"] for h in [launch_host, *others])
    assert 0.9 * size < controller <= 1.3 * size, extra
    assert extra[launch_host, "en0"] > 0.9 * size, extra
    for host in others:  # from the launch host, over bridge0 (the repair: rsync's delta)
        assert extra[host, "bridge0"] > 0.9 * size, extra
        assert extra[host, "en0"] < 0.1 * size, extra
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def interrupted_play(vc, log, extravars, until, what):
    """train.yml with extravars, Ctrl-C'd (SIGINT to its process group, as a terminal sends it)
    once until() holds; its output to log (ssh's ControlPersist masters would hold a pipe open for
    a minute), returned."""
    with log.open("w") as output:
        play = subprocess.Popen(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(vc.inventory),
             "train.yml", "-e", json.dumps(extravars)],
            cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(until, 120, what)
        finally:
            os.killpg(play.pid, signal.SIGINT)
            play.wait(timeout=60)
    return log.read_text()


def staging_processes(vc):
    """{host: [cmdline]} of the processes that move staged inputs in each host's network
    namespace: rsync, and the launch host's relay and the others' receivers (staging.py relay,
    take: a Python that runs the script as -c's argument)."""
    found = {}
    for host in vc.hosts:
        found[host.name] = []
        for pid in vc_pids(host.netns):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if os.path.basename(argv[0]) == b"rsync" or (
                    argv[1:2] == [b"-c"] and argv[3:4] in ([b"relay"], [b"take"])):
                found[host.name].append(b" ".join(argv[:1] + argv[3:]).decode(errors="replace"))
    return found


def test_an_interrupted_staging_resumes_where_it_stopped(cluster, tmp_path):
    """Ctrl-C of train.yml while the controller sends a corpus over the launch host's slow en0:
    the launch host keeps what arrived (rsync --partial) and the next launch sends only the rest;
    the play showed the transfer's progress. That launch Ctrl-C'd in turn while the launch host
    sends the corpus on over slow bridge0s: no transfer is left on any host, each kept what
    arrived, and the third launch sends each only the rest. Every copy is then the controller's."""
    vc = cluster
    # About 17 s at 16 Mbit/s (1.9 MiB/s): a cut at a third leaves 11 s for what a loaded
    # machine's slow readings and the sockets' buffers still deliver after it.
    size = 32 << 20
    corpus = tmp_path / "resumed.txt"
    corpus.write_bytes(os.urandom(size))
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()
    launch, others = vc.hosts[0], vc.hosts[1:]
    job = {"data": str(corpus), "command": "python -c pass"}  # a job that reads nothing: seconds
    extravars = {"launch_results_dir": str(tmp_path / "runs"), "run_name": "interrupted", **job,
                 "launch_staging_progress_interval": 1}

    def data(host):  # the host's data directory, read from here: no login to wait for
        return Path(host.workdir, "home", "mlx-cluster", "data")

    def arrived(host):
        sizes = []
        for temporary in data(host).glob(".resumed.txt.*"):  # none before the transfer
            with contextlib.suppress(FileNotFoundError):  # put in place meanwhile
                sizes.append(temporary.stat().st_size)
        return sum(sizes)

    def kept(host):
        corpus = data(host) / "resumed.txt"
        return wait_for(lambda: corpus.exists() and corpus.stat().st_size, 10, "the partial")

    def rates(text):  # the play's progress lines of the controller's send, with a rate
        return [float(rate) for rate in re.findall(
            rf"\[{launch.name}\] data/resumed\.txt from the controller: "
            rf"[\d.]+ of {size >> 20}\.0 MiB, ([\d.]+) MiB/s", text)]

    log = tmp_path / "interrupted.log"
    with vc.shaped("en0=16mbit", hosts=[launch]):
        interrupted = interrupted_play(vc, log, extravars,
                                       # a third, and two readings of it on a loaded machine
                                       # (an ssh login and a Python start each)
                                       lambda: arrived(launch) > size // 3 and rates(
                                           log.read_text()),
                                       "a third of the corpus on the launch host, shown")
    sent = kept(launch)
    assert size // 3 < sent < size, interrupted[-3000:]
    assert 0 < max(rates(interrupted)) < 3, interrupted[-3000:]

    before = rx_bytes(vc)
    with vc.shaped("bridge0=16mbit", hosts=others):
        fanned = interrupted_play(vc, tmp_path / "fanned.log", {**extravars, "run_name": "fanned"},
                                  lambda: min(arrived(h) for h in others) > size // 3,
                                  "a third of the corpus on the other hosts")
        received = {key: value - before[key] for key, value in rx_bytes(vc).items()}
        # Ended with the play, not finished at the link's pace (8 s more).
        wait_for(lambda: not any(staging_processes(vc).values()), 10, "no transfer on any host")
    named = re.findall(r"\[(\S+)\][^\[]*?resumed\.txt has (\d+) bytes, (\d+) on the controller",
                       words(fanned))
    assert (launch.name, str(sent), str(size)) in named, fanned[-6000:]
    # The rest, not the whole corpus, came to the launch host (with the launch's own traffic).
    assert received[launch.name, "en0"] < size - sent + (2 << 20), (sent, received)
    fanned_out = {h.name: kept(h) for h in others}
    assert all(size // 3 < n < size for n in fanned_out.values()), (fanned_out, fanned[-3000:])

    before = rx_bytes(vc)
    third, _ = train(vc, tmp_path, "resumed", **job)
    assert third.status == "successful", third.stdout[-6000:]
    received = {key: value - before[key] for key, value in rx_bytes(vc).items()}
    named = re.findall(r"\[(\S+)\][^\[]*?resumed\.txt has (\d+) bytes, (\d+) on the controller",
                       words(third.stdout))
    assert sorted(named) == sorted((h, str(n), str(size)) for h, n in fanned_out.items()), named
    for host, n in fanned_out.items():  # the rest, from the launch host
        assert received[host, "bridge0"] < size - n + (2 << 20), (fanned_out, received)
    assert {h: copy[0] for h, copy in copies(vc, "resumed.txt").items()} == dict.fromkeys(
        [h.name for h in vc.hosts], digest)
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


# A 12-layer float32 llama of 340 MB with a head of its own: its layers weigh more than a rank's
# python, MLX and mlx-lm (about 135 MB).
BIG_LLM = {"hidden_size": 512, "intermediate_size": 4096, "num_hidden_layers": 12,
           "tie_word_embeddings": False}


@pytest.fixture
def memory_capped(cluster):
    """The cluster, whose hosts' memory the test may cap (VirtualCluster.set_memory): lifted
    after it, for the tests after."""
    yield cluster
    cluster.set_memory(None)


# Below one process's fine-tune of BIG_LLM (555 MB resident, 507 MB of it its own: the shared
# libraries' pages are charged to the process that read them first), above a host's third
# (the host with 2 slots: 2 x 191 MB resident, 280 MB its own).
HOST_MEMORY = 420 << 20


def one_process(model, data, job, out):
    """The reference of a pipeline run: job's fine-tune of model on data in one process on the
    controller, started (its Popen: it runs meanwhile)."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in job.items()]
    return subprocess.Popen([sys.executable, "-m", "train", "--model", str(model), "--data",
                             str(data), *flags, "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def assert_trains_like(out, local, steps):
    """The run in out has the losses and adapters of the one process in local
    (tests/train/test_pipeline.py's tolerances)."""
    piped_losses, losses = ([r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]
                            for lines in ((o / "metrics.jsonl").read_text().splitlines()
                                          for o in (out, local)))
    assert len(piped_losses) == steps
    np.testing.assert_allclose(piped_losses, losses, rtol=5e-5)
    piped, single = ({k: np.array(v) for k, v in mx.load(str(path)).items()}
                     for path in (o / "adapters" / "adapters.safetensors" for o in (out, local)))
    assert piped.keys() == single.keys()
    for key in single:
        np.testing.assert_allclose(piped[key], single[key], rtol=0, atol=1e-4, err_msg=key)


def test_a_model_bigger_than_one_host_trains_as_a_pipeline_over_three_and_survives_a_kill(
        memory_capped, tmp_path):
    """-e parallel=pipeline on the 4 slots of the 3 hosts, stages 4,2,2,4: a third of BIG_LLM's
    layers on each host (two stages on the host with 2 slots), the activations and their
    gradients over the Thunderbolt network; its weights in 3 files, a third of the layers each,
    each host but the launch host (which relays them) is sent only its stages' file. Every
    host's memory is capped below what one process needs, then a rank is killed: the supervisor
    restarts the job under the cap, each stage resumes from its own checkpoint, and the losses
    and adapters are one uninterrupted process's (tests/train/test_pipeline.py's tolerances).
    One host alone, under the same cap, is killed for memory."""
    vc = memory_capped
    model, _ = write_llm(tmp_path / "big", tmp_path / "llm-data", shards=3, **BIG_LLM)
    # Examples of 4 words: a step is 20 tokens through 88M parameters (about 3 s here, a
    # third of write_llm's sentences'); 4 steps, a checkpoint after each: killed past the
    # first, two steps or more before the end on any machine.
    data = long_jsonl(tmp_path / "data", train=64, valid=16, words=4)
    job = {"steps": 4, "batch_size": 4, "lr": 1e-4, "log_every": 1, "eval_every": 0,
           "checkpoint_every": 1}
    local = tmp_path / "local"
    reference = one_process(model, data, job, local)
    name, victim = "pipeline", vc.hosts[2].name  # rank 3, the last stage
    started = time.monotonic()
    outcome = {}

    def play():
        outcome["run"], outcome["out"] = train(
            vc, tmp_path, name, model=str(model), data=str(data), parallel="pipeline",
            stages="4,2,2,4", restart_backoff=1, **job)

    thread = threading.Thread(target=play)
    thread.start()
    try:
        def checkpointed():  # rank 0 past the first checkpoint: every stage has one
            beat = vc.run(vc.hosts[0], f"cat mlx-cluster/runs/{name}/logs/rank.0.heartbeat "
                          "2>/dev/null || true", user=vc.hosts[0].user).stdout
            return bool(beat.strip()) and json.loads(beat)["step"] > 1

        wait_for(checkpointed, 600, "rank 0 past step 1")
        vc.set_memory(HOST_MEMORY)  # the ranks started from here on (the restart's) run capped
        os.kill(wait_for(lambda: rank_pid(vc, victim, name), 30, "rank 3"), signal.SIGKILL)
    finally:
        thread.join(timeout=900)
    run, out = outcome["run"], outcome["out"]
    print(f"\npipeline over 3 hosts, killed and resumed: {time.monotonic() - started:.0f} s")
    assert run.status == "successful", run.stdout[-6000:]
    [restart] = json.loads((out / "job.json").read_text())["restarts"]
    assert restart["reason"] == "rank_failed" and victim in restart["suspect"], restart
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 4 and 1 <= summary["resumed_from_step"] < 4, summary

    assert reference.wait(timeout=600) == 0, reference.stderr[-3000:]
    assert_trains_like(out, local, job["steps"])
    shards = sorted(p.name for p in model.glob("model-*.safetensors"))
    others = sorted({p.name for p in model.iterdir()} - set(shards))  # config, tokenizer, index
    for host, held in zip(vc.hosts, (shards, shards[1:2], shards[2:]), strict=True):
        listed = vc.run(host, "ls mlx-cluster/models/big", user=host.user).stdout.split()
        assert sorted(listed) == sorted(others + held), (host.name, listed)
    last = vc.hosts[2]  # the last stage's checkpoints stay on its host
    held = vc.run(last, "ls mlx-cluster/runs/pipeline/stage3/checkpoints",
                  user=last.user).stdout.split()
    assert "step_00000004" in held, held

    # Peak memory by host (ranks 0 | 1, 2 | 3), under the cap: about a third of the model
    # each, plus a rank's own python and libraries; one process needs more than the cap.
    whole = sum(p.stat().st_size for p in model.glob("model-*.safetensors"))
    [alone] = json.loads((local / "summary.json").read_text())["peak_memory_bytes"]
    peaks = summary["peak_memory_bytes"]
    by_host = [peaks[0], peaks[1] + peaks[2], peaks[3]]
    print("peak memory by host (MB):", [n >> 20 for n in by_host], "one process:", alone >> 20)
    assert alone > HOST_MEMORY > max(by_host), (alone, by_host)
    for ranks, peak in zip((1, 2, 1), by_host, strict=True):
        assert whole / 3 < peak < whole / 3 + ranks * (200 << 20), (peak, whole)
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}

    # The whole model on one host under the same cap: the kernel kills the rank, the play
    # names it.
    run, _ = train(vc, tmp_path, "alone", model=str(model), data=str(data), np=1,
                   max_restarts=0, **job)
    assert run.status == "failed"
    message = failure_message(run)
    assert f"rank 0 on {vc.hosts[0].name}: killed by signal 9" in message, message
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_replicas_of_a_pipeline_train_across_the_hosts_as_one_process(cluster, tmp_path):
    """-e parallel=pipeline -e stages=2,2 on the 4 slots: two replicas of a 2-stage pipeline,
    rank r stage r % 2 (ranks 0 and 2, stage 0, on hosts 1 and 2; ranks 1 and 3, stage 1, on
    hosts 2 and 3), each replica on half of every batch and each stage's gradients summed over
    its replicas across the hosts: one process's losses and adapters. The weights in 2 files, a
    stage's each: the host of rank 3 alone (stage 1) is sent only the second."""
    vc = cluster
    model, data = write_llm(tmp_path / "deep", tmp_path / "llm-data", shards=2,
                            num_hidden_layers=4, tie_word_embeddings=False)
    job = {"steps": 2, "batch_size": 4, "lr": 1e-3, "log_every": 1, "eval_every": 0}
    local = tmp_path / "local"
    reference = one_process(model, data, job, local)
    run, out = train(vc, tmp_path, "replicas", model=str(model), data=str(data),
                     parallel="pipeline", stages="2,2", **job)
    assert run.status == "successful", run.stdout[-6000:]
    assert ("global batch 4 over 2 replicas, each in 2 micro-batches through 2 stage(s)"
            in (out / "logs" / "rank.0.log").read_text())
    assert json.loads((out / "summary.json").read_text())["world_size"] == 4
    assert reference.wait(timeout=600) == 0, reference.stderr[-3000:]
    assert_trains_like(out, local, job["steps"])
    first, second = sorted(p.name for p in model.glob("model-*.safetensors"))
    last = vc.hosts[2]
    listed = vc.run(last, "ls mlx-cluster/models/deep", user=last.user).stdout.split()
    assert second in listed and first not in listed, listed
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_any_program_runs_under_the_launcher_and_lora_adapters_come_back(cluster, tmp_path,
                                                                          tiny_llm):
    vc = cluster
    model, data = tiny_llm
    # MLX's CPU backend (Linux) compiles each fused kernel with g++ on first use: 33 for
    # mlx_lm's step, a minute of the hosts' CPU per rank here; Macs compile theirs for Metal
    # in milliseconds. The program runs without (and shows an environment set for it).
    program = "env MLX_DISABLE_COMPILE=1 python -m mlx_lm lora"
    command = (f"{program} --train --model {{model}} --data {{data}} --iters 4 --batch-size 4 "
               "--num-layers 2 --steps-per-report 1 --adapter-path adapters")
    run, out = train(vc, tmp_path, "lora-command", model=str(model), data=str(data),
                     command=command)
    assert run.status == "successful", run.stdout[-6000:]
    for rank in range(4):  # every rank ran the program to its end, in a world of 4
        log = (out / "logs" / f"rank.{rank}.log").read_text()
        assert f"rank {rank} of 4: {program}" in log, log
        assert f"rank {rank}: exited with code 0" in log, log
    assert "models/llm" in (out / "command.sh").read_text()
    result = json.loads((out / "result.json").read_text())
    assert result["ok"] and result["world_size"] == 4, result
    assert (out / "adapters" / "adapters.safetensors").stat().st_size > 0
    generated = subprocess.run(
        [sys.executable, "-m", "mlx_lm", "generate", "--model", str(model), "--adapter-path",
         str(out / "adapters"), "--prompt", "the cat", "--max-tokens", "3"],
        capture_output=True, text=True, timeout=300)
    assert generated.returncode == 0, generated.stderr[-3000:]
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_a_hub_model_is_fetched_once_and_a_resume_trains_on_the_revision_it_recorded(
        cluster, tmp_path, tiny_llm, monkeypatch):
    """-e model=<Hugging Face id>, from a hub on the controller's network (HF_ENDPOINT, as for a
    user's mirror): the launch host downloads each file once for the whole cluster, stages it as
    hard links to its cache's files and sends the model on like a directory; every host holds a
    verified copy, the job fine-tunes it with LoRA (a pipeline of 2 stages x 2 replicas) and
    job.json records the commit. After the
    hub's main branch moved on, a resume asks the hub nothing, sends nothing again and trains on
    the recorded commit. With model_source: controller (hosts offline) the controller fetches the
    new commit, a model of 4 layers in 2 weight files, once, and stages it for a 4-stage
    pipeline: split by the fetched files' headers, the host of the last stage alone is sent only
    the second file. The model is private: both fetches use the controller's HF_TOKEN, which no
    play prints. Before all, check mode names what each host lacks and does nothing."""
    vc = cluster
    model, shared = tiny_llm
    data = tmp_path / "hub-data"  # a name of its own: on no host yet, whatever ran before
    shutil.copytree(shared, data)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model.iterdir()}
    name = HUB_REPO.replace("/", "--")
    job = {"model": HUB_REPO, "data": str(data), "eval_every": 0, "log_every": 1,
           "parallel": "pipeline"}
    token = "hf_" + os.urandom(8).hex()
    hub = Hub(vc.controller_ip, token=token)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", token)
    try:
        commit = hub.publish(HUB_REPO, model)
        # Check mode names what each host lacks (the data: the model is not fetched), asks the
        # hub nothing, sends and starts nothing.
        checked = run_playbook("train.yml", vc.inventory, tmp_path / "runner-check",
                               {"launch_results_dir": str(tmp_path / "runs"), "run_name": "hub",
                                **job}, cmdline="--check --diff")
        assert checked.status == "successful", checked.stdout[-6000:]
        assert words(checked.stdout).count("hub-data: not there: sending it again") == len(
            vc.hosts), checked.stdout[-6000:]
        assert hub.requests == []
        for host in vc.hosts:
            made = vc.run(host, f"ls -d mlx-cluster/models/{name} mlx-cluster/runs/hub; true",
                          user=host.user).stdout
            assert made == "", (host.name, made)
        # 2 stages x 2 replicas: the launch host reads the fetched file's headers (one file:
        # every host is sent it).
        first, out = train(vc, tmp_path, "hub", steps=2, stages="1,1", **job)
        assert first.status == "successful", first.stdout[-6000:]
        assert hub.downloads() == dict.fromkeys(files, 1)
        assert {r[-1] for r in hub.requests} == {vc.hosts[0].en0_ip}  # the launch host's
        for host in vc.hosts:
            copy = vc.run(host, f"cd mlx-cluster/models && sha256sum {name}/* && cat .{name}."
                          "manifest.json", user=host.user).stdout.splitlines()
            summed = dict(line.split()[::-1] for line in copy[:-1])
            assert summed == {f"{name}/{f}": digest for f, digest in files.items()}, host.name
            recorded = {f: entry[2] for f, entry in json.loads(copy[-1]).items()}
            assert recorded == files, host.name
        assert f"--model=models/{name}" in (out / "command.sh").read_text()
        launch = vc.hosts[0]  # its copy is its Hugging Face cache's files: on its disk once
        links = vc.run(launch, f"stat -c %h mlx-cluster/models/{name}/*", user=launch.user)
        assert links.stdout.split() == ["2"] * len(files), links.stdout
        hub_model = {"repo": HUB_REPO, "revision": commit}
        assert json.loads((out / "job.json").read_text())["hub_model"] == hub_model
        moved, _ = write_llm(tmp_path / "moved", tmp_path / "moved-data", shards=2,
                             num_hidden_layers=4, tie_word_embeddings=False)
        (moved / "README.md").write_text("a newer commit\n")
        moved_commit = hub.publish(HUB_REPO, moved)
        hub.requests.clear()
        second, out = train(vc, tmp_path, "hub", steps=4, resume=True, stages="1,1", **job)
        assert second.status == "successful", second.stdout[-6000:]
        assert hub.requests == []
        assert "sending it again" not in second.stdout
        assert json.loads((out / "job.json").read_text())["hub_model"] == hub_model
        hub.requests.clear()
        monkeypatch.setenv("HF_HOME", str(tmp_path / "controller-hf"))
        third, offline = train(vc, tmp_path, "hub-offline", steps=1, model_source="controller",
                               **job)
        assert third.status == "successful", third.stdout[-6000:]
        assert {r[-1] for r in hub.requests} == {vc.controller_ip}
        assert hub.downloads() == {p.name: 1 for p in moved.iterdir()}
        assert "--stages=1,1,1,1" in (offline / "command.sh").read_text()
        first_file, second_file = sorted(p.name for p in moved.glob("model-*.safetensors"))
        last = vc.hosts[2]  # rank 3's: the last stage
        listed = vc.run(last, f"ls mlx-cluster/models/{name}", user=last.user).stdout.split()
        assert second_file in listed and first_file not in listed, listed
        newer = json.loads((offline / "job.json").read_text())["hub_model"]
        assert newer == {"repo": HUB_REPO, "revision": moved_commit}
        assert not [run for run in (first, second, third) if token in run.stdout]
    finally:
        hub.close()
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["steps"], summary["resumed_from_step"], summary["world_size"]) == (4, 2, 4)
    assert job_processes(vc) == {h.name: [] for h in vc.hosts}


def test_preflight_names_a_host_whose_train_package_differs(cluster, tmp_path):
    """A file of train/ edited on one host only: the job is not started, and the message names
    that host and file (the host's checksums, taken beside preflight's other probes, against the
    controller's)."""
    vc = cluster
    odd = vc.hosts[1]
    loop = vc.run(odd, "ls mlx-cluster/venv/lib/python3*/site-packages/train/loop.py",
                  user=odd.user).stdout.strip()  # the installed train package
    vc.run(odd, f"cp {loop} {loop}.orig && echo '# edited here' >> {loop}", user=odd.user)
    try:
        run, _ = train(vc, tmp_path, "edited", steps=5)
    finally:
        vc.run(odd, f"mv {loop}.orig {loop}", user=odd.user)
    assert run.status == "failed"
    message = failure_message(run)
    assert f"train/ package on {odd.name} differs" in message, message
    assert f"{odd.name}: loop.py modified" in message, message
    assert [e for e in run.task_results() if e.get("task") == START_TASK] == []


def test_preflight_names_the_hosts_without_a_trackers_package(cluster, tmp_path):
    """report_to=wandb on hosts set up without it (python_env_packages' default): each host's
    own python -m train refuses it in preflight, and the job is not started."""
    vc = cluster
    run, _ = train(vc, tmp_path, "no-wandb", steps=5, report_to="tensorboard,wandb")
    assert run.status == "failed"
    message = failure_message(run)
    for host in vc.hosts:
        assert (f"{host.name}: report_to: wandb needs the wandb package in this Python "
                "environment; it is in requirements.lock: add wandb to the hosts' "
                "python_env_packages") in message, message
    assert "tensorboard" not in message.replace("report_to=tensorboard,wandb", "")
    assert [e for e in run.task_results() if e.get("task") == START_TASK] == []
