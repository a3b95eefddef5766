"""Pre-extracted multimodal features on disk (spec methods/cmcl.md, "Real-format loader"):

    <root>/<dataset>/<split>/<modality>.npz | .parquet     split in {train, test}
    <root>/<dataset>/class_text.npz | .parquet             optional class-name text bank

`.npz`: arrays pair_id [n] (int or str), features [n, D], optional label [n]. Parquet: column pair_id, the
features as one fixed-size list column `features` or as columns f0..f{D-1}, optional label. The two modalities
of a step are inner-joined on pair_id. Every problem raises ValueError naming the file and the column, so a
config validator can fail before any Ray resource is requested. Never unpickles (allow_pickle=False).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from methodlab.data.cmcl_synthetic import PairSet


@dataclass
class ModalityFile:
    path: Path
    ids: np.ndarray
    features: np.ndarray
    labels: np.ndarray | None


def parse_step(spec: str) -> tuple[str, str, str]:
    """'<dataset>:<modality_a>,<modality_b>' -> (dataset, a, b)."""
    dataset, sep, mods = spec.partition(":")
    parts = [m.strip() for m in mods.split(",")]
    if not sep or not dataset or len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"step {spec!r} must look like '<dataset>:<modality_a>,<modality_b>' with two different modalities")
    return dataset.strip(), parts[0], parts[1]


def _find(base: Path) -> Path:
    for ext in (".npz", ".parquet"):
        if base.with_suffix(ext).is_file():
            return base.with_suffix(ext)
    raise ValueError(f"{base}.npz / {base}.parquet: file not found")


def _read_npz(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as err:  # object arrays would need unpickling: refused
        raise ValueError(f"{path}: unreadable without unpickling ({err}); store pair_id as int64 or fixed-width str") from None
    except OSError as err:
        raise ValueError(f"{path}: not a readable .npz ({err})") from None


def _read_parquet(path: Path, feature_col: str, id_col: str, dim: int) -> dict:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001  (pyarrow raises several types for a bad file)
        raise ValueError(f"{path}: not a readable parquet file ({err})") from None
    cols = set(table.column_names)
    out: dict = {}
    if id_col in cols:
        out["pair_id"] = np.asarray(table.column(id_col).to_pylist())
    if feature_col in cols:
        rows = table.column(feature_col).to_pylist()
        widths = {len(r) if r is not None else -1 for r in rows}
        if len(widths) > 1:
            raise ValueError(f"{path}: column {feature_col!r} has rows of different widths {sorted(widths)}")
        out["features"] = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
    elif all(f"f{j}" in cols for j in range(dim)):
        out["features"] = np.stack([np.asarray(table.column(f"f{j}").to_numpy(zero_copy_only=False), np.float64)
                                    for j in range(dim)], 1)
    if "label" in cols:
        out["label"] = np.asarray(table.column("label").to_numpy(zero_copy_only=False))
    return out


def read_modality(path: Path, dim: int) -> ModalityFile:
    path = Path(path)
    raw = _read_npz(path) if path.suffix == ".npz" else _read_parquet(path, "features", "pair_id", dim)
    for col in ("pair_id", "features"):
        if col not in raw:
            hint = f" (or columns f0..f{dim - 1})" if col == "features" and path.suffix == ".parquet" else ""
            raise ValueError(f"{path}: missing column {col!r}{hint}")
    ids, feats = np.asarray(raw["pair_id"]), np.asarray(raw["features"])
    if feats.ndim != 2 or feats.shape[1] != dim:
        raise ValueError(f"{path}: column 'features' has shape {tuple(feats.shape)}, expected [n, {dim}] (config dim)")
    if not np.issubdtype(feats.dtype, np.number) or not np.isfinite(feats).all():
        raise ValueError(f"{path}: column 'features' holds non-finite or non-numeric values")
    if ids.ndim != 1 or len(ids) != len(feats):
        raise ValueError(f"{path}: column 'pair_id' must be 1-D with one id per feature row")
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"{path}: duplicate pair_id {uniq[counts > 1][0]!r} in column 'pair_id'")
    labels = raw.get("label")
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != ids.shape or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"{path}: column 'label' must be integer class indices, one per row")
    feats = feats.astype(np.float64)
    feats = feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
    return ModalityFile(path, ids, feats, labels)


def read_class_text(root: Path, dataset: str, dim: int) -> tuple[np.ndarray, list[str]] | None:
    base = Path(root) / dataset / "class_text"
    try:
        path = _find(base)
    except ValueError:
        return None
    if path.suffix == ".npz":
        raw = _read_npz(path)
        names_col = "names"
    else:
        raw = _read_parquet(path, "features", "class_name", dim)
        raw["names"] = raw.pop("pair_id", None)
        names_col = "class_name"
    if raw.get("names") is None or "features" not in raw:
        raise ValueError(f"{path}: needs columns {names_col!r} and 'features'")
    feats = np.asarray(raw["features"], np.float64)
    if feats.ndim != 2 or feats.shape[1] != dim or not np.isfinite(feats).all():
        raise ValueError(f"{path}: column 'features' must be finite [K, {dim}]")
    return feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12), [str(n) for n in raw["names"]]


def _join(fa: ModalityFile, fb: ModalityFile) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    common, ia, ib = np.intersect1d(fa.ids, fb.ids, assume_unique=True, return_indices=True)
    dropped = len(fa.ids) + len(fb.ids) - 2 * len(common)
    if len(common) == 0:
        raise ValueError(f"{fa.path} and {fb.path}: no common pair_id")
    labels = fa.labels[ia] if fa.labels is not None else (fb.labels[ib] if fb.labels is not None else None)
    return fa.features[ia], fb.features[ib], labels, dropped


def load_step(root: str | Path, spec: str, dim: int, log=print) -> PairSet:
    dataset, a, b = parse_step(spec)
    root = Path(root)
    parts = {}
    for split in ("train", "test"):
        fa = read_modality(_find(root / dataset / split / a), dim)
        fb = read_modality(_find(root / dataset / split / b), dim)
        xa, xb, y, dropped = _join(fa, fb)
        if dropped and log is not None:
            log(f"cmcl: {dataset}/{split} {a},{b}: dropped {dropped} rows without a partner")
        parts[split] = (xa, xb, y)
    bank = read_class_text(root, dataset, dim)
    (xa, xb, y), (ta, tb, ty) = parts["train"], parts["test"]
    if bank is not None and ty is not None and (ty.min() < 0 or ty.max() >= len(bank[0])):
        raise ValueError(f"{root / dataset}: column 'label' indexes beyond class_text ({len(bank[0])} classes)")
    return PairSet(spec, a, b, xa, xb, ta, tb, y, ty, bank[0] if bank else None, bank[1] if bank else None)
