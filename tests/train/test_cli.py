"""The command-line contract: every flag documented, bad values a one-line error with exit 2."""

import dataclasses
import json
import re

import mlx.core as mx
import pytest

from train import cli

from .conftest import mpirun_cmd, needs_mpirun, run, summary, train_cmd


def error_of(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse([str(a) for a in argv])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: error: ")
    return lines[0]


def test_help_documents_every_flag():
    """One flag per setting, under its name; and --config."""
    text = run(train_cmd("--help")).stdout
    for name in [*vars(cli.DEFAULT), "config"]:
        flag = "--" + name.replace("_", "-")
        assert re.search(rf"^\s+(-c FILE, )?{flag}\b.*\S", text, re.M), flag
    words = " ".join(text.split())
    assert "(default: 500)" in words and "(default: runs/train)" in words  # from cli.DEFAULT


def test_defaults_train_mlp_on_digits():
    args = cli.parse([])
    cli.check_world(args, 1)
    assert (args.model, args.dataset, args.lora, args.batch_size, args.lr) == (
        "mlp", "digits", False, 64, 1e-3)


def test_the_default_batch_fits_any_world_size(tiny_llm):
    """64 (4 for LoRA), or one example per rank where there are more ranks."""
    lora = ["--model", str(tiny_llm[0]), "--data", str(tiny_llm[1])]
    for argv, world, batch in (([], 3, 64), ([], 65, 65), (lora, 3, 4), (lora, 5, 5),
                               (lora, 16, 16)):
        args = cli.parse(argv)
        cli.check_world(args, world)
        assert args.batch_size == batch, (argv, world)


def test_unknown_model_names_value_and_choices(capsys):
    line = error_of(capsys, "--model", "resnet")
    assert "'resnet'" in line and "mlp, cnn, gpt" in line and "Hugging Face" in line


def test_unknown_dataset_names_value_and_choices(capsys):
    line = error_of(capsys, "--model", "cnn", "--dataset", "cifar10")
    assert "'cifar10'" in line and "digits, mnist, fashion-mnist" in line
    assert "choices: text" in error_of(capsys, "--model", "gpt", "--dataset", "mnist")


def test_missing_data_path(capsys, tmp_path):
    missing = tmp_path / "nope.txt"
    assert f"'{missing}' does not exist" in error_of(capsys, "--model", "gpt", "--data", missing)
    assert "needs --data" in error_of(capsys, "--model", "gpt")
    assert "train.jsonl or valid.jsonl" in error_of(capsys, "--model", "org/model", "--data",
                                                    tmp_path)
    assert "is not a text file" in error_of(capsys, "--model", "gpt", "--data", tmp_path)
    assert f"{tmp_path} has no train-images-idx3-ubyte.gz" in error_of(
        capsys, "--dataset", "fashion-mnist", "--data", tmp_path)


def test_width_is_mlps_and_makes_its_gradient_larger(capsys, tmp_path):
    assert "only mlp has a width, not cnn" in error_of(capsys, "--model", "cnn", "--width", "8")
    assert "'0'" in error_of(capsys, "--width", "0")
    out = tmp_path / "wide"
    run(train_cmd("--width", "300", "--steps", "1", "--eval-every", "0", "--out", out))
    [step] = (out / "checkpoints").iterdir()
    weights = mx.load(str(step / "model.safetensors"))
    assert weights["layers.1.weight"].shape == (300, 300)


def test_bad_numbers(capsys):
    assert "--steps" in error_of(capsys, "--steps", "0")
    assert "'-1'" in error_of(capsys, "--batch-size", "-1")
    assert "--lr" in error_of(capsys, "--lr", "0")
    # inf trained to a NaN loss and "succeeded"; a huge seed was a traceback on every rank.
    assert "'inf' is not a finite number > 0" in error_of(capsys, "--lr", "inf")
    assert "'nan' is not a finite number > 0" in error_of(capsys, "--lr", "nan")
    assert "is not an integer from 0 to 4294967295" in error_of(capsys, "--seed", 10**30)
    assert "'-1' is not an integer from 0" in error_of(capsys, "--seed", "-1")
    cli.parse(["--seed", str(2**32 - 1)])
    # Stated ranges: a slip of a digit or an exponent is an error, not a run of 10^23 steps.
    assert "'1e23' is not an integer from 1 to 1000000000" in error_of(capsys, "--steps", "1e23")
    assert "from 1 to 1000000000" in error_of(capsys, "--steps", 10**9 + 1)
    assert "from 1 to 65536" in error_of(capsys, "--width", 10**9)
    assert "from 1 to 65536" in error_of(capsys, "--batch-size", 65537)
    assert "from 0 to 1000000000" in error_of(capsys, "--eval-every", 10**10)
    assert "from 0 to 1099511627776" in error_of(capsys, "--grad-bucket-bytes", 2**41)
    assert "... (5000 characters) is not an integer" in error_of(capsys, "--steps", "9" * 5000)
    assert cli.parse(["--steps", str(10**9), "--width", "65536"]).steps == 10**9


@pytest.mark.parametrize("flag", ["--model", "--dataset", "--data"])
def test_values_that_look_like_flags_are_refused(capsys, flag):
    assert "must not be empty, start with '-'" in error_of(capsys, f"{flag}=-x")
    assert "must not be empty, start with '-'" in error_of(capsys, f"{flag}= mlp")
    assert "or hold a line break" in error_of(capsys, f"{flag}=my\nmodel")
    error = error_of(capsys, f"{flag}={'m' * 100_000}")
    assert "... (100000 characters) is longer than a path can be (at most 4096" in error
    assert len(error) < 200


def test_check_prints_the_settings_and_trains_nothing(tmp_path):
    done = run(train_cmd("--check", "4", "--steps", "7", "--out", tmp_path / "run"))
    settings = json.loads(done.stdout)
    assert (settings["steps"], settings["batch_size"], settings["dataset"]) == (7, 64, "digits")
    assert not (tmp_path / "run").exists()
    assert settings["batch"] == "global batch 64 (16 per rank)"
    grown = json.loads(run(train_cmd("--check", "65")).stdout)
    assert grown["batch"] == "global batch 65 (1 per rank)"
    refused = run(train_cmd("--check", "65", "--batch-size", "64"), check=False)
    assert refused.returncode == 2
    assert "--batch-size 64 leaves some of the 65 ranks without an example" in refused.stderr


def settings_file(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_a_config_file_sets_the_settings_it_names_and_flags_override_it(tmp_path):
    # 3e-4 is text to YAML (no dot), a number to --lr all the same; eval_every 0 is given, not
    # left out; data: (null) is as if not given.
    path = settings_file(tmp_path, "steps: 7\nbatch_size: 32\nlr: 3e-4\nresume: true\n"
                                   "eval_every: 0\ngrad_dtype: bfloat16\ndata:\n")
    path = str(path)
    args = cli.parse(["-c", path])
    assert (args.steps, args.batch_size, args.lr, args.resume, args.eval_every,
            args.grad_dtype) == (7, 32, 3e-4, True, 0, "bfloat16")
    assert (args.seed, args.log_every, args.data, args.model) == (0, 10, None, "mlp")
    for argv in (["--steps", "9", "--config", path], ["--config", path, "--steps=9"]):
        assert cli.parse(argv) == dataclasses.replace(args, steps=9)
    settings = json.loads(run(train_cmd("--check", "2", "-c", path, "--batch-size", "48")).stdout)
    assert (settings["steps"], settings["lr"], settings["resume"]) == (7, 3e-4, True)
    assert settings["batch"] == "global batch 48 (24 per rank)"


@pytest.mark.parametrize(("text", "error"), [
    ("batch-size: 32", "unknown setting 'batch-size'; did you mean batch_size?"),
    ("iters: 100", "unknown setting 'iters'; did you mean steps?"),  # mlx-lm's name
    ("every: 10", "unknown setting 'every'; did you mean eval_every, checkpoint_every or "
                  "log_every?"),
    ("np: 4", "unknown setting 'np'; settings: model, dataset, data, width, steps, batch_size,"),
    ("steps: ten", "steps: 'ten' is not an integer from 1 to 1000000000"),
    ("steps: 1.5", "steps: '1.5' is not an integer from 1 to 1000000000"),
    ("steps: true", "steps: 'true' is not one value (a number, name or path)"),
    ("lr: .inf", "lr: 'inf' is not a finite number > 0"),
    ("resume: maybe", "resume: 'maybe' is not true or false"),
    ("data: [a, b]", "data: '[\"a\", \"b\"]' is not one value"),
    ("model: -x", "model: '-x' is not a name or path"),
    ("grad_dtype: float16", "grad_dtype: invalid choice: 'float16'"),
    ("- steps: 3", "holds \"[{'steps': 3}]\", not settings by name (e.g. batch_size: 32)"),
])
def test_a_config_files_errors_name_the_file_and_the_setting(capsys, tmp_path, text, error):
    path = settings_file(tmp_path, text + "\n")
    assert error_of(capsys, "-c", path).startswith(f"train: error: {path}: {error}")


def test_a_config_file_that_cannot_be_read(capsys, tmp_path):
    assert "cannot read" in error_of(capsys, "-c", tmp_path / "none.yaml")
    path = settings_file(tmp_path, "steps: [\n")
    assert f"argument --config: {path} is not YAML (while parsing" in error_of(capsys, "-c", path)


def test_lora_model_directory_needs_config(capsys, tmp_path):
    assert "no config.json" in error_of(capsys, "--model", tmp_path)


def test_batch_size_needs_an_example_per_rank(capsys):
    args = cli.parse(["--batch-size", "30"])
    for world in (3, 4, 7, 30):
        cli.check_world(args, world)
    with pytest.raises(SystemExit) as exit_info:
        cli.check_world(args, 31)
    assert exit_info.value.code == 2
    assert ("--batch-size 30 leaves some of the 31 ranks without an example; choose at least 31"
            in capsys.readouterr().err)


def test_exit_code_of_the_real_command():
    result = run(train_cmd("--model", "resnet"), check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown model 'resnet'" in result.stderr


@needs_mpirun
def test_batch_smaller_than_the_world_under_mpirun(tmp_path):
    app = train_cmd("--batch-size", "1", "--out", tmp_path / "run")
    result = run(mpirun_cmd(app, app), check=False)
    assert result.returncode == 2
    assert "--batch-size 1 leaves some of the 2 ranks without an example" in result.stderr
    assert not (tmp_path / "run").exists()


@needs_mpirun
def test_a_world_of_one_process_under_mpirun_succeeds(tmp_path):
    result = run(mpirun_cmd(train_cmd("--steps", "2", "--out", tmp_path / "run")), check=False)
    assert result.returncode == 0, result.stderr[-3000:]  # mpirun: "exiting improperly", code 1
    assert summary(tmp_path / "run")["world_size"] == 1


def test_an_unknown_tracker_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.parse(["--report-to", "mlflow"])
    assert exit_.value.code == 2
    assert "argument --report-to: invalid choice: 'mlflow'" in capsys.readouterr().err


def test_pipeline_options_are_checked_before_any_rank_starts(capsys, tiny_llm):
    lora = ["--model", str(tiny_llm[0]), "--data", str(tiny_llm[1]), "--parallel", "pipeline"]
    assert "pipeline is for LoRA fine-tunes of an mlx-lm model, not mlp" in error_of(
        capsys, "--parallel", "pipeline")
    assert "argument --stages: only with --parallel pipeline" in error_of(capsys, "--stages", "1")
    assert "argument --micro-batches: only with --parallel pipeline" in error_of(
        capsys, "--micro-batches", "2")
    assert "argument --schedule: only with --parallel pipeline" in error_of(
        capsys, "--schedule", "gpipe")
    assert "'5,x' is not layer counts per stage, each >= 1" in error_of(
        capsys, *lora, "--stages", "5,x")
    assert "'5,0' is not layer counts" in error_of(capsys, *lora, "--stages", "5,0")

    args = cli.parse([*lora, "--stages", "1,1"])
    cli.check_world(args, 2)
    assert (args.stages, args.micro_batches, args.batch_size, args.schedule) == ("1,1", 2, 4,
                                                                                 "1f1b")
    assert cli.describe_batch(args, 2) == ("global batch 4 in 2 micro-batches through 2 "
                                           "stage(s), 1f1b schedule")
    # On a multiple of the stages' ranks, replicas of the pipeline, a micro-batch per stage each.
    args = cli.parse([*lora, "--stages", "1,1", "--batch-size", "6"])
    cli.check_world(args, 6)
    assert (cli.layout(args.stages, 6), args.micro_batches) == ((2, 3), 2)
    assert cli.describe_batch(args, 6) == ("global batch 6 over 3 replicas, each in 2 "
                                           "micro-batches through 2 stage(s), 1f1b schedule")
    for argv, world, error in (
            (["--stages", "1,1"], 3, "argument --stages: 1,1 is 2 stages but the run has 3 "
             "rank(s), not a multiple: a pipeline runs on stages x replicas ranks; start a "
             "multiple of 2 ranks (e.g. 2) or give layer counts for a number of stages that "
             "divides 3"),
            (["--batch-size", "8", "--micro-batches", "9"], 2, "argument --micro-batches: 9 is "
             "more than the 8 examples of a batch; choose at most 8"),
            (["--stages", "1,1", "--batch-size", "7", "--micro-batches", "4"], 4, "argument "
             "--micro-batches: 4 is more than the 3 examples of a replica's share of a batch of "
             "7; choose at most 3"),
            (["--stages", "1,1", "--batch-size", "2"], 6, "--batch-size 2 leaves some of the 3 "
             "replicas of the pipeline without an example; choose at least 3"),
            # tiny_llm's config.json says 2 layers: known before any rank starts
            ([], 3, f"{tiny_llm[0]} has 2 layers, fewer than the 3 stages (one per rank); start "
             "at most 2 ranks"),
            (["--stages", "2,1"], 2, f"argument --stages: 2,1 adds up to 3 layers; {tiny_llm[0]} "
             "has 2")):
        with pytest.raises(SystemExit):
            cli.check_world(cli.parse([*lora, *argv]), world)
        assert error in capsys.readouterr().err


def test_report_to_takes_a_list_from_the_flag_or_a_config_file(tmp_path):
    assert cli.parse(["--report-to", "wandb,trackio,wandb"]).report_to == ("wandb", "trackio")
    config = tmp_path / "run.yaml"
    config.write_text("report_to: [trackio, tensorboard]\n")
    assert cli.parse(["--config", str(config)]).report_to == ("trackio", "tensorboard")
    assert cli.parse([]).report_to == ()


def test_a_command_program_keeps_its_own_reporting(capsys):
    assert "argument --report-to: a --command program does its own reporting" in error_of(
        capsys, "--command", "python -m mlx_lm lora --report-to wandb", "--report-to", "wandb")
