"""Pipeline-parallel LoRA (`--parallel pipeline`) under real `mpirun` on this machine: the stages
together train what one process trains, each checkpoints only its own adapters, and rank 0 writes
all of them where mlx-lm's loader reads them."""

import importlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.utils import MODEL_REMAPPING

from tests.conftest import write_llm, write_shards
from train import cli, lora, pipeline, split

from .conftest import ROOT, metrics, mpirun_cmd, needs_mpirun, run, summary, train_cmd

pytestmark = needs_mpirun
MLX_LAUNCH = Path(sys.executable).parent / "mlx.launch"
LAYERS = 8
SETTINGS = ("--steps", "6", "--batch-size", "8", "--lr", "3e-3", "--log-every", "1",
            "--eval-every", "3", "--checkpoint-every", "0")
TWO_STAGES = ("--stages", "5,3", "--micro-batches", "4")


@pytest.fixture(scope="module")
def deep_llm(tiny_llm, tmp_path_factory):
    """(model directory, data directory): tiny_llm's tokenizer and data with an 8-layer float32
    llama with a head of its own (not the embedding's): each of the parts a stage may hold."""
    from mlx_lm.models import llama

    tiny_dir, data_dir = tiny_llm
    model_dir = tmp_path_factory.mktemp("deep_llm")
    for path in tiny_dir.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            shutil.copy(path, model_dir)
    config = {**json.loads((tiny_dir / "config.json").read_text()),
              "num_hidden_layers": LAYERS, "tie_word_embeddings": False}
    (model_dir / "config.json").write_text(json.dumps(config))
    mx.random.seed(1)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    mx.save_safetensors(str(model_dir / "model.safetensors"),
                        dict(tree_flatten(model.parameters())))
    return model_dir, data_dir


@pytest.fixture(scope="module")
def one_process(deep_llm, tmp_path_factory):
    """The out directory of the fine-tune on one process, data parallel's way."""
    out = tmp_path_factory.mktemp("one") / "run"
    run(train_cmd("--model", deep_llm[0], "--data", deep_llm[1], *SETTINGS, "--out", out))
    return out


def arrays(path):
    return {k: np.array(v) for k, v in mx.load(str(path)).items()}


def losses(out):
    return [r["loss"] if r["kind"] == "train" else r["eval_loss"] for r in metrics(out)]


def assert_trains_like(out, one_process):
    """out's losses and adapters are one process's. Float32; the micro-batches' gradients are
    summed in another order than one batch's: the losses agree to 5e-5 relative (measured: 7e-6)
    and the adapters, moved by up to 9e-2 in six Adam steps of 3e-3, to 1e-4 (measured: 3e-5)."""
    np.testing.assert_allclose(losses(out), losses(one_process), rtol=5e-5)
    single = arrays(one_process / "adapters" / "adapters.safetensors")
    piped = arrays(out / "adapters" / "adapters.safetensors")
    assert piped.keys() == single.keys()
    for key in single:
        np.testing.assert_allclose(piped[key], single[key], rtol=0, atol=1e-4, err_msg=key)


def pipeline_run(llm, outs, *flags):
    """Each rank a stage, with its own --out (MPMD), so that each stage's files show where they
    were written; mpirun's result."""
    return run(mpirun_cmd(*(train_cmd("--model", llm[0], "--data", llm[1], *SETTINGS,
                                      "--parallel", "pipeline", *flags, "--out", out)
                            for out in outs)))


@pytest.fixture(scope="module")
def two_stages(deep_llm, tmp_path_factory):
    """(mpirun's result, each rank's out directory) of a 2-stage fine-tune, 5 layers and 3, in 4
    micro-batches (1F1B's, more than the stages)."""
    outs = [tmp_path_factory.mktemp("two") / f"rank{r}" for r in range(2)]
    return pipeline_run(deep_llm, outs, *TWO_STAGES), outs


@pytest.fixture(scope="module")
def three_stages(deep_llm, tmp_path_factory):
    """The same on 3 stages balanced by parameter bytes."""
    outs = [tmp_path_factory.mktemp("three") / f"rank{r}" for r in range(3)]
    return pipeline_run(deep_llm, outs), outs


