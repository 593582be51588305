"""How --parallel pipeline splits an mlx-lm model's layers into stages, and which weight files
each stage reads: from the safetensors headers of the model's directory, without MLX, so that
training (train/pipeline.py) and staging (roles/launch: each host gets only the weight files
of its ranks' stages) split it the same way. No import of the train package here: the launch
plan's filters load this file on its own.
"""

import itertools
import json
import re
import struct
import sys
from pathlib import Path

# mlx-lm's weight files (mlx_lm.utils.load_model's glob) and its tensors' names.
WEIGHTS = "model*.safetensors"
INDEX = "model.safetensors.index.json"
LAYER = re.compile(r"^model\.layers\.(\d+)\.")
FIRST = ("model.embed_tokens.",)
LAST = ("model.norm.", "lm_head.")


def layout(stages, world_size):
    """(stages, replicas) of a pipeline over world_size ranks: as many stages as --stages has
    counts (without it, one per rank), and the ranks are that many stages over and over, each
    time a replica of the whole pipeline (rounded down: check_pipeline refuses a remainder)."""
    count = len(stages.split(",")) if stages is not None else world_size
    return count, world_size // count


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


def header(path):
    """{tensor name: bytes} of a safetensors file, from its header alone (8 bytes little-endian:
    the JSON header's length, then the header)."""
    with open(path, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        tensors = json.loads(f.read(length))
    return {name: t["data_offsets"][1] - t["data_offsets"][0]
            for name, t in tensors.items() if name != "__metadata__"}


def tensors(model_dir):
    """{weight file's name: {tensor name: bytes}} of the model in model_dir."""
    return {path.name: header(path) for path in sorted(Path(model_dir).glob(WEIGHTS))}


def part(name):
    """Which part of the model a tensor is: a layer's index, "first" (the embedding), "last"
    (norm and head), or None (another tensor: no stage's own)."""
    if match := LAYER.match(name):
        return int(match[1])
    return "first" if name.startswith(FIRST) else "last" if name.startswith(LAST) else None


def counts(files, stages_text, stages):
    """Layers per stage: --stages' counts, else balanced by the bytes of the weight files'
    tensors (files: tensors()), the tied head (no lm_head: the embedding) also on the last
    stage."""
    if stages_text is not None:
        return [int(n) for n in stages_text.split(",")]
    sizes = {}
    for name, size in itertools.chain(*(file.items() for file in files.values())):
        sizes[part(name)] = sizes.get(part(name), 0) + size
    layers = [sizes.get(i, 0) for i in range(1 + max(k for k in sizes if isinstance(k, int)))]
    first = sizes.get("first", 0)
    head = first if tied(itertools.chain(*files.values())) else 0
    return balanced(layers, first, sizes.get("last", 0) + head, stages)


def tied(names):
    """Whether the model's head is its embedding: no lm_head among its tensors' names."""
    return not any(name.startswith("lm_head.") for name in names)


def parts(split, stage, tied_head):
    """The parts (as part() names them) stage (its index) of split (layers per stage) reads: its
    layers, stage 0 the embedding, the last the norm and the head (the embedding when tied)."""
    wanted = set(range(sum(split[:stage]), sum(split[: stage + 1])))
    last = stage == len(split) - 1
    if stage == 0 or (last and tied_head):
        wanted.add("first")
    if last:
        wanted.add("last")
    return wanted


def stage_files(files, split, stage):
    """The weight files (names) holding the tensors stage of split reads (parts); files:
    tensors()."""
    wanted = parts(split, stage, tied(itertools.chain(*files.values())))
    return {file for file, names in files.items() if any(part(n) in wanted for n in names)}


def lacking(model_dir, split, stage):
    """The weight files stage of split reads that model_dir lacks, by its index
    (model.safetensors.index.json's weight_map; none without one): a pipeline's host is sent only
    its stages' files, and mlx-lm would leave the others' tensors as made."""
    index = Path(model_dir) / INDEX
    if not index.is_file():
        return set()
    weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    wanted = parts(split, stage, tied(weight_map))
    return ({file for name, file in weight_map.items() if part(name) in wanted}
            - {path.name for path in Path(model_dir).glob(WEIGHTS)})


if __name__ == "__main__":  # `python -c <this file> DIR`: a fetched model's tensors (roles/launch)
    print(json.dumps(tensors(sys.argv[1])))
