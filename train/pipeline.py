"""Pipeline-parallel LoRA: an mlx-lm model's layers split across the ranks in order (stage k on
rank k), each rank holding and training only its own.

Stage 0 also holds the embedding, the last stage the norm, the head and the loss. A step takes
the global batch in M micro-batches, each forward through the stages (the activations sent to
the next stage) and backward (their gradients sent back), in the order of a schedule: GPipe's,
every forward then every backward, or 1F1B's, one forward one backward once the pipeline is
full. A stage keeps only its inputs between a micro-batch's forward and backward and recomputes
its activations in the backward, so its memory is its layers, the inputs of the micro-batches
in flight (GPipe: M; 1F1B: at most S, the number of stages) and one micro-batch's activations.
Each stage's optimizer updates its own adapters: Adam is elementwise, so this is one optimizer
over the whole model.

The models are mlx-lm's whose forward is model.model's embed_tokens, layers (each called as
layer(h, mask)) and norm, then model.lm_head or the embedding as head, and nothing else: those of
cli.PIPELINE_MODELS (Gemma, for one, also scales the embedding and masks some layers to a
window), without sliding-window layers.
"""

import itertools
import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_map

from . import cli, data, distributed, lora
from .errors import fail

SEEN = 8  # each stage's newest intact checkpoints compared on resume: more than rotation keeps


def balanced(layer_bytes, first_bytes, last_bytes, stages):
    """Layers per stage, in order: the cuts nearest to equal shares of all the parameter bytes,
    stage 0 also holding first_bytes (the embedding) and the last stage last_bytes (norm and
    head); at least one layer each."""
    total = first_bytes + sum(layer_bytes) + last_bytes
    before = list(itertools.accumulate(layer_bytes, initial=first_bytes))  # bytes before layer i
    cuts = [0]
    for k in range(1, stages):
        lowest, highest = cuts[-1] + 1, len(layer_bytes) - (stages - k)
        cuts.append(min(range(lowest, highest + 1),
                        key=lambda i, k=k: abs(before[i] - k * total / stages)))
    return [end - start for start, end in zip(cuts, [*cuts[1:], len(layer_bytes)], strict=True)]


def nbytes(module):
    return sum(v.nbytes for _, v in tree_flatten(module.parameters()))


class Stage:
    """This rank's part of the model: model.model's layers start..end (the others None, never
    read: mlx-lm loaded them lazily), stage 0 with the embedding, the last with norm and head.
    Parameter names stay the whole model's (model.layers.5...), as in its checkpoints."""

    def __init__(self, model, counts, rank):
        inner = model.model
        self.model, self.rank, self.split = model, rank, ",".join(map(str, counts))
        self.first, self.last = rank == 0, rank == len(counts) - 1
        self.start, self.end = sum(counts[:rank]), sum(counts[: rank + 1])
        self.tied = getattr(model, "lm_head", None) is None  # the embedding is also the head
        # What travels between stages: known without evaluating (reading) any weight.
        probe = inner.embed_tokens(mx.zeros((1, 1), mx.int32))
        self.dims, self.dtype = probe.shape[-1], probe.dtype
        # Of the whole model, for its adapters (every stage gathers them).
        self.adapter_shapes = {k: (v.shape, v.dtype)
                               for k, v in tree_flatten(model.trainable_parameters())}
        self.trainable = sum(math.prod(shape) for shape, _ in self.adapter_shapes.values())
        self.adapter_config = lora.adapter_config(model)
        for i in range(len(inner.layers)):
            if not self.start <= i < self.end:
                inner.layers[i] = None
        if not (self.first or (self.last and self.tied)):
            inner.embed_tokens = None
        if not self.last:
            inner.norm = None
            if not self.tied:
                model.lm_head = None

    def __call__(self, x):
        """Stage 0: tokens to activations; the others: activations to activations, the last
        stage's to logits."""
        inner = self.model.model
        h = inner.embed_tokens(x) if self.first else x
        mask = "causal" if h.shape[1] > 1 else None  # mlx-lm's create_attention_mask, no cache
        for layer in inner.layers[self.start : self.end]:
            h = layer(h, mask)
        if not self.last:
            return h
        h = inner.norm(h)
        return inner.embed_tokens.as_linear(h) if self.tied else self.model.lm_head(h)

    def receive(self, rows, length, src, group):
        return mx.distributed.recv((rows, length, self.dims), self.dtype, src, group=group)


