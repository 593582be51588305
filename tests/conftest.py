"""Shared fixtures: `vcluster`, a factory of virtual Thunderbolt clusters (tools/vcluster.py), and
`tiny_llm`, a tiny mlx-lm model with jsonl data."""

import json
import os
import random
import re
import shutil
import subprocess

import pytest

from tools.vcluster import VirtualCluster

# tests/integration/conftest.py's clusters, each built once per test run, and the pytest-xdist
# group that runs every test on it (one worker of `make test`, which builds the cluster once).
# train_cluster's tests take about as long as all the other clusters' together (those that
# build their own included): a group each, one per worker; the in-process tests (no group) go
# to whichever worker is free.
SESSION_CLUSTERS = {"train_cluster": "train-cluster", "fresh_install": "other-clusters",
                    "cable_ring": "other-clusters"}


def cluster_unavailable() -> str | None:
    """Why virtual clusters cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "virtual cluster needs root (network and mount namespaces)"
    netns = shutil.which("ip") and subprocess.run(["ip", "netns", "list"], capture_output=True)
    if not netns or netns.returncode:
        return "virtual cluster needs iproute2 with `ip netns`"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    reason = cluster_unavailable() if any("cluster" in i.keywords for i in items) else None
    for item in items:
        if "cluster" in item.keywords:
            groups = {SESSION_CLUSTERS[n] for n in SESSION_CLUSTERS.keys() & set(item.fixturenames)}
            assert len(groups) <= 1, f"{item.nodeid} uses clusters of two groups: {groups}"
            group = groups.pop() if groups else "other-clusters"
            item.add_marker(pytest.mark.xdist_group(group))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    # Last, when the other worker's in-process tests are over: their load would skew what it
    # compares.
    items.sort(key=lambda item: "speed" in item.keywords)


# Seconds each `make test` worker spent in each group's tests (setup and teardown included):
# with the slowest tests, what every CI log says about where its time goes and how the groups
# share the workers.
BUSY: dict[tuple[str, str], float] = {}
# The same seconds by group and test file (those of 10 s or more): where a group's time goes.
BUSY_FILES: dict[tuple[str, str], float] = {}


def pytest_runtest_logreport(report):
    worker = getattr(getattr(report, "node", None), "workerinput", {}).get("workerid")
    if worker:  # a report pytest-xdist brought back from a worker
        group = report.nodeid.rpartition("@")[2]  # xdist's suffix, when the test has a group
        group = group if group in SESSION_CLUSTERS.values() else "in-process"
        BUSY[worker, group] = BUSY.get((worker, group), 0.0) + report.duration
        key = group, report.nodeid.split("::")[0]
        BUSY_FILES[key] = BUSY_FILES.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if BUSY:
        terminalreporter.write_sep("=", "busy seconds per worker and group")
        for worker in sorted({w for w, _ in BUSY}):
            groups = {g: s for (w, g), s in BUSY.items() if w == worker}
            parts = ", ".join(f"{g} {s:.0f}" for g, s in sorted(groups.items()))
            terminalreporter.write_line(f"{worker}: {sum(groups.values()):.0f} ({parts})")
        for group in sorted({g for g, _ in BUSY_FILES}):
            files = sorted(((s, f) for (g, f), s in BUSY_FILES.items() if g == group and s >= 10),
                           reverse=True)
            if files:
                terminalreporter.write_line(f"{group}: " + ", ".join(
                    f"{f.removeprefix('tests/')} {s:.0f}" for s, f in files))


@pytest.fixture
def vcluster(tmp_path_factory):
    """`vc = vcluster(hosts=2, **kw)` returns an up VirtualCluster; all are removed at test end."""
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)
    clusters = []

    def make(hosts=2, **kw):
        kw.setdefault("workdir", tmp_path_factory.mktemp("vcluster") / "vc")
        vc = VirtualCluster(hosts=hosts, **kw)
        clusters.append(vc)
        return vc.up()

    yield make
    errors = []
    for vc in reversed(clusters):
        try:
            vc.down()
        except Exception as exc:  # keep tearing the others down, then report
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory):
    """(model directory, data directory): a randomly initialised 2-layer llama that mlx_lm.load
    reads (config.json, model.safetensors, a word-level tokenizer) and mlx-lm jsonl data."""
    return write_llm(tmp_path_factory.mktemp("llm"), tmp_path_factory.mktemp("jsonl"))


def write_shards(model_dir, weights, shards, layers):
    """weights in shards files, as write_llm describes them."""
    import mlx.core as mx

    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]

    def shard(key):
        if match := re.match(r"model\.layers\.(\d+)\.", key):
            return int(match[1]) * shards // layers
        return 0 if key.startswith("model.embed_tokens.") else shards - 1

    for i, name in enumerate(names):
        mx.save_safetensors(str(model_dir / name),
                            {k: v for k, v in weights.items() if shard(k) == i})
    index = {"metadata": {"total_size": sum(v.nbytes for v in weights.values())},
             "weight_map": {k: names[shard(k)] for k in sorted(weights)}}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index))


def write_llm(model_dir, data_dir, shards=1, **config):
    """(model_dir, data_dir) with tiny_llm's model, tokenizer and data; config: the model's
    settings that differ (e.g. num_hidden_layers), for a bigger one; shards: the number of
    weight files, as a Hugging Face model of several has them (model-0000k-of-0000n.safetensors
    and an index): the layers in that many equal runs, the embedding in the first file, the
    norm and the head in the last."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    words = ["<unk>", "<eos>", "the", "cat", "dog", "is", "red", "blue", "green", "sat", "on", "a",
             "mat", "ran", "to", "park"]
    vocab = {w: i for i, w in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    # A chat template, so that prompt/completion and chat examples can be encoded too.
    template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>",
                            chat_template=template).save_pretrained(model_dir)
    config = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-5, "vocab_size": len(vocab), "tie_word_embeddings": True,
              "eos_token_id": 1, **config}
    (model_dir / "config.json").write_text(json.dumps(config))
    mx.random.seed(0)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    if shards == 1:
        mx.save_safetensors(str(model_dir / "model.safetensors"), weights)
    else:
        write_shards(model_dir, weights, shards, config["num_hidden_layers"])

    rng = random.Random(0)
    for name, count in (("train", 64), ("valid", 16)):
        lines = []
        for _ in range(count):
            animal, colour = rng.choice(["cat", "dog"]), rng.choice(["red", "blue", "green"])
            text = f"the {animal} is {colour} the {animal} sat on a mat the {animal} ran to park"
            lines.append(json.dumps({"text": text}) + "\n")
        (data_dir / f"{name}.jsonl").write_text("".join(lines))
    return model_dir, data_dir
