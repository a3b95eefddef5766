"""Side readings of grokking_flatness's reproduction (report text only; nothing here is a claim).

Claim B2 reads `summary.steepest_log_drop` over the memorised logs: the single log interval where log RF falls
fastest. `rf_profile` puts that reading beside the shape of the whole RF curve, so the report can say why it lands
where it does (issue 44 item 8): how far RF has already fallen by t_gen, how many intervals after t_gen fall at
least as fast as the steepest one before it, and where the steepest fall over a fixed window of steps lies."""

from __future__ import annotations

import math

from methodlab.methods.grokking_flatness.summary import memorised, value_at
from methodlab.reproduce.tables import fmt, md_table

WINDOW = 500  # steps: ten logs of the CPU recipe, about a tenth of the slowest dev seed's t_gen


def _rates(rows: list[dict]) -> list[tuple[float, int]]:
    """(log-RF fall per step, step ending the interval) over consecutive rows, as summary.steepest_log_drop."""
    return [((math.log(a["rf"]) - math.log(b["rf"])) / max(1, b["step"] - a["step"]), int(b["step"]))
            for a, b in zip(rows, rows[1:])]


def rf_profile(history: list[dict], t_mem: int, t_gen: int, window: int = WINDOW) -> dict | None:
    """The RF curve around B2's reading (None without a t_gen): peak after t_mem, orders of magnitude fallen from
    it by t_gen, the steepest interval up to t_gen, later intervals as steep, train-accuracy dips after t_mem, and
    the window of `window` steps with the largest fall (its midpoint's offset from t_gen, as B2's)."""
    rows = [h for h in memorised(history) if h.get("rf", 0) > 0]
    if t_gen <= 0 or len(rows) < 2:
        return None
    peak = max(rows, key=lambda h: h["rf"])
    rates = _rates(rows)
    before = max((r for r, s in rates if s <= t_gen), default=0.0)
    later = sum(1 for r, s in rates if s > t_gen and r >= before > 0)
    best = None
    for i, a in enumerate(rows):
        b = next((x for x in rows[i + 1:] if x["step"] >= a["step"] + window), None)
        if b is None:
            break
        fall = math.log(a["rf"]) - math.log(b["rf"])
        if best is None or fall > best[0]:
            best = (fall, int(a["step"]), int(b["step"]))
    mid = None if best is None else (best[1] + best[2]) / 2
    jumps = [(abs(math.log10(b["rf"] / a["rf"])), b["step"]) for a, b in zip(rows, rows[1:])]
    at_gen = value_at(history, "rf", t_gen)
    return {"peak_step": int(peak["step"]), "peak": peak["rf"], "at_t_gen": at_gen,
            "orders_fallen_by_t_gen": math.log10(peak["rf"] / at_gen),
            "steepest_before_t_gen": before, "later_as_steep": later,
            "dips_after_t_mem": sum(1 for h in history if h["step"] > t_mem and h.get("train/accuracy", 1) < 0.95),
            "jitter_before": _median([j for j, s in jumps if s <= t_gen]),
            "jitter_after": _median([j for j, s in jumps if s > t_gen]),
            "window": None if best is None else (best[1], best[2]),
            "window_offset": None if mid is None else abs(mid - t_gen) / t_gen}


def _span(prof: dict, key: str) -> str:
    v = [p[key] for p in prof.values() if p and p[key] is not None]
    return f"{min(v):.2f}-{max(v):.2f}" if v else "—"


