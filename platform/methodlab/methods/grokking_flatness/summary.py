"""Grokking timing from a metric history: t_mem, t_gen, delay, steepest RF / CDNV drops."""

from __future__ import annotations

import math


TRAIN_WINDOW = 3  # spec: every "train acc >= 99 %" test reads the best of the last 3 logs


def train_acc_at(history: list[dict], step: int, window: int = TRAIN_WINDOW) -> float:
    """The one reading of "train accuracy at `step`": best of the last `window` logs at or before it
    (single logs dip at high learning rates and recover within 100 steps). t_mem, the anti-flat check
    at the baseline's t_gen and the memorised-logs filter of the RF-drop step all use it (nan: no log)."""
    rows = [h["train/accuracy"] for h in history if h["step"] <= step and "train/accuracy" in h]
    return max(rows[-window:]) if rows else float("nan")


def memorised(history: list[dict], threshold: float = 0.99) -> list[dict]:
    """Logs whose train-accuracy reading (train_acc_at) is >= threshold."""
    logged = [h for h in history if "train/accuracy" in h]
    acc = [h["train/accuracy"] for h in logged]
    return [h for i, h in enumerate(logged) if max(acc[max(0, i - TRAIN_WINDOW + 1): i + 1]) >= threshold]


def first_step(history: list[dict], key: str, threshold: float, window: int = 1) -> int:
    """First logged step where the best of the last `window` logs of `key` >= threshold (-1: never).
    window 3 for train accuracy: single-log dips at high learning rates recover within 100 steps."""
    for i, h in enumerate(history):
        recent = [x[key] for x in history[max(0, i - window + 1): i + 1] if key in x]
        if recent and max(recent) >= threshold:
            return int(h["step"])
    return -1


def steepest_log_drop(history: list[dict], key: str, where=None) -> int:
    """Step ending the interval with the steepest decrease of log(key) per step (-1 if none)."""
    rows = [h for h in history if key in h and h[key] > 0 and (where is None or where(h))]
    best, best_step = 0.0, -1
    for a, b in zip(rows, rows[1:]):
        rate = (math.log(b[key]) - math.log(a[key])) / max(1, b["step"] - a["step"])
        if rate < best:
            best, best_step = rate, int(b["step"])
    return best_step


def value_at(history: list[dict], key: str, step: int) -> float:
    """`key` at the last log at or before `step` (nan: no such log)."""
    rows = [h[key] for h in history if h["step"] <= step and key in h]
    return float(rows[-1]) if rows else float("nan")


def cdnv_drop_before(history: list[dict], t_gen: int) -> float:
    """Share of CDNV's total decrease (first log -> the run's minimum) already made at t_gen (spec, Claim B);
    -1 when the run has no t_gen or CDNV never decreased."""
    rows = [h["cdnv"] for h in history if "cdnv" in h]
    if t_gen < 0 or not rows or rows[0] <= min(rows):
        return -1.0
    return (rows[0] - value_at(history, "cdnv", t_gen)) / (rows[0] - min(rows))


def grokking_summary(history: list[dict]) -> dict:
    t_mem = first_step(history, "train/accuracy", 0.99, window=TRAIN_WINDOW)
    t_gen = first_step(history, "val/accuracy", 0.95)
    return {
        "t_mem": t_mem,
        "t_gen": t_gen,
        "delay": t_gen - t_mem if t_mem >= 0 and t_gen >= 0 else -1,
        "rf_drop_step": steepest_log_drop(memorised(history), "rf"),
        "cdnv_drop_step": steepest_log_drop(history, "cdnv"),
        "cdnv_drop_frac_at_t_gen": cdnv_drop_before(history, t_gen),
    }
