"""Staging train.yml's inputs: files/staging.py (manifests on the hosts and the controller),
lookup_plugins/staging_manifest.py, filter_plugins/staging.py (what differs, the transfers) and
action_plugins/staging_transfer.py (their progress).
The transfer itself over real ssh, and the bytes per interface, in
tests/integration/test_train_playbook.py::test_inputs_are_sent_once_and_fanned_out_over_bridge0;
a Hugging Face model's fetch against a local hub (tests/integration/hf_endpoint.py)."""

import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.integration.hf_endpoint import Hub
from tests.unit.plugins import ROOT, load

script = load("roles/launch/files/staging.py")
staging = load("roles/launch/filter_plugins/staging.py")
transfer = load("roles/launch/action_plugins/staging_transfer.py")
lookup = load("roles/launch/lookup_plugins/staging_manifest.py")
SCRIPT = ROOT / "roles/launch/files/staging.py"


@pytest.fixture
def model(tmp_path):
    model = tmp_path / "ctrl" / "tiny-model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "sub" / "weights.bin").write_bytes(os.urandom(3000))
    return model


@pytest.fixture
def hashed(monkeypatch):
    """The files sha256 reads, in order."""
    read = []
    real = script.sha256

    def counting(path):
        read.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(script, "sha256", counting)
    monkeypatch.setattr(lookup.staging, "sha256", counting)  # the lookup's own copy
    return read


def rsync(src, dest, problems=()):
    """The hosts' rsync, with the flags the play uses, locally."""
    argv = staging.staging_rsync_argv(str(src), str(dest), src.is_dir(), "ssh", problems)
    subprocess.run(argv, check=True, capture_output=True)


def test_a_copy_is_recorded_private_and_unchanged_files_are_not_read_again(tmp_path, model, hashed):
    work = tmp_path / "host" / "mlx-cluster"
    (work / "models").mkdir(parents=True)
    rsync(model, work / "models" / "tiny-model")
    recorded = script.record(str(work), ["models/tiny-model"])["models/tiny-model"]
    # rsync -t kept the mtimes: the host's manifest is the controller's.
    assert recorded == script.manifest(str(model))
    assert sorted(hashed) == ["config.json", "config.json", "weights.bin", "weights.bin"]
    assert (work / "models" / ".tiny-model.manifest.json").stat().st_mode & 0o777 == 0o600
    modes = {p.name: p.stat().st_mode & 0o777 for p in (work / "models" / "tiny-model").rglob("*")}
    assert modes == {"config.json": 0o600, "sub": 0o700, "weights.bin": 0o600}
    assert (work / "models" / "tiny-model").stat().st_mode & 0o777 == 0o700
    hashed.clear()
    assert script.record(str(work), ["models/tiny-model"])["models/tiny-model"] == recorded
    assert hashed == []
    report = script.report(str(work), ["models/tiny-model", "data/none.txt"])
    assert report["models/tiny-model"] == {
        "manifest": recorded, "files": {name: entry[:2] for name, entry in recorded.items()}}
    assert report["data/none.txt"] == {"manifest": None, "files": {}}
    assert staging.staging_stale({"models/tiny-model": recorded}, report) == {}


def test_the_directories_a_transfer_goes_into_are_made_private(tmp_path):
    (tmp_path / "data").mkdir(mode=0o755)
    assert script.prepare(str(tmp_path), ["models/m", "data/c.txt"]) == ["data/c.txt", "models/m"]
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"data": 0o700, "models": 0o700}


def test_a_file_rewritten_with_its_mtime_restored_is_read_again(tmp_path, model, hashed):
    weights = model / "sub" / "weights.bin"
    cache = str(tmp_path / "manifest.json")
    first = script.update(str(model), cache)
    stat = weights.stat()
    weights.write_bytes(os.urandom(3000))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    hashed.clear()
    second = script.update(str(model), cache)
    assert hashed == ["weights.bin"]
    assert second["sub/weights.bin"][:2] == first["sub/weights.bin"][:2]
    assert second["sub/weights.bin"][2] != first["sub/weights.bin"][2]


def test_rsync_deletes_what_the_controller_no_longer_has_and_a_file_input_keeps_its_name(tmp_path):
    data = tmp_path / "corpus.txt"
    data.write_text("text " * 100)
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    rsync(data, work / "data" / "corpus.txt")
    recorded = script.record(str(work), ["data/corpus.txt"])
    assert recorded == {"data/corpus.txt": script.manifest(str(data))}
    # The same size and mtime, another content: the quick check passes it, a checksum does not.
    copy = work / "data" / "corpus.txt"
    copy.write_text("TEXT " * 100)
    os.utime(copy, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns))
    rsync(data, copy)
    assert copy.read_text() != data.read_text()
    rsync(data, copy, ["corpus.txt not verified"])
    assert copy.read_text() == data.read_text()
    (work / "data" / "dir").mkdir()
    (work / "data" / "dir" / "old.txt").write_text("gone on the controller")
    source = tmp_path / "dir"
    source.mkdir()
    (source / "new.txt").write_text("new")
    rsync(source, work / "data" / "dir")
    assert sorted(p.name for p in (work / "data" / "dir").iterdir()) == ["new.txt"]


