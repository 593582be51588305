"""train/report.py's Heartbeat: rewritten every second while the rank works, and not once the
rank says it is exiting, so the process's end cuts no write short (which would leave the
temporary file in the run's logs, to come back with its results)."""

import json
import threading
import time

from train.report import Heartbeat


def test_the_heartbeat_is_rewritten_until_the_rank_exits_then_left_whole(tmp_path):
    beat = Heartbeat(str(tmp_path / "rank.{rank}.heartbeat"), rank=1, steps=10)
    path = tmp_path / "rank.1.heartbeat"
    first = json.loads(path.read_text())
    time.sleep(1.5)
    assert json.loads(path.read_text())["time"] > first["time"]  # the thread rewrote it

    beat.at("exiting", 10)
    beat.beat()
    last = path.read_text()
    time.sleep(1.5)
    assert path.read_text() == last and json.loads(last)["phase"] == "exiting"
    assert [t for t in threading.enumerate() if t.name.endswith("(refresh)")] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank.1.heartbeat"]