def _median(v: list[float]) -> float | None:
    v = sorted(v)
    return None if not v else (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2


def drop_offset(drop, t_gen):
    """Claim B2's reading: |drop - t_gen| / t_gen (None without both; inf without a t_gen or a drop)."""
    if drop is None or t_gen is None:
        return None
    return abs(drop - t_gen) / t_gen if t_gen > 0 and drop > 0 else math.inf


def b2_section(res, seeds) -> list[str]:
    """Claim B2 beside the RF curve it reads (issue 44 item 8: why the steepest single fall misses t_gen)."""
    rows, prof = [], {}
    for s in seeds:
        t_mem, t_gen = res.metric("baseline", s, "t_mem"), res.metric("baseline", s, "t_gen")
        p = prof[s] = rf_profile(res.history("baseline", s), t_mem, t_gen)
        if p is None:
            continue
        w, drop = p["window"], res.metric("baseline", s, "rf_drop_step")
        rows.append([s, fmt(t_mem, 0), fmt(t_gen, 0), fmt(drop, 0), fmt(drop_offset(drop, t_gen), 2),
                     f"{p['peak']:.3g} @ {p['peak_step']}", f"{p['at_t_gen']:.3g}", fmt(p["orders_fallen_by_t_gen"], 1),
                     f"{p['steepest_before_t_gen']:.2g}", p["later_as_steep"],
                     f"{fmt(p['jitter_before'], 2)} / {fmt(p['jitter_after'], 2)}", p["dips_after_t_mem"],
                     "—" if w is None else f"{w[0]}-{w[1]}", fmt(p["window_offset"], 2)])
    if not rows:
        return []
    late = [s for s, p in prof.items() if p and p["later_as_steep"] > 0]
    spike = [s for s, p in prof.items() if p and p["peak_step"] > res.metric("baseline", s, "t_gen")]
    return ["## Claim B2 beside the RF curve", "",
            "B2 reads the single log interval (memorised logs) where log RF falls fastest per step. The table puts it "
            "beside the curve: RF's peak after t_mem, its value at t_gen and how many orders of magnitude it has "
            "fallen by then, the steepest fall per step in an interval ending at or before t_gen, how many intervals "
            "after t_gen fall at least as fast, the median change of log10 RF from one log to the next (before / "
            "after t_gen: RF is measured on one set of weights per log and jumps between logs, so a single log's "
            "value, t_gen's included, is a noisy reading), train-accuracy logs below 95 % after t_mem, and the "
            f"{WINDOW}-step window with the largest fall in log RF (its midpoint's offset from t_gen read as B2's). "
            "Context only: the claim keeps the spec's reading.", "",
            *md_table(["seed", "t_mem", "t_gen", "B2 step", "B2 offset", "RF peak @ step", "RF @ t_gen",
                       "orders fallen by t_gen", "steepest fall / step to t_gen", "later intervals as steep",
                       "median log10 change per log, before / after t_gen", "train dips < 95 %",
                       f"steepest {WINDOW}-step fall", "its offset"], rows),
            f"On seed{'s' * (len(late) > 1)} {', '.join(map(str, late))} at least one interval after t_gen falls as fast as "
            f"any before it. RF jumps from log to log before and after t_gen alike (median {_span(prof, 'jitter_before')} "
            f"orders of magnitude per log before, {_span(prof, 'jitter_after')} after), so the single steepest "
            "interval is one of many jumps of similar size and need not lie at the onset." if late else "",
            f"On seed{'s' * (len(spike) > 1)} {', '.join(map(str, spike))} RF's highest value after t_mem comes after t_gen (RF rose again "
            "after generalisation), so the fall from that late spike competes with the onset's." if spike else "", ""]


def official_comparison() -> list[str]:
    """Report section: the collapse regularizers against the official code (read, not run)."""
    return ["## Official code comparison: the collapse regularizers (issue 44 item 8)", "",
            "- Official (TrustworthyMachineLearning-Lab/grokking_flatness, `nc_experiments/training_utils.py`, "
            "ResNet-18 on CIFAR-10): `loss - lambda * CDNV_batch`, CDNV_batch = the mean over ordered pairs of the "
            "classes in the batch (true labels) of (var_1 + var_2) / (2 ||mu_1 - mu_2||^2) on the penultimate "
            "features, with gradient through them; lambda 1e-3 (`run_script.sh`). The grokking code of the same "
            "repository (`grokking_nc_rf`) has no regularizer, so the transformer arms apply that term to the "
            "features at the answer position.",
            "- Ours (`train.regularizer`, `measures.batch_cdnv`): the same term, -lambda (prevent) / +lambda "
            "(encourage). **Differs** in one point: a class with a single sample in the batch is left out (official: "
            "its variance 0, its mean kept in the pairs); at batch 512 over 97 residues (about 5 samples per class) "
            "that is a small share of the pairs. The term is unbounded: -lambda * CDNV falls without limit as two "
            "class means meet, so nothing but lambda's size keeps collapse-prevent from running away (the issue-22 "
            "dev-seed runs, reports/legacy/grokking_flatness.md: lambda 1e-2 diverged within 300 steps, CDNV 1.6e9; "
            "not rerun here). The study keeps the official 1e-3.", ""]


# Issue 44 (a FAIL needs the official code on the point in question): claims B2 (RF), C1 and D1 (anti-flat) against
# TrustworthyMachineLearning-Lab/grokking_flatness at 2b7827d (2025-12-01, the one commit with code). Read, not run.
FLATNESS_ROWS = (
    ("RF: weights and formula (B2)", "`grokking_nc_rf/grok/training.py` `training_step`: the bias-free readout; "
     "||W||_F^2 * sum_k p_k (1 - p_k) * ||phi||^2 per sample, the closed-form trace of the last layer's cross-entropy "
     "Hessian (no sampling)", "`measures.relative_flatness_trace` on the bias-free readout `W`, the same closed form",
     "matches (the official readout carries 139 unused vocabulary rows in ||W||_F and the softmax)"),
    ("RF: logits and features (B2)", "p = softmax of the element-wise product of the two answer-side logit vectors; "
     "phi = both positions' final states concatenated", "`rf_position=answer` (the study's): softmax of the answer "
     "logits and its state; `official_pair` reproduces the official quantity, not run by the study", "differs"),
    ("RF: data, state, logging (B2)", "every minibatch of a logged epoch, before its step (about 4 weight states per "
     "value at train fraction 0.2), averaged in the plotting notebook; logs every epoch to 200, then x1.01 apart; no "
     "smoothing; no code computes a steepest drop or t_gen", "the full train set after the step, one state; every 50 "
     "steps (CPU study), x1.01 after step 2,000 (paper.yaml)", "nearly matches; the B2 statistic is the spec's, with "
     "no official counterpart"),
    ("anti-flat form (C1, D1)", "`rf_resnet18/training_utils.py` `train` (also ViT, GPT-2, BERT): CE - lambda * "
     "mean(||W||_F^2 * sum p~(1 - p~) * ||phi / ||phi|| ||^2), p~ = softmax(z / tau); ||W||_F capped after every step",
     "`measures.anti_flat_term`, `train.cap_norm_`", "matches"),
    ("anti-flat on the grokking transformer (C1)", "none: `grokking_nc_rf` parses `hessian_coeff`, `use_rglr` and "
     "others, and no code reads them (`run_script.sh` as shipped fails argparse on them)", "our extension: lambda "
     "1e-2, cap 150, off at step 2,000 of 13,000", "no official counterpart; the official runs switch off at half of "
     "training, ours at 15 %"),
    ("anti-flat budget (D1)", "ResNet-18: lambda 1e-2, tau 2, cap 50, SGD 1e-2 / 0.9, batch 64, off at epoch 200 of "
     "400 (about 156,000 regularised steps), then lr x10, wd 2e-4, cosine; the plotted TinyBERT 'unplug' run's "
     "folder names lambda 0.3", "`jobs/grokking_flatness/digits.yaml`: the same constants, off at step 500 of 1,000 "
     "(500 regularised steps)", "differs: the same epochs-share, about 300x fewer regularised steps"),
    ("grokking setup", "2 layers, 4 heads, d 128, no biases, AdamW (0.9, 0.98), wd 1.0 on every parameter (LayerNorm "
     "gains too), lr 1e-4, batch 512, 1e5 steps, no clipping, one fixed split for every run", "paper.yaml / gpu.yaml: "
     "the same but with biases and the split drawn per seed; the CPU study: 1 layer, lr 3e-3, wd on weight matrices, "
     "clip 1, 13,000 steps", "paper.yaml nearly matches (GPU, not lent); the CPU study differs"),
)


def official_flatness() -> list[str]:
    """Report section: the relative-flatness measure and the anti-flat regularizer against the official code."""
    head = ["point", "official (2b7827d)", "ours", "verdict"]
    return ["## Official code comparison: relative flatness and the anti-flat regularizer (issue 44)", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(row) + " |" for row in FLATNESS_ROWS), "",
            "Reading (no run changes it): RF's formula and estimator are the official ones; B2's single-steepest-"
            "interval reading has no official counterpart (the paper reads its figure), and the official curve "
            "averages about 4 weight states per value where ours is one state, on the answer position rather than "
            "the official product of both answer-side logits. D1 ran 500 regularised SGD steps where the official "
            "ResNet recipe runs about 156,000, and the term only bites once ||W|| nears its cap, so a lambda of 1e-2 "
            "might have too little time to act (the 0.6 side arm shows the effect of a larger lambda); the paper's "
            "anti-flat anchor (TinyBERT on SST-5, the spec's table) comes, by its folder name in the official "
            "notebook, from a lambda 0.3 run. C1 applies the term to a transformer, which the official grokking code "
            "never does. The next section runs two of these points: a digits arm with the official step count and "
            "the baseline with `rf_position=official_pair`. Not run: weight decay on every parameter alone (it is "
            "part of the paper's recipe, `--full`); the paper's transformer setting (paper.yaml, gpu.yaml) needs a "
            "GPU, and none was lent.", ""]


