"""What a checkpoint's manifest catches, which checkpoint a resume falls back to, what rotation
keeps, a full disk mid-checkpoint (a real tmpfs), and where fsync goes on macOS."""

import errno
import fcntl
import json
import os

import mlx.core as mx
import mlx.optimizers as optim
import pytest

from train import checkpoint, durable, models

from .conftest import PAGE, disk_bytes, needs_root


def saved(out, steps):
    """Checkpoints at steps of a model whose weights are the step number: (model, optimizer)."""
    model, optimizer = models.MLP(4, 8), optim.Adam(learning_rate=0.1)
    optimizer.init(model.trainable_parameters())
    for step in steps:
        save(out, step, model, optimizer)
    return model, optimizer


def save(out, step, model, optimizer):
    model.update({"head": {"bias": mx.full(10, float(step))}})
    checkpoint.save(out, step, model, optimizer, {"seed": 0})


def path(out, step):
    return checkpoint.directory(out) / f"step_{step:08d}"


def loaded_step(out):
    """(the step of the checkpoint load_newest restores, {skipped step: why})."""
    model, optimizer = saved(out / "scratch", [0])
    found, state, skipped = checkpoint.load_newest(out, model, optimizer)
    if found is not None:
        assert state["step"] == checkpoint.step_of(found)
        assert model.parameters()["head"]["bias"].tolist() == [state["step"]] * 10
    return found and checkpoint.step_of(found), {checkpoint.step_of(p): why for p, why in skipped}


def flip_byte(file, offset=-1):
    data = bytearray(file.read_bytes())
    data[offset] ^= 0xFF
    file.write_bytes(data)


def test_the_manifest_catches_a_cut_a_changed_byte_and_a_missing_file(tmp_path):
    saved(tmp_path, [1, 2, 3, 4, 5])  # the newest 3 are kept
    assert [checkpoint.problem(path(tmp_path, s)) for s in (3, 4, 5)] == [None] * 3
    size = (path(tmp_path, 5) / "model.safetensors").stat().st_size
    os.truncate(path(tmp_path, 5) / "model.safetensors", size // 2)
    flip_byte(path(tmp_path, 4) / "optimizer.safetensors")  # same size: only the sha256 sees it
    assert loaded_step(tmp_path) == (3, {
        5: f"model.safetensors has {size // 2} bytes, its manifest says {size}",
        4: "optimizer.safetensors does not match its sha256 in the manifest"})

    (path(tmp_path, 3) / "state.json").unlink()
    assert loaded_step(tmp_path)[0] is None  # nothing intact: a resume starts over
    assert checkpoint.problem(path(tmp_path, 3)) == "state.json is missing"
    os.truncate(path(tmp_path, 3) / "manifest.json", 10)  # a cut manifest vouches for nothing
    assert checkpoint.problem(path(tmp_path, 3)).startswith("manifest.json unreadable (")


def test_a_checkpoint_from_before_manifests_is_judged_by_loading_it(tmp_path):
    saved(tmp_path, [1, 2])
    for step in (1, 2):
        (path(tmp_path, step) / "manifest.json").unlink()
    assert checkpoint.problem(path(tmp_path, 2)) is None and loaded_step(tmp_path) == (2, {})
    os.truncate(path(tmp_path, 2) / "model.safetensors", 100)
    step, skipped = loaded_step(tmp_path)
    assert step == 1 and skipped[2].startswith("does not load (")


def test_rotation_keeps_the_newest_intact_checkpoints_and_a_resave_replaces_a_broken_one(tmp_path):
    model, optimizer = saved(tmp_path, [1, 2, 3])
    for step in (2, 3):
        flip_byte(path(tmp_path, step) / "model.safetensors")
    saved(tmp_path, [4, 5])
    # 1 is one of the newest three intact ones: kept although two newer ones are broken
    assert [checkpoint.step_of(p) for p in checkpoint.newest_first(tmp_path)] == [5, 4, 3, 2, 1]
    save(tmp_path, 3, model, optimizer)  # a resume from 1 passes step 3 again
    assert checkpoint.problem(path(tmp_path, 3)) is None
    assert [checkpoint.step_of(p) for p in checkpoint.newest_first(tmp_path)] == [5, 4, 3]


@needs_root
def test_a_full_disk_fails_the_checkpoint_and_leaves_the_others(tmp_path, small_disk):
    saved(tmp_path / "measure", [1])
    size = disk_bytes(path(tmp_path / "measure", 1))
    filler = small_disk(checkpoint.directory(tmp_path), free=size * 3 // 2)
    model, optimizer = saved(tmp_path, [1])
    with pytest.raises(OSError) as failed:
        save(tmp_path, 2, model, optimizer)
    assert failed.value.errno == errno.ENOSPC
    # the half-written one is gone, with the space it took: step 1 is still the newest
    assert sorted(p.name for p in checkpoint.directory(tmp_path).iterdir()) == [
        ".filler", "step_00000001"]
    assert checkpoint.problem(path(tmp_path, 1)) is None
    filler.unlink()
    save(tmp_path, 2, model, optimizer)
    assert loaded_step(tmp_path) == (2, {})


@needs_root
def test_write_atomic_on_a_full_disk_keeps_the_old_content(tmp_path, small_disk):
    small_disk(tmp_path / "disk", free=PAGE)
    summary = tmp_path / "disk" / "summary.json"
    summary.write_text("old")  # the last free page
    with pytest.raises(OSError) as failed:
        durable.write_atomic(summary, json.dumps({"steps": 1}))
    assert failed.value.errno == errno.ENOSPC
    assert summary.read_text() == "old"
    assert sorted(p.name for p in summary.parent.iterdir()) == [".filler", "summary.json"]


def test_full_fsync_takes_macos_f_fullfsync_where_it_exists(tmp_path, monkeypatch):
    file = tmp_path / "file"
    file.write_text("data")
    fd = os.open(file, os.O_RDONLY)  # Python's descriptors are close-on-exec
    try:
        monkeypatch.delattr(fcntl, "F_FULLFSYNC", raising=False)  # Linux: fsync
        durable.full_fsync(fd)
        assert not os.get_inheritable(fd)
        # As on macOS, F_FULLFSYNC exists: this Linux stands in a command that shows it ran on
        # fd (F_SETFD 0 clears close-on-exec).
        monkeypatch.setattr(fcntl, "F_FULLFSYNC", fcntl.F_SETFD, raising=False)
        durable.full_fsync(fd)
        assert os.get_inheritable(fd)
        # A file system without it (EINVAL here, ENOTSUP on SMB): fsync instead, no error.
        monkeypatch.setattr(fcntl, "F_FULLFSYNC", 0x7FFF, raising=False)
        durable.full_fsync(fd)
    finally:
        os.close(fd)
