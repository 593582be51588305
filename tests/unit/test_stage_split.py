"""A pipeline's split of a model from its weight files' headers (train/split.py), as training and
the launch plan both read it, and the weight files each host is sent: only those its ranks'
stages read, when the model's weights are in several files."""

import json
import subprocess
import sys

import numpy as np
from safetensors.numpy import save_file

from train import split

from .test_launch_plan import BRIDGE, given, plan_of, plans, request

LAYER, EMBEDDING, NORM = 100, 10, 2  # float32 numbers of each


def write_model(directory, files, tied=False):
    """A model directory in mlx-lm's layout, its weights in len(files) safetensors files (files:
    the layers of each, in order), the embedding in the first, the norm and the head (none when
    tied) in the last; config, tokenizer and index beside them."""
    directory.mkdir()
    names = [f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i in range(len(files))]
    index, start = {}, 0
    for i, (name, layers) in enumerate(zip(names, files, strict=True)):
        tensors = {f"model.layers.{n}.mlp.up_proj.weight": np.ones((LAYER // 4, 4), np.float32)
                   for n in range(start, start + layers)}
        start += layers
        if i == 0:
            tensors["model.embed_tokens.weight"] = np.ones((EMBEDDING // 2, 2), np.float32)
        if i == len(files) - 1:
            tensors["model.norm.weight"] = np.ones(NORM, np.float32)
            tensors |= {} if tied else {"lm_head.weight": np.ones((EMBEDDING // 2, 2), np.float32)}
        save_file(tensors, str(directory / name))
        index |= dict.fromkeys(tensors, name)
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    for other in ("config.json", "tokenizer.json"):
        (directory / other).write_text("{}")
    return names


def test_the_split_is_counted_from_the_weight_files_headers(tmp_path):
    names = write_model(tmp_path / "m", [2, 1, 3])
    files = split.tensors(tmp_path / "m")
    assert files[names[1]] == {"model.layers.2.mlp.up_proj.weight": 400}
    # 6 layers of 400 bytes, 40 of embedding before them, 48 of norm and head after: 2448 bytes;
    # halves: the cut nearest 1224 bytes is after layer 3 (1240 bytes before layer 3).
    assert split.counts(files, None, 2) == [3, 3]
    assert split.counts(files, None, 3) == [2, 2, 2]
    assert split.counts(files, "1,5", 2) == [1, 5]  # --stages, as given
    assert split.stage_files(files, [3, 3], 0) == set(names[:2])
    assert split.stage_files(files, [3, 3], 1) == {names[2]}
    assert split.stage_files(files, [1, 5], 1) == set(names)  # layer 1 in the first
    # A tied head is the embedding: the last stage reads it too, and it weighs there.
    tied = write_model(tmp_path / "tied", [2, 1, 3], tied=True)
    tied_files = split.tensors(tmp_path / "tied")
    assert split.stage_files(tied_files, [3, 3], 1) == {tied[0], tied[2]}
    assert split.counts(tied_files, None, 2) == [3, 3]
    # A host sent only the last stage's file: by the index, the others' stages lack files.
    (tmp_path / "m" / names[0]).unlink()
    assert split.lacking(tmp_path / "m", [3, 3], 1) == set()
    assert split.lacking(tmp_path / "m", [3, 3], 0) == {names[0]}
    assert split.lacking(tmp_path / "m", [1, 5], 1) == {names[0]}


def test_a_pipeline_host_is_sent_only_the_weight_files_of_its_stages(tmp_path):
    """BRIDGE: a runs ranks 0 and 1, b rank 2: three stages of two layers each, one file each."""
    names = write_model(tmp_path / "m", [2, 2, 2])
    req = request(model=str(tmp_path / "m"), parallel="pipeline")
    on_b = plans.launch_plan(req, given(BRIDGE, on="b"))
    assert on_b["skipped"] == {"models/m": names[:2]}  # the config, tokenizer, index: sent
    # The launch host relays every file to the others: it is sent them all.
    plan = plan_of(req, given(BRIDGE))
    assert plan["errors"] == [] and plan["skipped"] == {}
    # The split the files were chosen by is the one the ranks run: b holds no other header.
    assert "--stages=2,2,2" in plan["argv"]
    given_stages = plans.launch_plan(request(model=str(tmp_path / "m"), parallel="pipeline",
                                             stages="1,1,4"), given(BRIDGE, on="b"))
    assert given_stages["skipped"] == {"models/m": names[:1]}
    # Data parallel, or a model in one file: every host gets every file, the ranks split it.
    assert plans.launch_plan(request(model=str(tmp_path / "m")), given(BRIDGE, on="b"))[
        "skipped"] == {}
    write_model(tmp_path / "one", [6])
    req = request(model=str(tmp_path / "one"), parallel="pipeline")
    assert plans.launch_plan(req, given(BRIDGE, on="b"))["skipped"] == {}
    assert not any(a.startswith("--stages") for a in plan_of(req, given(BRIDGE))["argv"])


def test_a_hub_models_pipeline_is_split_by_the_fetched_files_headers(tmp_path):
    """-e model=<Hugging Face id>: before the fetch no host can count its layers (every file
    planned for every host); the launch host then prints the fetched files' tensors with
    split.py and the plan, made again with them, splits as for a directory."""
    names = write_model(tmp_path / "m", [2, 2, 2])
    req = request(model="ann/deep", parallel="pipeline")
    early = plans.launch_plan(req, given(BRIDGE, on="b"))
    assert early["skipped"] == {} and early["stages"] is None
    printed = subprocess.run([sys.executable, *early["split_argv"][1:], str(tmp_path / "m")],
                             capture_output=True, text=True, check=True).stdout
    assert json.loads(printed) == split.tensors(tmp_path / "m")
    fetched = {"tensors": json.loads(printed)}
    plan = plan_of(req, given(BRIDGE), **fetched)
    assert plan["errors"] == [] and "--stages=2,2,2" in plan["argv"]
    on_b = plan_of(req, given(BRIDGE, on="b"), **fetched)
    assert on_b["skipped"] == {"models/ann--deep": names[:2]}
    # Data parallel: nothing to read.
    assert "split_argv" not in plans.launch_plan(request(model="ann/deep"), given(BRIDGE))
