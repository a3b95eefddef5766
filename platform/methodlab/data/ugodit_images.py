"""Images for UGoDIT's inverse problems, all offline: the images that ship inside the scikit-image wheel
(`skimage.data.brain()` downloads and is never used), Fashion-MNIST from Debian's `dataset-fashion-mnist`
IDX files, and a folder of PNGs (e.g. FFHQ) for users who have one. Plain functions returning float arrays."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

# Roles of the spec (fixed): training images in this order (M = 4 takes the first four), validation, tests.
TRAIN_IMAGES = ("camera", "moon", "coins", "brick", "grass", "gravel", "page", "coffee")
VAL_IMAGE = "text"
TEST_IMAGE = {"mri_multicoil": "shepp_logan_phantom", "super_resolution": "astronaut", "deblur_nonlinear": "astronaut"}
SKIMAGE_NAMES = frozenset(TRAIN_IMAGES + (VAL_IMAGE, "shepp_logan_phantom", "astronaut", "chelsea"))
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def _skimage_data():
    try:
        from skimage import data
    except ImportError:  # pragma: no cover - depends on the environment
        raise MissingSourceError("scikit-image is not installed: pip install 'methodlab[imaging]'") from None
    return data


def to_gray(img: np.ndarray) -> np.ndarray:
    """RGB(A) or gray, any dtype -> float64 gray (ITU-R 601 luma, as skimage.color.rgb2gray)."""
    a = np.asarray(img, dtype=np.float64)
    if a.ndim == 3:
        a = a[..., :3] @ np.array([0.2125, 0.7154, 0.0721])
    return a


def square_resize(img: np.ndarray, size: int) -> np.ndarray:
    """Centre-crop to a square, resize to size x size with anti-aliasing, min-max normalise to [0, 1]."""
    from skimage.transform import resize

    h, w = img.shape
    s = min(h, w)
    t, l = (h - s) // 2, (w - s) // 2
    a = resize(img[t:t + s, l:l + s], (size, size), anti_aliasing=True, preserve_range=True)
    lo, hi = float(a.min()), float(a.max())
    return ((a - lo) / max(hi - lo, 1e-12)).astype(np.float32)


def skimage_image(name: str, size: int = 64) -> np.ndarray:
    """One image shipped inside scikit-image, gray, square, size x size, in [0, 1]."""
    if name == "brain":
        raise MissingSourceError("skimage.data.brain() downloads from the network; not used offline")
    if name not in SKIMAGE_NAMES:
        raise ValueError(f"unknown image {name!r}; shipped: {sorted(SKIMAGE_NAMES)}")
    return square_resize(to_gray(getattr(_skimage_data(), name)()), size)


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    magic = int.from_bytes(raw[:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(label: int = 7, n: int = 5, split: str = "t10k", root: str | Path = FASHION_DIR) -> np.ndarray:
    """The first n images of class `label` (7 = sneaker) of a Fashion-MNIST split, [n, 28, 28] in [0, 1]."""
    root = Path(root)
    img, lab = root / f"{split}-images-idx3-ubyte.gz", root / f"{split}-labels-idx1-ubyte.gz"
    if not img.exists() or not lab.exists():
        raise MissingSourceError(f"Fashion-MNIST not found in {root}: apt-get install dataset-fashion-mnist")
    x, y = _read_idx(img), _read_idx(lab)
    sel = np.flatnonzero(y == label)[:n]
    return (x[sel].astype(np.float32) / 255.0)


def png_folder(folder: str | Path, limit: int | None = None, multiple: int = 64) -> list[np.ndarray]:
    """Gray images from a folder of PNGs (e.g. FFHQ), each centre-cropped to sides that are multiples of
    `multiple` (never resized), in [0, 1]."""
    import matplotlib.image as mpimg

    files = sorted(Path(folder).glob("*.png"))[:limit]
    if not files:
        raise MissingSourceError(f"no .png files in {folder}")
    out = []
    for f in files:
        a = to_gray(mpimg.imread(f))
        if a.max() > 1.0:
            a = a / 255.0
        h, w = (a.shape[0] // multiple) * multiple, (a.shape[1] // multiple) * multiple
        if h == 0 or w == 0:
            raise ValueError(f"{f}: smaller than {multiple} px")
        t, l = (a.shape[0] - h) // 2, (a.shape[1] - w) // 2
        out.append(a[t:t + h, l:l + w].astype(np.float32))
    return out