# The first stage also holds the embedding, the last the norm and head; balanced by parameter
# bytes, three stages take 3/2/3 layers (the embedding and head weigh little here).
@pytest.mark.parametrize("piped, split, micro", [("two_stages", [5, 3], 4),
                                                 ("three_stages", [3, 2, 3], 3)])
def test_the_stages_train_what_one_process_trains(request, deep_llm, one_process, piped, split,
                                                  micro):
    model_dir = deep_llm[0]
    result, outs = request.getfixturevalue(piped)
    assert (f"global batch 8 in {micro} micro-batches through {len(split)} stage(s), 1f1b "
            "schedule" in result.stdout)
    assert summary(outs[0])["world_size"] == len(split)
    assert len(summary(outs[0])["peak_memory_bytes"]) == len(split)  # by rank

    assert_trains_like(outs[0], one_process)
    single = arrays(one_process / "adapters" / "adapters.safetensors")
    assert max(np.abs(v).max() for k, v in single.items() if k.endswith("lora_b")) > 1e-2
    assert (json.loads((outs[0] / "adapters" / "adapter_config.json").read_text())
            == json.loads((one_process / "adapters" / "adapter_config.json").read_text()))

    # Each stage checkpoints its own layers' adapters and optimizer state, nothing else: the
    # first where rank 0 always does, the others in DIR/stage<k>.
    first = 0
    for rank, (out, layers) in enumerate(zip(outs, split, strict=True)):
        step = (out / (f"stage{rank}" if rank else "") / "checkpoints" / "step_00000006")
        held = {int(key.split(".")[2]) for key in arrays(step / "model.safetensors")}
        assert held == set(range(first, first + layers)), (rank, held)
        assert arrays(step / "optimizer.safetensors")
        config = json.loads((step / "state.json").read_text())["config"]
        assert config["stages"] == ",".join(map(str, split))  # as given or balanced
        assert sorted(p.name for p in out.iterdir()) == (
            ["adapters", "checkpoints", "loss.png", "metrics.jsonl", "summary.json"] if rank == 0
            else [f"stage{rank}"])
        first += layers

    # mlx-lm's own loader (mlx_lm.generate --adapter-path) reads the adapters of every stage.
    from mlx_lm import load

    tuned, _ = load(str(model_dir), adapter_path=str(outs[0] / "adapters"))
    loaded = {k: np.array(v) for k, v in tree_flatten(tuned.parameters())
              if k.endswith(("lora_a", "lora_b"))}
    saved = arrays(outs[0] / "adapters" / "adapters.safetensors")
    assert loaded.keys() == saved.keys()
    assert all(np.array_equal(loaded[k], saved[k]) for k in saved)


@pytest.mark.slow
def test_the_ring_backend_carries_the_pipeline_into_one_directory(tmp_path, deep_llm,
                                                                  one_process):
    """mlx.launch's ring on loopback (train.yml's backend over cables): the same adapters, and
    the ranks of one host share --out, each stage's checkpoints in a directory of its own."""
    out = tmp_path / "run"
    run([MLX_LAUNCH, "--backend", "ring", "-n", "2", "--",
         *train_cmd("--model", deep_llm[0], "--data", deep_llm[1], *SETTINGS, "--parallel",
                    "pipeline", "--stages", "5,3", "--out", out)])
    assert sorted(p.name for p in out.iterdir()) == [
        "adapters", "checkpoints", "loss.png", "metrics.jsonl", "stage1", "summary.json"]
    assert (out / "stage1" / "checkpoints" / "step_00000006").is_dir()
    np.testing.assert_allclose(losses(out), losses(one_process), rtol=5e-5)
    single = arrays(one_process / "adapters" / "adapters.safetensors")
    for key, value in arrays(out / "adapters" / "adapters.safetensors").items():
        np.testing.assert_allclose(value, single[key], rtol=0, atol=1e-4, err_msg=key)


