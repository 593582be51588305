"""LoRA fine-tuning of an mlx-lm model on mlx-lm's jsonl data (train.jsonl, valid.jsonl)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np

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
