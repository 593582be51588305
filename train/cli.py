"""The command line: flags, defaults, and one-line errors (exit code 2) for bad values."""

import argparse
import importlib.util
import math
import re
from pathlib import Path

from . import command, mnist
from .data import IMAGE_DATASETS
from .errors import fail

BUILT_IN = {"mlp": IMAGE_DATASETS, "cnn": IMAGE_DATASETS, "gpt": ("text",)}
LORA_DATASETS = ("jsonl",)
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# (learning rate, global batch size) when not given: LoRA follows mlx-lm's defaults.
DEFAULTS = {"built-in": (1e-3, 64), "lora": (1e-5, 4)}
MLP_WIDTH = 128  # hidden units of each of mlp's layers unless --width says otherwise
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit
# Upper bounds: far beyond any real run, low enough that a slip (steps=1e23) is an error.
STEPS_MAX = 10**9  # --steps and the every-K options
WIDTH_MAX = 65536
BATCH_MAX = 65536
BUCKET_MAX = 2**40
NAME_MAX = 4096  # characters of a name or path (Linux's PATH_MAX; macOS's is 1024)
# --report-to choice: the package rank 0 writes with (None: nothing to write).
TRACKERS = {"none": None, "tensorboard": "tensorboardX"}


class Parser(argparse.ArgumentParser):
    def error(self, message):
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


def path(text):
    return Path(name(text))


def parser():
    p = Parser(prog="python -m train", description="Train or fine-tune an MLX model on this "
               "machine, or data-parallel on every rank under mpirun / mlx.launch.")
    add = p.add_argument
    add("--model", type=name, metavar="NAME", help="mlp, cnn, gpt, or an mlx-lm "
        "model (local directory or Hugging Face repo id) to fine-tune with LoRA (default: mlp); "
        "with --command: what {model} stands for")
    add("--dataset", type=name, metavar="NAME", help="digits, mnist, fashion-mnist (mlp, cnn), "
        "text (gpt), jsonl (LoRA). Default: digits for mlp/cnn, text for gpt, jsonl for LoRA")
    add("--data", type=path, metavar="PATH", help="text: the text file; jsonl: the directory "
        "with train.jsonl and valid.jsonl; mnist/fashion-mnist: a directory with the IDX files "
        "instead of downloading them")
    add("--width", type=count(1, WIDTH_MAX), default=MLP_WIDTH, metavar="N", help="hidden "
        f"units of each of mlp's two layers: a larger model and gradient, 1 to {WIDTH_MAX} "
        f"(default: {MLP_WIDTH})")
    add("--steps", type=count(1, STEPS_MAX), default=500, metavar="N", help="optimizer steps, "
        f"1 to {STEPS_MAX} (default: 500)")
    add("--batch-size", type=count(1, BATCH_MAX), metavar="B", help="global batch size, split "
        "over the ranks as evenly as it goes (64 over 3: 22/21/21), at least one example each "
        f"(default: 64, 4 for LoRA, or one example per rank on more ranks; at most {BATCH_MAX})")
    add("--lr", type=positive_float, help="Adam learning rate (default: 1e-3; 1e-5 for LoRA)")
    add("--seed", type=count(0, SEED_MAX), default=0, metavar="S", help="seed for "
        f"initialisation and data order, 0 to {SEED_MAX} (default: 0)")
    add("--out", type=Path, default=Path("runs/train"), metavar="DIR", help="directory for "
        "metrics.jsonl, summary.json, loss.png and checkpoints/ (default: runs/train)")
    add("--resume", action="store_true", help="continue from the latest checkpoint in --out "
        "(starts fresh if there is none)")
    add("--eval-every", type=count(0, STEPS_MAX), default=100, metavar="K", help="evaluate "
        "every K steps and at the end; 0: only at the end (default: 100)")
    add("--checkpoint-every", type=count(0, STEPS_MAX), default=100, metavar="K", help="checkpoint "
        "every K steps and at the end; 0: only at the end (default: 100)")
    add("--grad-bucket-bytes", type=count(0, BUCKET_MAX), default=32 * 1024**2, metavar="N",
        help="average the gradients in all-reduces of at least N bytes each (whole tensors, the "
        "last one may be smaller); 0: one per tensor (default: 32 MiB, MLX's; bench.yml "
        "recommends one for your interconnect)")
    add("--grad-dtype", choices=("float32", "bfloat16"), default="float32", help="the "
        "gradients' type on the wire: bfloat16 sends half the bytes; weights and optimizer stay "
        "float32 (default: float32)")
    add("--log-every", type=count(1, STEPS_MAX), default=10, metavar="K", help="report the loss "
        "every K steps (default: 10)")
    add("--heartbeat", metavar="TEMPLATE", help="each rank writes {phase, step, steps, progress, "
        "time, pid} as JSON to this path ({rank}: its rank) every second, for a watchdog; e.g. "
        "runs/x/logs/rank.{rank}.heartbeat (default: none)")
    add("--report-to", choices=tuple(TRACKERS), default="none", help="also send rank 0's "
        "metrics to an experiment tracker: tensorboard writes event files to DIR/tensorboard "
        "(tensorboard --logdir DIR/tensorboard); metrics.jsonl is written either way "
        "(default: none)")
    add("--command", metavar="CMD", help="run CMD on every rank instead of training (e.g. "
        "'python -m mlx_lm lora --train --model {model} --data {data}'), in --out, with "
        "{model} and {data} replaced by the absolute paths given with --model and --data; its "
        "output is the rank's progress, --heartbeat and --out as for training")
    add("--check", type=count(1), metavar="RANKS", help="only check the flags for a run over "
        "RANKS processes, print the settings as JSON and exit (train.yml asks this on the "
        "controller before it contacts any host)")
    return p


def parse(argv=None):
    args = parser().parse_args(argv)
    if (package := TRACKERS[args.report_to]) and importlib.util.find_spec(package) is None:
        fail(f"argument --report-to: {args.report_to} needs the {package} package in this Python "
             f"environment; it is in requirements.lock: re-run setup.yml (make venv here)")
    if args.command is not None:
        check_command(args)
        return args
    args.model = args.model or "mlp"
    if args.width != MLP_WIDTH and args.model != "mlp":
        fail(f"argument --width: only mlp has a width, not {args.model}; leave --width out")
    args.lora = args.model not in BUILT_IN
    if args.lora:
        check_lora_model(args.model)
    choices = LORA_DATASETS if args.lora else BUILT_IN[args.model]
    args.dataset = args.dataset or choices[0]
    if args.dataset not in choices:
        fail(f"unknown dataset '{args.dataset}' for model '{args.model}'; "
             f"choices: {', '.join(choices)}")
    check_data(args)
    args.lr = args.lr or DEFAULTS["lora" if args.lora else "built-in"][0]
    return args  # the batch's default depends on the world size: check_world sets it


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
    if args.batch_size < world_size:
        fail(f"--batch-size {args.batch_size} leaves some of the {world_size} ranks without an "
             f"example; choose at least {world_size}")
