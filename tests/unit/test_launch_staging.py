"""Staging train.yml's inputs: files/staging.py (manifests on the hosts and the controller),
lookup_plugins/staging_manifest.py and filter_plugins/staging.py (what differs, the transfers).
The transfer itself over real ssh, and the bytes per interface, in
tests/integration/test_train_playbook.py::test_inputs_are_sent_once_and_fanned_out_over_bridge0."""

import os
import shlex
import subprocess

import pytest
import yaml

from tests.unit.plugins import load

script = load("roles/launch/files/staging.py")
staging = load("roles/launch/filter_plugins/staging.py")
lookup = load("roles/launch/lookup_plugins/staging_manifest.py")


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


def test_a_copy_that_differs_after_its_transfer_is_named_with_its_host():
    got = {"models/m": {**EXPECTED, "weights.bin": [3000, 1700000001, "cc"]}}
    assert staging.staging_record_errors(got, {"models/m": EXPECTED}, "h2") == [
        "h2: models/m differs from the controller's after the transfer: weights.bin — check the "
        "disk and the link, then run train.yml again"]
    assert staging.staging_record_errors({"models/m": EXPECTED}, {"models/m": EXPECTED}, "h2") == []


HOSTS = [{"name": n, "mpi_address": f"198.19.0.{i}"} for i, n in enumerate(["h1", "h2", "h3"], 1)]
STAGED = [{"rel": "models/m", "src": "/ctrl/m/", "dir": True},
          {"rel": "data/c.txt", "src": "/ctrl/c.txt", "dir": False}]


def info(name, home=None):
    home = home or f"/home/{name}"
    return {"name": name, "home": home, "work_dir": f"{home}/mlx-cluster"}


def test_the_launch_host_sends_each_other_host_only_what_it_lacks_to_its_mpi_address():
    ranked = [{"inventory_hostname": "h1", "cluster_host_info": info("h1"),
               "launch_stale": {"models/m": ["not there"]}},
              {"inventory_hostname": "h2", "cluster_host_info": info("h2", "/Users/Jane Doe"),
               "launch_stale": {"models/m": ["not there"], "data/c.txt": ["c.txt missing"]}},
              {"inventory_hostname": "h3", "cluster_host_info": info("h3"), "launch_stale": {}}]
    commands = staging.staging_fanout_commands(STAGED, ranked, HOSTS, "h1")
    flags = ["rsync", "-r", "-t", "-L", "--delete", "--timeout=60",
             "-e", "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes"]
    assert commands == [
        {"item": {"host": "h2", "rel": "models/m"},
         "argv": [*flags, "/home/h1/mlx-cluster/models/m/", "198.19.0.2:mlx-cluster/models/m/"]},
        {"item": {"host": "h2", "rel": "data/c.txt"},
         "argv": [*flags, "/home/h1/mlx-cluster/data/c.txt", "198.19.0.2:mlx-cluster/data/c.txt"]},
    ]
    closed = "rsync: connection unexpectedly closed"
    results = [{"item": commands[0]["item"], "rc": 0, "stderr": ""},
               {"item": commands[1]["item"], "rc": 12, "stderr": closed + "\n"}]
    assert staging.staging_fanout_errors(results, "h1") == [
        f"h2: sending data/c.txt from h1 failed (rsync exit 12): {closed}"]


def test_a_work_dir_outside_the_home_is_given_whole():
    outside = {"home": "/Users/ann", "work_dir": "/Volumes/fast/mlx"}
    assert staging.staging_remote_path(outside, "data/x") == "/Volumes/fast/mlx/data/x"


def test_the_controller_reaches_the_launch_host_as_ansible_does():
    stale = {"models/m": ["not there"], "data/c.txt": ["c.txt not verified"]}
    hostvars = {"inventory_hostname": "h1", "ansible_host": "fe80::1", "ansible_user": "ann",
                "ansible_port": 2222, "ansible_ssh_private_key_file": "~/.ssh/k",
                "ansible_ssh_common_args": "-o UserKnownHostsFile=/tmp/kh -o IdentitiesOnly=yes"}
    argv = staging.staging_controller_argv(STAGED, "models/m", stale["models/m"], hostvars,
                                           info("h1"))
    assert argv[:6] == ["rsync", "-r", "-t", "-L", "--delete", "--timeout=60"]
    assert argv[6] == "-e"
    assert shlex.split(argv[7]) == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "~/.ssh/k",
                                    "-l", "ann", "-o", "UserKnownHostsFile=/tmp/kh",
                                    "-o", "IdentitiesOnly=yes"]
    assert argv[8:] == ["/ctrl/m/", "[fe80::1]:mlx-cluster/models/m/"]
    plain = staging.staging_controller_argv(STAGED, "data/c.txt", stale["data/c.txt"],
                                            {"inventory_hostname": "h1"}, info("h1"))
    # Same size and mtime but not the recorded content: rsync compares checksums.
    assert plain[6:] == ["-c", "-e", "ssh -o BatchMode=yes", "/ctrl/c.txt",
                         "h1:mlx-cluster/data/c.txt"]


def test_a_launch_host_ansible_runs_on_locally_gets_a_local_copy(tmp_path, model):
    work = tmp_path / "work"
    hostvars = {"inventory_hostname": "localhost", "ansible_connection": "local"}
    staged = [{"rel": "models/tiny-model", "src": str(model), "dir": True}]
    argv = staging.staging_controller_argv(staged, "models/tiny-model", ["not there"], hostvars,
                                           {"home": str(tmp_path), "work_dir": str(work)})
    assert argv[-1] == f"{work}/models/tiny-model/"
    (work / "models").mkdir(parents=True)
    subprocess.run(argv, check=True, capture_output=True)
    assert script.manifest(str(work / "models" / "tiny-model")) == script.manifest(str(model))
