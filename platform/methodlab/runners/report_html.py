"""report.html beside summary.parquet: a self-contained page (figures inlined as base64 PNG, no
script, no network) that leads with the method's key metrics (its config's `key_metrics`: a table for a
single run, columns per trial for a sweep, the first curves), then learning curves, the metric against
each swept parameter, a parallel-coordinates view, Optuna parameter importances and the trials ASHA stopped.
`build_compare` writes compare.html: runs / sweeps side by side, mean and spread over seeds."""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path

import pandas as pd
import yaml

from methodlab.runners.results import read_history, read_summary

REPORT = "report.html"
FIG_DIR = "report_files"
MIN_TRIALS_IMPORTANCE = 3
CSS = """body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}.note{color:#555;font-size:13px}"""


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class Figures:
    """Collects figures as PNG bytes: inlined in the page and also written to report_files/ (for
    MLflow artifacts and for reading one plot on its own)."""

    def __init__(self, folder: Path):
        self.folder, self.items = folder, []

    def add(self, fig, name: str, title: str) -> None:
        plt = _plt()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        plt.close(fig)
        data = buf.getvalue()
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.png").write_bytes(data)
        self.items.append((name, title, data))

    def html(self, name: str) -> str:
        for n, title, data in self.items:
            if n == name:
                b64 = base64.b64encode(data).decode()
                return (f'<figure id="fig-{n}"><img alt="{html.escape(title)}" src="data:image/png;base64,{b64}">'
                        f'<figcaption class="note">{html.escape(title)}</figcaption></figure>')
        return ""


def read_record(run_dir: Path) -> dict:
    for name in ("sweep.yaml", "job.yaml"):
        p = run_dir / name
        if p.exists():
            return {"kind": name.split(".")[0], **(yaml.safe_load(p.read_text()) or {})}
    return {"kind": "unknown"}


def swept_params(summary: pd.DataFrame, record: dict) -> list[str]:
    declared = list(((record.get("space") or {}).get("params") or {}))
    if declared:
        return [p for p in declared if f"config/{p}" in summary]
    return [c.removeprefix("config/") for c in summary.columns
            if c.startswith("config/") and c != "config/seed" and summary[c].astype(str).nunique() > 1]


