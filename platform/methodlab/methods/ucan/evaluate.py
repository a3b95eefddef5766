"""Metrics of ucan. All clouds live in the unit bounding sphere.
- P2S (analytic shapes): mean exact unsigned distance of the output points to the true surface.
- CD: mean_x min_y |x-y|^2 + mean_y min_x |x-y|^2 against the clean samples (ScoreDenoise's squared Chamfer).
- P2M (meshes): mean squared point-to-mesh distance of the output points (trimesh; one-directional).
The reports print CD and P2M x10^4 (the paper's unit); P2S is printed x10^3. P2S and P2M never share a table."""

from __future__ import annotations

from typing import Callable

import numpy as np

from methodlab.data import ucan_meshes, ucan_shapes
from methodlab.methods.ucan.model import chamfer_np


def item_metrics(out: np.ndarray, item) -> dict[str, float]:
    m = {"cd": chamfer_np(out, item.clean)}
    if item.shape is not None:
        m["p2s"] = float(ucan_shapes.distance(item.shape, out).mean())
    if item.mesh is not None:
        m["p2m"] = float((ucan_meshes.point_to_mesh(out, *item.mesh) ** 2).mean())
    return m


def evaluate(denoise: Callable[[np.ndarray], np.ndarray], items, prefix: str) -> tuple[dict[str, float], list[dict]]:
    """Run `denoise` on every item's noisy cloud; -> ({prefix/p2s, prefix/cd, prefix/p2s/<family>...}, rows)."""
    rows = []
    for it in items:
        out = np.asarray(denoise(it.noisy), dtype=np.float64)
        rows.append({"name": it.name, "family": it.family, **item_metrics(out, it)})
    agg: dict[str, float] = {}
    for key in ("p2s", "cd", "p2m"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            agg[f"{prefix}/{key}"] = float(np.mean(vals))
    for fam in sorted({r["family"] for r in rows if "p2s" in r}):
        agg[f"{prefix}/p2s/{fam}"] = float(np.mean([r["p2s"] for r in rows if r["family"] == fam and "p2s" in r]))
    return agg, rows