def test_the_controllers_manifests_are_cached_and_read_again_only_where_changed(tmp_path, model,
                                                                              hashed):
    assert yaml.safe_load(lookup.DOCUMENTATION)["options"]["cache"]["required"]  # Ansible loads it
    cache = tmp_path / "cache"
    first = lookup.LookupModule().run([str(model) + "/"], {}, cache=str(cache))
    assert first == [script.manifest(str(model))]
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    hashed.clear()
    (model / "config.json").write_text('{"layers": 3}')
    second = lookup.LookupModule().run([str(model)], {}, cache=str(cache))
    assert hashed == ["config.json"]
    assert second[0]["sub/weights.bin"] == first[0]["sub/weights.bin"]
    assert second[0]["config.json"] != first[0]["config.json"]
    # Ansible's workers, one per host, at once: the first reads what changed, the others then
    # find it recorded.
    hashed.clear()
    (model / "sub" / "weights.bin").write_bytes(os.urandom(5000))
    with ThreadPoolExecutor(max_workers=4) as pool:
        third = list(pool.map(lambda _: lookup.LookupModule().run([str(model)], {},
                                                                  cache=str(cache)), range(4)))
    assert hashed == ["weights.bin"]
    assert third == [[script.manifest(str(model))]] * 4


EXPECTED = {"config.json": [13, 1700000000, "aa"], "weights.bin": [3000, 1700000001, "bb"]}


def report(files, manifest=EXPECTED):
    return {"models/m": {"manifest": manifest, "files": files}}


@pytest.mark.parametrize(("found", "problems"), [
    (report({"config.json": [13, 1700000000], "weights.bin": [3000, 1700000001]}), None),
    (None, ["not there"]),
    (report({}), ["not there"]),
    (report({"config.json": [13, 1700000000]}), ["weights.bin missing"]),
    (report({"config.json": [13, 1700000000], "weights.bin": [3004, 1700000001]}),
     ["weights.bin has 3004 bytes, 3000 on the controller"]),
    (report({"config.json": [13, 1700000099], "weights.bin": [3000, 1700000001]}),
     ["config.json modified at another time than on the controller"]),
    (report({"config.json": [13, 1700000000], "weights.bin": [3000, 1700000001]}, manifest=None),
     ["config.json not verified", "weights.bin not verified"]),
    (report({"config.json": [13, 1700000000], "weights.bin": [3000, 1700000001],
             "extra.txt": [1, 1]}), ["extra.txt not on the controller"]),
])
def test_a_copy_is_stale_when_a_file_differs_by_size_mtime_record_or_presence(found, problems):
    stale = staging.staging_stale({"models/m": EXPECTED}, found)
    assert stale == ({"models/m": problems} if problems else {})


def test_the_stale_lines_name_the_first_differences_and_count_the_rest():
    stale = {"data/d": [f"f{i} missing" for i in range(5)]}
    assert staging.staging_stale_lines(stale) == [
        "data/d: f0 missing; f1 missing; f2 missing; and 2 more: sending it again"]
    ranked = [{"inventory_hostname": "h1", "launch_stale": {}},
              {"inventory_hostname": "h2", "launch_stale": stale}]
    assert staging.staging_stale_names(ranked) == {"h2": staging.staging_stale_lines(stale)}


def test_a_copy_that_differs_after_its_transfer_is_named_with_its_host(tmp_path, model):
    got = {"models/m": {**EXPECTED, "weights.bin": [3000, 1700000001, "cc"]}}
    assert transfer.record_errors(got, {"models/m": EXPECTED}, "h2") == [
        "h2: models/m differs from the controller's after the transfer: weights.bin — check the "
        "disk and the link, then run train.yml again"]
    assert transfer.record_errors({"models/m": EXPECTED}, {"models/m": EXPECTED}, "h2") == []
    # After the transfers, each host with a copy the relay did not record hashes it, at once;
    # one whose bytes differ (its size and mtime the controller's) is named.
    manifests = {"models/m": script.manifest(str(model))}
    watch = {}
    for host in ("h2", "h3", "h4"):
        work = tmp_path / host
        (work / "models").mkdir(parents=True)
        rsync(model, work / "models" / "m")
        watch[host] = {"totals": {"models/m": 1}, "skipped": {},
                       "record": [sys.executable, str(SCRIPT), "record", str(work), '["models/m"]']}
    weights = tmp_path / "h3" / "models" / "m" / "sub" / "weights.bin"
    stat = weights.stat()
    weights.write_bytes(os.urandom(stat.st_size))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    watch["h4"]["record"] = ["false"]  # the relay recorded its copy: not run
    hosts, errors = transfer.record(watch, {"h4": ["models/m"]}, manifests)
    assert hosts == ["h2", "h3"]
    assert errors == ["h3: models/m differs from the controller's after the transfer: "
                      "sub/weights.bin — check the disk and the link, then run train.yml again"]
    assert (tmp_path / "h2" / "models" / ".m.manifest.json").exists()
    watch["h2"]["record"] = [sys.executable, "-c", "import sys; sys.exit('disk full')"]
    assert transfer.record(watch, {"h3": ["models/m"], "h4": ["models/m"]}, manifests)[1] == [
        "h2: hashing the copies sent failed (exit 1): disk full"]


def test_a_pipeline_host_is_judged_and_sent_without_the_weight_files_its_stages_do_not_read(
        tmp_path):
    skipped = {"models/m": ["weights.bin"]}
    recorded = {"config.json": EXPECTED["config.json"]}
    config = {"config.json": EXPECTED["config.json"][:2]}
    assert staging.staging_stale({"models/m": EXPECTED}, report(config, recorded), skipped) == {}
    assert staging.staging_stale({"models/m": EXPECTED}, report(config, recorded)) == {
        "models/m": ["weights.bin missing"]}
    # An older copy of it (a run whose stages read it): neither stale nor removed.
    older = report({**config, "weights.bin": [10, 5]}, recorded)
    assert staging.staging_stale({"models/m": EXPECTED}, older, skipped) == {}
    assert transfer.record_errors({"models/m": recorded}, {"models/m": EXPECTED}, "h2",
                                         skipped) == []
    source, copy = tmp_path / "m", tmp_path / "copy"
    source.mkdir()
    copy.mkdir()
    for name in ("config.json", "weights.bin", "other.bin"):
        (source / name).write_text(name)
    (copy / "weights.bin").write_text("older")
    subprocess.run(staging.staging_rsync_argv(str(source), str(copy), True, "ssh", (),
                                              ["weights.bin", "other.bin"]), check=True)
    assert {p.name: p.read_text() for p in copy.iterdir()} == {
        "config.json": "config.json", "weights.bin": "older"}


