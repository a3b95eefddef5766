"""Long-tailed classification data for more_longtail (MORE), as plain functions.

- digits-LT: sklearn `load_digits` (1,797 8x8 images), a balanced test set of 50 images per class, a long-tailed
  train set from the rest with n_k = int(n_max * IF^(-k/(C-1))) (class order shuffled by seed), and a balanced
  validation split from what is left (for sweeps; never the test split).
- Fashion-MNIST-LT: the Debian `dataset-fashion-mnist` IDX files (60,000 train / 10,000 test), same profile.
- digit mosaics (multi-label): 2x2 mosaics of 8x8 digits (16x16), label set = the distinct digits present,
  digit classes drawn from a long-tailed prior.
- real-format loaders: CIFAR-10/100 *binary version* (never the pickled python version), ImageNet-LT / Places-LT /
  iNat text lists ("relative/path.jpg label"), COCO instances JSON and VOC XML -> multi-hot.
- Many / Medium / Few groups: relative to training counts on small sets (top / bottom 30 % of classes), the paper's
  fixed cut-offs (>100, 20-100, <20 training images) when n_max > 1,000.

Every image array is float32 in [0, 1], shaped [n, H, W] (grey) or [n, 3, H, W] (colour)."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
FMNIST_CLASSES = ("t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle boot")


# --------------------------------------------------------------------------------------------- profile + groups
def lt_counts(n_max: int, imbalance: float, n_classes: int) -> np.ndarray:
    """n_k = int(n_max * IF^(-k/(C-1))) for rank k = 0..C-1 (rank 0 the head)."""
    k = np.arange(n_classes)
    return np.array([int(n_max * imbalance ** (-kk / max(n_classes - 1, 1))) for kk in k], dtype=np.int64)


def class_ranks(n_classes: int, seed: int, shuffle: bool = True) -> np.ndarray:
    """rank[c] = frequency rank of class c (0 = most frequent); a seeded permutation of the class ids."""
    if not shuffle:
        return np.arange(n_classes)
    return np.random.default_rng(seed).permutation(n_classes)


def groups_relative(counts: np.ndarray, frac: float = 0.3) -> np.ndarray:
    """0 = Many, 1 = Medium, 2 = Few per class: rank classes by training count (descending, ties by class id);
    Many = the top round(frac*C) (at least 1), Few = the bottom round(frac*C) (at least 1), Medium = the rest."""
    counts = np.asarray(counts)
    c = len(counts)
    k = max(1, int(round(frac * c)))
    order = sorted(range(c), key=lambda i: (-int(counts[i]), i))
    g = np.ones(c, dtype=np.int64)
    for i in order[:k]:
        g[i] = 0
    for i in order[c - k:]:
        g[i] = 2
    return g


def groups_fixed(counts: np.ndarray, many: int = 100, few: int = 20) -> np.ndarray:
    """The paper's cut-offs: Many > 100 training images, Medium 20..100, Few < 20."""
    counts = np.asarray(counts)
    return np.where(counts > many, 0, np.where(counts < few, 2, 1)).astype(np.int64)


def make_groups(counts: np.ndarray, mode: str = "auto", frac: float = 0.3) -> np.ndarray:
    if mode == "auto":
        mode = "fixed" if int(np.max(counts)) > 1000 else "relative"
    return groups_fixed(counts) if mode == "fixed" else groups_relative(counts, frac)


def _lt_split(y: np.ndarray, n_classes: int, n_max: int, imbalance: float, test_per_class: int | None,
              val_per_class: int, seed: int, shuffle_classes: bool = True):
    """Per class (its own seeded shuffle): the first test_per_class images -> test (None: no test taken here),
    the next n_k -> train, then up to val_per_class -> validation (balanced: the same count for every class)."""
    rng = np.random.default_rng(seed)
    ranks = class_ranks(n_classes, seed, shuffle_classes)
    prof = lt_counts(n_max, imbalance, n_classes)
    tr, te, rest = [], [], []
    for c in range(n_classes):
        idx = rng.permutation(np.flatnonzero(y == c))
        nt = 0 if test_per_class is None else test_per_class
        n_k = int(prof[ranks[c]])
        if nt + n_k > len(idx):
            raise ValueError(f"class {c} has {len(idx)} images: cannot take {nt} test + {n_k} train")
        te.append(idx[:nt])
        tr.append(idx[nt:nt + n_k])
        rest.append(idx[nt + n_k:])
    n_val = min([val_per_class] + [len(r) for r in rest])
    va = [r[:n_val] for r in rest]
    cat = lambda parts: np.sort(np.concatenate(parts)).astype(np.int64)  # noqa: E731
    return cat(tr), cat(te), cat(va), ranks


