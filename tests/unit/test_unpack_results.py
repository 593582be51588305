"""roles/launch/files/unpack_results.py: the hosts' archives into the run's directory."""

import io
import subprocess
import sys
import tarfile

from tools.playbook import ROOT

SCRIPT = ROOT / "roles" / "launch" / "files" / "unpack_results.py"


def archive(path, files):
    with tarfile.open(path, "w") as tar:
        for name in sorted({n.rsplit("/", 1)[0] for n in files}):  # directory entries, as tar
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def unpack(run_dir, *archives):
    subprocess.run([sys.executable, SCRIPT, run_dir, *archives], check=True)


def test_an_earlier_launch_is_replaced_and_the_users_own_files_are_kept(tmp_path):
    run = tmp_path / "runs" / "r"
    (run / "checkpoints" / "step_00000010").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "logs" / "rank.3.log").write_text("an earlier launch\n")
    (run / "summary.json").write_text("{}")
    (run / "notes.txt").write_text("mine\n")
    incoming = tmp_path / "runs" / ".incoming-r"
    incoming.mkdir()
    launch_host = archive(incoming / "a.tar", {
        "r/job.json": "{}", "r/checkpoints/step_00000020/model.safetensors": "w",
        "r/logs/rank.0.log": "0\n"})
    other = archive(incoming / "b.tar", {"r/logs/rank.1.log": "1\n", "other/x": "not ours",
                                         "r/adapters/a.safetensors": "rank 1's copy"})

    unpack(run, launch_host, other)
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()) == [
        "checkpoints/step_00000020/model.safetensors", "job.json", "logs/rank.0.log",
        "logs/rank.1.log", "notes.txt"]
    assert not (tmp_path / "runs" / "other").exists() and not incoming.exists()
    for path in (run / "logs", run / "logs" / "rank.0.log"):
        assert path.stat().st_mode & 0o077 == 0, path  # private


def test_without_the_launch_hosts_archive_nothing_is_removed(tmp_path):
    run = tmp_path / "runs" / "r"
    (run / "checkpoints" / "step_00000010").mkdir(parents=True)
    (run / "job.json").write_text('{"state": "finished"}')
    unpack(run, archive(tmp_path / "b.tar", {"r/logs/rank.1.log": "1\n"}))
    assert (run / "checkpoints" / "step_00000010").is_dir()
    assert (run / "job.json").read_text() == '{"state": "finished"}'
    assert (run / "logs" / "rank.1.log").read_text() == "1\n"
