"""MNIST and Fashion-MNIST: the IDX files, downloaded once (MD5-checked) and cached."""

import gzip
import hashlib
import os
import struct
import urllib.request
from pathlib import Path

import numpy as np

SOURCES = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "fashion-mnist": "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
}
# The published MD5s of the four files (the same for every mirror).
MD5 = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
        "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
        "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    },
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlx-cluster"


def md5(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def download(url, path, expected_md5):
    """Fetch url to path unless a file with the right checksum is already there."""
    if path.exists() and md5(path) == expected_md5:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # A per-process temporary name: ranks sharing a cache never see a partial file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    urllib.request.urlretrieve(url, tmp)
    if (got := md5(tmp)) != expected_md5:
        tmp.unlink()
        raise ValueError(f"{url}: MD5 {got}, expected {expected_md5}; download again later")
    tmp.replace(path)
    return path


def read_idx(path):
    """An IDX file (plain or gzipped) as a numpy array of unsigned bytes."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        _, dtype, ndim = struct.unpack(">HBB", f.read(4))
        if dtype != 0x08:
            raise ValueError(f"{path}: IDX type {dtype:#x}, expected unsigned bytes (0x08)")
        shape = struct.unpack(f">{ndim}I", f.read(4 * ndim))
        return np.frombuffer(f.read(), np.uint8).reshape(shape)


def find(directory, name):
    """name.gz or the unpacked name inside directory."""
    for candidate in (directory / name, directory / name.removesuffix(".gz")):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{directory} has no {name} (or unpacked {name.removesuffix('.gz')})")


def load(dataset, directory=None):
    """(train_images, train_labels, test_images, test_labels) from directory or the cache."""
    if directory is None:
        directory = CACHE / dataset
        for name, digest in MD5[dataset].items():
            download(SOURCES[dataset] + name, directory / name, digest)
    return tuple(read_idx(find(Path(directory), name)) for name in MD5[dataset])
