"""Pipeline-parallel LoRA: an mlx-lm model's layers split across the ranks in order (stage k on
rank k), each rank holding and training only its own; on R times as many ranks as stages, R
replicas of the pipeline.

Stage 0 also holds the embedding, the last stage the norm, the head and the loss. A step takes
the global batch in M micro-batches, each forward through the stages (the activations sent to
the next stage) and backward (their gradients sent back), in the order of a schedule: GPipe's,
every forward then every backward, or 1F1B's, one forward one backward once the pipeline is
full. A stage keeps only its inputs between a micro-batch's forward and backward and recomputes
its activations in the backward, so its memory is its layers, the inputs of the micro-batches
in flight (GPipe: M; 1F1B: at most S, the number of stages) and one micro-batch's activations.
Each stage's optimizer updates its own adapters: Adam is elementwise, so this is one optimizer
over the whole model.

Replicas: with S stages, rank r*S + k is stage k of replica r, a replica's stages neighbouring
ranks: MLX's ring backend sends only to the ranks next to one in the ring. Each replica takes its
share of the global batch, as data parallel's ranks do, and each stage's gradients are summed over
its replicas after the backward: the replicas of a stage stay identical, replica 0 writes their
checkpoints and gives its state to the others on resume. Every collective spans the whole world
(the ring backend has no Group.split, and on MPI a split group aborts at finalize).

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
from mlx.utils import tree_flatten, tree_map, tree_map_with_path

from . import cli, data, distributed, lora, split
from .errors import fail

SEEN = 8  # each stage's newest intact checkpoints compared on resume: more than rotation keeps


class Stage:
    """This rank's part of the model: model.model's layers start..end (the others None, never
    read: mlx-lm loaded them lazily), stage 0 with the embedding, the last with norm and head.
    Parameter names stay the whole model's (model.layers.5...), as in its checkpoints."""

    def __init__(self, model, counts, rank, replicas=1):
        inner = model.model
        self.model, self.split = model, ",".join(map(str, counts))
        self.replica, self.index = divmod(rank, len(counts))  # this stage, of this replica
        self.stages, self.replicas = len(counts), replicas
        self.first, self.last = self.index == 0, self.index == len(counts) - 1
        self.start, self.end = sum(counts[: self.index]), sum(counts[: self.index + 1])
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

    def peer(self, offset):
        """The rank of the stage offset after this one (-1: before) in this replica."""
        return self.replica * self.stages + self.index + offset

    def receive(self, rows, length, offset, group):
        """Activations or their gradients from the stage offset away."""
        return mx.distributed.recv((rows, length, self.dims), self.dtype, self.peer(offset),
                                   group=group)


def load(model_name, data_dir, group, stages_text):
    """(this rank's Stage, train split, valid split): the model loaded lazily, LoRA added to
    every layer as on one process (the same random adapters), then cut to this rank's stage."""
    model, train, valid = lora.load(model_name, data_dir, lazy=True, partial=True)
    stages, replicas = cli.layout(stages_text, group.size())
    cli.check_split(model_name, getattr(model, "model_type", None), len(model.layers),
                    stages_text, stages)
    inner = model.model
    if any(getattr(layer, "use_sliding", False) for layer in inner.layers):
        fail(f"--parallel pipeline: {model_name} has sliding-window layers, which the pipeline "
             "does not split; use --parallel data")
    # The weight files' bytes, as train.yml's staging splits them (split.py).
    path = lora.model_path(model_name)
    counts = split.counts(split.tensors(path), stages_text, stages)
    if lacking := split.lacking(path, counts, group.rank() % stages):
        fail(f"--parallel pipeline: {path} lacks {', '.join(sorted(lacking))}, which stage "
             f"{group.rank() % stages} of {','.join(map(str, counts))} reads: this host holds "
             "another split's weight files; stage the model again (train.yml does) or give "
             "--stages as it was staged")
    return Stage(model, counts, group.rank(), replicas), train, valid


def check_send_recv(stage, group):
    """A one-number exchange along the pipeline: a backend without send/recv fails here, with
    a clear error, rather than in the first step."""
    try:
        if not stage.last:
            mx.eval(mx.distributed.send(mx.zeros(1), stage.peer(1), group=group))
        if not stage.first:
            mx.eval(mx.distributed.recv((1,), mx.float32, stage.peer(-1), group=group))
    except RuntimeError as e:
        fail(f"--parallel pipeline: the distributed backend cannot send between ranks ({e}); "
             "use the ring or mpi backend")


def common_steps(steps, stage, group):
    """The steps (each stage's list, newest first, on its replica 0, ranks 0 to S-1: the others'
    are not read) at which every stage has a checkpoint."""
    mine = mx.array([*steps[:SEEN], *[-1] * (SEEN - len(steps[:SEEN]))], mx.int32)
    every = np.array(mx.distributed.all_gather(mine, group=group)).reshape(group.size(), SEEN)
    return set.intersection(*(set(row) for row in every[: stage.stages].tolist())) - {-1}