@pytest.mark.slow
def test_a_resumed_pipeline_continues_exactly(tmp_path, deep_llm, two_stages):
    """Each stage resumes from its own checkpoint, at the step every stage has."""
    outs = [tmp_path / f"rank{r}" for r in range(2)]
    pipeline_run(deep_llm, outs, "--steps", "3", *TWO_STAGES)
    resumed = pipeline_run(deep_llm, outs, *TWO_STAGES, "--resume")
    assert resumed.stdout.count("(step 3)") == 2, resumed.stdout  # rank 0 and 1, each its own
    assert losses(outs[0]) == losses(two_stages[1][0])  # bit for bit
    resumed, straight = (arrays(out / "adapters" / "adapters.safetensors")
                         for out in (outs[0], two_stages[1][0]))
    assert resumed.keys() == straight.keys()
    assert all(np.array_equal(resumed[k], straight[k]) for k in straight)

    # Another split would load other layers' adapters: refused.
    other = run(mpirun_cmd(*(train_cmd("--model", deep_llm[0], "--data", deep_llm[1], *SETTINGS,
                                       "--parallel", "pipeline", "--stages", "4,4", "--steps",
                                       "7", "--resume", "--out", out) for out in outs)),
                check=False)
    assert other.returncode != 0
    assert "was made with --stages 5,3, not 4,4" in other.stderr


def test_gpipe_gives_1f1bs_result_bit_for_bit(tmp_path, deep_llm, two_stages):
    """The schedules run the same passes in another order: each stage sums its micro-batches'
    gradients in the same order."""
    outs = [tmp_path / f"rank{r}" for r in range(2)]
    result = pipeline_run(deep_llm, outs, *TWO_STAGES, "--schedule", "gpipe")
    assert "4 micro-batches through 2 stage(s), gpipe schedule" in result.stdout
    assert losses(outs[0]) == losses(two_stages[1][0])
    gpipe, one_f_one_b = (arrays(out / "adapters" / "adapters.safetensors")
                          for out in (outs[0], two_stages[1][0]))
    assert gpipe.keys() == one_f_one_b.keys()
    assert all(np.array_equal(gpipe[k], one_f_one_b[k]) for k in gpipe)


def exchanged(schedule, stages, micro):
    """Every stage's actions run against each other, each send and receive waiting for the other
    side's (as MPI's and the ring's do for large messages): (whether all of them finish, the
    most micro-batch inputs each stage held at once)."""
    todo = [pipeline.actions(schedule, stages, micro, r) for r in range(stages)]
    pairs = {"F": (-1, "send"), "send": (1, "F"), "dh": (1, "B"), "B": (-1, "dh")}
    held, most = [0] * stages, [0] * stages
    moved = True
    while moved:
        moved = False
        for rank in (r for r in range(stages) if todo[r]):
            kind, m = todo[rank][0]
            offset, other = pairs[kind]
            peer = rank + offset
            if 0 <= peer < stages and todo[peer][:1] != [(other, m)]:
                continue  # waits for the peer's side of the exchange
            for r in [rank] + ([peer] if 0 <= peer < stages else []):
                held[r] += {"F": 1, "B": -1}.get(todo[r].pop(0)[0], 0)
                most[r] = max(most[r], held[r])
            moved = True
    return not any(todo), most


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("micro", [1, 2, 3, 4, 7])
def test_the_schedules_never_deadlock_and_1f1b_holds_at_most_a_micro_batch_per_stage(stages,
                                                                                    micro):
    """Both schedules finish with blocking sends; a stage holds the inputs of all M micro-batches
    under GPipe and of at most S - rank under 1F1B."""
    assert exchanged("gpipe", stages, micro) == (True, [micro] * stages)
    assert exchanged("1f1b", stages, micro) == (True, [min(micro, stages - r)
                                                       for r in range(stages)])


def test_a_stage_reads_only_its_own_weights(deep_llm):
    """mlx-lm loads lazily and the stage drops the other layers before anything is evaluated:
    the last of stages 5/3 reads 3 layers, the norm and the head, never the whole model."""
    model_bytes = (deep_llm[0] / "model.safetensors").stat().st_size
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    model, _, _ = lora.load(deep_llm[0], deep_llm[1], lazy=True)
    stage = pipeline.Stage(model, [5, 3], 1)
    mx.eval(stage.model.parameters())
    held = mx.get_peak_memory() - before
    own = sum(v.nbytes for _, v in tree_flatten(stage.model.parameters()))
    # 3 of 8 layers with their adapters; read eagerly, the peak would be the whole model's
    assert own <= held < own + 1024 and own < 0.6 * model_bytes, (held, own, model_bytes)


