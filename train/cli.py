"""The command line: the run's settings and their defaults, the flags and a --config file that
set them, and one-line errors (exit code 2) for bad values."""

import argparse
import importlib.util
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import command, data, mnist, spelling
from .data import IMAGE_DATASETS
from .errors import fail
from .split import layout

BUILT_IN = {"mlp": IMAGE_DATASETS, "cnn": IMAGE_DATASETS, "gpt": ("text",)}
LORA_DATASETS = ("jsonl",)
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# (learning rate, global batch size) when not given: LoRA follows mlx-lm's defaults.
DEFAULTS = {"built-in": (1e-3, 64), "lora": (1e-5, 4)}
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit
# Upper bounds: far beyond any real run, low enough that a slip (steps=1e23) is an error.
STEPS_MAX = 10**9  # --steps and the every-K options
WIDTH_MAX = 65536
BATCH_MAX = 65536
BUCKET_MAX = 2**40
NAME_MAX = 4096  # characters of a name or path (Linux's PATH_MAX; macOS's is 1024)
# mlx-lm model types (config.json's model_type) that --parallel pipeline splits (train/pipeline.py).
PIPELINE_MODELS = ("llama", "mistral", "qwen2", "qwen3")
# --report-to's trackers and the package rank 0 writes each with.
TRACKERS = {"tensorboard": "tensorboardX", "wandb": "wandb", "trackio": "trackio"}


@dataclass
class Settings:
    """The run's settings: one per flag, under its name (--batch-size: batch_size), which is also
    its key in a --config file and train.yml's -e; with its default. None: parse and check_world
    choose one for the model and the number of ranks, or there is none."""

    model: str | None = None
    dataset: str | None = None
    data: Path | None = None
    width: int = 128
    steps: int = 500
    batch_size: int | None = None
    lr: float | None = None
    seed: int = 0
    out: Path = Path("runs/train")
    resume: bool = False
    eval_every: int = 100
    eval_batches: int = 0
    checkpoint_every: int = 100
    # MLX's; smaller ones were slower (benchmarks/results/mpi_allreduce-1gbit-buckets-*)
    grad_bucket_bytes: int = 32 * 1024**2
    grad_dtype: str = "float32"
    parallel: str = "data"
    stages: str | None = None
    micro_batches: int | None = None
    schedule: str | None = None
    log_every: int = 10
    heartbeat: str | None = None
    report_to: tuple = ()  # names in TRACKERS
    command: str | None = None
    check: int | None = None

    @property
    def lora(self):
        """Fine-tune an mlx-lm model with LoRA, not train a built-in one."""
        return self.model not in BUILT_IN


DEFAULT = Settings()


class Parser(argparse.ArgumentParser):
    source = None  # the --config file whose settings are parsed: its errors name it and the key

    def error(self, message):
        if self.source:  # argument --batch-size: ... -> run.yaml: batch_size: ...
            message = re.sub(r"^argument --([a-z-]+)",
                             lambda m: f"{self.source}: {m[1].replace('-', '_')}", message)
        fail(message)


def shown(text, limit=40):
    """A value as an error message quotes it: cut short, so the error stays one line."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def count(minimum, maximum=None):
    """An integer in [minimum, maximum], with the range in the error."""
    wanted = f"an integer from {minimum} to {maximum}" if maximum else f"an integer >= {minimum}"

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not {wanted}")
        return value

    return parse


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):  # inf trains to NaN; nan compares false
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number > 0 (e.g. 0.001)")
    return value


def name(text):
    """A name or path that cannot be mistaken for a flag, on one line, of a length a path can
    have."""
    if text.startswith("-") or text != text.strip() or not text or not text.isprintable():
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a name or path (it must not be "
                                         "empty, start with '-' or a space, or hold a line break)")
    if len(text) > NAME_MAX:
        raise argparse.ArgumentTypeError(f"{shown(text)} is longer than a path can be (at most "
                                         f"{NAME_MAX} characters)")
    return text


def trackers(text):
    """--report-to's comma-separated list (wandb,trackio), each tracker once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for unknown in (name for name in names if name not in TRACKERS):
        raise argparse.ArgumentTypeError(f"invalid choice: {shown(unknown)} (choose from "
                                         f"{', '.join(TRACKERS)}, comma-separated)")
    return tuple(dict.fromkeys(names))