def from_first_replica(stage, tree, group):
    """tree (of the same structure on every replica of this stage) as replica 0 of this stage
    has it, bit for bit: one sum of bytes over the world, in which replica 0 of each stage gives
    its own at its place and every other rank zeros."""
    if stage.replicas == 1:
        return tree
    # In the order of their names: each rank's tree may have its own order (a checkpoint's).
    items = sorted((k, a) for k, a in tree_flatten(tree) if isinstance(a, mx.array))
    mine = mx.concatenate([mx.view(a.reshape(-1), mx.uint8) for _, a in items])
    sizes = mx.distributed.all_gather(mx.array([mine.size]), group=group).reshape(-1).tolist()
    start = sum(sizes[: stage.index])  # replica 0's place: its rank is the stage's
    given = mine if stage.replica == 0 else mx.zeros_like(mine)
    whole = mx.concatenate([mx.zeros(start, mx.uint8), given,
                            mx.zeros(sum(sizes) - start - mine.size, mx.uint8)])
    total = mx.distributed.all_sum(whole, group=group)[start : start + mine.size]
    ends = list(itertools.accumulate(a.nbytes for _, a in items))[:-1]
    parts = mx.split(total, ends) if ends else [total]
    restored = {key: mx.view(part, a.dtype).reshape(a.shape)
                for (key, a), part in zip(items, parts, strict=True)}
    mx.eval(list(restored.values()))
    return tree_map_with_path(lambda key, a: restored.get(key, a), tree)


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
    """One step over the global batch (inputs, targets, weights as numpy), each replica its
    share in the schedule's order: (this rank's share of the mean loss over the batch's targets,
    zero but on the last stage; this stage's gradients, summed over its replicas)."""
    scale = 1 / float(batch[2].sum())  # each replica's loss is its share of the batch's mean
    batch = data.shard(batch, stage.replica, stage.replicas)
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
    for kind, m in actions(schedule, stage.stages, micro_batches, stage.index):
        inputs, targets, weights = micro[m]
        if kind == "F":
            held[m] = inputs if stage.first else stage.receive(*inputs.shape, -1, group)
            out[m] = None if stage.last else stage(held[m])
            mx.eval(held[m], out[m])
        elif kind == "send":
            mx.eval(mx.distributed.send(out.pop(m), stage.peer(1), group=group))
        elif kind == "dh":
            cotangent[m] = (mx.array(1.0) if stage.last
                            else stage.receive(*inputs.shape, 1, group))
            mx.eval(cotangent[m])
        else:
            value, found = gradient(params, held.pop(m), cotangent.pop(m), targets, weights)
            if not stage.first:
                found, dh = found
                mx.eval(mx.distributed.send(dh, stage.peer(-1), group=group))
            grads = found if grads is None else tree_map(mx.add, grads, found)
            loss = loss + value if stage.last else loss
            mx.eval(grads, loss)
    stage.model.update(params)
    return loss, over_replicas(stage, grads, group)


def over_replicas(stage, grads, group):
    """This stage's gradients summed over its replicas: the whole model's, each rank's own at
    their place and zeros elsewhere, in one all-reduce (LoRA's are small)."""
    if stage.replicas == 1:
        return grads
    summed = whole(stage, dict(tree_flatten(grads)), group)
    return tree_map_with_path(lambda name, grad: summed.get(name, grad), grads)


def evaluate(stage, split, examples, batch_size, group, heartbeat):
    """(loss, accuracy) over the split's first `examples`, each replica's share (every R-th
    of them) through its pipeline; the heartbeat's progress moves on at each batch."""
    totals = mx.zeros(3)  # loss sum, correct targets, targets: the last stages'
    mine = np.arange(stage.replica, examples, stage.replicas)
    for i in range(0, len(mine), batch_size):
        inputs, targets, weights = map(mx.array, split[mine[i : i + batch_size]])
        h = inputs if stage.first else stage.receive(*inputs.shape, -1, group)
        out = stage(h)
        if stage.last:
            correct = ((out.argmax(-1) == targets) * weights).sum()
            totals += mx.stack([loss_sum(out, targets, weights), correct, weights.sum()])
            mx.eval(totals)
        else:
            mx.eval(mx.distributed.send(out, stage.peer(1), group=group))
        heartbeat.advance()
    loss, correct, count = mx.distributed.all_sum(totals, group=group).tolist()
    return loss / count, correct / count


def adapters(stage, group):
    """The whole model's adapters, on every rank: each stage's own (its replica 0's)."""
    own = dict(tree_flatten(stage.model.trainable_parameters())) if stage.replica == 0 else {}
    summed = whole(stage, own, group)
    mx.eval(list(summed.values()))  # here on every rank: only rank 0 writes them
    return summed


def whole(stage, own, group):
    """{name: array} of the whole model's adapters' shapes summed over the world: each rank's
    own (by name) and zeros for the others, in one all-reduce (one per tensor cost 40 ms each
    on the ring over loopback)."""
    items = [(name, own[name] if name in own else mx.zeros(shape, dtype))
             for name, (shape, dtype) in sorted(stage.adapter_shapes.items())]
    return dict(distributed.all_sum_together(items, group))
