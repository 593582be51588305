"""The command line: flags, defaults, and one-line errors (exit code 2) for bad values."""

import argparse
import re
import sys
from pathlib import Path

from .data import IMAGE_DATASETS

BUILT_IN = {"mlp": IMAGE_DATASETS, "cnn": IMAGE_DATASETS, "gpt": ("text",)}
LORA_DATASETS = ("jsonl",)
REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# (learning rate, global batch size) when not given: LoRA follows mlx-lm's defaults.
DEFAULTS = {"built-in": (1e-3, 64), "lora": (1e-5, 4)}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(message)


def fail(message):
    print(f"train: error: {message}", file=sys.stderr)
    sys.exit(2)


def count(minimum):
    def parse(text):
        value = int(text)
        if value < minimum:
            raise ValueError
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise ValueError
    return value


def parser():
    p = Parser(prog="python -m train", description="Train or fine-tune an MLX model on this "
               "machine, or data-parallel on every rank under mpirun / mlx.launch.")
    p.add_argument("--model", default="mlp", help="mlp, cnn, gpt, or an mlx-lm model (local "
                   "directory or Hugging Face repo id) to fine-tune with LoRA (default: mlp)")
    p.add_argument("--dataset", help="digits, mnist, fashion-mnist (mlp, cnn), text (gpt), jsonl "
                   "(LoRA). Default: digits for mlp/cnn, text for gpt, jsonl for LoRA")
    p.add_argument("--data", type=Path, help="text: the text file; jsonl: the directory with "
                   "train.jsonl and valid.jsonl; mnist/fashion-mnist: a directory with the IDX "
                   "files instead of downloading them")
    p.add_argument("--steps", type=count(1), default=500, help="optimizer steps (default: 500)")
    p.add_argument("--batch-size", type=count(1), help="global batch size, split evenly over "
                   "the ranks (default: 64; 4 for LoRA)")
    p.add_argument("--lr", type=positive_float, help="Adam learning rate (default: 1e-3; "
                   "1e-5 for LoRA)")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation and data order")
    p.add_argument("--out", type=Path, default=Path("runs/train"), help="directory for "
                   "metrics.jsonl, summary.json, loss.png and checkpoints/ (default: runs/train)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint "
                   "in --out (starts fresh if there is none)")
    p.add_argument("--eval-every", type=count(0), default=100, help="evaluate every K steps "
                   "and at the end; 0: only at the end (default: 100)")
    p.add_argument("--checkpoint-every", type=count(0), default=100, help="checkpoint every K "
                   "steps and at the end; 0: only at the end (default: 100)")
    p.add_argument("--log-every", type=count(1), default=10, help="report the loss every K "
                   "steps (default: 10)")
    return p


def parse(argv=None):
    args = parser().parse_args(argv)
    args.lora = args.model not in BUILT_IN
    if args.lora:
        check_lora_model(args.model)
    choices = LORA_DATASETS if args.lora else BUILT_IN[args.model]
    args.dataset = args.dataset or choices[0]
    if args.dataset not in choices:
        fail(f"unknown dataset '{args.dataset}' for model '{args.model}'; "
             f"choices: {', '.join(choices)}")
    check_data(args)
    lr, batch_size = DEFAULTS["lora" if args.lora else "built-in"]
    args.lr = args.lr or lr
    args.batch_size = args.batch_size or batch_size
    return args


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
    if args.dataset == "jsonl":
        missing = [f for f in ("train.jsonl", "valid.jsonl") if not (args.data / f).is_file()]
        if missing:
            fail(f"data directory '{args.data}' has no {' or '.join(missing)}")


def check_world(args, world_size):
    if args.batch_size % world_size:
        fail(f"batch size {args.batch_size} does not split over {world_size} ranks; choose a "
             f"multiple of {world_size}")