def path(text):
    return Path(name(text))


def layer_counts(text):
    """--stages: positive layer counts separated by commas; kept as given (5,3)."""
    if not re.fullmatch(r"[1-9][0-9]{0,5}(,[1-9][0-9]{0,5})*", text):
        raise argparse.ArgumentTypeError(f"{shown(text)} is not layer counts per stage, each "
                                         ">= 1, separated by commas (e.g. 5,3)")
    return text


def parser():
    p = Parser(prog="python -m train", description="Train or fine-tune an MLX model on this "
               "machine, or data-parallel on every rank under mpirun / mlx.launch.")
    add = p.add_argument
    add("-c", "--config", type=path, metavar="FILE", help="read settings from a YAML file, each "
        "under its flag's name with _ (batch_size: 32), as train.yml takes it (-e @FILE); flags "
        "given here override the file's")
    add("--model", type=name, metavar="NAME", help="mlp, cnn, gpt, or an mlx-lm "
        "model (local directory or Hugging Face repo id) to fine-tune with LoRA (default: mlp); "
        "with --command: what {model} stands for")
    add("--dataset", type=name, metavar="NAME", help="digits, mnist, fashion-mnist (mlp, cnn), "
        "text (gpt), jsonl (LoRA). Default: digits for mlp/cnn, text for gpt, jsonl for LoRA")
    add("--data", type=path, metavar="PATH", help="text: the text file; jsonl: the directory "
        "with train.jsonl and valid.jsonl; mnist/fashion-mnist: a directory with the IDX files "
        "instead of downloading them")
    add("--width", type=count(1, WIDTH_MAX), metavar="N", help="hidden units of each of mlp's "
        f"two layers: a larger model and gradient, 1 to {WIDTH_MAX} (default: %(default)s)")
    add("--steps", type=count(1, STEPS_MAX), metavar="N", help="optimizer steps, "
        f"1 to {STEPS_MAX} (default: %(default)s)")
    add("--batch-size", type=count(1, BATCH_MAX), metavar="B", help="global batch size, split "
        "over the ranks as evenly as it goes (64 over 3: 22/21/21), at least one example each "
        f"(default: 64, 4 for LoRA, or one example per rank on more ranks; at most {BATCH_MAX})")
    add("--lr", type=positive_float, help="Adam learning rate (default: 1e-3; 1e-5 for LoRA)")
    add("--seed", type=count(0, SEED_MAX), metavar="S", help="seed for initialisation and data "
        f"order, 0 to {SEED_MAX} (default: %(default)s)")
    add("--out", type=Path, metavar="DIR", help="directory for metrics.jsonl, summary.json, "
        "loss.png and checkpoints/ (default: %(default)s)")
    add("--resume", action="store_true", help="continue from the latest checkpoint in --out "
        "(starts fresh if there is none)")
    add("--eval-every", type=count(0, STEPS_MAX), metavar="K", help="evaluate every K steps and "
        "at the end; 0: only at the end (default: %(default)s)")
    add("--eval-batches", type=count(0, STEPS_MAX), metavar="B", help="evaluate on the first B "
        "global batches of the evaluation split (the same examples on any number of ranks), as "
        "mlx-lm's val_batches; 0: all of it (default: %(default)s)")
    add("--checkpoint-every", type=count(0, STEPS_MAX), metavar="K", help="checkpoint every K "
        "steps and at the end; 0: only at the end (default: %(default)s)")
    add("--grad-bucket-bytes", type=count(0, BUCKET_MAX), metavar="N", help="average the "
        "gradients in all-reduces of at least N bytes each (whole tensors, the last one may be "
        "smaller); 0: one per tensor (default: %(default)s, MLX's 32 MiB; bench.yml recommends "
        "one for your interconnect)")
    add("--grad-dtype", choices=("float32", "bfloat16"), help="the gradients' type on the wire: "
        "bfloat16 sends half the bytes; weights and optimizer stay float32 (default: "
        "%(default)s)")
    add("--parallel", choices=("data", "pipeline"), help="data: every rank holds the whole "
        "model and trains on its share of the batch; pipeline (LoRA of an mlx-lm "
        f"{', '.join(PIPELINE_MODELS)} model): the model's layers are split across the ranks in "
        "order, each rank holds and trains only its own, for a model bigger than one host "
        "(default: %(default)s)")
    add("--stages", type=layer_counts, metavar="COUNTS", help="--parallel pipeline: layers per "
        "stage in order, e.g. 5,3; on more ranks than stages, a multiple of them, the ranks run "
        "that many replicas of the pipeline, each on its share of the batch (default: one stage "
        "per rank, balanced by parameter bytes)")
    add("--micro-batches", type=count(1, BATCH_MAX), metavar="M", help="--parallel pipeline: "
        "the global batch (each replica's share of it) goes through the stages in M parts, "
        "which keeps them busy at once (default: the number of stages)")
    add("--schedule", choices=("1f1b", "gpipe"), help="--parallel pipeline: the order of the "
        "micro-batches' forward and backward passes, with the same result: 1f1b (default) one "
        "forward one backward once the pipeline is full, so a stage holds the inputs of at most "
        "as many micro-batches as there are stages; gpipe every forward then every backward, "
        "holding all M")
    add("--log-every", type=count(1, STEPS_MAX), metavar="K", help="report the loss every K "
        "steps (default: %(default)s)")
    add("--heartbeat", metavar="TEMPLATE", help="each rank writes {phase, step, steps, progress, "
        "time, pid} as JSON to this path ({rank}: its rank) every second, for a watchdog; e.g. "
        "runs/x/logs/rank.{rank}.heartbeat (default: none)")
    add("--report-to", type=trackers, metavar="NAMES", help="also send rank 0's metrics, "
        "under metrics.jsonl's names (train/loss), with the settings as the config, to these "
        "experiment trackers (comma-separated): tensorboard writes event files to "
        "DIR/tensorboard (tensorboard --logdir DIR/tensorboard), wandb an offline W&B run to "
        "DIR/wandb (wandb sync DIR/wandb/offline-run-*), trackio its local database in "
        "DIR/trackio (TRACKIO_DIR=DIR/trackio trackio show); metrics.jsonl is written either "
        "way (default: none)")
    add("--command", metavar="CMD", help="run CMD on every rank instead of training (e.g. "
        "'python -m mlx_lm lora --train --model {model} --data {data}'), in --out, with "
        "{model} and {data} replaced by the absolute paths given with --model and --data; its "
        "output is the rank's progress, --heartbeat and --out as for training")
    add("--check", type=count(1), metavar="RANKS", help="only check the flags for a run over "
        "RANKS processes, print the settings as JSON and exit (train.yml asks this on the "
        "controller before it contacts any host)")
    p.set_defaults(**vars(DEFAULT))
    return p


