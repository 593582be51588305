"""Datasets as splits of numbered examples, and which examples make each rank's batch.

A split maps a list of example indices to numpy arrays (inputs, targets, weights); the weights
say which targets count towards the loss (all of them for images, the real tokens for padded
text). The order of examples is a pure function of (seed, step), so the step is the whole data
position a checkpoint needs, and every rank can compute the global batch and take its shard.
"""

from functools import lru_cache
from pathlib import Path

import numpy as np

from . import mnist

IMAGE_DATASETS = ("digits", "mnist", "fashion-mnist")


class Images:
    def __init__(self, images, labels):
        self.images = images.astype(np.float32)
        self.labels = labels.astype(np.int32)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.images[idx], self.labels[idx], np.ones(len(idx), np.float32)


class TextWindows:
    """Byte-level language modelling: example i is the window starting at byte starts[i]."""

    def __init__(self, data, context, starts):
        self.data, self.context, self.starts = data, context, starts

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, idx):
        rows = np.stack([self.data[s : s + self.context + 1] for s in self.starts[idx]])
        inputs, targets = rows[:, :-1].astype(np.int32), rows[:, 1:].astype(np.int32)
        return inputs, targets, np.ones(targets.shape, np.float32)


def digits():
    """scikit-learn's 8x8 handwritten digits (ships with the package), 20% held out."""
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    images, labels = d.images[order][..., None] / 16.0, d.target[order]
    cut = len(labels) * 4 // 5
    return Images(images[:cut], labels[:cut]), Images(images[cut:], labels[cut:])


def idx_images(name, directory):
    train_x, train_y, test_x, test_y = mnist.load(name, directory)
    return Images(train_x[..., None] / 255.0, train_y), Images(test_x[..., None] / 255.0, test_y)


def text(path, context):
    """A text file as bytes; the last 10% is the evaluation split (non-overlapping windows)."""
    data = np.frombuffer(Path(path).read_bytes(), np.uint8)
    cut = len(data) * 9 // 10
    if cut - context < 1 or len(data) - cut <= context:
        raise ValueError(f"{path}: {len(data)} bytes, need more than {10 * (context + 1)}")
    train = TextWindows(data[:cut], context, np.arange(cut - context))
    test = TextWindows(data[cut:], context, np.arange(0, len(data) - cut - context, context))
    return train, test


def load(name, path, context):
    """(train, test) splits of a built-in dataset."""
    if name == "digits":
        return digits()
    if name in ("mnist", "fashion-mnist"):
        return idx_images(name, path)
    return text(path, context)


@lru_cache(maxsize=2)
def epoch_order(seed, epoch, n):
    return np.random.default_rng([seed, epoch]).permutation(n)


def global_batch(seed, step, batch_size, n):
    """Indices of the examples of global batch `step` (0-based): consecutive slices of one
    shuffled order per epoch, so every example is seen once per epoch."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    epochs, offsets = np.divmod(positions, n)
    return np.array([epoch_order(seed, int(e), n)[o] for e, o in zip(epochs, offsets, strict=True)])


def shard_sizes(rows, world_size):
    """Rows of each rank's share: as equal as can be, the first ranks one more (np.array_split's
    split). The training loss weighs each rank's sum by the global batch, so the gradients are
    one process's whatever the split."""
    base, extra = divmod(rows, world_size)
    return [base + (rank < extra) for rank in range(world_size)]


def describe_batch(rows, world_size):
    """The global batch and its split in words: `global batch 64 (22/21/21 per rank)`, or for
    many ranks `global batch 100 (7 on ranks 0-3, 6 on ranks 4-15)`."""
    sizes = shard_sizes(rows, world_size)
    extra = rows % world_size
    if not extra:
        split = f"{sizes[0]} per rank"
    elif world_size <= 8:
        split = "/".join(map(str, sizes)) + " per rank"
    else:
        split = f"{sizes[0]} on ranks 0-{extra - 1}, {sizes[-1]} on ranks {extra}-{world_size - 1}"
    return f"global batch {rows} ({split})"


def shard(arrays, rank, world_size):
    """This rank's share of the rows of each array (shard_sizes)."""
    sizes = shard_sizes(len(arrays[0]), world_size)
    start = sum(sizes[:rank])
    return tuple(a[start : start + sizes[rank]] for a in arrays)
