"""The training loop: each rank's shard of every global batch, gradients averaged over ranks.

A file DIR/stop (its content: a reason word such as `user` or `time_limit`) asks the job to stop:
rank 0 sees it, every rank agrees on the step, rank 0 checkpoints there and writes
DIR/stopped.json, and every rank exits 0. `--resume` later continues to the end.
"""

import json
import resource
import sys
import time

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten

from . import checkpoint, cli, data, distributed, durable, lora, models, pipeline, report
from .errors import fail

# A resumed run must have these settings of the run it continues.
SAME_ON_RESUME = ("model", "dataset", "data", "batch_size", "seed", "width", "parallel",
                  "stages")
MLX_CPU_CACHE = 32 << 20  # MLX's own limit of freed buffers kept on the CPU


def keep_freed_buffers():
    """Keep as many freed buffers for reuse as the run has held at once so far: call it after a
    step. MLX's CPU allocator keeps only 32 MiB (its Metal one, up to the memory limit), so every
    larger array of a step (a gradient bucket, its sum) would be mapped and page-faulted afresh,
    step after step: about five times the cost of filling it (Linux, mlx 0.32). One step's peak,
    not the memory limit: the CPU allocator never gives its cache back when memory runs short,
    and steps of other shapes (the last batch, other lengths) would pile up there."""
    if mx.default_device() == mx.cpu:
        mx.set_cache_limit(max(mx.get_peak_memory(), MLX_CPU_CACHE))


def build(args, group):
    """(model, train split, eval split, this rank's pipeline stage or None), initialised from
    args.seed."""
    mx.random.seed(args.seed)
    if args.parallel == "pipeline":
        stage, train, test = pipeline.load(args.model, args.data, group, args.stages)
        args.stages = stage.split  # as balanced: the checkpoints record it, a resume needs it
        pipeline.check_send_recv(stage, group)
        return stage.model, train, test, stage
    if args.lora:
        return *lora.load(args.model, args.data), None
    train, test = data.load(args.dataset, args.data, models.CONTEXT)
    inputs, _, _ = train[np.arange(1)]
    return models.build(args.model, inputs.shape[1:], args.width), train, test, None


def update(optimizer, model, grads):
    """The optimizer's step, each parameter's started in the order distributed.sum_gradients
    sends their buckets: a bucket's parameters are updated while the next buckets travel."""
    optimizer.update(model, grads)
    for _, parameter in reversed(tree_flatten(model.trainable_parameters())):
        mx.async_eval(parameter)


def weighted_loss(model, inputs, targets, weights, scale):
    logits = model(inputs).astype(mx.float32)
    return (nn.losses.cross_entropy(logits, targets) * weights).sum() * scale


def evaluate(model, split, examples, batch_size, group, heartbeat):
    """(loss, accuracy) over the split's first `examples`; each rank takes every world-size-th
    of them and moves the heartbeat's progress on at each batch."""
    totals = mx.zeros(3)  # loss sum, correct targets, targets
    mine = np.arange(group.rank(), examples, group.size())
    for i in range(0, len(mine), batch_size):
        inputs, targets, weights = map(mx.array, split[mine[i : i + batch_size]])
        logits = model(inputs).astype(mx.float32)
        loss = nn.losses.cross_entropy(logits, targets)
        correct = logits.argmax(-1) == targets
        totals += mx.stack([(loss * weights).sum(), (correct * weights).sum(), weights.sum()])
        mx.eval(totals)
        heartbeat.advance()
    loss, correct, count = mx.distributed.all_sum(totals, group=group).tolist()
    return loss / count, correct / count


def eval_examples(args, split):
    """How many of the split's examples an evaluation takes: its first eval_batches global
    batches, the same examples on any number of ranks; all of them for 0."""
    return min(len(split), args.eval_batches * args.batch_size) if args.eval_batches else len(split)


def evaluation(args, model, stage, split, group, heartbeat):
    """(loss, accuracy) over split's eval_examples: the model's, or the pipeline's through its
    stages."""
    examples = eval_examples(args, split)
    if stage is None:
        return evaluate(model, split, examples, args.batch_size, group, heartbeat)
    return pipeline.evaluate(stage, split, examples, args.batch_size, group, heartbeat)