HOSTS = [{"name": n, "mpi_address": f"198.19.0.{i}"} for i, n in enumerate(["h1", "h2", "h3"], 1)]
STAGED = [{"rel": "models/m", "src": "/ctrl/m/", "dir": True},
          {"rel": "data/c.txt", "src": "/ctrl/c.txt", "dir": False}]


# A host that is sent every file of its inputs (launch_plan.skipped: none).
WHOLE = {"launch_plan": {"skipped": {}}}


def info(name, home=None):
    home = home or f"/home/{name}"
    return {"name": name, "home": home, "work_dir": f"{home}/mlx-cluster",
            "python_env": f"{home}/mlx-cluster/venv"}


def test_the_launch_host_sends_each_other_host_only_what_it_lacks_to_its_mpi_address():
    ranked = [{"inventory_hostname": "h1", "cluster_host_info": info("h1"),
               **WHOLE, "launch_stale": {"models/m": ["not there"]}},
              {"inventory_hostname": "h2", "cluster_host_info": info("h2", "/Users/Jane Doe"),
               **WHOLE,
               "launch_stale": {"models/m": ["not there"], "data/c.txt": ["c.txt missing"]}},
              {"inventory_hostname": "h3", "cluster_host_info": info("h3"), **WHOLE,
               "launch_stale": {}}]
    commands = staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1")
    flags = ["rsync", "-r", "-t", "-L", "--delete", "--timeout=60", "--partial"]
    ssh = ["-e", "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes"]

    def makes(into):
        return f"--rsync-path=mkdir -p -- {into} && chmod 700 -- {into} && rsync"

    assert commands == [
        {"item": {"host": "h2", "rel": "models/m", "from": "h1"},
         "argv": [*flags, makes("mlx-cluster/models"), *ssh, "models/m/",
                  "198.19.0.2:mlx-cluster/models/m/"], "whole": True},
        {"item": {"host": "h2", "rel": "data/c.txt", "from": "h1"},
         "argv": [*flags, makes("mlx-cluster/data"), *ssh, "data/c.txt",
                  "198.19.0.2:mlx-cluster/data/c.txt"], "whole": True},
    ]  # in the launch host's work dir (staging.py relay)
    # A pipeline's host is sent no weight file its stages do not read.
    ranked[1]["launch_plan"] = {"skipped": {"models/m": ["w-1.safetensors"]}}
    assert staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1")[0]["argv"] == [
        *flags, "--exclude=/w-1.safetensors", makes("mlx-cluster/models"), *ssh, "models/m/",
        "198.19.0.2:mlx-cluster/models/m/"]
    ranked[1] |= WHOLE
    # A file there the controller lacks: only rsync --delete makes that copy the controller's.
    ranked[1]["launch_stale"]["models/m"] = ["old.bin not on the controller"]
    assert [c["whole"] for c in staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1")] == [
        False, True]
    ranked[1]["launch_stale"]["models/m"] = ["not there"]
    closed = "rsync: connection unexpectedly closed"
    results = [{"item": commands[0]["item"], "rc": 0, "stderr": ""},
               {"item": commands[1]["item"], "rc": 12, "stderr": closed + "\n"}]
    assert transfer.transfer_errors(results) == [
        f"h2: sending data/c.txt from h1 failed (rsync exit 12): {closed}"]
    # Over cables: to the other end of the first cable from the launch host to that host.
    ranked[2]["launch_stale"] = {"models/m": ["not there"]}
    ends = [{"peer": peer, "peer_address": f"198.18.4.{n}"}
            for peer, n in (("h3", 2), ("h2", 6), ("h2", 10))]
    cabled = staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1", ends)
    assert [c["argv"][-1].split(":")[0] for c in cabled] == ["198.18.4.6"] * 2 + ["198.18.4.2"]


def test_the_launch_host_runs_its_transfers_at_once_in_its_work_dir(tmp_path):
    """With nothing to pass on (the launch host lacks nothing), the relay runs the rsyncs."""
    work = tmp_path / "mlx-cluster"
    (work / "data").mkdir(parents=True)
    (work / "data" / "c.txt").write_bytes(os.urandom(1000))
    copy = tmp_path / "h2" / "c.txt"
    copy.parent.mkdir()
    commands = [{"item": {"host": "h2", "rel": "data/c.txt", "from": "h1"},
                 "argv": staging.staging_rsync_argv("data/c.txt", str(copy), False, "ssh"),
                 "whole": True},
                {"item": {"host": "h3", "rel": "data/c.txt", "from": "h1"},
                 "argv": ["sh", "-c", "echo no route >&2; exit 12"], "whole": True}]
    local = {"inventory_hostname": "h1", "ansible_connection": "local", **WHOLE, "launch_stale": {},
             "cluster_host_info": {**info("h1", str(tmp_path)),
                                   "python_env": os.path.dirname(os.path.dirname(sys.executable))}}
    argv = staging.staging_relay_argv(STAGED, [local], HOSTS, local, {}, commands,
                                      SCRIPT.read_text())
    with transfer._relaying(argv, "h1") as finish:
        results = finish()["results"]
    assert [(r["item"]["host"], r["rc"], r["stderr"]) for r in results] == [
        ("h2", 0, ""), ("h3", 12, "no route")]
    assert copy.read_bytes() == (work / "data" / "c.txt").read_bytes()
    assert staging.staging_relay_argv(STAGED, [local], HOSTS, local, {}, [], "") == []
    with pytest.raises(transfer.AnsibleActionFail, match="did not run: .*No such file"), \
            transfer._relaying([sys.executable, "/nowhere/staging.py"], "h1") as finish:
        finish()