def digits_gaps(r, s, arm="digits-anti_flat", base="digits-baseline") -> list[tuple[int, float]]:
    """(step, unregularized - anti-flat test accuracy in points) at every log of the regularized phase."""
    hb, ha, cancel = r.history(base, s), r.history(arm, s), r.config(arm).get("cancel_step")
    if not hb or not ha or cancel is None:
        return []
    return [(x["step"], 100 * (value_at(hb, "val/accuracy", x["step"]) - x["val/accuracy"])) for x in ha
            if x["step"] <= cancel]


def _d1_probe(res, arm="digits-anti_flat-long", base="digits-baseline-long") -> dict[int, dict]:
    """Per seed: the regularized phase's gaps (points) and the RF ratio at its last log; finals of both runs."""
    out = {}
    for s in res.seeds(arm):
        g, ha, hb = digits_gaps(res, s, arm, base), res.history(arm, s), res.history(base, s)
        if g:
            end = g[-1][0]  # the last log of the regularized phase
            out[s] = {"gaps": [x for _, x in g], "rf_ratio": value_at(ha, "rf", end) / value_at(hb, "rf", end),
                      "final": ha[-1]["val/accuracy"], "base_final": hb[-1]["val/accuracy"]}
    return out


def _d1_probe_rows(res) -> list[list]:
    rows = []
    for s, p in _d1_probe(res).items():
        v = p["gaps"]
        rows.append([s, fmt(min(v), 1), fmt(sum(v) / len(v), 1), fmt(max(v), 1), fmt(v[-1], 1),
                     f"{sum(x >= 10 for x in v)} / {len(v)}", fmt(p["rf_ratio"], 0), fmt(p["final"], 3),
                     fmt(p["base_final"], 3)])
    return rows


