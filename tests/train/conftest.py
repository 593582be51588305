"""Helpers for the train/ tests: run `python -m train` (alone or under mpirun) and read its files,
plus small local data: IDX image files, a text file, a tiny mlx-lm model with jsonl data."""

import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIRUN = shutil.which("mpirun")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="needs Open MPI's mpirun")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")
PAGE = os.sysconf("SC_PAGE_SIZE")


def train_cmd(*args):
    return [sys.executable, "-m", "train", *map(str, args)]


def mpirun_cmd(*apps):
    """mpirun running each argv in apps as one rank (MPMD: `app0 : app1 ...`)."""
    cmd = [MPIRUN, "--bind-to", "none", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for i, app in enumerate(apps):
        cmd += ([":"] if i else []) + ["-np", "1", *app]
    return cmd


def run(cmd, check=True, timeout=600, **kwargs):
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            **kwargs)
    if check and result.returncode:
        raise AssertionError(f"{cmd} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def final_weights(out):
    """The newest checkpoint's model weights as numpy arrays."""
    latest = sorted((Path(out) / "checkpoints").glob("step_*"))[-1]
    return {k: np.array(v) for k, v in mx.load(str(latest / "model.safetensors")).items()}


def disk_bytes(directory):
    """What directory's files take on a tmpfs: whole pages."""
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in directory.iterdir())


@pytest.fixture
def small_disk():
    """small_disk(directory, free): a tmpfs mounted on directory with `free` bytes left and the
    rest taken by the file it returns (delete it to free the space); unmounted after the test."""
    mounted = []

    def mount(directory, free, taken=64 * PAGE):
        directory.mkdir(parents=True, exist_ok=True)
        size = -(-free // PAGE) * PAGE + taken
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory],
                       check=True)
        mounted.append(directory)
        filler = directory / ".filler"
        filler.write_bytes(bytes(taken))
        return filler

    yield mount
    for directory in mounted:
        subprocess.run(["umount", "--lazy", directory], check=True)


def summary(out):
    return json.loads((Path(out) / "summary.json").read_text())


def metrics(out):
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def long_jsonl(directory, train, valid, words=100):
    """mlx-lm jsonl data for tests/conftest.py's tiny_llm: `train` and `valid` examples of
    `words` words of its vocabulary (a large split makes a slow load or evaluation)."""
    rng = random.Random(0)
    vocab = ["the", "cat", "dog", "is", "red", "blue", "green", "sat", "on", "a", "mat", "ran",
             "to", "park"]
    directory.mkdir()
    for split, count in (("train", train), ("valid", valid)):
        lines = (json.dumps({"text": " ".join(rng.choices(vocab, k=words))}) for _ in range(count))
        (directory / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def phase_spans(beats, pid):
    """{phase: seconds} of one process, from (monotonic time, heartbeat) samples."""
    mine = [(t, b["phase"]) for t, b in beats if b["pid"] == pid]
    spans = {}
    for (t, phase), (t_next, _) in zip(mine, [*mine[1:], mine[-1]], strict=True):
        spans[phase] = spans.get(phase, 0.0) + t_next - t
    return spans


def write_idx(path, array):
    """array (unsigned bytes) as an IDX file, gzipped if path ends in .gz."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def bar_images(count, seed):
    """28x28 images whose label is the row of a bright horizontal bar (plus noise)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count)
    images = rng.integers(0, 60, (count, 28, 28))
    for image, label in zip(images, labels, strict=True):
        image[2 + 2 * label : 4 + 2 * label, 4:24] = 255
    return images, labels


@pytest.fixture(scope="session")
def idx_dir(tmp_path_factory):
    """A small dataset in MNIST's four IDX files (gzipped, as published)."""
    directory = tmp_path_factory.mktemp("idx")
    for prefix, count, seed in (("train", 600, 1), ("t10k", 200, 2)):
        images, labels = bar_images(count, seed)
        write_idx(directory / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return directory


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    """About 90 KB of real English-and-Python text: the source of the argparse module."""
    import argparse

    path = tmp_path_factory.mktemp("text") / "argparse.txt"
    shutil.copy(argparse.__file__, path)
    return path