def parse(argv=None):
    """The settings: the flags' over a --config file's over the defaults, checked together."""
    p = parser()
    given = p.parse_args(argv)
    if given.config is not None:  # argparse keeps a namespace's values where no flag is given
        given = p.parse_args(argv, namespace=read_config(given.config))
    del given.config
    args = Settings(**vars(given))
    if args.report_to and args.command is not None:
        fail("argument --report-to: a --command program does its own reporting (mlx-lm's lora "
             "reports to W&B itself); leave --report-to out")
    for tracker in args.report_to:
        if importlib.util.find_spec(package := TRACKERS[tracker]) is None:
            fail(f"argument --report-to: {tracker} needs the {package} package in this Python "
                 f"environment; it is in requirements.lock: add {package} to the hosts' "
                 f"python_env_packages and re-run setup.yml (on the controller: make venv)")
    if args.command is not None:
        check_command(args)
        return args
    args.model = args.model or "mlp"
    if args.width != DEFAULT.width and args.model != "mlp":
        fail(f"argument --width: only mlp has a width, not {args.model}; leave --width out")
    if args.lora:
        check_lora_model(args.model)
    check_parallel(args)
    choices = LORA_DATASETS if args.lora else BUILT_IN[args.model]
    args.dataset = args.dataset or choices[0]
    if args.dataset not in choices:
        fail(f"unknown dataset '{args.dataset}' for model '{args.model}'; "
             f"choices: {', '.join(choices)}")
    check_data(args)
    args.lr = args.lr or DEFAULTS["lora" if args.lora else "built-in"][0]
    return args  # the batch's default depends on the world size: check_world sets it


