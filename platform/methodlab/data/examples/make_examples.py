"""Writes the small example files that the `jobs/<slug>/own_data.yaml` jobs read (issue 42, item 10).

Each file is in the format a user's own data takes (stated in the job file and in README "Bring your own data"),
a few KB, deterministic (fixed seeds), and made from generators or data that ship with the installed packages
(scikit-learn digits, scikit-image sample images), so nothing is downloaded. Re-create them with

    .venv/bin/python platform/methodlab/data/examples/make_examples.py

tests/configs/test_item10_byo_data.py checks that the committed files are what this script writes.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _csv(rows: list[list], header: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _f(x: float, nd: int = 3) -> str:
    return f"{x:.{nd}f}"


def monotone_gbt() -> dict[str, bytes]:
    """15 products with 3 features; 120 comparisons (item_a, item_b, r): r in [-1, 1], r > 0 = item_a preferred,
    from a latent score linear in the features plus item noise."""
    rng = np.random.default_rng(0)
    n_items, feats = 15, ["price", "rating", "weight"]
    x = rng.normal(size=(n_items, 3))
    score = x @ np.array([-0.8, 1.2, -0.3]) + 0.3 * rng.normal(size=n_items)
    ids = [f"p{i:02d}" for i in range(n_items)]
    items = [[ids[i], *(_f(v) for v in x[i])] for i in range(n_items)]
    comps = []
    for _ in range(120):
        a, b = rng.choice(n_items, 2, replace=False)
        r = float(np.tanh(0.8 * (score[a] - score[b]) + 0.2 * rng.normal()))
        comps.append([ids[a], ids[b], _f(r, 2)])
    return {"monotone_gbt_items.csv": _csv(items, ["item_id", *feats]).encode(),
            "monotone_gbt_comparisons.csv": _csv(comps, ["item_a", "item_b", "r"]).encode()}


def discrete_structure() -> dict[str, bytes]:
    """The sprinkler network (cloudy -> rain, cloudy -> sprinkler, rain -> wet_grass, sprinkler -> wet_grass,
    wet_grass -> slippery), 2,000 rows of 0/1, plus its adjacency (row = cause, column = effect)."""
    rng = np.random.default_rng(0)
    n = 2000
    cloudy = rng.random(n) < 0.5
    rain = rng.random(n) < np.where(cloudy, 0.8, 0.15)
    sprinkler = rng.random(n) < np.where(cloudy, 0.1, 0.55)
    wet = rng.random(n) < np.select([rain & sprinkler, rain | sprinkler], [0.97, 0.85], 0.05)
    slippery = rng.random(n) < np.where(wet, 0.75, 0.05)
    names = ["cloudy", "rain", "sprinkler", "wet_grass", "slippery"]
    cols = np.stack([cloudy, rain, sprinkler, wet, slippery], 1).astype(int)
    adj = np.zeros((5, 5), int)
    for c, e in (("cloudy", "rain"), ("cloudy", "sprinkler"), ("rain", "wet_grass"), ("sprinkler", "wet_grass"),
                 ("wet_grass", "slippery")):
        adj[names.index(c), names.index(e)] = 1
    return {"discrete_structure_data.csv": _csv(cols.tolist(), names).encode(),
            "discrete_structure_truth.csv": _csv(adj.tolist(), names).encode()}


def strategic_causal() -> dict[str, bytes]:
    """A loan table: income, savings, debt (natural units), age (immutable), label approved (1 = favourable).
    Graph: income -> savings (0.3), debt -> savings (-0.5). Flags: age immutable; debt: smaller is better."""
    rng = np.random.default_rng(0)
    n = 240
    age = rng.uniform(20, 70, n)
    income = rng.normal(3.0, 1.0, n) + 0.02 * (age - 45)
    debt = np.abs(rng.normal(1.0, 0.6, n))
    savings = 0.3 * income - 0.5 * debt + rng.normal(0, 0.5, n)
    logit = 1.2 * (income - 3) + 1.5 * savings - 1.0 * (debt - 1) + 0.3 * rng.normal(size=n)
    approved = (logit > 0).astype(int)
    rows = [[_f(income[i], 2), _f(savings[i], 2), _f(debt[i], 2), _f(age[i], 0), approved[i]] for i in range(n)]
    flags = {"age": {"mutable": False}, "debt": {"sign": -1}, "savings": {"ability": 0.5, "desirable": True},
             "income": {"desirable": True}}
    return {"strategic_causal_data.csv": _csv(rows, ["income", "savings", "debt", "age", "approved"]).encode(),
            "strategic_causal_graph.csv": _csv([["income", "savings", 0.3], ["debt", "savings", -0.5]],
                                               ["cause", "effect", "weight"]).encode(),
            "strategic_causal_flags.json": (json.dumps(flags, indent=1) + "\n").encode()}


def mtpp_threshold() -> dict[str, bytes]:
    """60 event sequences (seq_id, time, mark): 3 marks, mark 2 rare, times non-decreasing within a sequence."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(60):
        t = 0.0
        for _ in range(int(rng.integers(8, 16))):
            t += float(rng.exponential(1.0))
            rows.append([f"s{s:02d}", _f(t), int(rng.choice(3, p=[0.6, 0.32, 0.08]))])
    return {"mtpp_threshold_events.csv": _csv(rows, ["seq_id", "time", "mark"]).encode()}