def _d1_probe_reading(res) -> str:
    p = _d1_probe(res)
    if not p:
        return ""
    lo, hi = min(min(x["gaps"]) for x in p.values()), max(max(x["gaps"]) for x in p.values())
    r = [x["rf_ratio"] for x in p.values()]
    steps = res.config("digits-anti_flat-long").get("cancel_step")
    short = res.config("digits-anti_flat").get("cancel_step")
    acts = f"RF ends the phase {min(r):.0f}-{max(r):.0f} x the twin's, so the term acts"
    if hi < 10:
        return (f"Reading: {acts}, yet test accuracy is never 10 points below the twin's at any log of any seed "
                f"(gaps {lo:.1f} to {hi:.1f} points over {len(p)} seeds). {steps:,} regularised steps instead of D1's "
                f"{short} do not produce D1's gap at lambda 1e-2: the step count is not what fails D1 on this MLP.")
    return (f"Reading: {acts}; the gap reaches {hi:.1f} points (smallest {lo:.1f}): with the official step count "
            "lambda 1e-2 does lower test accuracy at some logs; D1 (every log) reads the smallest.")


def _first_divergence(a: list[dict], b: list[dict]) -> int | None:
    """The first step logged by both runs where their train or val accuracy differ (None: never)."""
    at = {x["step"]: x for x in b}
    for x in a:
        y = at.get(x["step"])
        if y is not None and (x["train/accuracy"], x["val/accuracy"]) != (y["train/accuracy"], y["val/accuracy"]):
            return int(x["step"])
    return None


def _b2_probe(res, arm="baseline-official_pair") -> dict[int, dict]:
    """Per seed of the official-RF twin: its t_gen, steepest drop, B2 offset and RF profile, beside the baseline's."""
    out = {}
    for s in res.seeds(arm):
        t_mem, t_gen = res.metric(arm, s, "t_mem"), res.metric(arm, s, "t_gen")
        if t_gen is None:
            continue
        drop = res.metric(arm, s, "rf_drop_step")
        out[s] = {"t_gen": t_gen, "drop": drop, "offset": drop_offset(drop, t_gen),
                  "profile": rf_profile(res.history(arm, s), t_mem, t_gen),
                  "base_t_gen": res.metric("baseline", s, "t_gen"),
                  "claim": drop_offset(res.metric("baseline", s, "rf_drop_step"), res.metric("baseline", s, "t_gen")),
                  "split": _first_divergence(res.history(arm, s), res.history("baseline", s))}
    return out