def _is_num(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _x_col(history: pd.DataFrame) -> str:
    for c in ("step", "epoch", "training_iteration"):
        if c in history:
            return c
    return history.columns[1]


def key_metrics(summary: pd.DataFrame, record: dict, chosen: list[str] | None = None) -> list[str]:
    """What the page leads with: the run's metric, the metrics asked for (`methodlab results --metric`), then
    the method's own `key_metrics` (its config class; none for an unknown or removed method)."""
    metric = str(summary["metric"].iloc[0]) if len(summary) and "metric" in summary else None
    method = str(summary["method"].iloc[0]) if len(summary) and "method" in summary else record.get("method")
    declared: tuple[str, ...] = ()
    if method:
        try:
            from methodlab.core.registry import get_spec

            cls = get_spec(str(method)).config_cls()
            declared = tuple(cls.key_metrics) or (cls.primary_metric,)
        except Exception:  # noqa: BLE001 - a folder from another version or a test double: no declared metrics
            declared = ()
    return [k for k in dict.fromkeys([metric, *(chosen or []), *declared]) if k]


def _varies(s: pd.Series) -> bool:
    vals = s.dropna()
    return len(vals) > 1 and vals.nunique() > 1


def curve_metrics(primary: str, history: pd.DataFrame, extra: list[str] | None = None, limit: int = 4) -> list[str]:
    """The key metrics first (primary, the ones asked for, the method's declared ones) where the history holds at
    least two reports of them, then other metrics that change over the run, to `limit` panels (more where more
    key metrics were declared). A setting that never changes (a constant lr, a zero regulariser term) or a
    once-reported final value is no curve."""
    skip = {"trial_id", "step", "epoch", "training_iteration", "time_this_iter_s", "time_total_s", "timestamp",
            "time_since_restore", "iterations_since_restore", "pid"}
    keys = [k for k in dict.fromkeys([primary, *(extra or [])])
            if k in history and _is_num(history[k]) and history[k].notna().sum() >= 2]
    if primary in history and primary not in keys:
        keys.insert(0, primary)  # the run's metric is drawn even from a single report
    others = [c for c in history.columns if c not in skip and c not in keys and _is_num(history[c])
              and not c.startswith(("final/", "time/", "_")) and _varies(history[c])]
    return [*keys, *others][:max(limit, len(keys))]


def key_metric_rows(summary: pd.DataFrame, history: pd.DataFrame | None, keys: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """One row per key metric of a single run: its last reported value, the step of it, min, max, number of
    reports (from history.parquet, else the final value in summary.parquet). Also the keys the run never reported."""
    rows, missing = [], []
    x = _x_col(history) if history is not None and len(history) else None
    for k in keys:
        series = history[k].dropna() if history is not None and k in history and _is_num(history[k]) else None
        if series is not None and len(series):
            step = history.loc[series.index[-1], x] if x is not None and x in history else None
            rows.append({"metric": k, "last": float(series.iloc[-1]), "at " + (x or "step"): step,
                         "min": float(series.min()), "max": float(series.max()), "reports": int(len(series))})
        elif f"final/{k}" in summary and len(summary) and pd.notna(summary[f"final/{k}"].iloc[0]):
            v = summary[f"final/{k}"].iloc[0]
            rows.append({"metric": k, "last": float(v), "min": float(v), "max": float(v), "reports": 1})
        else:
            missing.append(k)
    return pd.DataFrame(rows), missing


def fig_curves(figs: Figures, summary: pd.DataFrame, history: pd.DataFrame, metrics: list[str]) -> None:
    plt = _plt()
    x = _x_col(history)
    stopped = set(summary.loc[summary.get("stopped_early", pd.Series(False, index=summary.index)).fillna(False).astype(bool),
                              "trial_id"]) if "stopped_early" in summary else set()
    n = len(metrics)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    for ax, key in zip(flat, metrics):
        for tid, part in history.groupby("trial_id", sort=False):
            part = part.dropna(subset=[key]) if key in part else part.iloc[:0]
            if not len(part):
                continue
            (line,) = ax.plot(part[x], part[key], lw=1.2, marker=".", label=str(tid)[:24])
            if tid in stopped:  # where ASHA cut the trial short
                ax.plot(part[x].iloc[-1], part[key].iloc[-1], "x", color=line.get_color(), ms=9, mew=2)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel(x)
    axes[0][0].legend(fontsize=6, loc="best")
    if stopped:
        fig.text(0.01, 0.005, "x = stopped early by ASHA", fontsize=8)
    fig.tight_layout()
    figs.add(fig, "curves", "learning curves: " + ", ".join(metrics))


def _codes(s: pd.Series) -> tuple[pd.Series, list | None]:
    if _is_num(s):
        return s.astype(float), None
    cats = sorted(s.astype(str).unique())
    return s.astype(str).map({c: i for i, c in enumerate(cats)}).astype(float), cats


def fig_params(figs: Figures, summary: pd.DataFrame, params: list[str], metric: str, record: dict) -> None:
    plt = _plt()
    space = (record.get("space") or {}).get("params") or {}
    n = len(params)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    y = summary["best"].astype(float)
    for ax, p in zip(axes[0], params):
        vals, cats = _codes(summary[f"config/{p}"])
        ax.scatter(vals, y, c="tab:blue", alpha=0.8)
        if cats is not None:
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels(cats, rotation=30, ha="right", fontsize=8)
        elif (space.get(p) or {}).get("loguniform"):
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # narrow ranges: minor labels overlap
        ax.set_xlabel(p)
        ax.set_ylabel(f"best {metric}")
    fig.tight_layout()
    figs.add(fig, "params", f"{metric} against each swept parameter")


def fig_parallel(figs: Figures, summary: pd.DataFrame, params: list[str], metric: str) -> None:
    plt = _plt()
    cols, ticks = [], []
    for p in params:
        vals, cats = _codes(summary[f"config/{p}"])
        if cats is None and (vals > 0).all() and vals.max() / max(vals.min(), 1e-300) > 20:
            vals = vals.apply(math.log10)  # log-scaled axis for wide positive ranges (learning rates)
            p = f"log10 {p}"
        cols.append((p, vals, cats))
    y = summary["best"].astype(float)
    cols.append((metric, y, None))
    norm = []
    for name, vals, cats in cols:
        lo, hi = float(vals.min()), float(vals.max())
        norm.append((vals - lo) / (hi - lo) if hi > lo else vals * 0 + 0.5)
        ticks.append((name, lo, hi, cats))
    fig, ax = plt.subplots(figsize=(max(6.0, 2.0 * len(cols)), 4.0))
    cmap = plt.get_cmap("viridis")
    ylo, yhi = float(y.min()), float(y.max())
    for i in range(len(summary)):
        frac = (y.iloc[i] - ylo) / (yhi - ylo) if yhi > ylo and y.iloc[i] == y.iloc[i] else 0.5
        ax.plot(range(len(cols)), [nv.iloc[i] for nv in norm], color=cmap(frac), lw=1.5, alpha=0.85)
    ax.set_xticks(range(len(cols)))
    labels = []
    for name, lo, hi, cats in ticks:
        rng = ("/".join(cats[:4]) + ("/..." if len(cats) > 4 else "")) if cats else f"{lo:.3g} .. {hi:.3g}"
        labels.append(f"{name}\n{rng}")
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_yticks([])
    for i in range(len(cols)):
        ax.axvline(i, color="#999", lw=0.8)
    fig.tight_layout()
    figs.add(fig, "parallel", "parallel coordinates (colour: metric)")


def _distribution(spec: dict | None, values: pd.Series):
    import optuna.distributions as od

    spec = spec or {}
    if spec.get("loguniform"):
        return od.FloatDistribution(*spec["loguniform"], log=True)
    if spec.get("uniform"):
        return od.FloatDistribution(*spec["uniform"])
    if spec.get("randint"):
        return od.IntDistribution(*spec["randint"])
    choices = spec.get("choice") or spec.get("grid") or sorted(values.astype(str).unique())
    return od.CategoricalDistribution([c if isinstance(c, (str, int, float, bool)) or c is None else json.dumps(c)
                                       for c in choices])


def importances(summary: pd.DataFrame, params: list[str], record: dict, mode: str) -> tuple[dict | None, str]:
    """Optuna's fANOVA importances on a study rebuilt from the finished trials' best values."""
    import optuna

    ok = summary[(summary["status"] != "ERROR") & summary["best"].notna()] if len(summary) else summary
    if not params:
        return None, "no swept parameters"
    if len(ok) < MIN_TRIALS_IMPORTANCE:
        return None, (f"too few finished trials for parameter importances ({len(ok)}; needs at least "
                      f"{MIN_TRIALS_IMPORTANCE})")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = (record.get("space") or {}).get("params") or {}
    dists = {p: _distribution(space.get(p), summary[f"config/{p}"]) for p in params}
    study = optuna.create_study(direction="maximize" if mode == "max" else "minimize")
    skipped = 0
    for _, row in ok.iterrows():
        values = {}
        for p in params:
            v = row[f"config/{p}"]
            if isinstance(dists[p], optuna.distributions.CategoricalDistribution):
                v = v if v in dists[p].choices else str(v)
            elif isinstance(dists[p], optuna.distributions.IntDistribution):
                v = int(v)
            else:
                v = float(v)
            values[p] = v
        try:
            study.add_trial(optuna.trial.create_trial(params=values, distributions=dists, value=float(row["best"])))
        except ValueError:
            skipped += 1  # a fixed point outside the declared range
    if len(study.trials) < MIN_TRIALS_IMPORTANCE:
        return None, f"too few trials inside the declared ranges ({len(study.trials)})"
    try:
        imp = optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    except Exception as err:  # e.g. every trial with the same params
        return None, f"optuna could not compute importances: {err}"
    note = f"fANOVA over {len(study.trials)} trials" + (f" ({skipped} outside the declared ranges left out)" if skipped else "")
    return dict(imp), note


def fig_importances(figs: Figures, imp: dict) -> None:
    plt = _plt()
    names = list(imp)[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(names) + 1.2))
    ax.barh(names, [imp[n] for n in names], color="tab:orange")
    ax.set_xlabel("importance (fANOVA)")
    fig.tight_layout()
    figs.add(fig, "importances", "Optuna parameter importances")


def _table(df: pd.DataFrame, cols: list[str], max_rows: int = 100) -> str:
    def cell(v):
        if isinstance(v, float):
            return "" if v != v else f"{v:.4g}"
        return html.escape("" if v is None else str(v))

    head = "".join(f"<th>{html.escape(c.replace('config/', '').replace('final/', ''))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{cell(r.get(c))}</td>" for c in cols) + "</tr>"
                   for _, r in df.head(max_rows).iterrows())
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(title: str, sections: list[str]) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>")


