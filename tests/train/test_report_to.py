"""--report-to tensorboard: rank 0's metrics as TensorBoard events, metrics.jsonl unchanged."""

import struct

import pytest
from tensorboardX.proto.event_pb2 import Event

from .conftest import metrics, run, train_cmd


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


def test_tensorboard_gets_the_scalars_of_metrics_jsonl(tmp_path):
    out = tmp_path / "run"
    run(train_cmd("--model", "mlp", "--steps", "20", "--log-every", "5", "--eval-every", "10",
                  "--report-to", "tensorboard", "--out", out))
    written = events(out / "tensorboard")
    expected = {(f"{r['kind']}/{name}", r["step"]): value for r in metrics(out)
                for name, value in r.items() if name not in ("kind", "step")}
    assert {key for key in expected if key[0] == "train/loss"} == {
        ("train/loss", step) for step in (5, 10, 15, 20)}
    assert ("eval/eval_accuracy", 20) in expected
    assert written.keys() == expected.keys()
    for key, value in expected.items():
        assert written[key] == pytest.approx(value, rel=1e-6), key  # float32 in the events


def test_without_report_to_nothing_but_metrics_jsonl(tmp_path):
    out = tmp_path / "run"
    run(train_cmd("--model", "mlp", "--steps", "5", "--out", out))
    assert metrics(out) and not (out / "tensorboard").exists()