def _b2_probe_rows(probe: dict[int, dict]) -> list[list]:
    rows = []
    for s, q in probe.items():
        p = q["profile"]
        rows.append([s, fmt(q["t_gen"], 0), fmt(q["base_t_gen"], 0), fmt(q["split"], 0), fmt(q["drop"], 0),
                     fmt(q["offset"], 2), fmt(q["claim"], 2),
                     "—" if p is None else f"{fmt(p['jitter_before'], 2)} / {fmt(p['jitter_after'], 2)}",
                     "—" if p is None else p["later_as_steep"]])
    return rows


def _b2_probe_reading(res, probe: dict[int, dict]) -> str:
    off = {s: q["offset"] for s, q in probe.items() if q["offset"] is not None}
    if not off:
        return ""
    near = [s for s, v in off.items() if v <= 0.2]
    text = (f"Reading: on the official RF quantity B2's offset is {min(off.values()):.2f}-{max(off.values()):.2f} "
            f"(bar <= 0.2), within the bar on {len(near)} of {len(off)} seeds"
            + (f" ({', '.join(map(str, near))})" if near else ""))
    base = [rf_profile(res.history("baseline", s), res.metric("baseline", s, "t_mem"),
                       res.metric("baseline", s, "t_gen")) for s in res.seeds("baseline")]
    jit = [_jitter([q["profile"] for q in probe.values()]), _jitter(base)]
    if None not in jit:
        text += (f"; the median change of log10 RF from one log to the next is {jit[0]:.2f} on the official quantity "
                 f"against {jit[1]:.2f} at the answer position")
    if len(near) == len(off):
        return text + ": B2 holds on every seed on the official quantity, so the measure is what fails the claim."
    return text + ": its steepest single fall does not land at t_gen on every seed either, so the measure alone is " \
                  "not what fails B2."


def _jitter(profiles: list[dict | None]) -> float | None:
    """The median of rf_profile's median log10 change per log over these profiles (before and after t_gen pooled)."""
    v = [x for p in profiles if p for x in (p.get("jitter_before"), p.get("jitter_after")) if x is not None]
    return _median(v) if v else None


def probe_section(res) -> list[str]:
    """Report section: the issue-44 probes beside D1 and B2 (side arms, not claims)."""
    probe = _b2_probe(res)
    d1, b2 = _d1_probe_rows(res), _b2_probe_rows(probe)
    if not d1 and not b2:
        return []
    cfg = res.config("digits-anti_flat-long")
    out = ["## Probes beside D1 and B2 (issue 44; side arms, not claims)", ""]
    if d1:
        out += [f"**D1 at the official step count.** `digits-anti_flat-long`: the digits recipe of Claim D, anti-flat "
                f"lambda {cfg.get('lam'):g} for {cfg.get('cancel_step'):,} steps (the official ResNet-18 recipe's "
                f"regularised count: 782 steps an epoch x 200 epochs) instead of 500, then cancelled for "
                f"{cfg.get('max_steps') - cfg.get('cancel_step'):,} steps, a log every {cfg.get('log_every')} steps; "
                "`digits-baseline-long` is the unregularized twin on the same schedule. Gap as in D1 "
                "(unregularized minus anti-flat test accuracy, points) at every log of the regularized phase; RF "
                "ratio: "
                "anti-flat RF / unregularized RF at the phase's last log (the term acts when it is well above 1).", "",
                *md_table(["seed", "smallest gap", "mean gap", "largest gap", "gap at phase end", "logs with gap >= 10",
                           "RF ratio at phase end", "anti-flat final", "unregularized final"], d1, nd=None),
                _d1_probe_reading(res), ""]
    if b2:
        out += ["**B2 on the official RF quantity.** `baseline-official_pair`: the baseline recipe with RF logged as "
                "the official grokking code logs it (`rf_position=official_pair`: the product of both answer-side "
                "logits over the concatenated states). The measure does not touch training: on one machine the two "
                "train identically (test `test_rf_position_changes_the_measure_not_the_training`; this session's "
                "answer-position run of seed 11, stopped at step 1,250, matched its twin in loss, accuracy and ||W|| "
                "at all 25 logs). The baseline runs here ran in an "
                "earlier session, with the same key (code and config), and differ from the twin from the logged step "
                "shown: the floating-point rounding of that session's machine (as ctsketch's task `switch_rounding` "
                "measures), amplified over training, so each run's B2 is read against its own t_gen: two "
                "trajectories of one recipe.",
                "", *md_table(["seed", "t_gen", "baseline t_gen", "first log differing from the baseline run",
                               "steepest RF drop", "B2 offset (official RF)",
                               "B2 offset (claim)", "median log10 change per log, before / after t_gen",
                               "later intervals as steep"], b2, nd=None), _b2_probe_reading(res, probe), ""]
    return out
