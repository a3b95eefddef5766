"""`methodlab reproduce grokking_flatness`: claims A-C of the spec on the calibrated CPU preset
(3 seeds: baseline, anti-flat, collapse-prevent, collapse-encourage) plus the digits variant.
Writes reports/grokking_flatness.md and reports/grokking_flatness.png. Runs are resumable: a
re-run reuses finished run folders under results/reproduce/grokking_flatness/."""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from methodlab.methods.grokking_flatness.summary import TRAIN_WINDOW, first_step, memorised, steepest_log_drop, train_acc_at

SEEDS = (0, 1, 2)
JOB = "jobs/grokking_flatness/cpu_frac02.yaml"  # issue 22: cpu.yaml + train fraction 0.2 + clip 1 (dev seeds 10-12); the demo keeps cpu.yaml
DIGITS_JOB = "jobs/grokking_flatness/digits.yaml"
# per regime: overrides of the calibrated CPU preset
REGIMES = {
    # at train fraction 0.2 the dev seeds generalise at steps 4,400-7,400: the baseline and collapse arms run 9,000
    # steps (B's window reaches 1.2 x t_gen; the final CDNVs are compared at the same steps); the
    # anti-flat check reads its run only at the baseline's t_gen, so 8,000 steps cover it (a run that ends before the
    # baseline's t_gen is not read: the claim fails as "not measured")
    "baseline": ["reg=none", "max_steps=9000"],
    "anti_flat": ["reg=anti_flat", "lam=0.01", "tau=2.0", "w_cap=150", "cancel_step=2000", "max_steps=8000"],
    "collapse_prevent": ["reg=collapse_prevent", "lam=0.001", "max_steps=9000"],
    # lambda 1e-3 left CDNV within noise of the baseline and 3e-2 reached 0.22-0.84x (seeds 0-2, old recipe); the spec
    # allows raising it (range up to 1e-1): 1e-1, chosen on dev seed 10 (CDNV 0.08x the baseline, t_gen 0.71x)
    "collapse_encourage": ["reg=collapse_encourage", "lam=0.1", "max_steps=9000"],
}


RECIPE_TAG = "f02clip"  # run folders are tagged by recipe, so a run of another recipe is never reused


def run_name(regime: str, seed: int) -> str:
    lam = next((o.split("=")[1] for o in REGIMES[regime] if o.startswith("lam=")), None)
    name = f"{regime}-lam{lam}-seed{seed}" if regime.startswith("collapse") else f"{regime}-seed{seed}"
    return f"{name}-{RECIPE_TAG}"


def _run(args) -> list[dict]:
    job, name, overrides, storage = args
    from methodlab.runners.local import run_local
    from methodlab.runners.results import read_history_jsonl
    from methodlab.specs.files import load_job

    # one torch thread per run, as the recipe was measured (several runs share the machine's cores): the
    # config narrows the job's threads inside fit (torch_threads may change on resume: folders are reused)
    out = run_local(load_job(job, overrides=[*overrides, "torch_threads=1"]), name, storage, quiet=True)
    return read_history_jsonl(Path(out["run_dir"]) / "metrics.jsonl")


def at_step(history: list[dict], key: str, step: int):
    """Value of `key` at the last log <= step."""
    rows = [h for h in history if h["step"] <= step]
    return rows[-1][key] if rows else float("nan")