def _npz(**arrays) -> bytes:
    """np.savez_compressed's layout with fixed zip timestamps, so the bytes depend on the arrays only."""
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def min_swgg() -> dict[str, bytes]:
    """Two clouds of 48 points in 5 dims: source N(0, I), target a shifted, stretched Gaussian."""
    rng = np.random.default_rng(0)
    src = rng.normal(size=(48, 5))
    tgt = rng.normal(size=(48, 5)) * np.array([2.0, 0.5, 1.0, 1.0, 0.3]) + np.array([3.0, -1.0, 0, 0, 1.0])
    return {"min_swgg_clouds.npz": _npz(source=src.round(4), target=tgt.round(4))}


def cmcl() -> dict[str, bytes]:
    """Pre-extracted features of one dataset `toy` in three modalities (image, text, audio), dim 8, 6 classes:
    <root>/toy/<split>/<modality>.npz with pair_id, features [n, 8], label; rows of a split pair up by pair_id."""
    rng = np.random.default_rng(0)
    dim, k = 8, 6
    protos = rng.normal(size=(k, dim))
    mix = {m: np.linalg.qr(rng.normal(size=(dim, dim)))[0] for m in ("image", "text", "audio")}
    out = {}
    for split, n in (("train", 48), ("test", 24)):
        y = np.arange(n) % k
        z = protos[y] + 0.3 * rng.normal(size=(n, dim))
        ids = np.arange(n) + (0 if split == "train" else 1000)
        for m, q in mix.items():
            f = (z @ q + 0.2 * rng.normal(size=(n, dim))).astype(np.float32).round(3)
            out[f"cmcl_features/toy/{split}/{m}.npz"] = _npz(pair_id=ids, features=f, label=y)
    return out


