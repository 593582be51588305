"""roles/launch/action_plugins/launch_collect.py: the hosts' archives into the run's directory."""

import io
import tarfile

from tests.unit.plugins import load

collect = load("roles/launch/action_plugins/launch_collect.py")


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
    collect.unpack(run_dir, archives)


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


def test_rank_logs_are_read_by_rank_and_result_json_is_private(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank.10.log").write_text("ten\n")
    (tmp_path / "logs" / "rank.2.log").write_text("two\n")
    (tmp_path / "logs" / "rank.2.heartbeat").write_text("")
    assert collect.rank_logs(tmp_path) == {2: "two\n", 10: "ten\n"}
    collect.write_private(tmp_path / "result.json", "{}\n")
    assert (tmp_path / "result.json").stat().st_mode & 0o777 == 0o600