def read_config(path):
    """The defaults with a YAML file's settings over them, as a namespace of parsed flags: each
    key is a setting's name and its value is checked as its flag's is; errors name the file and
    the key (mlx-lm's --config, with its keys and types checked)."""
    try:
        with path.open() as file:
            values = yaml.safe_load(file)
    except (OSError, UnicodeError) as e:
        fail(f"argument --config: cannot read {path} ({getattr(e, 'strerror', None) or e})")
    except yaml.YAMLError as e:
        fail(f"argument --config: {path} is not YAML ({' '.join(str(e).split())})")
    if not isinstance(values, dict | None):
        fail(f"{path}: holds {shown(str(values))}, not settings by name (e.g. batch_size: 32)")
    flags = []
    for key, value in (values or {}).items():
        key = str(key)
        if key not in vars(DEFAULT):
            meant = spelling.meant(key, vars(DEFAULT))
            hint = (f"did you mean {spelling.either(meant)}?" if meant
                    else f"settings: {', '.join(vars(DEFAULT))}")
            fail(f"{path}: unknown setting {key!r}; {hint}")
        if value is None:  # as if not given
            continue
        if isinstance(getattr(DEFAULT, key), tuple) and isinstance(value, list):
            value = ",".join(map(str, value))  # report_to: [wandb, trackio], as its flag takes it
        switch = isinstance(getattr(DEFAULT, key), bool)  # a flag without a value: --resume
        if switch != isinstance(value, bool) or isinstance(value, dict | list):
            wanted = "true or false" if switch else "one value (a number, name or path)"
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            fail(f"{path}: {key}: {shown(text)} is not {wanted}")
        flag = "--" + key.replace("_", "-")
        if value is not False:
            flags.append(flag if switch else f"{flag}={value}")
    p = parser()
    p.source = path
    return p.parse_args(flags)


def check_parallel(args):
    if args.parallel == "pipeline" and not args.lora:
        fail(f"argument --parallel: pipeline is for LoRA fine-tunes of an mlx-lm model, not "
             f"{args.model}; leave --parallel out")
    for option in ("stages", "micro_batches", "schedule"):
        if getattr(args, option) is not None and args.parallel != "pipeline":
            fail(f"argument --{option.replace('_', '-')}: only with --parallel pipeline")


def check_command(args):
    """A command that splits like a shell line, with a value for each placeholder it uses."""
    try:
        words = command.argv(args.command, {})
    except ValueError as e:
        fail(f"argument --command: cannot split it like a shell would ({e})")
    if not words:
        fail("argument --command: empty; give the program to run and its arguments")
    for missing in command.missing_placeholders(args.command, {"model": args.model,
                                                                "data": args.data}):
        fail(f"argument --command: uses {{{missing}}} but no --{missing} was given")
    if args.data is not None and not args.data.exists():
        fail(f"data path '{args.data}' does not exist")


def check_lora_model(model):
    path = Path(model)
    if path.is_dir():
        if not (path / "config.json").exists():
            fail(f"model directory '{model}' has no config.json; expected an mlx-lm model")
    elif not REPO_ID.match(model):
        fail(f"unknown model '{model}'; choices: {', '.join(BUILT_IN)}, a local mlx-lm "
             "model directory, or a Hugging Face repo id (owner/name)")