def finished(args, group):
    """Whether the run wrote summary.json (rank 0's word, for every rank). A run lost after its
    last checkpoint and before its outputs (adapters, summary) was not: resumed, it writes them."""
    done = group.rank() == 0 and (args.out / "summary.json").exists()
    return mx.distributed.all_sum(mx.array(int(done)), group=group).item() > 0


def restore(args, model, optimizer, group, stage):
    """(the step to start from, the broken checkpoints skipped): rank 0 loads the newest intact
    checkpoint (if resuming) and every rank takes rank 0's step, parameters and optimizer state.
    A pipeline's stages hold different parameters: each its own checkpoints, which its replica 0
    loads and gives to the stage's other replicas."""
    optimizer.learning_rate = args.lr
    if stage is not None:
        out, first = checkpoint_out(args, stage), stage.replica == 0
        steps = (pipeline.common_steps(checkpoint.intact_steps(out) if first else [], stage,
                                       group) if args.resume else None)
        step, skipped = load_newest(args, out, model, optimizer, steps) if first else (0, [])
        restored = pipeline.from_first_replica(stage, {
            "model": model.trainable_parameters(), "optimizer": optimizer.state,
            "step": mx.array(step)}, group)
        model.update(restored["model"])
        optimizer.state = restored["optimizer"]
        step = int(restored["step"].item())
        pipeline.check_restored(step, group)
        return step, skipped
    step, skipped = (load_newest(args, args.out, model, optimizer) if group.rank() == 0
                     else (0, []))
    model.update(distributed.from_rank0(model.trainable_parameters(), group))
    optimizer.state = distributed.from_rank0(optimizer.state, group)
    return int(distributed.from_rank0(mx.array(step), group).item()), skipped


def load_newest(args, out, model, optimizer, steps=None):
    """Rank 0 (or each pipeline stage): (step, [{"step", "why"}] of the newer checkpoints
    skipped as broken) of the newest intact checkpoint in out (at one of steps, if given),
    loaded into model and optimizer; step 0 if there is none."""
    if not args.resume:
        if found := checkpoint.newest_first(out):
            fail(f"--out {args.out} already has checkpoints; pass --resume to continue from "
                 f"{found[0].name} or choose another --out")
        return 0, []
    path, state, broken = checkpoint.load_newest(out, model, optimizer, steps)
    skipped = [{"step": checkpoint.step_of(found), "why": why} for found, why in broken]
    for found, why in broken:
        report.say(f"skipping checkpoint {found}: {why}")
    if path is None:
        if broken:
            report.say(f"no intact checkpoint in {checkpoint.directory(out)}: starting over")
        return 0, skipped
    for key in SAME_ON_RESUME:
        # A checkpoint from before a setting existed was made with its default.
        saved = state["config"].get(key, getattr(cli.DEFAULT, key))
        if saved != config(args)[key]:
            fail(f"--resume: {path} was made with --{key.replace('_', '-')} "
                 f"{saved}, not {config(args)[key]}")
    report.say(f"resuming from {path} (step {state['step']})")
    return state["step"], skipped


