"""LoRA fine-tuning of an mlx-lm model on mlx-lm's jsonl data (train.jsonl, valid.jsonl)."""

import json
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

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


def load(model_name, data_dir):
    """(model with LoRA layers, trainable = adapters only, train split, valid split)."""
    from mlx_lm import load as load_model
    from mlx_lm.tuner.datasets import load_local_dataset
    from mlx_lm.tuner.utils import linear_to_lora_layers

    model, tokenizer = load_model(model_name)
    model.freeze()
    linear_to_lora_layers(model, len(model.layers), LORA)
    train, valid, _ = load_local_dataset(Path(data_dir), tokenizer, SimpleNamespace())
    return model, *(Examples([d.process(d[i]) for i in range(len(d))]) for d in (train, valid))


def save_adapters(model, directory):
    """The adapters in mlx-lm's layout, for `mlx_lm.generate --adapter-path directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(directory / "adapters.safetensors"),
                        dict(tree_flatten(model.trainable_parameters())))
    config = {"fine_tune_type": "lora", "num_layers": len(model.layers), "lora_parameters": LORA}
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=1))