def load(model_name, data_dir, group, stages_text):
    """(this rank's Stage, train split, valid split): the model loaded lazily, LoRA added to
    every layer as on one process (the same random adapters), then cut to this rank's stage."""
    model, train, valid = lora.load(model_name, data_dir, lazy=True)
    cli.check_split(model_name, getattr(model, "model_type", None), len(model.layers),
                    stages_text, group.size())
    inner = model.model
    if any(getattr(layer, "use_sliding", False) for layer in inner.layers):
        fail(f"--parallel pipeline: {model_name} has sliding-window layers, which the pipeline "
             "does not split; use --parallel data")
    if stages_text is None:
        head = inner.embed_tokens if getattr(model, "lm_head", None) is None else model.lm_head
        counts = balanced([nbytes(layer) for layer in inner.layers], nbytes(inner.embed_tokens),
                          nbytes(inner.norm) + nbytes(head), group.size())
    else:
        counts = [int(n) for n in stages_text.split(",")]
    return Stage(model, counts, group.rank()), train, valid


def check_send_recv(stage, group):
    """A one-number exchange along the pipeline: a backend without send/recv fails here, with
    a clear error, rather than in the first step."""
    try:
        if not stage.last:
            mx.eval(mx.distributed.send(mx.zeros(1), stage.rank + 1, group=group))
        if not stage.first:
            mx.eval(mx.distributed.recv((1,), mx.float32, stage.rank - 1, group=group))
    except RuntimeError as e:
        fail(f"--parallel pipeline: the distributed backend cannot send between ranks ({e}); "
             "use the ring or mpi backend")


def common_steps(steps, group):
    """The steps (each stage's list, newest first) at which every stage has a checkpoint."""
    mine = mx.array([*steps[:SEEN], *[-1] * (SEEN - len(steps[:SEEN]))], mx.int32)
    every = np.array(mx.distributed.all_gather(mine, group=group)).reshape(group.size(), SEEN)
    return set.intersection(*(set(row) for row in every.tolist())) - {-1}


def check_restored(step, group):
    """Every stage resumed from the same step (one whose checkpoint did not load on a stage
    sends the others on to another)."""
    low, high = (int(f(mx.array(step), group=group).item())
                 for f in (mx.distributed.all_min, mx.distributed.all_max))
    if low != high:
        fail(f"--resume: the stages' newest checkpoints that load are at steps {low} to {high}, "
             "not one step; see the skipped checkpoints above")


def loss_sum(logits, targets, weights):
    return (nn.losses.cross_entropy(logits.astype(mx.float32), targets) * weights).sum()


def passes(schedule, stages, micro_batches, rank):
    """Stage rank's passes in order, ("F", m) or ("B", m): GPipe's every forward then every
    backward; 1F1B's as many forwards as the stages after this one, then one forward one
    backward, then the backwards left."""
    warm = micro_batches if schedule == "gpipe" else min(stages - rank - 1, micro_batches)
    steady = [p for m in range(warm, micro_batches) for p in (("F", m), ("B", m - warm))]
    return ([("F", m) for m in range(warm)] + steady
            + [("B", m) for m in range(micro_batches - warm, micro_batches)])


def actions(schedule, stages, micro_batches, rank):
    """Stage rank's actions in order: ("F", m) receives micro-batch m's input (held until its
    backward) and computes its output, ("send", m) sends that output on, ("dh", m) receives the
    gradient of it, ("B", m) computes the backward and sends the gradient of the input back.
    Sends and receives block until the other side's: each output goes as soon as this stage has
    received as many gradients as the next stage sends before taking that input (1F1B's next
    stage sends a gradient, then takes the next input), so both stages meet each exchange in
    the same order."""
    last = rank == stages - 1
    before, done = {}, 0  # of each input of the next stage: the backward passes it runs first
    for kind, m in [] if last else passes(schedule, stages, micro_batches, rank + 1):
        if kind == "F":
            before[m] = done
        done += kind == "B"
    done, waiting, steps = 0, [], []
    for kind, m in passes(schedule, stages, micro_batches, rank):
        steps += [("F", m)] if kind == "F" else [("dh", m)]
        done += kind == "B"
        waiting += [m] if kind == "F" and not last else []
        while waiting and before[waiting[0]] <= done:
            steps.append(("send", waiting.pop(0)))
        steps += [("B", m)] if kind == "B" else []
    return steps


