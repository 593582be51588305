"""The built-in models: two image classifiers and a small byte-level GPT."""

import mlx.core as mx
import mlx.nn as nn

CONTEXT = 64  # bytes the GPT sees at once
CLASSES = 10


class MLP(nn.Module):
    def __init__(self, in_dims, hidden, out_dims=CLASSES):
        super().__init__()
        self.layers = [nn.Linear(in_dims, hidden), nn.Linear(hidden, hidden)]
        self.head = nn.Linear(hidden, out_dims)

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for layer in self.layers:
            x = nn.relu(layer(x))
        return self.head(x)


class CNN(nn.Module):
    def __init__(self, side, channels=(16, 32), out_dims=CLASSES):
        super().__init__()
        self.convs = [nn.Conv2d(1, channels[0], 3, padding=1),
                      nn.Conv2d(channels[0], channels[1], 3, padding=1)]
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(channels[1] * (side // 4) ** 2, out_dims)

    def __call__(self, x):
        for conv in self.convs:
            x = self.pool(nn.relu(conv(x)))
        return self.head(x.reshape(x.shape[0], -1))


class GPT(nn.Module):
    def __init__(self, vocab=256, dims=64, heads=4, layers=2, context=CONTEXT):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dims)
        self.positions = nn.Embedding(context, dims)
        self.blocks = nn.TransformerEncoder(layers, dims, heads, norm_first=True)
        self.head = nn.Linear(dims, vocab)

    def __call__(self, x):
        length = x.shape[1]
        mask = nn.MultiHeadAttention.create_additive_causal_mask(length)
        h = self.tokens(x) + self.positions(mx.arange(length))
        return self.head(self.blocks(h, mask))


def build(name, image_shape, width):
    """A built-in model; image_shape is (height, width, 1) of the data for mlp and cnn; width:
    mlp's hidden units per layer."""
    if name == "mlp":
        return MLP(image_shape[0] * image_shape[1], hidden=width)
    if name == "cnn":
        return CNN(image_shape[0])
    return GPT()
