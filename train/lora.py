"""LoRA fine-tuning of an mlx-lm model on mlx-lm's jsonl data (train.jsonl, valid.jsonl).

Only mlx-lm's public `load` is used: the LoRA layers and the data loading are ours (mlx-lm's
tuner internals change between minor versions), and the adapters are written in the layout
`mlx_lm.generate --adapter-path` reads (its LoRALinear's lora_a / lora_b, the keys we wrapped).
"""

import json
import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_unflatten

from .errors import fail

LORA = {"rank": 8, "scale": 20.0, "dropout": 0.0}  # mlx-lm's defaults, without dropout
MAX_TOKENS = 2048  # longer examples are cut, as mlx-lm does by default


class Examples:
    """Tokenised examples; targets before an example's prompt offset do not count."""

    def __init__(self, examples):
        self.examples = [(tokens[:MAX_TOKENS], offset) for tokens, offset in examples]

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        chosen = [self.examples[i] for i in idx]
        width = max(len(tokens) for tokens, _ in chosen)
        rows = np.zeros((len(chosen), width), np.int32)
        weights = np.zeros((len(chosen), width - 1), np.float32)
        for row, (tokens, offset) in enumerate(chosen):
            rows[row, : len(tokens)] = tokens
            # target j is token j + 1: count prompt-free, non-padding positions
            weights[row, max(offset, 1) - 1 : len(tokens) - 1] = 1.0
        return rows[:, :-1], rows[:, 1:], weights


class LoRALinear(nn.Module):
    """y = linear(x) + scale * (x @ lora_a) @ lora_b; lora_b starts at zero, so training starts
    from the base model exactly. Names and initialisation as mlx-lm's, so its loader reads ours."""

    def __init__(self, linear, rank, scale):
        super().__init__()
        output_dims, input_dims = linear.weight.shape
        if isinstance(linear, nn.QuantizedLinear):
            input_dims = input_dims * 32 // linear.bits
        self.linear, self.scale = linear, scale
        bound = 1 / math.sqrt(input_dims)
        self.lora_a = mx.random.uniform(low=-bound, high=bound, shape=(input_dims, rank))
        self.lora_b = mx.zeros((rank, output_dims))

    def __call__(self, x):
        return self.linear(x) + (self.scale * ((x @ self.lora_a) @ self.lora_b)).astype(x.dtype)


def add_lora(model):
    """Every linear layer of every block becomes a LoRALinear: only its adapters train."""
    model.freeze()
    for block in model.layers:
        block.update_modules(tree_unflatten(
            [(path, LoRALinear(m, LORA["rank"], LORA["scale"]))
             for path, m in block.named_modules()
             if isinstance(m, (nn.Linear, nn.QuantizedLinear))]))


def lora_keys(model):
    """The wrapped layers' paths within a block: mlx-lm's loader wraps exactly these."""
    return sorted({path for block in model.layers for path, m in block.named_modules()
                   if isinstance(m, LoRALinear)})


def encode(example, tokenizer):
    """An mlx-lm jsonl example ({"text"}, {"prompt", "completion"} or {"messages"}) as
    (tokens ending in EOS, offset of the first target token: 0, every token counts)."""
    if "text" in example:
        tokens = tokenizer.encode(example["text"])
    elif "messages" in example:
        tokens = tokenizer.apply_chat_template(example["messages"], tools=example.get("tools"))
    elif {"prompt", "completion"} <= example.keys():
        tokens = tokenizer.apply_chat_template(
            [{"role": "user", "content": example["prompt"]},
             {"role": "assistant", "content": example["completion"]}])
    else:
        raise ValueError(f"keys {sorted(example)}; expected text, prompt and completion, or "
                         "messages")
    if not tokens or tokens[-1] != tokenizer.eos_token_id:
        tokens = [*tokens, tokenizer.eos_token_id]
    return tokens, 0


def read_split(path, tokenizer):
    examples = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            examples.append(encode(json.loads(line), tokenizer))
        except ValueError as e:  # bad JSON, or an example of no known format
            fail(f"{path} line {number}: {e}")
    if not examples:
        fail(f"{path} has no examples")
    return Examples(examples)


def load(model_name, data_dir, lazy=False, partial=False):
    """(model with LoRA layers, trainable = adapters only, train split, valid split); lazy: no
    weight read until used; partial: weight files may be missing (a pipeline stage's host holds
    only its stages' files), their tensors left as made, never read. mlx_lm.load's steps, with
    load_model's strict."""
    from mlx_lm.utils import load_model, load_tokenizer

    path = model_path(model_name)
    model, config = load_model(path, lazy=lazy, strict=not partial)
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    add_lora(model)
    return model, *(read_split(data_dir / f"{split}.jsonl", tokenizer)
                    for split in ("train", "valid"))


def model_path(model_name):
    """The model's directory: model_name, or a Hugging Face repo's snapshot (fetched if need
    be), as mlx_lm.load finds it."""
    from mlx_lm.utils import _download

    return _download(str(model_name))


def adapter_config(model):
    """adapter_config.json: how mlx-lm's loader wraps the model before it reads the adapters."""
    return {"fine_tune_type": "lora", "num_layers": len(model.layers),
            "lora_parameters": {**LORA, "keys": lora_keys(model)}}


def save_adapters(adapters, config, directory):
    """The adapters ({name: array}) in mlx-lm's layout, for `mlx_lm.generate --adapter-path
    directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(directory / "adapters.safetensors"), adapters)
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=1))