def gyroatt() -> dict[str, bytes]:
    """24 EEG trials (4 motor-imagery classes x 6), 8 channels x 128 samples at 128 Hz, float16, two recordings
    (the first trains, the second tests): the method's synthetic generator, channels C3, C4, Cz and 5 neighbours.
    It shows the format; 12 training trials are too few to learn from (a BCI IV-2a subject has 288 per day)."""
    from methodlab.data.gyroatt_eeg import synthetic_mi

    x, y, _, names = synthetic_mi(6, seed=3, n_samples=128)
    keep = [names.index(c) for c in ("C3", "C4", "Cz", "FC3", "FC4", "CP3", "CP4", "Pz") if c in names][:8]
    if len(keep) < 8:
        keep = list(range(8))
    rec = (np.arange(len(y)) >= len(y) // 2).astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(y))
    x, y = x[perm][:, keep], y[perm]
    return {"gyroatt_trials.npz": _npz(X=x.astype(np.float16), y=y.astype(np.int64), recording=rec,
                                       sfreq=np.float64(128.0), ch_names=np.array([names[i] for i in keep]))}


def _png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def more_longtail() -> dict[str, bytes]:
    """A long-tailed image list: 5 digit classes (scikit-learn's 8x8 digits as PNG), 30/15/8/4/2 training images,
    6 test images per class; lists of 'relative/path.png label' lines under one image root."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(0)
    out, train, test = {}, [], []
    for c, n_train in enumerate((30, 15, 8, 4, 2)):
        idx = rng.permutation(np.flatnonzero(d.target == c))[: n_train + 6]
        for j, i in enumerate(idx):
            rel = f"images/{c}/{j:02d}.png"
            out[f"more_longtail_images/{rel}"] = _png((d.images[i] * 255 / 16).astype(np.uint8))
            (train if j < n_train else test).append(f"{rel} {c}")
    out["more_longtail_images/train.txt"] = ("\n".join(train) + "\n").encode()
    out["more_longtail_images/test.txt"] = ("\n".join(test) + "\n").encode()
    return out


def ugodit() -> dict[str, bytes]:
    """Six 64x64 gray PNGs from scikit-image's sample images (sorted: the first four train, then validation, test)."""
    from skimage import data, transform
    from skimage.color import rgb2gray

    out = {}
    for i, name in enumerate(("camera", "coins", "moon", "brick", "text", "astronaut")):
        img = getattr(data, name)()
        img = rgb2gray(img) if img.ndim == 3 else img / 255.0
        side = min(img.shape)
        img = img[:side, :side]
        small = transform.resize(img, (64, 64), anti_aliasing=True)
        out[f"ugodit_pngs/{i}_{name}.png"] = _png((np.clip(small, 0, 1) * 255).round().astype(np.uint8))
    return out


def face() -> dict[str, bytes]:
    """40 users x 30 items of implicit feedback (user, item) split train / val / test, with text profiles:
    items are books of 5 genres, users like two genres."""
    rng = np.random.default_rng(0)
    genres = ["mystery", "science fiction", "romance", "history", "cooking"]
    n_users, n_items = 40, 30
    g_item = np.arange(n_items) % len(genres)
    likes = [rng.choice(len(genres), 2, replace=False) for _ in range(n_users)]
    pairs = {"train": [], "val": [], "test": []}
    for u in range(n_users):
        liked = np.flatnonzero(np.isin(g_item, likes[u]))
        other = np.flatnonzero(~np.isin(g_item, likes[u]))
        chosen = np.concatenate([rng.choice(liked, 8, replace=False), rng.choice(other, 1, replace=False)])
        rng.shuffle(chosen)
        for j, i in enumerate(chosen):
            pairs["train" if j < 6 else ("val" if j < 7 else "test")].append([u, int(i)])
    out = {f"face_files/{s}.csv": _csv(p, ["user", "item"]).encode() for s, p in pairs.items()}
    items = [{"id": i, "profile": f"a {genres[g_item[i]]} book, title {i}"} for i in range(n_items)]
    users = [{"id": u, "profile": f"reads {genres[likes[u][0]]} and {genres[likes[u][1]]} books"} for u in range(n_users)]
    out["face_files/item_profiles.jsonl"] = "".join(json.dumps(r) + "\n" for r in items).encode()
    out["face_files/user_profiles.jsonl"] = "".join(json.dumps(r) + "\n" for r in users).encode()
    return out


MAKERS = (monotone_gbt, discrete_structure, strategic_causal, mtpp_threshold, min_swgg, cmcl, gyroatt, more_longtail,
          ugodit, face)


def build() -> dict[str, bytes]:
    """{path relative to this folder: bytes} of every example file."""
    files: dict[str, bytes] = {}
    for make in MAKERS:
        files.update(make())
    return files


def main(argv: list[str] | None = None) -> int:
    files = build()
    for rel, data in files.items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    total = sum(len(b) for b in files.values())
    print(f"wrote {len(files)} example files under {HERE} ({total / 1024:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
