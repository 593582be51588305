"""--report-to tensorboard,wandb,trackio: rank 0's metrics in each tracker, under metrics.jsonl's
numbers and names (kind/name: train/loss), with the run's settings as the config; metrics.jsonl
unchanged. Each tracker's own files are read back as its tools would."""

import json
import sqlite3
import struct
import sys

import pytest
from tensorboardX.proto.event_pb2 import Event
from wandb.proto.wandb_internal_pb2 import Record

from ansible_collections.mlx_cluster.shared.plugins.module_utils.loader import load

from .conftest import metrics, run, train_cmd

launch = load("roles/launch/filter_plugins/launch.py")

WANDB_BLOCK = 32768  # a .wandb file: ":W&B" header (7 bytes), then LevelDB log blocks


def events(directory):
    """{(tag, step): value} of the event files' scalars (TFRecords: length, crc, data, crc)."""
    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        while data:
            (length,) = struct.unpack("<Q", data[:8])
            event = Event.FromString(data[12:12 + length])
            data = data[12 + length + 4:]
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = value.simple_value
    return scalars


def wandb_records(path):
    """The Records of an offline run's .wandb file (LevelDB log: crc, length, type, data; a
    record may span blocks: FIRST, MIDDLE, LAST; FULL alone)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        if WANDB_BLOCK - pos % WANDB_BLOCK < 7:  # a block's tail too short for a header: padding
            pos += WANDB_BLOCK - pos % WANDB_BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            yield Record.FromString(chunk)
            chunk = b""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("report_to") / "run"
    run(train_cmd("--model", "mlp", "--steps", "20", "--log-every", "5", "--eval-every", "10",
                  "--report-to", "tensorboard,wandb,trackio", "--out", out))
    return out


@pytest.fixture(scope="module")
def expected(out):
    """{(kind/name, step): value} of metrics.jsonl: what every tracker must hold."""
    expected = {(f"{r['kind']}/{name}", r["step"]): value for r in metrics(out)
                for name, value in r.items() if name not in ("kind", "step")}
    assert {key for key in expected if key[0] == "train/loss"} == {
        ("train/loss", step) for step in (5, 10, 15, 20)}
    assert ("eval/eval_accuracy", 20) in expected
    return expected


def test_tensorboard_gets_the_scalars_of_metrics_jsonl(out, expected):
    written = events(out / "tensorboard")
    assert written.keys() == expected.keys()
    for key, value in expected.items():
        assert written[key] == pytest.approx(value, rel=1e-6), key  # float32 in the events


def test_wandb_offline_run_gets_the_scalars_and_the_settings(out, expected):
    (path,) = (out / "wandb").glob("offline-run-*/run-*.wandb")  # `wandb sync` uploads it
    written, config = {}, {}
    for record in wandb_records(path):
        if record.HasField("history"):
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                   for item in record.history.item}
            written |= {(key, row["_step"]): value for key, value in row.items()
                        if not key.startswith("_")}
        elif record.HasField("run"):
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
    assert written == expected
    assert config["steps"] == 20 and config["report_to"] == ["tensorboard", "wandb", "trackio"]


def test_trackio_local_database_gets_the_scalars_and_the_settings(out, expected):
    with sqlite3.connect(out / "trackio" / "mlx-cluster.db") as db:  # TRACKIO_DIR=DIR/trackio
        rows = db.execute("SELECT step, metrics FROM metrics").fetchall()
        (config,) = db.execute("SELECT config FROM configs").fetchone()
    written = {(key, step): value for step, row in rows for key, value in json.loads(row).items()}
    assert written == expected
    assert json.loads(config)["steps"] == 20


def test_without_report_to_nothing_but_metrics_jsonl(tmp_path):
    out = tmp_path / "run"
    run(train_cmd("--model", "mlp", "--steps", "5", "--out", out))
    assert metrics(out) and not {"tensorboard", "wandb", "trackio"} & {
        p.name for p in out.iterdir()}


def test_a_host_without_a_trackers_package_is_named_with_the_fix_before_the_launch():
    """train.yml's preflight runs `python -m train --check 1 --report-to=...` in each host's
    environment (probe.yml): here one where wandb cannot be imported."""
    hidden = ("import runpy, sys; sys.modules['wandb'] = None; sys.argv[0] = 'train'; "
              "runpy.run_module('train', run_name='__main__')")
    probed = run([sys.executable, "-c", hidden, "--check", "1", "--report-to=tensorboard,wandb"],
                 check=False)
    assert probed.returncode == 2
    assert launch.launch_trackers_error(vars(probed) | {"rc": probed.returncode}, "h1") == (
        "h1: report_to: wandb needs the wandb package in this Python environment; it is in "
        "requirements.lock: add wandb to the hosts' python_env_packages and re-run setup.yml (on "
        "the controller: make venv)")
    assert launch.launch_trackers_error({"rc": 0}, "h1") == ""
    assert launch.launch_trackers_error(None, "h1") == ""  # no report_to: not asked
