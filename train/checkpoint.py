"""Checkpoints: DIR/checkpoints/step_NNNNNNNN/{model,optimizer}.safetensors, state.json and
manifest.json (each other file's size and sha256).

A checkpoint is written into a hidden temporary directory, its manifest last, flushed to the disk
and renamed into place, so a crash mid-write leaves the previous latest one. A failed write (a
full disk) removes the temporary directory and raises. Loading checks the manifest and falls
back to the newest intact checkpoint: a file cut short or changed since it was written (a disk
fault, a power cut) is never loaded. A checkpoint from before manifests (no manifest.json) is
trusted if it loads. Rotation keeps the newest KEEP intact checkpoints, whatever is broken.
"""

import hashlib
import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from . import durable

KEEP = 3  # newest intact checkpoints kept; older ones are deleted
MANIFEST = "manifest.json"


def directory(out):
    return Path(out) / "checkpoints"


def newest_first(out):
    """Every checkpoint directory, intact or not, newest first."""
    return sorted(directory(out).glob("step_*"), reverse=True)


def step_of(path):
    return int(path.name.removeprefix("step_"))


def save(out, step, model, optimizer, config):
    final = directory(out) / f"step_{step:08d}"
    tmp = directory(out) / f".tmp_step_{step:08d}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash
    try:
        write(tmp, step, model, optimizer, config)
        shutil.rmtree(final, ignore_errors=True)  # a broken one that a resumed run fell back from
        tmp.rename(final)
        durable.fsync(directory(out))  # the rename itself survives a power cut
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written stays, nor its space
        raise
    rotate(out)
    return final


def write(tmp, step, model, optimizer, config):
    """The checkpoint's files in tmp, each on the disk before the manifest that vouches for it."""
    tmp.mkdir(parents=True)
    # Only trainable parameters: all of a built-in model, the adapters of a LoRA model.
    # Through a Python file: a failed write is an OSError (ENOSPC), not MLX's bare RuntimeError.
    arrays = {"model.safetensors": dict(tree_flatten(model.trainable_parameters())),
              "optimizer.safetensors": dict(tree_flatten(optimizer.state))}
    for name, tree in arrays.items():
        with open(tmp / name, "wb") as f:
            mx.save_safetensors(f, tree)
            f.flush()
            durable.full_fsync(f.fileno())
    # The data order is a function of (seed, step): the step is the whole data/RNG position.
    durable.write(tmp / "state.json", json.dumps({"step": step, "config": config}, indent=1))
    files = {p.name: {"size": p.stat().st_size, "sha256": sha256(p)} for p in tmp.iterdir()}
    durable.write(tmp / MANIFEST, json.dumps({"files": files}, indent=1))
    durable.fsync(tmp)


def rotate(out):
    """Delete the checkpoints older than the newest KEEP intact ones: a broken newer checkpoint
    never costs an intact older one."""
    intact = 0
    for path in newest_first(out):
        if intact >= KEEP:
            shutil.rmtree(path)
        elif problem(path) is None:
            intact += 1


def problem(path):
    """Why the checkpoint directory path cannot be trusted, or None: its manifest unreadable, or
    a file missing or of another size or sha256 than the manifest says."""
    if not (path / MANIFEST).exists():
        return None  # from before manifests: judged by whether it loads
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{MANIFEST} unreadable ({error})"
    for name, expected in sorted(files.items()):
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if (size := file.stat().st_size) != expected["size"]:
            return f"{name} has {size} bytes, its manifest says {expected['size']}"
        if sha256(file) != expected["sha256"]:
            return f"{name} does not match its sha256 in the manifest"
    return None


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def intact_steps(out):
    """The steps of the checkpoints in out that their manifests vouch for, newest first."""
    return [step_of(path) for path in newest_first(out) if problem(path) is None]


def load_newest(out, model, optimizer, steps=None):
    """Restore model and optimizer from the newest checkpoint that is intact and loads, and is
    at one of steps if given: (its directory or None, its state.json or None, [(directory,
    why)] of the newer ones skipped)."""
    skipped = []
    for path in newest_first(out):
        why = problem(path)
        if why is None and steps is not None and step_of(path) not in steps:
            why = "not intact on every pipeline stage"
        if why is None:
            try:
                return path, load(path, model, optimizer), skipped
            except (OSError, ValueError, RuntimeError) as error:  # MLX: RuntimeError
                why = f"does not load ({error})"
        skipped.append((path, why))
    return None, None, skipped


def load(path, model, optimizer):
    """Restore model and optimizer from a checkpoint directory; returns its state.json."""
    model.load_weights(str(path / "model.safetensors"), strict=False)
    optimizer.state = tree_unflatten(list(mx.load(str(path / "optimizer.safetensors")).items()))
    return json.loads((path / "state.json").read_text())