def claims_for_seed(h: dict[str, list[dict]]) -> dict:
    base = h["baseline"]
    t_mem = first_step(base, "train/accuracy", 0.99, window=TRAIN_WINDOW)
    t_gen = first_step(base, "val/accuracy", 0.95)
    r = {"t_mem": t_mem, "t_gen": t_gen}
    r["A"] = t_mem > 0 and t_gen > 0 and t_gen >= 2 * t_mem
    # B1: CDNV has fallen by >= 50 % of its total decrease before t_gen
    c0, c_end = base[0]["cdnv"], min(x["cdnv"] for x in base)
    c_gen = at_step(base, "cdnv", t_gen) if t_gen > 0 else float("nan")
    r["cdnv_frac_before_tgen"] = (c0 - c_gen) / (c0 - c_end) if c0 > c_end else float("nan")
    # B2: steepest drop of log RF over the logs whose train-accuracy reading (best of the last 3) is >= 99 %
    r["rf_drop_step"] = steepest_log_drop(memorised(base), "rf")
    r["B"] = (r["cdnv_frac_before_tgen"] >= 0.5) and t_gen > 0 and abs(r["rf_drop_step"] - t_gen) <= 0.2 * t_gen
    # C1: anti-flat: val <= 50 % at the baseline's t_gen, with train >= 99 % (the same best-of-3 reading as t_mem)
    af = h.get("anti_flat")
    if af is not None:
        covered = t_gen > 0 and af[-1]["step"] >= t_gen  # never read a run that ended before the baseline's t_gen
        r["af_val_at_tgen"] = at_step(af, "val/accuracy", t_gen) if covered else float("nan")
        r["af_train_at_tgen"] = train_acc_at(af, t_gen) if covered else float("nan")
        r["af_val_final"] = af[-1]["val/accuracy"]
        r["C_anti_flat"] = covered and r["af_val_at_tgen"] <= 0.5 and r["af_train_at_tgen"] >= 0.99
    # C2: collapse regularizers leave the timing alone but do act on CDNV
    for reg, test in (("collapse_prevent", lambda ratio: ratio >= 2.0), ("collapse_encourage", lambda ratio: ratio <= 0.5)):
        run = h.get(reg)
        if run is None:
            continue
        tg = first_step(run, "val/accuracy", 0.95)
        # "final CDNV": mean of the last 5 logs of both runs (same steps); single logs oscillate after grokking
        ratio = sum(x["cdnv"] for x in run[-5:]) / sum(x["cdnv"] for x in base[-5:])
        r[f"{reg}_t_gen"], r[f"{reg}_cdnv_ratio"] = tg, ratio
        r[f"C_{reg}"] = tg > 0 and 0.5 * t_gen <= tg <= 2 * t_gen and test(ratio)
    return r


def digits_claim(hist: dict[str, list[dict]], cancel: int) -> dict:
    reg, base = hist["anti_flat"], hist["baseline"]
    def mean_gap(lo: int) -> float:
        gaps = [at_step(base, "val/accuracy", x["step"]) - x["val/accuracy"] for x in reg if lo <= x["step"] < cancel]
        return sum(gaps) / len(gaps)

    gap, late_gap = mean_gap(0), mean_gap(cancel // 2)
    final_reg, final_base = reg[-1]["val/accuracy"], base[-1]["val/accuracy"]
    recovered = final_reg >= final_base - 0.03
    return {"gap_points": 100 * gap, "late_gap_points": 100 * late_gap, "final_reg": final_reg, "final_base": final_base,
            "pass": gap >= 0.10 and recovered}


def plot(histories, digits, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(15, 8))
    colors = {"baseline": "k", "anti_flat": "tab:red", "collapse_prevent": "tab:blue", "collapse_encourage": "tab:green"}
    for seed, h in histories.items():
        b = h["baseline"]
        steps = [x["step"] for x in b]
        ax[0, 0].plot(steps, [x["train/accuracy"] for x in b], "--", color="0.5", lw=1, label="train" if seed == 0 else None)
        ax[0, 0].plot(steps, [x["val/accuracy"] for x in b], color="k", lw=1.2, label="val" if seed == 0 else None)
        ax[0, 1].semilogy(steps, [x["rf"] for x in b], color="tab:purple", lw=1.2, label=f"seed {seed}")
        ax[0, 2].semilogy(steps, [x["cdnv"] for x in b], color="tab:orange", lw=1.2, label=f"seed {seed}")
        for reg, run in h.items():
            kw = {"color": colors[reg], "lw": 1.2, "label": reg if seed == 0 else None}
            ax[1, 0].plot([x["step"] for x in run], [x["val/accuracy"] for x in run], **kw)
            ax[1, 1].semilogy([x["step"] for x in run], [x["cdnv"] for x in run], **kw)
    ax[0, 0].set_title("baseline: train (dashed) / val accuracy, 3 seeds")
    ax[0, 1].set_title("baseline: relative flatness (trace form)")
    ax[0, 2].set_title("baseline: CDNV (train features)")
    ax[1, 0].set_title("val accuracy by regularizer (3 seeds)")
    ax[1, 0].axvline(2000, color="tab:red", ls=":", lw=1)
    ax[1, 1].set_title("CDNV by regularizer")
    for reg, run in digits.items():
        ax[1, 2].plot([x["step"] for x in run], [x["val/accuracy"] for x in run], color=colors[reg], label=reg)
    ax[1, 2].set_title("digits MLP: test accuracy (anti-flat cancelled at step 500)")
    for a in ax.flat:
        a.set_xlabel("step")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def fmt(v) -> str:
    if v is None:
        return "not run"
    if isinstance(v, bool):
        return "PASS" if v else "FAIL"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3g}"
    return str(v)


