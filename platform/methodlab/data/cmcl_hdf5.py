"""The official CMCL feature layout (optional, `feature_format: hdf5`; h5py is imported only here):

    <root>/<dataset>_<split>_<encoder>.h5        one dataset per sample id, value [n_modalities, D] in the
                                                dataset's canonical modality order
    <root>/<dataset>_class_<encoder>.h5          one dataset per class name: its text embedding [D]
    <root>/<dataset>_labels.json | .csv          optional: sample id -> class name (csv: sample_id,class_name)

A step names modalities by name (resolved through `names`, the dataset's modality order) or by index
(`vggsound_s:1,2`). Problems raise ValueError naming the file, so config validation fails before Ray starts.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from methodlab.data.cmcl_features import parse_step
from methodlab.data.cmcl_synthetic import PairSet


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ValueError("feature_format=hdf5 needs the h5py package (pip install h5py)") from None
    return h5py


def resolve(dataset: str, mod: str, names: list[str] | None) -> tuple[int, str]:
    """(index into the [n_modalities, D] rows, modality name used for the head)."""
    if mod.isdigit():
        i = int(mod)
        return i, (names[i] if names and i < len(names) else f"m{i}")
    if not names or mod not in names:
        raise ValueError(f"step {dataset}:{mod}: name modalities by index, or list the dataset's modality order in "
                         f"dataset_modalities.{dataset}")
    return names.index(mod), mod


def _read(path: Path, dim: int) -> tuple[list[str], np.ndarray]:
    h5py = _h5py()
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    with h5py.File(path, "r") as f:
        keys = sorted(f.keys())
        if not keys:
            raise ValueError(f"{path}: no samples")
        arr = np.stack([np.asarray(f[k][()], dtype=np.float64) for k in keys])
    if arr.shape[-1] != dim:
        raise ValueError(f"{path}: features have width {arr.shape[-1]}, expected {dim} (config dim)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{path}: non-finite feature values")
    return keys, arr


def _labels(root: Path, dataset: str) -> dict[str, str] | None:
    js, cs = root / f"{dataset}_labels.json", root / f"{dataset}_labels.csv"
    if js.is_file():
        return {str(k): str(v) for k, v in json.loads(js.read_text()).items()}
    if cs.is_file():
        with cs.open() as fh:
            return {row["sample_id"]: row["class_name"] for row in csv.DictReader(fh)}
    return None


def _norm(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def load_step_hdf5(root: str | Path, spec: str, dim: int, encoder: str, names: list[str] | None) -> PairSet:
    dataset, a, b = parse_step(spec)
    root = Path(root)
    (ia, na), (ib, nb) = resolve(dataset, a, names), resolve(dataset, b, names)
    bank, class_names = None, None
    cpath = root / f"{dataset}_class_{encoder}.h5"
    if cpath.is_file():
        class_names, feats = _read(cpath, dim)
        bank = _norm(feats.reshape(len(class_names), dim))
    mapping = _labels(root, dataset)
    parts = {}
    for split in ("train", "test"):
        path = root / f"{dataset}_{split}_{encoder}.h5"
        keys, arr = _read(path, dim)
        if arr.ndim != 3 or max(ia, ib) >= arr.shape[1]:
            raise ValueError(f"{path}: samples have {arr.shape[1] if arr.ndim == 3 else 1} modalities; step {spec} "
                             f"needs index {max(ia, ib)}")
        y = None
        if mapping is not None and class_names is not None:
            missing = [k for k in keys if k not in mapping]
            if missing:
                raise ValueError(f"{root / dataset}_labels: no class for sample {missing[0]!r}")
            y = np.array([class_names.index(mapping[k]) for k in keys])
        parts[split] = (_norm(arr[:, ia]), _norm(arr[:, ib]), y)
    (xa, xb, y), (ta, tb, ty) = parts["train"], parts["test"]
    return PairSet(spec, na, nb, xa, xb, ta, tb, y, ty, bank, class_names)
