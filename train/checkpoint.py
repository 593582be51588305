"""Checkpoints: DIR/checkpoints/step_NNNNNNNN/{model,optimizer}.safetensors + state.json.

A checkpoint is written into a hidden temporary directory, flushed to disk and renamed into
place, so every step_* directory is complete: a crash mid-write leaves the previous latest one.
"""

import json
import os
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

KEEP = 3  # newest checkpoints kept; older ones are deleted


def directory(out):
    return Path(out) / "checkpoints"


def latest(out):
    """The newest complete checkpoint directory, or None."""
    steps = sorted(directory(out).glob("step_*"))
    return steps[-1] if steps else None


def save(out, step, model, optimizer, config):
    final = directory(out) / f"step_{step:08d}"
    tmp = directory(out) / f".tmp_step_{step:08d}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash
    tmp.mkdir(parents=True)
    # Only trainable parameters: all of a built-in model, the adapters of a LoRA model.
    mx.save_safetensors(str(tmp / "model.safetensors"),
                        dict(tree_flatten(model.trainable_parameters())))
    mx.save_safetensors(str(tmp / "optimizer.safetensors"), dict(tree_flatten(optimizer.state)))
    # The data order is a function of (seed, step): the step is the whole data/RNG position.
    (tmp / "state.json").write_text(json.dumps({"step": step, "config": config}, indent=1))
    for path in (*tmp.iterdir(), tmp):
        fsync(path)
    tmp.rename(final)
    fsync(directory(out))  # the rename itself survives a power cut
    for old in sorted(directory(out).glob("step_*"))[:-KEEP]:
        shutil.rmtree(old)
    return final


def fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path, model, optimizer):
    """Restore model and optimizer from a checkpoint directory; returns its state.json."""
    model.load_weights(str(path / "model.safetensors"), strict=False)
    optimizer.state = tree_unflatten(list(mx.load(str(path / "optimizer.safetensors")).items()))
    return json.loads((path / "state.json").read_text())
