"""roles/launch/files/pack_results.py: a host's part of a run, as launch_fetch runs it."""

import subprocess
import sys
import tarfile

from tools.playbook import ROOT

SCRIPT = ROOT / "roles" / "launch" / "files" / "pack_results.py"


def pack(run_dir, archive):
    return subprocess.run([sys.executable, "-", run_dir, archive], input=SCRIPT.read_bytes(),
                          capture_output=True, check=True).stdout


def test_the_latest_checkpoint_comes_back_without_heartbeats_or_earlier_archives(tmp_path):
    run = tmp_path / "r"
    for step in ("step_00000100", "step_00000200", "step_00000250"):
        (run / "checkpoints" / step).mkdir(parents=True)
        (run / "checkpoints" / step / "model.safetensors").write_text(step)
    (run / "logs").mkdir()
    (run / "logs" / "rank.0.log").write_text("0\n")
    (run / "logs" / "rank.0.heartbeat").write_text("")
    (run / "logs" / ".rank.0.heartbeat.tmp").write_text("")
    (run / "adapters.safetensors").write_text("a program's own output")
    (run / ".results.tar").write_text("the last launch's archive")

    pack(run, run / ".results.tar")
    with tarfile.open(run / ".results.tar") as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert names == ["r/adapters.safetensors", "r/checkpoints/step_00000250/model.safetensors",
                     "r/logs/rank.0.log"]
    assert (run / ".results.tar").stat().st_mode & 0o077 == 0


def test_a_host_without_the_run_says_so_and_writes_nothing(tmp_path):
    assert pack(tmp_path / "r", tmp_path / "r" / ".results.tar") == b"no run directory\n"
    assert list(tmp_path.iterdir()) == []