@pytest.mark.parametrize("kind", cli.PIPELINE_MODELS)
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own-head"])
@pytest.mark.parametrize("bits", [None, 4], ids=["float32", "4-bit"])
def test_the_stages_compute_the_models_logits(kind, tied, bits):
    """Each model type the pipeline takes, quantized or not: its stages chained give mlx-lm's own
    forward, bit for bit (mistral is mlx-lm's llama)."""
    module = importlib.import_module(f"mlx_lm.models.{MODEL_REMAPPING.get(kind, kind)}")
    config = {"model_type": kind, "hidden_size": 32, "num_hidden_layers": 5,
              "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "rms_norm_eps": 1e-5, "vocab_size": 16, "rope_theta": 1e4,
              "max_position_embeddings": 64, "tie_word_embeddings": tied}

    def model():
        mx.random.seed(0)
        built = module.Model(module.ModelArgs.from_dict(config))
        if bits:
            nn.quantize(built, group_size=32, bits=bits)
        return built

    tokens = mx.array([[1, 2, 3, 4, 5, 6]])
    h = tokens
    for rank in range(3):
        h = pipeline.Stage(model(), [2, 1, 2], rank)(h)
    assert mx.array_equal(h, model()(tokens)).item()


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "own-head"])
def test_a_quantized_stage_loads_from_its_own_weight_files_alone(tmp_path, deep_llm, tied):
    """A 4-bit model in 3 weight files, each stage's host holding only the files its stage reads
    (as train.yml stages it): each stage loads there (mlx-lm quantizes the layers whose scales it
    finds, the others are never read) and computes what that stage of the whole model does."""
    from mlx_lm.models import llama

    whole = tmp_path / "whole"
    shutil.copytree(deep_llm[0], whole)
    (whole / "model.safetensors").unlink()
    config = {**json.loads((whole / "config.json").read_text()), "tie_word_embeddings": tied}
    mx.random.seed(2)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    nn.quantize(model, group_size=32, bits=4)
    write_shards(whole, dict(tree_flatten(model.parameters())), 3, LAYERS)
    config["quantization"] = {"group_size": 32, "bits": 4}
    (whole / "config.json").write_text(json.dumps(config))
    files = split.tensors(whole)
    counts = split.counts(files, None, 3)

    def stage(model_dir, rank):
        mx.random.seed(0)  # the same adapters: LoRA's B starts at zero, A drawn in layer order
        return pipeline.Stage(lora.load(model_dir, deep_llm[1], lazy=True, partial=True)[0],
                              counts, rank)

    h, held = mx.array([[1, 2, 3, 4, 5, 6]]), []
    for rank in range(3):
        host = tmp_path / f"host{rank}"
        shutil.copytree(whole, host)
        for name in set(files) - split.stage_files(files, counts, rank):
            (host / name).unlink()
        held.append(len(list(host.glob("*.safetensors"))))
        assert not split.lacking(host, counts, rank)
        out = stage(host, rank)(h)
        expected = stage(whole, rank)(h)
        assert mx.array_equal(out, expected).item(), rank
        h = expected
    assert min(held) < 3, held  # a stage's host held but part of the model