def test_the_launch_hosts_transfers_end_when_the_controller_goes_away(tmp_path):
    """Its stdin closed (the controller's ssh gone) while a transfer runs: the transfer's whole
    process group (rsync and its ssh) is killed at once."""
    child = tmp_path / "child.pid"
    commands = [{"item": {"host": "h2", "rel": "data/c.txt", "from": "h1"},
                 "argv": ["sh", "-c", f"sleep 60 & echo $! > {child}; wait"], "whole": True}]
    spec = {"script": "", "manifests": {}, "paths": {}, "hosts": [], "commands": commands}
    relay = subprocess.Popen([sys.executable, str(SCRIPT), "relay", str(tmp_path),
                              json.dumps(spec)], stdin=subprocess.PIPE)
    relay.stdin.write(b"done\n")
    relay.stdin.flush()
    deadline = time.monotonic() + 10
    while not child.exists() or not child.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    relay.stdin.close()
    assert relay.wait(timeout=10) != 0
    sleeper = int(child.read_text())
    while running(sleeper):
        assert time.monotonic() < deadline, f"sleep {sleeper} outlived its transfer"
        time.sleep(0.05)


def test_the_launch_host_relays_each_input_it_lacks_to_the_hosts_that_lack_it_too():
    ranked = [{"inventory_hostname": "h1", "cluster_host_info": info("h1"),
               **WHOLE, "launch_stale": {"models/m": ["not there"], "data/c.txt": ["not there"]}},
              {"inventory_hostname": "h2", "cluster_host_info": info("h2"),
               **WHOLE, "launch_stale": {"models/m": ["not there"]}},
              {"inventory_hostname": "h3", "cluster_host_info": info("h3"), **WHOLE,
               "launch_stale": {}}]
    manifests = {"models/m": {"w.bin": [3, 7, "ab"], "sub/x": [1, 7, "cd"]},
                 "data/c.txt": {"c.txt": [2, 7, "ef"]}}
    ends = [{"peer": "h2", "peer_address": "198.18.4.6"}]
    commands = staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1", ends)
    argv = staging.staging_relay_argv(STAGED, ranked, HOSTS, ranked[0], manifests, commands, "S",
                                      ends)
    assert argv[-1].startswith("/home/h1/mlx-cluster/venv/bin/python -c S relay ")
    spec = json.loads(shlex.split(argv[-1])[-1])
    assert spec == {"commands": commands, "launch_host": "h1",
        "script": "S", "manifests": manifests,
        "paths": {"models/m": {"w.bin": "models/m/w.bin", "sub/x": "models/m/sub/x"},
                  "data/c.txt": {"c.txt": "data/c.txt"}},
        "hosts": [{"host": "h2", "argv": ["ssh", "-o", "BatchMode=yes", "-o",
                                          "StrictHostKeyChecking=yes", "198.18.4.6"],
                   "python": "/home/h2/mlx-cluster/venv/bin/python",
                   "work_dir": "/home/h2/mlx-cluster", "rels": ["models/m"], "skipped": {}}]}
    # A file there with the controller's size and mtime, unverified: rsync -c checks it in place.
    ranked[0]["launch_stale"]["models/m"] = ["w.bin not verified"]
    argv = staging.staging_relay_argv(STAGED, ranked, HOSTS, ranked[0], manifests, commands, "S")
    assert json.loads(shlex.split(argv[-1])[-1])["paths"]["models/m"] == {
        "sub/x": "models/m/sub/x"}
    # Nothing to pass on: the others lack nothing the launch host receives.
    ranked[1]["launch_stale"] = {}
    assert staging.staging_relay_argv(STAGED, ranked, HOSTS, ranked[0], manifests, [], "S") == []