def step(stage, batch, micro_batches, schedule, group):
    """One step over the global batch (inputs, targets, weights as numpy) in the schedule's
    order: (the mean loss over the batch's targets, on every rank; this stage's gradients)."""
    rank = stage.rank
    scale = 1 / float(batch[2].sum())
    micro = [tuple(map(mx.array, data.shard(batch, m, micro_batches)))
             for m in range(micro_batches)]

    def objective(params, h, cotangent, targets, weights):
        stage.model.update(params)
        out = stage(h)
        if stage.last:  # the cotangent of the loss is 1
            out = loss_sum(out, targets, weights) * scale
        return (out * cotangent).sum()

    gradient = mx.value_and_grad(objective, argnums=0 if stage.first else (0, 1))
    params = stage.model.trainable_parameters()
    grads, loss = None, mx.array(0.0)
    held, out, cotangent = {}, {}, {}  # of the micro-batches in flight
    for kind, m in actions(schedule, group.size(), micro_batches, rank):
        inputs, targets, weights = micro[m]
        if kind == "F":
            held[m] = inputs if stage.first else stage.receive(*inputs.shape, rank - 1, group)
            out[m] = None if stage.last else stage(held[m])
            mx.eval(held[m], out[m])
        elif kind == "send":
            mx.eval(mx.distributed.send(out.pop(m), rank + 1, group=group))
        elif kind == "dh":
            cotangent[m] = (mx.array(1.0) if stage.last
                            else stage.receive(*inputs.shape, rank + 1, group))
            mx.eval(cotangent[m])
        else:
            value, found = gradient(params, held.pop(m), cotangent.pop(m), targets, weights)
            if not stage.first:
                found, dh = found
                mx.eval(mx.distributed.send(dh, rank - 1, group=group))
            grads = found if grads is None else tree_map(mx.add, grads, found)
            loss = loss + value if stage.last else loss
            mx.eval(grads, loss)
    stage.model.update(params)
    # The loss is the last stage's: a sum to which the others add zeros.
    return mx.distributed.all_sum(loss, group=group), grads


def evaluate(stage, split, batch_size, group, heartbeat):
    """(loss, accuracy) over the whole split, every batch through the pipeline; the heartbeat's
    progress moves on at each batch."""
    totals = mx.zeros(3)  # loss sum, correct targets, targets: the last stage's
    for i in range(0, len(split), batch_size):
        inputs, targets, weights = map(mx.array, split[range(i, min(i + batch_size, len(split)))])
        h = inputs if stage.first else stage.receive(*inputs.shape, stage.rank - 1, group)
        out = stage(h)
        if stage.last:
            correct = ((out.argmax(-1) == targets) * weights).sum()
            totals += mx.stack([loss_sum(out, targets, weights), correct, weights.sum()])
            mx.eval(totals)
        else:
            mx.eval(mx.distributed.send(out, stage.rank + 1, group=group))
        heartbeat.advance()
    loss, correct, count = mx.distributed.all_sum(totals, group=group).tolist()
    return loss / count, correct / count


def adapters(stage, group):
    """The whole model's adapters, on every rank: each stage's own and zeros for the others',
    summed in one all-reduce (one per tensor cost 40 ms each on the ring over loopback)."""
    own = dict(tree_flatten(stage.model.trainable_parameters()))
    whole = [(name, own[name] if name in own else mx.zeros(shape, dtype))
             for name, (shape, dtype) in sorted(stage.adapter_shapes.items())]
    summed = distributed.all_sum_together(whole, group)
    mx.eval([array for _, array in summed])  # here on every rank: only rank 0 writes them
    return dict(summed)
