"""What rank 0 shows and writes: progress, DIR/metrics.jsonl (and the same scalars to the
trackers of --report-to), DIR/summary.json, DIR/loss.png; and every rank's heartbeat file."""

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

PREFIX = "[train]"  # progress lines start with this, for launchers that stream them


def say(message):
    print(f"{PREFIX} {message}", flush=True)


class Progress:
    """A tqdm bar on a terminal, else one plain line per logged step. Launchers such as mpirun
    may give processes a pseudo-terminal, so callers pass bar=False under a launcher."""

    def __init__(self, first_step, steps, bar):
        self.steps, self.start, self.first = steps, time.perf_counter(), first_step
        self.bar = None
        if bar and sys.stdout.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=steps, initial=first_step, unit="step", dynamic_ncols=True)

    def log(self, step, loss, samples_per_s):
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.4f}", samples_s=f"{samples_per_s:.0f}")
            return
        elapsed = time.perf_counter() - self.start
        eta = elapsed / (step - self.first) * (self.steps - step)
        say(f"step {step}/{self.steps} loss {loss:.4f} samples/s {samples_per_s:.1f} "
            f"eta {time.strftime('%H:%M:%S', time.gmtime(eta))}")

    def write(self, message):
        if self.bar is not None:
            self.bar.write(f"{PREFIX} {message}")
        else:
            say(message)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class Metrics:
    """DIR/metrics.jsonl: one record per logged train step or evaluation; each record's numbers
    also go to the trackers of --report-to, under the same names."""

    def __init__(self, out, resumed_step, report_to=(), config=None):
        self.path = out / "metrics.jsonl"
        # A resumed run redoes the steps after its checkpoint: drop their old records.
        kept = [r for r in self.records() if r["step"] <= resumed_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self.trackers = [TRACKERS[name](out, resumed_step if kept else None, config)
                         for name in report_to]

    def records(self):
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def add(self, **record):
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        for tracker in self.trackers:
            tracker.log(scalars(record), record["step"])

    def close(self):
        for tracker in self.trackers:
            tracker.close()


def scalars(record):
    """A record's numbers under the names every tracker shows: kind/name (train/loss)."""
    return {f"{record['kind']}/{name}": value for name, value in record.items()
            if name not in ("kind", "step") and isinstance(value, (int, float))}


class TensorBoard:
    """Event files in DIR/tensorboard (tensorboardX)."""

    def __init__(self, out, resumed_step, config):
        from tensorboardX import SummaryWriter

        # purge_step: a resumed run's redone steps replace the old ones in TensorBoard too.
        self.writer = SummaryWriter(str(out / "tensorboard"),
                                    purge_step=None if resumed_step is None else resumed_step + 1)

    def log(self, values, step):
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandB:
    """An offline W&B run in DIR/wandb (no account; `wandb sync` uploads it), one per launch."""

    def __init__(self, out, resumed_step, config):
        import wandb

        # silent, console off: rank 0's output stays the play's progress lines
        self.run = wandb.init(mode="offline", dir=out, project="mlx-cluster", name=out.name,
                              config=config, settings=wandb.Settings(silent=True, console="off"))

    def log(self, values, step):
        self.run.log(values, step=step)

    def close(self):
        self.run.finish()


class Trackio:
    """trackio's local database in DIR/trackio (project mlx-cluster, a run per launch)."""

    def __init__(self, out, resumed_step, config):
        os.environ["TRACKIO_DIR"] = str(out / "trackio")  # read when trackio is imported
        import trackio

        self.run = trackio.init(project="mlx-cluster", name=out.name, config=config)

    def log(self, values, step):
        self.run.log(values, step=step)

    def close(self):
        self.run.finish()


# --report-to's names (train/cli.py's TRACKERS: the package each needs).
TRACKERS = {"tensorboard": TensorBoard, "wandb": WandB, "trackio": Trackio}


def plot(records, path):
    """Train loss per logged step, eval loss per evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for kind, key, style in (("train", "loss", "-"), ("eval", "eval_loss", "o-")):
        points = [(r["step"], r[key]) for r in records if r["kind"] == kind]
        if points:
            ax.plot(*zip(*points, strict=True), style, label=f"{kind} loss")
    ax.set(xlabel="step", ylabel="loss", yscale="log", title="Training loss")
    # plain numbers (2.5, not 2.5x10^0); minor ticks labelled only on short ranges
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.LogFormatter(labelOnlyBase=False,
                                                                minor_thresholds=(1, 0.4)))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Heartbeat:
    """{"phase", "step", "steps", "progress", "start", "time", "pid"} in a small JSON file,
    replaced atomically: a watchdog reads it to see that this rank lives and makes progress.

    The caller moves phase (loading, training, evaluating, checkpointing, exiting), step (the
    steps done) and progress (units of work within the phase, e.g. evaluation batches), and sets
    start (the step of the checkpoint this launch resumed from, once loaded); a daemon
    thread rewrites the file every second, so a fresh "time" says the process runs in any phase.
    mx.eval releases the GIL (measured, mlx 0.32 on a CPU: the thread beat every second through
    a 10-minute mx.eval), so long computations and collectives do not silence it; a stopped
    process or a hung host does."""

    def __init__(self, template, rank, steps):
        self.path = Path(template.replace("{rank}", str(rank))) if template else None
        self.steps, self.phase, self.step, self.progress = steps, "loading", 0, 0
        self.start = None  # unknown: a program's own (train --command)
        self.lock = threading.Lock()  # the thread and beat() share the temporary file
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.beat()
            threading.Thread(target=self.refresh, daemon=True).start()

    def at(self, phase, step):
        self.phase, self.step, self.progress = phase, step, 0

    def advance(self):
        self.progress += 1

    def refresh(self):
        """Every second until the caller's beat says "exiting": a write the process's end cut
        short would leave its temporary file behind."""
        while True:
            time.sleep(1)
            with self.lock:
                if self.phase == "exiting":
                    return
                # A full disk: retried; the watchdog sees the gap.
                with contextlib.suppress(OSError):
                    self.write()

    def beat(self):
        """Write the file now (the thread does every second)."""
        if self.path is not None:
            with self.lock:
                self.write()

    def write(self):
        record = {"phase": self.phase, "step": self.step, "steps": self.steps,
                  "progress": self.progress, "start": self.start, "time": time.time(),
                  "pid": os.getpid()}
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, self.path)