def test_a_stage_whose_host_lacks_a_weight_file_it_reads_is_refused(tmp_path):
    """A model staged for another split (its host sent only another stage's files): the stage
    says which file it lacks and what to do, instead of training on weights left as made."""
    model, data = write_llm(tmp_path / "m", tmp_path / "data", shards=3, num_hidden_layers=6)
    (model / "model-00002-of-00003.safetensors").unlink()
    result = run(train_cmd("--model", model, "--data", data, "--parallel", "pipeline",
                           "--steps", 1, "--out", tmp_path / "run"), check=False)
    assert result.returncode == 2, result.stderr
    assert (f"train: error: --parallel pipeline: {model} lacks model-00002-of-00003.safetensors, "
            "which stage 0 of 6 reads") in result.stderr, result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_model_of_another_structure_is_refused(tmp_path, deep_llm):
    """Gemma scales the embedding and masks some layers to a window: not the stages' forward."""
    from mlx_lm.models import gemma3_text

    model_dir = tmp_path / "gemma"
    shutil.copytree(deep_llm[0], model_dir)
    config = {"model_type": "gemma3_text", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "head_dim": 8, "vocab_size": 16}
    (model_dir / "config.json").write_text(json.dumps(config))
    model = gemma3_text.Model(gemma3_text.ModelArgs.from_dict(config))
    mx.save_safetensors(str(model_dir / "model.safetensors"),
                        dict(tree_flatten(model.parameters())))
    result = run(train_cmd("--model", model_dir, "--data", deep_llm[1], "--parallel", "pipeline",
                           "--out", tmp_path / "run"), check=False)
    assert result.returncode == 2
    assert (f"train: error: --parallel pipeline: {model_dir} is a gemma3_text model; the pipeline "
            "splits llama, mistral, qwen2, qwen3 models") in result.stderr


@pytest.mark.slow
def test_a_stop_checkpoints_every_stage_at_one_step(tmp_path, deep_llm):
    """DIR/stop: each stage writes its checkpoint at the agreed step, and a resume goes on from
    there on every stage (the ranks share --out, as on one host)."""
    out = tmp_path / "run"

    def ranks(*flags):
        app = train_cmd("--model", deep_llm[0], "--data", deep_llm[1], *SETTINGS, "--parallel",
                        "pipeline", *flags, "--out", out)
        return mpirun_cmd(app, app)

    process = subprocess.Popen(ranks("--steps", "100000"), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.jsonl").exists() and len(metrics(out)) >= 2):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        (out / "stop").write_text("user")
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    step = json.loads((out / "stopped.json").read_text())["step"]
    for stage in (out, out / "stage1"):
        assert [p.name for p in (stage / "checkpoints").iterdir()] == [f"step_{step:08d}"]
    assert not (out / "summary.json").exists()

    resumed = run(ranks("--steps", str(step + 1), "--resume"))
    assert resumed.stdout.count(f"(step {step})") == 2, resumed.stdout
    assert summary(out)["steps"] == step + 1


def test_stages_are_balanced_by_parameter_bytes():
    """Cuts nearest to equal shares, the embedding's bytes on the first stage and the head's on
    the last, at least one layer each."""
    assert split.balanced([1] * 8, 0, 0, 3) == [3, 2, 3]
    assert split.balanced([1] * 8, 4, 0, 2) == [2, 6]  # a heavy embedding: fewer layers
    assert split.balanced([1] * 8, 0, 4, 2) == [6, 2]
    assert split.balanced([1] * 4, 100, 0, 4) == [1, 1, 1, 1]
    assert split.balanced([1, 1, 6, 1, 1], 0, 0, 2) == [2, 3]


@pytest.mark.slow
def test_replicas_of_the_stages_train_what_one_process_trains(tmp_path, deep_llm, one_process):
    """Half the run as 2 stages, resumed as 2 stages x 2 replicas (rank 2r + k stage k of replica
    r), each rank with its own --out: each replica takes half of every batch and each stage's
    gradients are summed over its replicas, which gives one process's result; replica 0 of each
    stage loads its checkpoint and gives it to replica 1, which has none."""
    outs = [tmp_path / f"rank{r}" for r in range(4)]
    pipeline_run(deep_llm, outs[:2], *TWO_STAGES, "--steps", "3")
    resumed = pipeline_run(deep_llm, outs, *TWO_STAGES, "--resume")
    assert ("global batch 8 over 2 replicas, each in 4 micro-batches through 2 stage(s)"
            in resumed.stdout)
    assert resumed.stdout.count("(step 3)") == 2, resumed.stdout  # replica 0 of each stage
    assert summary(outs[0])["world_size"] == 4
    assert_trains_like(outs[0], one_process)
    # Replica 0 (ranks 0 and 1) checkpoints each stage; replica 1 writes nothing.
    assert (outs[1] / "stage1" / "checkpoints" / "step_00000006").is_dir()
    assert [p.name for p in outs[1].iterdir()] == ["stage1"]
    assert not outs[2].exists() and not outs[3].exists()