def check_data(args):
    if args.data is None:
        if args.dataset in ("text", "jsonl"):
            fail(f"dataset '{args.dataset}' needs --data PATH")
        return
    if args.dataset == "digits":
        fail("dataset 'digits' ships with scikit-learn and takes no --data")
    if not args.data.exists():
        fail(f"data path '{args.data}' does not exist")
    if args.dataset == "text" and not args.data.is_file():
        fail(f"data path '{args.data}' is not a text file")
    if args.dataset == "jsonl":
        missing = [f for f in ("train.jsonl", "valid.jsonl") if not (args.data / f).is_file()]
        if missing:
            fail(f"data directory '{args.data}' has no {' or '.join(missing)}")
    if args.dataset in mnist.MD5:
        try:
            for name in mnist.MD5[args.dataset]:
                mnist.find(args.data, name)
        except FileNotFoundError as e:
            fail(str(e))


def check_world(args, world_size):
    if args.command is not None:  # the program's own flags are its business
        return
    if args.batch_size is None:  # the default fits any world: at least one example per rank
        args.batch_size = max(DEFAULTS["lora" if args.lora else "built-in"][1], world_size)
    if args.parallel == "pipeline":
        check_pipeline(args, world_size)
    elif args.batch_size < world_size:
        fail(f"--batch-size {args.batch_size} leaves some of the {world_size} ranks without an "
             f"example; choose at least {world_size}")


def check_pipeline(args, world_size):
    """The ranks as replicas of the stages, np = stages x replicas; in each replica's share of
    the batch, a micro-batch for each."""
    stages, replicas = layout(args.stages, world_size)
    if world_size % stages:
        fail(f"argument --stages: {args.stages} is {stages} stages but the run has {world_size} "
             f"rank(s), not a multiple: a pipeline runs on stages x replicas ranks; start a "
             f"multiple of {stages} ranks (e.g. {max(stages, world_size - world_size % stages)}) "
             f"or give layer counts for a number of stages that divides {world_size}")
    if args.batch_size < replicas:
        fail(f"--batch-size {args.batch_size} leaves some of the {replicas} replicas of the "
             f"pipeline without an example; choose at least {replicas}")
    share = args.batch_size // replicas  # the smallest replica's
    args.micro_batches = args.micro_batches or min(stages, share)
    # 1F1B: GPipe's result and bubble, with at most S micro-batches' inputs held instead of M.
    args.schedule = args.schedule or "1f1b"
    if args.micro_batches > share:
        of = "a batch" if replicas == 1 else f"a replica's share of a batch of {args.batch_size}"
        fail(f"argument --micro-batches: {args.micro_batches} is more than the {share} examples "
             f"of {of}; choose at most {share}")
    # A local model is known here, before any host is contacted; a Hugging Face one once
    # fetched (pipeline.load).
    if (config := Path(args.model) / "config.json").exists():
        found = json.loads(config.read_text())
        check_split(args.model, found.get("model_type"), found.get("num_hidden_layers"),
                    args.stages, stages)


def check_split(model, kind, layers, stages, count):
    """A model of type kind with `layers` layers (None: not known yet) splits into count stages
    (of --stages, if given)."""
    if kind not in PIPELINE_MODELS:
        fail(f"--parallel pipeline: {model} is a {kind} model; the pipeline splits "
             f"{', '.join(PIPELINE_MODELS)} models; use --parallel data")
    if not isinstance(layers, int):
        return
    if layers < count:  # only without --stages, whose counts are each >= 1: one stage per rank
        fail(f"--parallel pipeline: {model} has {layers} layers, fewer than the {count} "
             f"stages (one per rank); start at most {layers} ranks")
    if stages is not None and (total := sum(map(int, stages.split(",")))) != layers:
        fail(f"argument --stages: {stages} adds up to {total} layers; {model} has {layers}")


def describe_batch(args, world_size):
    """The global batch and how it is split, in words."""
    if args.parallel == "pipeline":
        stages, replicas = layout(args.stages, world_size)
        over = f" over {replicas} replicas, each" if replicas > 1 else ""
        return (f"global batch {args.batch_size}{over} in {args.micro_batches} micro-batches "
                f"through {stages} stage(s), {args.schedule} schedule")
    return data.describe_batch(args.batch_size, world_size)
