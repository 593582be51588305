"""Single-process training runs: each model learns, and rank 0's files say what happened."""

import json
import math
import sys

import matplotlib.image
import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from .conftest import final_weights, metrics, run, summary, train_cmd


def test_mlp_on_digits_with_defaults_reaches_95_percent(tmp_path):
    out = tmp_path / "run"
    stdout = run(train_cmd("--out", out)).stdout
    result = summary(out)
    assert result["eval_accuracy"] >= 0.95, result
    assert result["steps"] == 500 and result["world_size"] == 1
    assert result["train_loss"] < 0.1 and result["eval_loss"] < 0.2
    assert result["samples_per_s"] > 0 and result["comm_time_share"] < 0.05
    assert result["wall_time_s"] > 0
    [peak] = result["peak_memory_bytes"]  # bytes: python, MLX and the digits, not KiB or GiB
    assert 50 << 20 < peak < 1 << 30, peak

    records = metrics(out)
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(10, 501, 10))
    assert all(r["lr"] == 1e-3 and r["world_size"] == 1 and r["samples_per_s"] > 0
               for r in train)
    assert train[-1]["loss"] == result["train_loss"] < train[0]["loss"] / 10
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [100, 200, 300, 400, 500]
    assert evals[-1]["eval_accuracy"] == result["eval_accuracy"]

    height, width, _ = matplotlib.image.imread(out / "loss.png").shape
    assert (height, width) == (400, 700)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step_00000300", "step_00000400", "step_00000500"]  # the newest three are kept

    # not a terminal: one plain progress line per logged step, all with the stable prefix
    lines = stdout.splitlines()
    assert all(line.startswith("[train] ") for line in lines)
    assert sum(line.startswith("[train] step ") for line in lines) == 50
    assert "[train] step 500/500 loss " in stdout and " eta " in stdout


def test_cnn_on_mnist_format_files(tmp_path, idx_dir):
    out = tmp_path / "run"
    run(train_cmd("--model", "cnn", "--dataset", "mnist", "--data", idx_dir, "--steps", "60",
                  "--batch-size", "32", "--eval-every", "0", "--out", out))
    assert summary(out)["eval_accuracy"] >= 0.9


def test_gpt_loss_goes_down_on_text(tmp_path, text_file):
    small = tmp_path / "small.txt"
    small.write_bytes(text_file.read_bytes()[:30_000])
    out = tmp_path / "run"
    run(train_cmd("--model", "gpt", "--data", small, "--steps", "40", "--batch-size", "8",
                  "--lr", "3e-3", "--eval-every", "0", "--out", out))
    train = [r["loss"] for r in metrics(out) if r["kind"] == "train"]
    uniform = math.log(256)  # an untrained byte model's loss: ln(256) = 5.5
    assert train[-1] < train[0] and train[-1] < 0.55 * uniform, train
    assert summary(out)["eval_loss"] < 0.6 * uniform


def test_lora_fine_tunes_only_adapters(tmp_path, tiny_llm):
    model_dir, data_dir = tiny_llm
    base = (model_dir / "model.safetensors").read_bytes()
    out = tmp_path / "run"
    run(train_cmd("--model", model_dir, "--data", data_dir, "--steps", "30", "--batch-size", "8",
                  "--lr", "3e-3", "--eval-every", "10", "--out", out))
    evals = [r["eval_loss"] for r in metrics(out) if r["kind"] == "eval"]
    assert len(evals) == 3 and evals[0] - evals[2] > 0.3, evals
    adapters = final_weights(out)
    assert adapters and all(k.endswith((".lora_a", ".lora_b")) for k in adapters)
    assert any(np.abs(v).max() > 0 for k, v in adapters.items() if k.endswith("lora_b"))
    assert (model_dir / "model.safetensors").read_bytes() == base
    state = json.loads(next((out / "checkpoints").glob("step_*/state.json")).read_text())
    assert state["config"]["model"] == str(model_dir)
    assert mx.load(str(out / "checkpoints" / "step_00000030" / "optimizer.safetensors"))

    # the run's adapters load with mlx-lm itself
    from mlx_lm import load

    tuned, _ = load(str(model_dir), adapter_path=str(out / "adapters"))
    loaded = {k: v for k, v in tree_flatten(tuned.parameters()) if k.endswith(("lora_a", "lora_b"))}
    assert loaded.keys() == adapters.keys()
    assert all(np.array_equal(np.array(loaded[k]), adapters[k]) for k in adapters)


FREE_AND_LOOK = """
import sys
import mlx.core as mx
from train import loop
a = mx.ones((16 << 20,))  # the first step's 64 MiB array, twice MLX's CPU cache
mx.eval(a)
if sys.argv[1] == "train":
    loop.keep_freed_buffers()  # after the first step
del a  # kept for the next step, or given back
kept = mx.get_cache_memory()
x = mx.ones((25 << 20,))  # a 100 MiB array, larger than the first step held
mx.eval(x)
del x
print(kept, mx.get_cache_memory() - kept)
"""


def test_training_keeps_a_steps_freed_buffers_for_the_next_one():
    """A step's large arrays (64 MiB here) are kept once freed, for the next step, as on Metal,
    instead of going back to the system (MLX's CPU default, shown by the same script); but no
    more than the first step held at once, so the process at most doubles its memory."""
    def cached(mode):
        return [int(n) for n in run([sys.executable, "-c", FREE_AND_LOOK, mode]).stdout.split()]
    kept, more = cached("train")
    assert kept >= 64 << 20 and more < 1 << 20
    assert cached("default")[0] < 64 << 20