def summary_columns(summary: pd.DataFrame, params: list[str], chosen: list[str] | None = None) -> list[str]:
    extra = [f"final/{c}" if f"final/{c}" in summary and c not in summary else c for c in (chosen or [])]
    base = ["trial_id", "status", *[f"config/{p}" for p in params], "best", "checkpoint_metric", *extra]
    if "stopped_early" in summary and summary["stopped_early"].fillna(False).astype(bool).any():
        base += ["stopped_early", "stopped_at"]
    return [c for c in dict.fromkeys(base) if c in summary]


def build_report(run_dir: str | Path, metrics: list[str] | None = None) -> Path:
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    history = read_history(run_dir)
    record = read_record(run_dir)
    metric = str(summary["metric"].iloc[0]) if len(summary) else "?"
    mode = str(summary["mode"].iloc[0]) if len(summary) else "max"
    params = swept_params(summary, record) if len(summary) > 1 else []
    keys = key_metrics(summary, record, metrics)
    figs = Figures(run_dir / FIG_DIR)
    sections = [f"<p class='note'>{len(summary)} {'trials' if record['kind'] == 'sweep' else 'run(s)'}, "
                f"metric <b>{html.escape(metric)}</b> ({mode}), best first. Folder: {html.escape(str(run_dir))}</p>"]
    if len(summary) == 1:  # a single run: its key metrics are the headline
        rows, missing = key_metric_rows(summary, history, keys)
        sections.append("<h2>Key metrics</h2>")
        if len(rows):
            sections.append('<div id="key-metrics">' + _table(rows, list(rows.columns)) + "</div>")
        if missing:
            sections.append(f"<p class='note'>not reported by this run: {html.escape(', '.join(missing))}</p>")
    chosen = metrics if len(summary) == 1 else [*(metrics or []), *keys[1:]]  # a sweep: key metrics per trial
    sections += ["<h2>Trials</h2>", _table(summary, summary_columns(summary, params, chosen))]
    sections.append("<h2>Learning curves</h2>")
    if history is not None and len(history):
        fig_curves(figs, summary, history, curve_metrics(metric, history, keys))
        sections.append(figs.html("curves"))
    else:
        sections.append("<p class='note'>no history.parquet: no curves</p>")
    if params and len(summary):
        fig_params(figs, summary, params, metric, record)
        fig_parallel(figs, summary, params, metric)
        sections += ["<h2>Metric against each swept parameter</h2>", figs.html("params"),
                     "<h2>Parallel coordinates</h2>", figs.html("parallel")]
    sections.append("<h2>Parameter importances (Optuna)</h2>")
    imp, note = importances(summary, params, record, mode) if record["kind"] == "sweep" else (None, "a single run: no sweep")
    if imp:
        fig_importances(figs, imp)
        sections += [figs.html("importances"), f"<p class='note'>{html.escape(note)}</p>"]
    else:
        sections.append(f'<p class="note" id="no-importances">{html.escape(note)}</p>')
    sections.append("<h2>Early stopping (ASHA)</h2>")
    sched = ((record.get("space") or {}).get("scheduler") or {})
    if record["kind"] != "sweep":
        sections.append("<p class='note'>a single run: no scheduler</p>")
    elif sched.get("type") != "asha":
        sections.append(f"<p class='note'>scheduler {html.escape(str(sched.get('type')))}: no early stopping</p>")
    else:
        stopped = summary[summary.get("stopped_early", pd.Series(False, index=summary.index)).fillna(False).astype(bool)]
        sections.append(f"<p class='note'>ASHA on {html.escape(str(sched.get('time_attr')))}, grace period "
                        f"{sched.get('grace_period')}, max_t {sched.get('max_t')}: {len(stopped)} of {len(summary)} "
                        "trials stopped early.</p>")
        if len(stopped):
            sections.append(_table(stopped, ["trial_id", "stopped_at", "best", *[f"config/{p}" for p in params]]))
    out = run_dir / REPORT
    out.write_text(_page(f"{record.get('name') or run_dir.name}: results", sections))
    return out