# --------------------------------------------------------------------------------------------- digits-LT
def digits_images():
    """sklearn digits as [1797, 8, 8] float32 in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def digits_lt(seed: int = 0, imbalance: float = 100.0, n_max: int = 120, test_per_class: int = 50,
              val_per_class: int = 10, shuffle_classes: bool = True) -> dict:
    """digits-LT: train / balanced test / balanced validation (from the images left over)."""
    x, y = digits_images()
    tr, te, va, ranks = _lt_split(y, 10, n_max, imbalance, test_per_class, val_per_class, seed, shuffle_classes)
    return {"x_train": x[tr], "y_train": y[tr], "x_test": x[te], "y_test": y[te], "x_val": x[va], "y_val": y[va],
            "n_classes": 10, "class_names": [str(i) for i in range(10)], "ranks": ranks}


# --------------------------------------------------------------------------------------------- Fashion-MNIST-LT
def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (optionally .gz): magic 0x0000 08 <ndim>, big-endian dims, then uint8 data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: truncated ({data.size} bytes for dims {dims})")
    return data.reshape(dims)


def _idx_file(root: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (root / name).is_file():
            return root / name
    raise MissingSourceError(f"Fashion-MNIST: {root / stem}[.gz] missing; install the Debian package "
                             "`dataset-fashion-mnist` (apt-get install dataset-fashion-mnist) or set data_root")


def fashion_mnist(root: str | Path | None = None):
    """(x_train [60000,28,28], y_train, x_test [10000,28,28], y_test), images float32 in [0, 1]."""
    root = Path(root or FMNIST_DIR)
    out = []
    for split in ("train", "t10k"):
        xi = read_idx(_idx_file(root, f"{split}-images-idx3-ubyte")).astype(np.float32) / 255.0
        yi = read_idx(_idx_file(root, f"{split}-labels-idx1-ubyte")).astype(np.int64)
        out += [xi, yi]
    return tuple(out)


def fmnist_lt(seed: int = 0, imbalance: float = 100.0, n_max: int = 6000, val_per_class: int = 100,
              root: str | Path | None = None, shuffle_classes: bool = True) -> dict:
    """Fashion-MNIST-LT: n_k = int(6000 IF^(-k/9)) from the 60k training images; the 10k test images (balanced)
    are the test set; a balanced validation split from the training images left over."""
    xtr, ytr, xte, yte = fashion_mnist(root)
    tr, _, va, ranks = _lt_split(ytr, 10, n_max, imbalance, None, val_per_class, seed, shuffle_classes)
    return {"x_train": xtr[tr], "y_train": ytr[tr], "x_test": xte, "y_test": yte, "x_val": xtr[va], "y_val": ytr[va],
            "n_classes": 10, "class_names": list(FMNIST_CLASSES), "ranks": ranks}


# --------------------------------------------------------------------------------------------- digit mosaics
def digit_mosaics(seed: int = 0, imbalance: float = 100.0, n_train: int = 1000, n_test: int = 500,
                  test_per_class: int = 50) -> dict:
    """Multi-label 2x2 mosaics of 8x8 digits -> [n, 16, 16], multi-hot over the 10 digits present.
    Train tiles draw digit classes from a long-tailed prior p_k ~ IF^(-rank/9) (class order shuffled by seed)
    and images from the digits outside the test pool; test tiles draw classes uniformly from the test pool."""
    x, y = digits_images()
    rng = np.random.default_rng(seed)
    ranks = class_ranks(10, seed)
    pools_tr, pools_te = [], []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y == c))
        pools_te.append(idx[:test_per_class])
        pools_tr.append(idx[test_per_class:])
    prior_tr = imbalance ** (-ranks / 9.0)
    prior_tr = prior_tr / prior_tr.sum()

    def build(n, prior, pools):
        imgs = np.zeros((n, 16, 16), dtype=np.float32)
        lab = np.zeros((n, 10), dtype=np.float32)
        cls = rng.choice(10, size=(n, 4), p=prior)
        for i in range(n):
            for t in range(4):
                c = cls[i, t]
                img = x[pools[c][rng.integers(len(pools[c]))]]
                r, q = divmod(t, 2)
                imgs[i, 8 * r:8 * r + 8, 8 * q:8 * q + 8] = img
                lab[i, c] = 1.0
        return imgs, lab

    xtr, ytr = build(n_train, prior_tr, pools_tr)
    xva, yva = build(max(n_test // 5, 20), np.full(10, 0.1), pools_tr)
    xte, yte = build(n_test, np.full(10, 0.1), pools_te)
    return {"x_train": xtr, "y_train": ytr, "x_test": xte, "y_test": yte, "x_val": xva, "y_val": yva,
            "n_classes": 10, "class_names": [str(i) for i in range(10)], "ranks": ranks, "multilabel": True}


# --------------------------------------------------------------------------------------------- CIFAR binary
CIFAR_PICKLED = ("data_batch_1", "test_batch", "train", "test", "meta", "batches.meta")


def _read_cifar_bin(files: list[Path], label_bytes: int, fine: bool) -> tuple[np.ndarray, np.ndarray]:
    rec = label_bytes + 3072
    xs, ys = [], []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        if raw.size % rec:
            raise ValueError(f"{f}: {raw.size} bytes is not a multiple of the {rec}-byte CIFAR record")
        raw = raw.reshape(-1, rec)
        ys.append(raw[:, label_bytes - 1 if fine else 0].astype(np.int64))
        xs.append(raw[:, label_bytes:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0)
    return np.concatenate(xs), np.concatenate(ys)


def cifar_binary(root: str | Path, n_classes: int = 10):
    """CIFAR-10 (`data_batch_1..5.bin`, `test_batch.bin`) or CIFAR-100 (`train.bin`, `test.bin`, fine labels)
    binary version, read with numpy. The pickled python version is refused with one line."""
    root = Path(root)
    if not root.is_dir():
        raise MissingSourceError(f"CIFAR: {root} is not a folder; point data_root at the CIFAR binary version")
    if n_classes == 10:
        train = [root / f"data_batch_{i}.bin" for i in range(1, 6)]
        test = [root / "test_batch.bin"]
        lb, fine = 1, False
    else:
        train, test, lb, fine = [root / "train.bin"], [root / "test.bin"], 2, True
    if not all(f.is_file() for f in train + test):
        if any((root / p).is_file() for p in CIFAR_PICKLED):
            raise MissingSourceError(f"CIFAR: {root} holds the pickled 'python version', which is never unpickled; "
                                     f"download the CIFAR-{n_classes} *binary version* (cifar-{n_classes}-binary.tar.gz)")
        missing = [f.name for f in train + test if not f.is_file()]
        raise MissingSourceError(f"CIFAR: {root} lacks {', '.join(missing)} (the CIFAR-{n_classes} binary version)")
    xtr, ytr = _read_cifar_bin(train, lb, fine)
    xte, yte = _read_cifar_bin(test, lb, fine)
    return xtr, ytr, xte, yte


def cifar_lt(root: str | Path, n_classes: int = 10, seed: int = 0, imbalance: float = 100.0,
             val_per_class: int = 20) -> dict:
    xtr, ytr, xte, yte = cifar_binary(root, n_classes)
    n_max = int(np.bincount(ytr, minlength=n_classes).min()) - val_per_class
    tr, _, va, ranks = _lt_split(ytr, n_classes, n_max, imbalance, None, val_per_class, seed, True)
    return {"x_train": xtr[tr], "y_train": ytr[tr], "x_test": xte, "y_test": yte, "x_val": xtr[va], "y_val": ytr[va],
            "n_classes": n_classes, "class_names": [str(i) for i in range(n_classes)], "ranks": ranks}


# --------------------------------------------------------------------------------------------- list files
def read_list_file(path: str | Path) -> tuple[list[str], np.ndarray]:
    """ImageNet-LT / Places-LT / iNat lists: one "relative/path.jpg label" per line (blank lines skipped)."""
    paths, labels = [], []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{n}: expected 'relative/path.jpg label', got {line[:80]!r}")
        paths.append(parts[0])
        labels.append(int(parts[1]))
    return paths, np.asarray(labels, dtype=np.int64)


def load_images(root: str | Path, rel_paths: list[str], size: int, grey: bool = False) -> np.ndarray:
    """Decode and resize images with Pillow -> [n, 3, size, size] (or [n, size, size]) float32 in [0, 1]."""
    from PIL import Image

    out = np.zeros((len(rel_paths), size, size) if grey else (len(rel_paths), 3, size, size), dtype=np.float32)
    for i, rel in enumerate(rel_paths):
        with Image.open(Path(root) / rel) as im:
            im = im.convert("L" if grey else "RGB").resize((size, size))
            a = np.asarray(im, dtype=np.float32) / 255.0
        out[i] = a if grey else a.transpose(2, 0, 1)
    return out


def list_file_lt(root: str | Path, train_list: str | Path, test_list: str | Path, val_list: str | Path | None = None,
                 image_size: int = 32, max_images: int | None = None, seed: int = 0) -> dict:
    """Images listed in the train / test (/ val) lists; class counts come from the train list only."""
    rng = np.random.default_rng(seed)
    ptr, ytr = read_list_file(train_list)
    pte, yte = read_list_file(test_list)
    n_classes = int(max(ytr.max(), yte.max())) + 1

    def sub(p, y):
        if max_images is not None and len(p) > max_images:
            keep = np.sort(rng.choice(len(p), max_images, replace=False))
            return [p[i] for i in keep], y[keep]
        return p, y

    ptr, ytr = sub(ptr, ytr)
    pte, yte = sub(pte, yte)
    d = {"x_train": load_images(root, ptr, image_size), "y_train": ytr, "x_test": load_images(root, pte, image_size),
         "y_test": yte, "n_classes": n_classes, "class_names": [str(i) for i in range(n_classes)],
         "ranks": np.argsort(np.argsort(-np.bincount(ytr, minlength=n_classes), kind="stable"), kind="stable")}
    if val_list is not None:
        pva, yva = sub(*read_list_file(val_list))
        d["x_val"], d["y_val"] = load_images(root, pva, image_size), yva
    else:
        d["x_val"], d["y_val"] = d["x_test"][:0], yte[:0]
    return d


# --------------------------------------------------------------------------------------------- multi-label files
def coco_multihot(instances_json: str | Path) -> tuple[list[str], np.ndarray, list[str]]:
    """COCO instances JSON -> (file names, multi-hot [n, C] over the category ids in sorted order, class names)."""
    data = json.loads(Path(instances_json).read_text())
    cats = sorted(data["categories"], key=lambda c: c["id"])
    col = {c["id"]: j for j, c in enumerate(cats)}
    images = sorted(data["images"], key=lambda im: im["id"])
    row = {im["id"]: i for i, im in enumerate(images)}
    y = np.zeros((len(images), len(cats)), dtype=np.float32)
    for a in data.get("annotations", []):
        if a["image_id"] in row and a["category_id"] in col:
            y[row[a["image_id"]], col[a["category_id"]]] = 1.0
    return [im["file_name"] for im in images], y, [c["name"] for c in cats]


VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")


def voc_multihot(xml_paths: list[str | Path], classes: tuple[str, ...] = VOC_CLASSES) -> np.ndarray:
    """VOC annotation XML files -> multi-hot [n, 20] (objects marked difficult count as present)."""
    import xml.etree.ElementTree as ET

    col = {c: j for j, c in enumerate(classes)}
    y = np.zeros((len(xml_paths), len(classes)), dtype=np.float32)
    for i, p in enumerate(xml_paths):
        for obj in ET.parse(p).getroot().iter("object"):
            name = (obj.findtext("name") or "").strip()
            if name in col:
                y[i, col[name]] = 1.0
    return y