def selected_regimes() -> list[str]:
    """METHODLAB_GROK_REGIMES (e.g. "baseline" or "baseline,anti_flat"): run only these arms; the claims that
    need an arm that did not run are reported as not run. Default: every arm."""
    raw = os.environ.get("METHODLAB_GROK_REGIMES", "").strip()
    if not raw:
        return list(REGIMES)
    regimes = [r.strip() for r in raw.split(",") if r.strip()]
    unknown = sorted(set(regimes) - set(REGIMES))
    if unknown:
        raise ValueError(f"METHODLAB_GROK_REGIMES: unknown arm(s) {unknown}; choose from {list(REGIMES)}")
    return ["baseline", *[r for r in regimes if r != "baseline"]]  # every claim is read against the baseline


def recipe_text() -> str:
    """The shared training recipe, read from the job file (so the report cannot drift from it)."""
    from methodlab.specs.files import load_job

    c = load_job(JOB).config
    sched = (f"constant LR {c.lr:g} (10-step warm-up), cosine-annealed from step {c.lr_decay_start:,} to {c.lr_min:g} "
             f"over {c.lr_decay_steps:,} steps" if c.lr_decay_start is not None else f"constant LR {c.lr:g}")
    clip = f"gradient-norm clip {c.grad_clip:g}" if c.grad_clip else "no gradient clipping"
    wd = "all parameters" if c.wd_params == "all" else "weight matrices only"
    return (f"mod-{c.p} addition, train fraction {c.train_frac:g}, {c.n_layers}-layer transformer (d_model {c.d_model}), "
            f"AdamW betas {tuple(c.betas)}, batch {c.batch_size}, {sched}, decoupled weight decay {c.weight_decay:g} on {wd}, "
            f"{clip}")


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> Path:
    t0 = time.time()
    seeds = SEEDS[:1] if quick else SEEDS
    regimes = selected_regimes()
    storage = str(Path("results/reproduce/grokking_flatness").resolve())
    tasks = []
    for seed in seeds:
        for regime in regimes:
            tasks.append((JOB, run_name(regime, seed), [*REGIMES[regime], f"seed={seed}", "log_every=50",
                                                         "checkpoint_every=100"], storage))  # cheap resume on a busy machine
    for regime, over in (("baseline", ["reg=none"]), ("anti_flat", [])):
        tasks.append((DIGITS_JOB, f"digits-{regime}", over, storage))
    # longest first; among equals the baselines first (every claim reads them), then the arms in REGIMES order, so a
    # reproduction cut short by a busy machine has finished the runs that the most claims need
    order = {run_name(r, s): i for i, r in enumerate(REGIMES) for s in seeds}
    tasks.sort(key=lambda t: (-next((int(o.split("=")[1]) for o in t[2] if o.startswith("max_steps=")), 0),
                              order.get(t[1], len(REGIMES))))
    print(f"[grokking_flatness] {len(tasks)} runs, {workers} at a time (1 torch thread each) -> {storage}", flush=True)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = dict(zip([t[1] for t in tasks], pool.map(_run, tasks)))
    histories = {s: {r: results[run_name(r, s)] for r in regimes} for s in seeds}
    digits = {"baseline": results["digits-baseline"], "anti_flat": results["digits-anti_flat"]}
    per_seed = {s: claims_for_seed(h) for s, h in histories.items()}
    dig = digits_claim(digits, 500)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "grokking_flatness.png"
    plot(histories, digits, png)
    claims = ["A", "B", "C_anti_flat", "C_collapse_prevent", "C_collapse_encourage"]
    cols = ["t_mem", "t_gen", "cdnv_frac_before_tgen", "rf_drop_step", "af_val_at_tgen", "af_train_at_tgen", "af_val_final",
            "collapse_prevent_t_gen", "collapse_prevent_cdnv_ratio", "collapse_encourage_t_gen", "collapse_encourage_cdnv_ratio"]
    not_run = [r for r in REGIMES if r not in regimes]
    lam = {r: next(o.split("=")[1] for o in REGIMES[r] if o.startswith("lam=")) for r in REGIMES if r != "baseline"}
    steps = {r: next(o.split("=")[1] for o in REGIMES[r] if o.startswith("max_steps=")) for r in REGIMES}
    lines = [
        "# grokking_flatness — reproduction report",
        "",
        "Paper: *Flatness is Necessary, Neural Collapse is Not: Rethinking Generalization via Grokking* (NeurIPS 2025).",
        f"Command: `{'METHODLAB_GROK_REGIMES=' + ','.join(regimes) + ' ' if not_run else ''}methodlab reproduce "
        f"grokking_flatness{' --quick' if quick else ''}`; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"wall time {time.time() - t0:.0f} s ({workers} runs at a time, 1 torch thread each).",
        f"Setting: `{JOB}`: {recipe_text()}; the same recipe for every arm; seeds {list(seeds)}. "
        f"Arms: baseline {steps['baseline']} steps; anti-flat (lambda {lam['anti_flat']}, tau 2, cap 150, off at step "
        f"2,000, no LR bump) {steps['anti_flat']} steps (read only at the baseline's t_gen); collapse-prevent (lambda {lam['collapse_prevent']}) and "
        f"collapse-encourage (lambda {lam['collapse_encourage']}) {steps['collapse_prevent']} steps.",
    ]
    if not_run:
        lines += ["", f"**Not run in this reproduction: {', '.join(not_run)}** (METHODLAB_GROK_REGIMES); the claims "
                  "that need them read `not run`. See *Investigation* below for what was measured on them."]
    lines += [
        "",
        "## Claims per seed",
        "",
        "| seed | " + " | ".join(claims) + " |",
        "|---|" + "---|" * len(claims),
    ]
    for s, r in per_seed.items():
        lines.append(f"| {s} | " + " | ".join(fmt(r.get(c)) for c in claims) + " |")
    all_pass = {c: (all(r[c] for r in per_seed.values()) if all(c in r for r in per_seed.values()) else None) for c in claims}
    lines.append("| all | " + " | ".join(fmt(v) for v in all_pass.values()) + " |")
    cols = [c for c in cols if any(c in r for r in per_seed.values())]
    lines += ["", "## Measured values (per seed and mean)", "", "| seed | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for s, r in per_seed.items():
        lines.append(f"| {s} | " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    means = {c: sum(float(r[c]) for r in per_seed.values()) / len(per_seed) for c in cols}
    lines.append("| mean | " + " | ".join(fmt(means[c]) for c in cols) + " |")
    lines += [
        "",
        "Definitions (spec, Acceptance): \"train accuracy at a step\" is always the best of the last 3 logs at or before "
        "it (`summary.train_acc_at`), for the baseline and for the regularized runs alike. t_mem = first step where that "
        "reading is >= 99 %; t_gen = first step with val accuracy >= 95 %. A: t_gen >= 2 t_mem. B: CDNV has fallen by "
        ">= 50 % of its total decrease before t_gen, and the steepest decrease of log RF (over the logs whose reading is "
        ">= 99 %) lies within 20 % of t_gen. C: anti-flat val <= 50 % at the baseline's t_gen with the reading >= 99 % "
        "there; collapse-prevent / -encourage reach val >= 95 % within [0.5, 2] x baseline t_gen and end with CDNV >= 2x "
        "/ <= 0.5x the baseline's (mean of the last 5 logs of both runs, same steps).",
        "",
        "## Digits variant (MLP 64-256-256-10 on sklearn digits, 300 training images)",
        "",
        "| mean test-acc gap, whole regularized phase (points) | same, its second half | anti-flat final | unregularized final | claim |",
        "|---|---|---|---|---|",
        f"| {dig['gap_points']:.1f} | {dig['late_gap_points']:.1f} | {dig['final_reg']:.3f} | {dig['final_base']:.3f} | {fmt(dig['pass'])} |",
        "",
        "Claim: averaged over the regularized phase (steps 0-500 = 100 epochs), test accuracy is >= 10 points below the "
        "unregularized run at the same step, and it recovers to within 3 points of it after cancellation. lambda is 0.6 "
        "here ([calibrated]: 1e-2, the ResNet value, has no measurable effect on this MLP within 100 epochs; 1.0 and above "
        "collapse it to chance for good). The gap is largest early: late in the phase it shrinks (second column).",
        "",
        "## Paper anchors",
        "",
        "The paper's Fig. 1 (2-layer model, train fraction 0.2, lr 1e-4, 1e5 steps) shows CDNV falling before "
        "generalisation and RF dropping steeply at its onset; the CPU preset compresses the same phases into a few "
        "thousand steps. The 2-layer paper run is `jobs/grokking_flatness/paper.yaml` (hours on 2 CPU cores).",
        "",
        f"![curves]({png.name})",
    ]
    notes = out / "grokking_flatness_investigation.md"  # hand-kept record of the dev-seed screens (issue 22)
    if notes.exists():
        lines += ["", notes.read_text().rstrip()]
    report = out / "grokking_flatness.md"
    report.write_text("\n".join(lines) + "\n")
    return report