# ---------------------------------------------------------------------------------------------------
# --compare: several run / sweep folders side by side


def compare_groups(run_dirs: list[str | Path]) -> pd.DataFrame:
    """One row per group of trials that differ only by seed: mean, std (ddof=0), min, max of `best`."""
    rows = []
    for d in run_dirs:
        s = read_summary(d).copy()
        s["folder"] = str(d)
        rows.append(s)
    allrows = pd.concat(rows, ignore_index=True)
    allrows["_key"] = allrows["method"].astype(str)
    for method, idx in allrows.groupby("method").groups.items():
        # within one method, the config values (other than the seed) that differ name the groups
        part = allrows.loc[idx]
        cfg = [c for c in part.columns if c.startswith("config/") and c != "config/seed" and part[c].notna().any()]
        for c in cfg:
            if part[c].astype(str).nunique() > 1:
                allrows.loc[idx, "_key"] += " " + c.removeprefix("config/") + "=" + part[c].astype(str)
    out = []
    for key, g in allrows.groupby("_key", sort=False):
        b = g["best"].astype(float)
        seeds = sorted(g["config/seed"].dropna().astype(int).tolist()) if "config/seed" in g else []
        out.append({"group": key, "method": g["method"].iloc[0], "metric": g["metric"].iloc[0], "n": len(g),
                    "seeds": ",".join(map(str, seeds)), "mean": b.mean(), "std": b.std(ddof=0), "min": b.min(),
                    "max": b.max(), "folders": ", ".join(dict.fromkeys(g["folder"]))})
    return pd.DataFrame(out)


