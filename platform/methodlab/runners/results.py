"""summary.parquet (one row per run or trial) and history.parquet (every report), plus reading them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

SUMMARY = "summary.parquet"
HISTORY = "history.parquet"
# {trial_id, at} of each trial the sweep's ASHA stopped early, one JSON line each (runners/tune.py writes it)
EARLY_STOPS = "early_stops.jsonl"


def _flat(prefix: str, d: dict) -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(key + ".", v))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def _numeric(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("_")}


def read_early_stops(sweep_dir: str | Path) -> dict:
    """{trial_id: time attribute} of the trials the scheduler stopped early (empty when none or no log)."""
    path = Path(sweep_dir) / EARLY_STOPS
    if not path.exists():
        return {}
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["trial_id"]: r["at"] for r in rows}


def read_history_jsonl(path: Path) -> list[dict]:
    """Reports of a run, deduplicated by step (a resumed run re-reports what followed its checkpoint)."""
    if not path.exists():
        return []
    rows: dict[Any, dict] = {}
    for i, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            row = json.loads(line)
            rows[row.get("step", i)] = row
    return list(rows.values())


def write_run_summary(run_dir: Path, slug: str, cfg, final: dict, checkpoint: Path | None) -> pd.DataFrame:
    cls = type(cfg)
    history = read_history_jsonl(run_dir / "metrics.jsonl")
    metric, mode = cls.primary_metric, cls.mode
    values = [h[metric] for h in history if isinstance(h.get(metric), (int, float))]
    best = (max(values) if mode == "max" else min(values)) if values else math.nan
    row = {"trial_id": run_dir.name, "method": slug, "status": "TERMINATED", "metric": metric, "mode": mode,
           "best": best, "checkpoint": str(checkpoint) if checkpoint else None, "checkpoint_metric": final.get(metric),
           "iterations": len(history), **_flat("config/", cfg.model_dump(mode="json")),
           **{f"final/{k}": v for k, v in _numeric(final).items()}}
    df = pd.DataFrame([row])
    df.to_parquet(run_dir / SUMMARY)
    if history:
        hist = pd.DataFrame([{"trial_id": run_dir.name, **_numeric(h)} for h in history])
        hist.to_parquet(run_dir / HISTORY)
    return df


def _fill_lost_reports(part: pd.DataFrame, reports: Path) -> pd.DataFrame:
    """Add the steps a trial reported (its own record, runners/tune.py REPORTS_DIR) that never reached Tune's
    results (lost with a node), and keep one row per step. Only gaps: a report made after Tune had stopped the
    trial (ASHA) is not part of its results."""
    if "step" not in part or not reports.exists() or not part["step"].notna().any():
        return part
    seen = set(part["step"].dropna().astype(float))
    last = max(seen)
    extra = [_numeric(r) for r in read_history_jsonl(reports)
             if isinstance(r.get("step"), (int, float)) and float(r["step"]) not in seen and float(r["step"]) < last]
    if extra:
        part = pd.concat([part, pd.DataFrame(extra)], ignore_index=True)
    return part.sort_values("step", kind="stable").drop_duplicates("step", keep="last").reset_index(drop=True)


def write_sweep_summary(sweep_dir: Path, slug: str, result_grid, metric: str, mode: str, params: list[str],
                        early_stops: dict | None = None, reports_dir: Path | None = None) -> pd.DataFrame:
    """`early_stops`: {trial_id: time attribute} of the trials the scheduler stopped early. `reports_dir`: the
    trials' own report records, which fill steps missing from Tune's results."""
    early_stops = early_stops or {}
    rows, hist = [], []
    for res in result_grid:
        trial_id = Path(res.path).name if res.path else "?"
        cfg = res.config or {}
        metrics = res.metrics or {}
        df = res.metrics_dataframe
        best_ckpt, best_val = None, None
        for ckpt, m in res.best_checkpoints or []:
            v = m.get(metric)
            if v is None:
                continue
            if best_val is None or (v > best_val if mode == "max" else v < best_val):
                best_ckpt, best_val = ckpt, v
        if best_ckpt is None and res.checkpoint is not None:
            best_ckpt, best_val = res.checkpoint, metrics.get(metric)
        if best_ckpt is None and metrics.get("checkpoint_path"):  # Train-in-Tune trials
            best_ckpt, best_val = metrics["checkpoint_path"], metrics.get(metric)
        series = df[metric].dropna() if df is not None and metric in df else pd.Series(dtype=float)
        best = (series.max() if mode == "max" else series.min()) if len(series) else math.nan
        rows.append({"trial_id": metrics.get("trial_id", trial_id), "method": slug,
                     "status": "ERROR" if res.error else "TERMINATED", "error": str(res.error)[:500] if res.error else None,
                     "metric": metric, "mode": mode, "best": best,
                     "checkpoint": getattr(best_ckpt, "path", best_ckpt), "checkpoint_metric": best_val,
                     "iterations": metrics.get("training_iteration", 0), "path": res.path,
                     "stopped_early": metrics.get("trial_id", trial_id) in early_stops,
                     "stopped_at": early_stops.get(metrics.get("trial_id", trial_id)),
                     **{f"config/{p}": (json.dumps(cfg.get(p)) if isinstance(cfg.get(p), (list, dict)) else cfg.get(p))
                        for p in params},
                     **{f"final/{k}": v for k, v in _numeric(metrics).items() if k not in ("time_this_iter_s", "pid")}})
        if df is not None and len(df):
            keep = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not c.startswith("_")]
            part = df[keep].copy()
            if reports_dir is not None:
                part = _fill_lost_reports(part, Path(reports_dir) / f"{rows[-1]['trial_id']}.jsonl")
            part.insert(0, "trial_id", rows[-1]["trial_id"])
            hist.append(part)
    table = pd.DataFrame(rows)
    if len(table):
        table = table.sort_values("checkpoint_metric", ascending=(mode == "min"), na_position="last").reset_index(drop=True)
    table.to_parquet(sweep_dir / SUMMARY)
    if hist:
        pd.concat(hist, ignore_index=True).to_parquet(sweep_dir / HISTORY)
    return table


def read_summary(run_dir: str | Path) -> pd.DataFrame:
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        from methodlab.core.errors import MethodlabError

        raise MethodlabError(f"{path}: not found; results come from `methodlab run` or `methodlab tune`")
    return pd.read_parquet(path)


def read_history(run_dir: str | Path) -> pd.DataFrame | None:
    path = Path(run_dir) / HISTORY
    return pd.read_parquet(path) if path.exists() else None