def test_each_file_goes_on_as_it_arrives_and_only_the_controllers_bytes_are_kept(tmp_path,
                                                                                  hashed):
    """The relay reads each file while rsync writes it (its temporary, renamed at the end) and
    passes it on; a receiving host keeps a file, private, with the controller's mtime and recorded
    (record reads it no more), only when its sha256 is the controller's; the launch host records
    what it read whole with the controller's sha256. An input recorded whole on a host is named
    verified: the play neither hashes nor checks it again there."""
    launch, other, partial = tmp_path / "h1", tmp_path / "h2", tmp_path / "h3"
    (launch / "models" / "m").mkdir(parents=True)
    (other / "models").mkdir(parents=True)
    (partial / "models" / "m").mkdir(parents=True, mode=0o755)  # an older transfer's
    good, bad = os.urandom(3 * script.CHUNK + 5), os.urandom(1000)
    digest = hashlib.sha256(good).hexdigest()
    (launch / "data").mkdir()
    small = b"{}"  # put in place before the relay saw its temporary
    (launch / "data" / "c.txt").write_bytes(small)
    os.utime(launch / "data" / "c.txt", (1700000000, 1700000000))
    manifests = {"models/m": {"w.bin": [len(good), 1700000000, digest],
                              "x.bin": [len(bad), 1700000000, "0" * 64]},
                 "data/c.txt": {"c.txt": [2, 1700000000, hashlib.sha256(small).hexdigest()]}}
    # The rsyncs after it: h2's of models/m (x.bin did not arrive whole), not of data/c.txt;
    # none to h3, a pipeline's host not sent x.bin (its stages do not read it).
    commands = [{"item": {"host": host, "rel": rel, "from": "h1"},
                 "argv": ["echo", f"{host} {rel}"], "whole": True}
                for host, rel in (("h2", "models/m"), ("h2", "data/c.txt"), ("h3", "models/m"))]
    spec = {"script": SCRIPT.read_text(), "launch_host": "h1", "manifests": manifests,
            "paths": {"models/m": {"w.bin": "models/m/w.bin", "x.bin": "models/m/x.bin"},
                      "data/c.txt": {"c.txt": "data/c.txt"}},
            "hosts": [{"host": "h2", "argv": ["sh", "-c"], "python": sys.executable,
                       "work_dir": str(other), "rels": ["models/m", "data/c.txt"], "skipped": {}},
                      {"host": "h3", "argv": ["sh", "-c"], "python": sys.executable,
                       "work_dir": str(partial), "rels": ["models/m"],
                       "skipped": {"models/m": ["x.bin"]}}],
            "commands": commands}
    relay = subprocess.Popen([sys.executable, str(SCRIPT), "relay", str(launch), json.dumps(spec)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for name, data in (("w.bin", good), ("x.bin", bad)):  # as rsync writes them
        temporary = launch / "models" / "m" / f".{name}.a1B2c3"
        with temporary.open("wb") as f:
            for start in range(0, len(data), script.CHUNK):
                f.write(data[start:start + script.CHUNK])
                f.flush()
                time.sleep(0.1)
        os.utime(temporary, (1700000000, 1700000000))
        temporary.rename(launch / "models" / "m" / name)
    relay.stdin.write(b"done\n")
    relay.stdin.flush()
    assert relay.wait(timeout=20) == 0
    relayed = json.loads(relay.stdout.read())
    assert [r["stdout"] for r in relayed["results"]] == ["h2 models/m"]
    assert relayed["verified"] == {"h1": ["data/c.txt"], "h2": ["data/c.txt"], "h3": ["models/m"]}
    assert sorted(os.listdir(partial / "models" / "m")) == ["w.bin"]
    assert oct((partial / "models" / "m").stat().st_mode & 0o777) == "0o700"
    assert oct((partial / "models").stat().st_mode & 0o777) == "0o700"  # made 0755 by the test
    assert (other / "data" / "c.txt").read_bytes() == small
    copy = other / "models" / "m"
    assert sorted(os.listdir(copy)) == ["w.bin"]  # x.bin, not the controller's, for rsync
    assert (copy / "w.bin").read_bytes() == good
    assert oct((copy / "w.bin").stat().st_mode & 0o777) == "0o600"
    assert int((copy / "w.bin").stat().st_mtime) == 1700000000
    recorded = json.loads((other / "models" / ".m.manifest.json").read_text())
    assert recorded == {"w.bin": manifests["models/m"]["w.bin"]}
    assert script.record(str(other), ["models/m"]) == {"models/m": recorded}
    assert hashed == []  # hashed as it arrived
    # On the launch host, what the relay read whole is recorded; record reads the rest.
    assert json.loads((launch / "models" / ".m.manifest.json").read_text()) == recorded
    assert script.record(str(launch), ["models/m"])["models/m"]["w.bin"] == recorded["w.bin"]
    assert hashed == ["x.bin"]
    # Relayed again (the next launch): what the launch host holds as the controller's is not.
    spec["hosts"][0]["work_dir"] = str(tmp_path / "h4")
    again = subprocess.Popen([sys.executable, str(SCRIPT), "relay", str(launch), json.dumps(spec)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    again.stdin.write(b"done\n")
    again.stdin.flush()
    assert again.wait(timeout=20) == 0
    assert len(json.loads(again.stdout.read())["results"]) == 3
    assert not (tmp_path / "h4" / "models" / "m" / "w.bin").exists()


def test_a_relay_cut_off_keeps_what_arrived_and_ends_its_ssh(tmp_path):
    """The controller gone (stdin closed without "done") while a file arrives: the relay ends
    at once, and the receiving host keeps what arrived in the file's place, like rsync
    --partial, for the next launch's rsync to complete."""
    launch, other = tmp_path / "h1", tmp_path / "h2"
    (launch / "data").mkdir(parents=True)
    part = os.urandom(2 * script.CHUNK)
    (launch / "data" / ".c.txt.XyZ123").write_bytes(part)  # rsync still writing it
    spec = {"script": SCRIPT.read_text(),
            "manifests": {"data/c.txt": {"c.txt": [4 * script.CHUNK, 1700000000, "0" * 64]}},
            "paths": {"data/c.txt": {"c.txt": "data/c.txt"}},
            "hosts": [{"host": "h2", "argv": ["sh", "-c"], "python": sys.executable,
                       "work_dir": str(other), "rels": ["data/c.txt"], "skipped": {}}],
            "commands": []}
    relay = subprocess.Popen([sys.executable, str(SCRIPT), "relay", str(launch), json.dumps(spec)],
                             stdin=subprocess.PIPE)
    kept = other / "data" / "c.txt"
    deadline = time.monotonic() + 10
    while sum(f.stat().st_size for f in (other / "data").glob(".c.txt.*")) < len(part):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    relay.stdin.close()
    assert relay.wait(timeout=10) != 0
    while not kept.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert kept.read_bytes() == part


def running(pid):
    """Whether pid runs (a killed process nobody reaped yet is a zombie: Z)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_work_dir_outside_the_home_is_given_whole():
    outside = {"home": "/Users/ann", "work_dir": "/Volumes/fast/mlx"}
    assert staging.staging_remote_path(outside, "data/x") == "/Volumes/fast/mlx/data/x"


def test_the_controller_reaches_the_launch_host_as_ansible_does():
    stale = {"models/m": ["not there"], "data/c.txt": ["c.txt not verified"]}
    hostvars = {"inventory_hostname": "h1", "ansible_host": "fe80::1", "ansible_user": "ann",
                "ansible_port": 2222, "ansible_ssh_private_key_file": "~/.ssh/k",
                "ansible_ssh_common_args": "-o UserKnownHostsFile=/tmp/kh -o IdentitiesOnly=yes"}
    sends = staging.staging_controller_commands(STAGED, stale, hostvars, info("h1"))
    assert [s["item"] for s in sends] == [{"host": "h1", "rel": rel, "from": "the controller"}
                                          for rel in stale]
    argv = sends[0]["argv"]
    assert argv[:7] == ["rsync", "-r", "-t", "-L", "--delete", "--timeout=60", "--partial"]
    assert argv[7:9] == ["--rsync-path=mkdir -p -- mlx-cluster/models && chmod 700 -- "
                         "mlx-cluster/models && rsync", "-e"]
    assert shlex.split(argv[9]) == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "~/.ssh/k",
                                    "-l", "ann", "-o", "UserKnownHostsFile=/tmp/kh",
                                    "-o", "IdentitiesOnly=yes"]
    assert argv[10:] == ["/ctrl/m/", "[fe80::1]:mlx-cluster/models/m/"]
    plain = staging.staging_controller_argv(STAGED, "data/c.txt", stale["data/c.txt"],
                                            {"inventory_hostname": "h1"}, info("h1"))
    # Same size and mtime but not the recorded content: rsync compares checksums.
    assert plain[7:] == ["-c", "--rsync-path=mkdir -p -- mlx-cluster/data && chmod 700 -- "
                         "mlx-cluster/data && rsync",
                         "-e", "ssh -o BatchMode=yes", "/ctrl/c.txt", "h1:mlx-cluster/data/c.txt"]


def test_the_remote_rsync_makes_the_private_directory_its_copy_goes_into(tmp_path, model):
    """rsync over a remote shell that runs its command in the host's home, as ssh does: the
    directories the copy goes into are made first (a space in the home is no matter)."""
    home = tmp_path / "Jane Doe"
    (home / "mlx-cluster" / "models").mkdir(parents=True, mode=0o755)  # an older version's
    remote_shell = tmp_path / "rsh"
    remote_shell.write_text(f'#!/bin/sh\nshift\ncd {shlex.quote(str(home))} && exec sh -c "$*"\n')
    remote_shell.chmod(0o700)
    staged = [{"rel": "models/tiny-model", "src": str(model), "dir": True}]
    hostvars = {"inventory_hostname": "h1"}
    argv = staging.staging_controller_argv(staged, "models/tiny-model", ["not there"], hostvars,
                                           info("h1", str(home)))
    argv[argv.index("-e") + 1] = str(remote_shell)
    subprocess.run(argv, check=True, capture_output=True)
    copy = home / "mlx-cluster" / "models" / "tiny-model"
    assert script.manifest(str(copy)) == script.manifest(str(model))
    assert (home / "mlx-cluster" / "models").stat().st_mode & 0o777 == 0o700


def test_a_launch_host_ansible_runs_on_locally_gets_a_local_copy(tmp_path, model):
    work = tmp_path / "work"
    hostvars = {"inventory_hostname": "localhost", "ansible_connection": "local"}
    staged = [{"rel": "models/tiny-model", "src": str(model), "dir": True}]
    [send] = staging.staging_controller_commands(staged, {"models/tiny-model": ["not there"]},
                                                 hostvars, {"home": str(tmp_path),
                                                            "work_dir": str(work)})
    assert send["argv"][-1] == f"{work}/models/tiny-model/"
    assert transfer._run(send)["rc"] == 0  # the directory it goes into made first, private
    assert script.manifest(str(work / "models" / "tiny-model")) == script.manifest(str(model))
    assert (work / "models").stat().st_mode & 0o777 == 0o700


def test_what_arrived_counts_a_file_rsync_is_receiving_at_what_it_wrote(tmp_path):
    data = tmp_path / "data"
    (data / "m" / "sub").mkdir(parents=True)
    (data / "c.txt").write_bytes(b"x" * 1000)  # an older or partial copy
    (data / ".c.txt.AbC123").write_bytes(b"x" * 300)  # what rsync wrote of the new one
    (data / "other.txt").write_bytes(b"x" * 50)
    (data / "m" / "a").write_bytes(b"x" * 10)
    (data / "m" / "sub" / "b").write_bytes(b"x" * 20)
    (data / "m" / "sub" / ".b.Zz9x0Q").write_bytes(b"x" * 7)
    (data / "m" / ".a.k3Jq9ZxW0p").write_bytes(b"x" * 4)  # openrsync's (macOS 15): ten characters
    assert script.received(str(tmp_path), ["data/c.txt", "data/m", "data/none", "models/m"]) == {
        "data/c.txt": 300, "data/m": 11, "data/none": 0, "models/m": 0}
    (data / ".c.txt.AbC123").rename(data / "c.txt")
    assert script.received(str(tmp_path), ["data/c.txt"]) == {"data/c.txt": 300}


def test_the_controller_reads_what_arrived_on_each_host_that_lacks_an_input(tmp_path):
    manifests = {"models/m": EXPECTED, "data/c.txt": {"c.txt": [5000, 1700000000, "cc"]}}
    remote = {"inventory_hostname": "h2", "ansible_host": "198.18.0.2", "ansible_user": "ann",
              "cluster_host_info": info("h2"), **WHOLE,
              "launch_stale": {"data/c.txt": ["not there"]}}
    work = tmp_path / "mlx-cluster"
    local = {"inventory_hostname": "h1", "ansible_connection": "local",
             "cluster_host_info": {**info("h1", str(tmp_path)),
                                   "python_env": os.path.dirname(os.path.dirname(sys.executable))},
             **WHOLE, "launch_stale": {"models/m": ["not there"]}}
    unchanged = {"inventory_hostname": "h3", "cluster_host_info": info("h3"), **WHOLE,
                 "launch_stale": {}}
    source = Path(script.__file__).read_text()
    watch = staging.staging_watch_commands([local, remote, unchanged], manifests, source)
    assert sorted(watch) == ["h1", "h2"]
    assert watch["h1"]["totals"] == {"models/m": 3013}
    assert watch["h2"]["totals"] == {"data/c.txt": 5000}
    assert shlex.split(watch["h2"]["record"][-1])[3:] == [
        "record", "/home/h2/mlx-cluster", '["data/c.txt"]']
    ssh = watch["h2"]["argv"]
    assert ssh[:-2] == ["ssh", "-o", "BatchMode=yes", "-l", "ann"] and ssh[-2] == "198.18.0.2"
    assert shlex.split(ssh[-1]) == ["/home/h2/mlx-cluster/venv/bin/python", "-c", source,
                                    "received", "/home/h2/mlx-cluster", '["data/c.txt"]']
    (work / "models" / "m").mkdir(parents=True)
    (work / "models" / "m" / "config.json").write_text("{}")
    assert transfer.Progress(watch, "the controller", 5).read(watch["h1"]["argv"]) == {
        "models/m": 2}


def test_a_progress_line_gives_the_bytes_there_the_rate_and_the_time_left():
    assert transfer.progress_line("h2", "data/c.txt", "h1", 40 << 20, 100 << 20) == (
        "[h2] data/c.txt from h1: 40.0 of 100.0 MiB")
    assert transfer.progress_line("h1", "models/m", "the controller", 40 << 20, 100 << 20,
                                  20 << 20) == (
        "[h1] models/m from the controller: 40.0 of 100.0 MiB, 20.0 MiB/s, 3 s left")
    assert transfer.progress_line("h1", "m", "c", 0, 1 << 40, 10 << 20).endswith(
        "10.0 MiB/s, 1748 min left")
    assert transfer.progress_line("h1", "m", "c", 1, 2, 0).endswith(", 0.0 MiB/s")


def test_a_transfer_longer_than_the_interval_shows_its_progress(tmp_path, capsys):
    copy = tmp_path / "data" / ".c.txt.AbC123"
    copy.parent.mkdir()
    watch = {"h1": {"argv": [sys.executable, str(Path(script.__file__)), "received",
                             str(tmp_path), '["data/c.txt"]'],
                    "totals": {"data/c.txt": 4 << 20}}}
    with transfer.Progress(watch, "the controller", 0.3):
        for _ in range(4):  # a transfer of about 1.2 s
            with copy.open("ab") as f:
                f.write(b"x" * (1 << 20))
            time.sleep(0.3)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[h1]")]
    assert len(lines) >= 2, lines
    assert re.fullmatch(r"\[h1\] data/c.txt from the controller: [0-4]\.0 of 4\.0 MiB", lines[0])
    assert re.fullmatch(r".*MiB, \d+\.\d MiB/s(, \d+ s left)?", lines[1]), lines
    with transfer.Progress(watch, "the controller", 5):  # a quick transfer reads nothing
        pass
    assert capsys.readouterr().out == ""
    # A reading under way (a slow ssh login) when the transfer ends is ended, not waited for.
    slow = tmp_path / "slow.pid"
    watch["h1"]["argv"] = ["sh", "-c", f"echo $$ > {slow}; exec sleep 30"]
    with transfer.Progress(watch, "the controller", 0.1):
        while not slow.exists() or not slow.read_text().strip():
            time.sleep(0.05)
        ended = time.monotonic()
    assert time.monotonic() - ended < 5
    assert not running(int(slow.read_text()))
    assert capsys.readouterr().out == ""


def test_a_ctrl_c_another_thread_takes_still_ends_the_transfers_at_once():
    """Ansible's worker ends itself and its transfers from its SIGINT handler, which Python runs
    in the main thread only; the kernel may hand the signal to a thread that reads a host's
    progress (here: the one thread that does not block it). The main thread must not sleep
    through it in a transfer's read until the transfer ends (30 s here)."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal, sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from tests.unit.plugins import load
        transfer = load("roles/launch/action_plugins/staging_transfer.py")
        signal.signal(signal.SIGINT, lambda *_: os._exit(3))  # Ansible's worker: it ends
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
        print("sending", flush=True)
        transfer.interruptible(lambda: transfer.transfer(
            {{"sends": [{{"item": "send", "argv": ["sleep", "30"]}}]}}, "h1"))
        """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert child.stdout.readline() == "sending\n"
        # Then the main thread waits for the transfer (a child that died instead fails below).
        while child.poll() is None and subprocess.run(
                ["pgrep", "-g", str(child.pid), "-x", "sleep"], stdout=subprocess.DEVNULL,
                check=False).returncode:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=5) == 3
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)  # its sleep too
        child.wait()


def test_a_host_without_rsync_is_named_with_the_fix():
    missing = {"item": "rsync", "rc": -1, "stdout": "", "stderr": "",
               "msg": "cannot run rsync: [Errno 2] No such file or directory: 'rsync'"}
    assert staging.staging_rsync_error(missing, "h2") == (
        "h2 has no rsync (cannot run rsync: [Errno 2] No such file or directory: 'rsync'), which "
        "-e data and -e model travel with — install it there (setup.yml --tags python_env does on "
        "Linux; macOS ships it), then run train.yml again")
    assert staging.staging_rsync_error({"item": "rsync", "rc": 0, "stdout": "rsync  version 3.2.7"},
                                       "h2") == ""
    assert staging.staging_rsync_error(None, "h2") == ""  # nothing staged: not asked


def sized(manifest):
    """A manifest's sizes and sha256, without the mtimes (a download's are its own)."""
    return {name: (size, digest) for name, (size, _, digest) in manifest.items()}


def test_a_hub_model_is_fetched_once_and_a_recorded_revision_again_without_asking_the_hub(
        tmp_path, model):
    """files/staging.py fetch, as train.yml runs it (a process of its own, HF_ENDPOINT in its
    environment), against a local hub: each file is downloaded once; the branch asked again costs
    one question and no file; the commit a run recorded is fetched from the cache, without a
    request, after the branch moved on, and the branch then brings the new commit. The hub wants
    a token (a private model): the fetch has the one on its stdin; without it, it fails naming
    the repo and the hub."""
    hub = Hub("127.0.0.1", token="hf_private")
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_TOKEN", None)

    def run(revision, token, **staged):
        hub.requests.clear()
        return subprocess.run([sys.executable, str(SCRIPT), "fetch", str(tmp_path / "cache"),
                               json.dumps({"repo": "ann/tiny", "revision": revision, **staged})],
                              input=json.dumps({"token": token}) + "\n", env=env,
                              capture_output=True, text=True, timeout=120)

    def fetch(revision, **staged):
        done = run(revision, "hf_private", **staged)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    try:
        first = hub.publish("ann/tiny", model)
        refused = run("", "")
        assert refused.returncode == 1 and refused.stderr.startswith(
            f"cannot fetch ann/tiny at its default branch from {hub.url}: "), refused.stderr
        got = fetch("")
        assert got["revision"] == first and got["path"].endswith(f"/snapshots/{first}")
        assert sized(got["manifest"]) == sized(script.manifest(str(model)))
        assert hub.downloads() == {"config.json": 1, "sub/weights.bin": 1}
        assert fetch("")["revision"] == first
        assert [r[1] for r in hub.requests] == ["revision"]  # the branch's commit; no file
        (model / "config.json").write_text('{"layers": 3}')
        second = hub.publish("ann/tiny", model)
        again = fetch(first)
        assert (again["revision"], hub.requests) == (first, [])
        assert again["manifest"] == got["manifest"]
        assert fetch("")["revision"] == second and hub.downloads() == {"config.json": 1}
        # The launch host's: staged as it is fetched, the cache's files themselves, recorded.
        work = tmp_path / "work"
        launch = fetch(second, work_dir=str(work), rel="models/ann--tiny")
        assert (work / "models" / "ann--tiny" / "config.json").stat().st_nlink == 2
        assert sized(launch["manifest"]) == sized(script.manifest(str(model)))
        rel = {"models/ann--tiny": launch["manifest"]}
        assert staging.staging_stale(rel, {"models/ann--tiny": launch["staged"]}) == {}
    finally:
        hub.close()


def test_a_hub_model_is_staged_under_the_caches_spelling_of_its_id():
    assert staging.staging_hub_rel("mlx-community/Qwen-4bit") == "models/mlx-community--Qwen-4bit"


def test_a_resumed_run_fetches_the_revision_its_job_recorded_for_that_repo():
    runs = [{"run": "a", "hub_model": {"repo": "ann/tiny", "revision": "c" * 40}},
            {"run": "b", "hub_model": None}, {"run": "old"}]
    assert staging.staging_hub_revision(runs, "a", "ann/tiny") == "c" * 40
    assert staging.staging_hub_revision(runs, "a", "ann/other") == ""  # train refuses it
    for run in ("b", "old", "missing"):
        assert staging.staging_hub_revision(runs, run, "ann/tiny") == ""


def test_the_launch_host_stages_a_snapshot_as_hard_links_to_its_blobs(tmp_path):
    """A Hugging Face snapshot (symlinks into the cache's blobs) staged on the launch host: its
    files are the blobs themselves (one copy on the disk); another revision replaces the links
    that differ without writing into a blob, and a file the revision lacks goes."""
    blobs, snapshot, staged = tmp_path / "blobs", tmp_path / "snapshot", tmp_path / "models" / "m"
    (snapshot / "sub").mkdir(parents=True)
    blobs.mkdir()
    for name, data in (("a", b"config"), ("b", b"weights"), ("c", b"new weights")):
        (blobs / name).write_bytes(data)
    (snapshot / "config.json").symlink_to(blobs / "a")
    (snapshot / "sub" / "w.bin").symlink_to(blobs / "b")
    (snapshot / "gone.txt").symlink_to(blobs / "a")
    script.link(str(snapshot), str(staged))
    assert (staged / "sub" / "w.bin").stat().st_ino == (blobs / "b").stat().st_ino
    assert script.manifest(str(staged)) == script.manifest(str(snapshot))
    (snapshot / "sub" / "w.bin").unlink()
    (snapshot / "sub" / "w.bin").symlink_to(blobs / "c")
    (snapshot / "gone.txt").unlink()
    script.link(str(snapshot), str(staged))
    assert (staged / "sub" / "w.bin").read_bytes() == b"new weights"
    assert (blobs / "b").read_bytes() == b"weights"  # the old blob untouched
    assert sorted(script.files(str(staged))) == ["config.json", "sub/w.bin"]
