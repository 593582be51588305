"""Data: the IDX loader and checked download, the batch order, sharding, LoRA target masks."""

import hashlib

import numpy as np
import pytest

from train import data, lora, mnist

from .conftest import bar_images, write_idx


def test_read_idx_plain_and_gzipped(tmp_path):
    images, labels = bar_images(5, seed=0)
    write_idx(tmp_path / "images.gz", images)
    write_idx(tmp_path / "labels", labels)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "images.gz"), images)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "labels"), labels)


def test_load_mnist_from_a_directory(idx_dir):
    train, test = data.load("mnist", idx_dir, context=None)
    assert (len(train), len(test)) == (600, 200)
    inputs, targets, weights = train[np.array([0, 5])]
    assert inputs.shape == (2, 28, 28, 1) and inputs.max() == 1.0
    assert targets.dtype == np.int32 and weights.tolist() == [1.0, 1.0]


def test_download_checks_md5_and_caches(tmp_path):
    source = tmp_path / "published.gz"
    source.write_bytes(b"idx bytes")
    good = hashlib.md5(b"idx bytes").hexdigest()
    target = tmp_path / "cache" / "published.gz"
    assert mnist.download(source.as_uri(), target, good).read_bytes() == b"idx bytes"
    source.unlink()  # a cached file with the right checksum is not fetched again
    assert mnist.download(source.as_uri(), target, good) == target

    source.write_bytes(b"tampered")
    other = tmp_path / "cache" / "other.gz"
    with pytest.raises(ValueError, match="expected " + good):
        mnist.download(source.as_uri(), other, good)
    assert list(other.parent.iterdir()) == [target]  # nothing half-written is left


def test_global_batches_visit_every_example_once_per_epoch():
    n, batch = 10, 4
    seen = np.concatenate([data.global_batch(7, step, batch, n) for step in range(5)])
    assert sorted(seen[:n]) == list(range(n)) and sorted(seen[n:]) == list(range(n))
    assert not np.array_equal(seen[:n], seen[n:])  # each epoch has its own order
    np.testing.assert_array_equal(data.global_batch(7, 3, batch, n), seen[12:16])


def test_shards_are_equal_disjoint_rows():
    rows = (np.arange(8), np.arange(8) * 10)
    shards = [data.shard(rows, rank, 4) for rank in range(4)]
    assert [s[0].tolist() for s in shards] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert shards[3][1].tolist() == [60, 70]


@pytest.mark.parametrize("world", [2, 3, 5, 16])
def test_any_world_splits_the_batch_into_shares_one_row_apart(world):
    rows = np.arange(64)
    shards = [data.shard((rows,), rank, world)[0] for rank in range(world)]
    np.testing.assert_array_equal(np.concatenate(shards), rows)
    assert [len(s) for s in shards] == [len(s) for s in np.array_split(rows, world)]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_the_split_in_words():
    assert data.describe_batch(64, 4) == "global batch 64 (16 per rank)"
    assert data.describe_batch(64, 3) == "global batch 64 (22/21/21 per rank)"
    assert data.describe_batch(100, 16) == "global batch 100 (7 on ranks 0-3, 6 on ranks 4-15)"


def test_text_windows_predict_the_next_byte(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(range(200)))
    train, test = data.load("text", path, context=8)
    inputs, targets, _ = train[np.array([3])]
    assert inputs[0].tolist() == list(range(3, 11)) and targets[0].tolist() == list(range(4, 12))
    assert len(train) == 180 - 8 and len(test) == 2  # 20 held-out bytes: 2 windows of 8
    with pytest.raises(ValueError, match="need more than"):
        data.load("text", path, context=64)


def test_lora_examples_weigh_only_completion_tokens():
    examples = lora.Examples([([5, 6, 7, 8], 2), ([9, 10], 0)])
    inputs, targets, weights = examples[np.array([0, 1])]
    assert inputs.tolist() == [[5, 6, 7], [9, 10, 0]]
    assert targets.tolist() == [[6, 7, 8], [10, 0, 0]]
    # example 0: tokens 0-1 are the prompt, so only 7 and 8 count; example 1: no padding
    assert weights.tolist() == [[0, 1, 1], [1, 0, 0]]


def test_lora_reads_each_of_mlx_lms_jsonl_formats(tiny_llm, tmp_path, capsys):
    from mlx_lm import load

    model_dir, _ = tiny_llm
    _, tokenizer = load(str(model_dir))
    cat, eos = tokenizer.encode("the cat is red"), tokenizer.eos_token_id
    chat = [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": "is red"}]
    assert lora.encode({"text": "the cat is red"}, tokenizer) == ([*cat, eos], 0)
    assert lora.encode({"prompt": "the cat", "completion": "is red"}, tokenizer) == (
        [*tokenizer.apply_chat_template(chat), eos], 0)
    assert lora.encode({"messages": chat}, tokenizer) == (
        [*tokenizer.apply_chat_template(chat), eos], 0)

    split = tmp_path / "train.jsonl"
    split.write_text('{"text": "the dog"}\n\n{"question": "the cat"}\n')
    with pytest.raises(SystemExit) as exit_:
        lora.read_split(split, tokenizer)
    assert exit_.value.code == 2
    assert f"{split} line 3: keys ['question']; expected text" in capsys.readouterr().err