def peak_memory(group):
    """Each rank's peak resident memory in bytes (ru_maxrss: KiB on Linux, bytes on macOS), on
    every rank: what a pipeline's stage needs of its host."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform == "darwin"
                                                                else 1)
    return [n * 1024 for n in mx.distributed.all_gather(mx.array([kib]), group=group).tolist()]


def checkpoint_out(args, stage):
    """The directory whose checkpoints/ this rank writes (rank 0, or replica 0 of a pipeline
    stage): --out, or for a stage after the first, its own in it (DIR/stage1/checkpoints/...)."""
    return args.out if stage is None or stage.first else args.out / f"stage{stage.index}"


def config(args):
    return {k: str(v) if v is not None and k in ("out", "data") else v
            for k, v in vars(args).items()}


def stop_reason(out):
    """The reason word in DIR/stop (`user` if empty), and consume the request."""
    path = out / "stop"
    words = path.read_text().split() if path.exists() else []
    path.unlink(missing_ok=True)
    return words[0] if words else "user"


def run(args, group):
    started = time.perf_counter()
    rank, world = group.rank(), group.size()
    heartbeat = report.Heartbeat(args.heartbeat, rank, args.steps)  # phase "loading"
    model, train, test, stage = build(args, group)
    optimizer = optim.Adam(learning_rate=args.lr)
    optimizer.init(model.trainable_parameters())
    start, skipped = restore(args, model, optimizer, group, stage)
    # This rank writes them: a stage its own, on its replica 0.
    checkpoints = rank == 0 if stage is None else stage.replica == 0
    if start >= args.steps and finished(args, group):
        if rank == 0:
            report.say(f"{args.out} is already at step {start} of {args.steps}; nothing to do")
        return
    progress = None  # rank 0's
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stopped.json").unlink(missing_ok=True)  # an earlier launch's stop
        metrics = report.Metrics(args.out, start, args.report_to, config(args))
        progress = report.Progress(start, args.steps, bar=not distributed.launcher_sizes())
        trainable = (sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
                     if stage is None else stage.trainable)
        examples = eval_examples(args, test)
        evaluated = f", the first {examples} evaluated" if examples < len(test) else ""
        progress.write(f"{args.model} ({trainable:,} trainable parameters) on {args.dataset} "
                       f"({len(train)} train / {len(test)} eval examples{evaluated}), "
                       f"{world} rank(s), "
                       f"{cli.describe_batch(args, world)}, "
                       f"steps {start + 1}..{args.steps}")

    heartbeat.start = start
    heartbeat.at("training", start)
    stop_file = args.out / "stop"
    saved = None  # the step of the latest checkpoint this run wrote
    loss_and_grad = nn.value_and_grad(model, weighted_loss)
    step_time = sync_time = 0.0
    window_loss, window_start, window_steps = mx.array(0.0), time.perf_counter(), 0
    train_loss = eval_loss = accuracy = None
    for step in range(start + 1, args.steps + 1):
        tick = time.perf_counter()
        batch = train[data.global_batch(args.seed, step - 1, args.batch_size, len(train))]
        if stage is None:
            # Each rank's loss is its share of the mean loss over every target of the global
            # batch: summed over ranks, the gradients equal one process's on the whole batch.
            scale = 1 / float(batch[2].sum())
            shard = map(mx.array, data.shard(batch, rank, world))
            loss, grads = loss_and_grad(model, *shard, scale)
            # Unevaluated: each bucket's all-reduce starts while the backward pass goes on.
            summed = distributed.sum_gradients(grads, group, args.grad_bucket_bytes,
                                               getattr(mx, args.grad_dtype))
        else:  # the stages' sends and receives are the step itself
            loss, grads = pipeline.step(stage, batch, args.micro_batches, args.schedule, group)
            summed = grads
        mx.eval(loss, grads)
        update(optimizer, model, summed)
        # Rank 0's stop request reaches every rank after the gradients' all-reduces, on their
        # stream: one more 4-byte sum, no extra round trip, and all ranks agree on the step.
        stop = mx.distributed.all_sum(mx.array(int(rank == 0 and stop_file.exists())),
                                      group=group, stream=distributed.comm_stream())
        synced = time.perf_counter()  # from here: the averaging the backward pass did not hide
        mx.eval(stop)  # after every bucket's sum
        sync_time += time.perf_counter() - synced
        mx.eval(model.parameters(), optimizer.state)
        if step == start + 1:
            keep_freed_buffers()
        step_time += time.perf_counter() - tick
        window_loss, window_steps = window_loss + loss, window_steps + 1

        if step % args.log_every == 0 or step == args.steps:
            train_loss = mx.distributed.all_sum(window_loss, group=group).item() / window_steps
            speed = window_steps * args.batch_size / (time.perf_counter() - window_start)
            if rank == 0:
                metrics.add(kind="train", step=step, loss=train_loss, lr=args.lr,
                            samples_per_s=speed, world_size=world)
                progress.log(step, train_loss, speed)
            window_loss, window_start, window_steps = mx.array(0.0), time.perf_counter(), 0

        if (args.eval_every and step % args.eval_every == 0) or step == args.steps:
            heartbeat.at("evaluating", step)
            eval_loss, accuracy = evaluation(args, model, stage, test, group, heartbeat)
            if rank == 0:
                metrics.add(kind="eval", step=step, eval_loss=eval_loss, eval_accuracy=accuracy)
                progress.write(f"eval step {step} loss {eval_loss:.4f} accuracy {accuracy:.4f}")
            window_start = time.perf_counter()

        if checkpoints and ((args.checkpoint_every and step % args.checkpoint_every == 0)
                            or step == args.steps):
            heartbeat.at("checkpointing", step)
            save(args, checkpoint_out(args, stage), step, model, optimizer, progress)
            window_start, saved = time.perf_counter(), step

        heartbeat.at("training", step)
        if step == start + 1:
            heartbeat.beat()  # at once: training has started
        if stop.item() and step < args.steps:
            if checkpoints and saved != step:
                heartbeat.at("checkpointing", step)
                save(args, checkpoint_out(args, stage), step, model, optimizer, progress)
            if rank == 0:
                stopped(args, step, progress)
                metrics.close()
            heartbeat.at("exiting", step)
            heartbeat.beat()
            return

    if start >= args.steps:  # its last checkpoint, not its outputs: they follow from it
        heartbeat.at("evaluating", start)
        eval_loss, accuracy = evaluation(args, model, stage, test, group, heartbeat)
        if rank == 0:
            train_loss = next((r["loss"] for r in reversed(metrics.records())
                               if r["kind"] == "train"), None)
    heartbeat.at("exiting", args.steps)
    heartbeat.beat()
    if args.lora:  # a pipeline's: every stage's, on every rank
        adapters = (dict(tree_flatten(model.trainable_parameters())) if stage is None
                    else pipeline.adapters(stage, group))
    peaks = peak_memory(group)
    if rank == 0:
        progress.close()
        metrics.close()  # the trackers' files complete before summary.json says the run is
        steps_run = args.steps - start
        summary = {
            "model": args.model, "dataset": args.dataset, "world_size": world,
            "steps": args.steps, "resumed_from_step": start, "checkpoints_skipped": skipped,
            "train_loss": train_loss, "eval_loss": eval_loss, "eval_accuracy": accuracy,
            "wall_time_s": time.perf_counter() - started,
            "samples_per_s": steps_run * args.batch_size / step_time if steps_run > 0 else None,
            # A pipeline's sends are its step: no share of it to tell apart.
            "comm_time_share": sync_time / step_time if stage is None and steps_run > 0 else None,
            "peak_memory_bytes": peaks,  # by rank
        }
        report.plot(metrics.records(), args.out / "loss.png")
        if args.lora:
            lora.save_adapters(adapters, lora.adapter_config(model) if stage is None
                               else stage.adapter_config, args.out / "adapters")
        # Last: train.yml takes summary.json as the sign that the job is complete.
        durable.write_atomic(args.out / "summary.json", json.dumps(summary, indent=1) + "\n")
        report.say(f"done in {summary['wall_time_s']:.1f}s: eval loss {eval_loss:.4f} accuracy "
                   f"{accuracy:.4f}; wrote summary.json, metrics.jsonl, loss.png in {args.out}")


def save(args, out, step, model, optimizer, progress):
    """The checkpoint at step in out (rank 0's, or a pipeline stage's), told on rank 0's
    progress. One that cannot be written (a full disk) ends the run: the supervisor restarts it
    from the newest intact checkpoint, which nothing has replaced."""
    try:
        path = checkpoint.save(out, step, model, optimizer, config(args))
    except OSError as error:
        fail(f"the checkpoint at step {step} could not be written to "
             f"{checkpoint.directory(out)}: {error.strerror or error}; the checkpoints "
             "before it are unchanged: resume once there is space (or the disk is fixed)")
    if progress:
        progress.write(f"checkpoint {path}")


def stopped(args, step, progress):
    """Rank 0's end of a stopped run, its checkpoint at the agreed step written: DIR/stopped.json
    (no summary.json: that one means the run completed all its steps)."""
    progress.close()
    reason = stop_reason(args.out)
    record = {"step": step, "reason": reason, "steps": args.steps}
    durable.write_atomic(args.out / "stopped.json", json.dumps(record) + "\n")
    report.say(f"stopped at step {step} ({reason})")