def build_compare(run_dirs: list[str | Path], out: str | Path, metric: str | None = None) -> tuple[Path, pd.DataFrame]:
    plt = _plt()
    out = Path(out)
    groups = compare_groups(run_dirs)
    figs = Figures(out.parent / FIG_DIR)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(groups)), 3.8))
    ax.bar(range(len(groups)), groups["mean"], yerr=groups["std"], capsize=4, color="tab:blue", alpha=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g[:28] for g in groups["group"]], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel(f"best {groups['metric'].iloc[0]} (mean ± std over seeds)")
    fig.tight_layout()
    figs.add(fig, "compare_bars", "mean and spread over seeds")
    key = metric or str(groups["metric"].iloc[0])
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    drawn = 0
    for d in run_dirs:
        h = read_history(d)
        if h is None or key not in h:
            continue
        x = _x_col(h)
        curve = h.groupby(x)[key].agg(["mean", "std", "count"]).reset_index()
        (line,) = ax.plot(curve[x], curve["mean"], label=Path(d).name[:28])
        ax.fill_between(curve[x], curve["mean"] - curve["std"].fillna(0), curve["mean"] + curve["std"].fillna(0),
                        color=line.get_color(), alpha=0.15)
        drawn += 1
    if drawn:
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figs.add(fig, "compare_curves", f"{key}: mean ± std over each folder's trials")
    else:
        plt.close(fig)
    sections = [_table(groups, ["group", "n", "seeds", "mean", "std", "min", "max", "folders"]),
                figs.html("compare_bars"), figs.html("compare_curves")]
    out.write_text(_page("comparison", sections))
    return out, groups
