"""`methodlab reproduce hier_retrieval`: the spec's acceptance experiment as a harness study (methodlab.reproduce).
Every arm is a run of the platform's runner on jobs/hier_retrieval/*.yaml with overrides.

1. Constructive check (Algorithm 1, setting `constructive`) on the b=3, D=6 tree at dim = 10 s ln m and at dim 16;
   the dimension law of the construction (Task `dimension_law`, diagnostics.py).
2. Main claims: standard vs rebalanced vs pretrain-finetune on the synthetic tree, dim 16, 3,000 steps, 3 seeds.
3. WordNet nouns at a reduced CPU scale (seed 0): the three recipes and the finetune lr ratio 1e-3 / 1, pretrain-
   finetune continuing from the standard run's checkpoint (an arm `needs` it).
4. WordNet at the largest CPU scale that fits ~30 min (the paper's dim 64, pretraining capped by wall time, then
   pretrain-finetune from its checkpoint) beside the paper's table, and the negatives choice of that run on the
   development seeds. Sections 3-4 are not run under --quick but for a 20-second version of section 4."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from methodlab.methods.hier_retrieval import diagnostics as D
from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot
from methodlab.reproduce.tables import md_table, mean

SLUG = "hier_retrieval"
CONS, SYN, WN, WNL = (f"jobs/{SLUG}/{n}.yaml" for n in ("constructive", "synthetic", "wordnet_reduced", "wordnet_large"))
RECIPES = ("standard", "rebalanced", "pretrain_finetune")
S_QUICK = ("steps=1000",)
WN_PF = {"pretrain_finetune": (), "pretrain_finetune (lr ratio 1e-3)": ("finetune_lr_ratio=1e-3",),
         "pretrain_finetune (lr ratio 1)": ("finetune_lr_ratio=1.0",)}
# --full: section 3 at the spec's WordNet CPU preset (jobs/hier_retrieval/wordnet_cpu.yaml; ~2 h per run on a thread)
WN_FULL = ("dim=64", "num_negatives=8192", "batch_size=1024", "lr=1e-3", "steps=6000", "val_queries=2000",
           "eval_queries=10000", "eval_every=500", "finetune_eval_every=100", "checkpoint_every=500")
# section 4 under --quick: 20 s of pretraining, fewer queries
L_QUICK = ("max_pretrain_s=20", "val_queries=300", "eval_queries=1000", "eval_every=50", "finetune_eval_every=10")


def _wn_arm(label: str) -> str:
    return "wn-" + label.replace(" (lr ratio ", "-lr").replace(")", "")


def _arms() -> tuple[Arm, ...]:
    cons = (Arm("cons-theory", CONS, seeds="reported", label="constructive, dim = 10 s ln m"),
            Arm("cons-16", CONS, ("constructive_dim=16",), seeds="reported", label="constructive, dim 16"))
    syn = tuple(Arm(f"syn-{r}", SYN, (f"recipe={r}",), quick=S_QUICK, seeds="reported", label=f"synthetic, {r}")
                for r in RECIPES)
    wn = (Arm("wn-standard", WN, full=WN_FULL, seeds=(0,), skip_quick=True),
          Arm("wn-rebalanced", WN, ("recipe=rebalanced",), full=WN_FULL, seeds=(0,), skip_quick=True),
          *(Arm(_wn_arm(lab), WN, ("recipe=pretrain_finetune", *over), full=WN_FULL, seeds=(0,), skip_quick=True,
                needs=(("wn-standard", "pretrain_from"),)) for lab, over in WN_PF.items()))
    neg = (Arm("wn-neg-inbatch", WN, ("steps=1000", "eval_every=1000"), seeds="dev", skip_quick=True),
           Arm("wn-neg-uniform", WN, ("steps=1000", "eval_every=1000", "in_batch_negatives=false"), seeds="dev",
               skip_quick=True))
    large = (Arm("wnl-standard", WNL, quick=L_QUICK, seeds=(0,)),
             Arm("wnl-pretrain_finetune", WNL, ("recipe=pretrain_finetune",), quick=L_QUICK,
                 needs=(("wnl-standard", "pretrain_from"),), seeds=(0,)))
    return cons + syn + wn + neg + large


def _m(arm: str, key: str):
    return lambda r, s: r.metric(arm, s, key)


def _sub(a, b):
    return None if a is None or b is None else a - b


def _d(a: str, b: str, key: str):
    """Per seed: arm a's key - arm b's key."""
    return lambda r, s: _sub(r.metric(a, s, key), r.metric(b, s, key))


def cons_quality(r, s):
    p, q = r.metric("cons-theory", s, "constructive/precision"), r.metric("cons-theory", s, "constructive/recall")
    return None if p is None or q is None else min(p, q)


def wordnet_d8_gain(r, s):
    """Seed 0's run (the arms run one seed): distance-8 recall of pretrain-finetune minus standard."""
    return _d("wnl-pretrain_finetune", "wnl-standard", "eval/recall_d8")(r, 0)


SHORT, LONG = "eval/recall_short", "eval/recall_long"
ST, PF, RB = "syn-standard", "syn-pretrain_finetune", "syn-rebalanced"
CLAIMS = (
    Claim("K1", "Constructive, dim = 10 s ln m: min(precision, recall) of thresholding at 1/2, every seed",
          cons_quality, ">=", 0.99, combine="every", uses=("cons-theory",)),
    Claim("K2", "Constructive, dim 16 must clearly fail: recall@|R(q)|, every seed",
          _m("cons-16", "eval/recall_overall"), "<", 0.9, combine="every", uses=("cons-16",)),
    Claim("S1", "Synthetic b=3 D=6, dim 16: standard shows the phenomenon: short (d<=1) - long (d>=4) recall",
          lambda r, s: _sub(r.metric(ST, s, SHORT), r.metric(ST, s, LONG)), ">=", 0.15, uses=(ST,)),
    Claim("S2", "Synthetic: pretrain-finetune - standard long recall", _d(PF, ST, LONG), ">=", 0.15, uses=(PF, ST)),
    Claim("S3", "Synthetic: short-recall drop of pretrain-finetune (standard - PF)", _d(ST, PF, SHORT), "<=", 0.05,
          uses=(PF, ST)),
    Claim("S4", "Synthetic: rebalanced (w_long 5) - standard long recall (the baseline is real)", _d(RB, ST, LONG),
          ">=", 0.15, uses=(RB, ST)),
    Claim("W1", "WordNet, dim 64, largest CPU scale, seed 0: distance-8 recall, pretrain-finetune - standard (the "
          "spec sets no bar, context only: bar 0 checks the direction)", wordnet_d8_gain, ">", 0.0, combine="pooled",
          uses=("wnl-standard", "wnl-pretrain_finetune"), paper="0.563 (0.194 -> 0.757, dim 64, until convergence)"),
)


# The spec's main-claim recipe (Acceptance) by config key; the WordNet arms' reduced-scale values read as
# differences from it (the spec's WordNet CPU preset: dim 64, 8,192 negatives, batch 1,024, lr 1e-3, 6,000 steps).
SPEC_RECIPE = {"dim": 16, "gamma": 0.5, "delta_long": 4, "steps": 3000, "batch_size": 1024, "lr": 1e-3,
               "finetune_lr_ratio": 0.1, "max_finetune_fraction": 0.15, "scale_pretrain": 20.0,
               "scale_finetune": 500.0, "temperature_mode": "scale", "w_long": 5.0, "finetune_fresh_optimizer": False,
               "mask_other_positives": False}


def _cons(res, seeds) -> list[str]:
    rows = [[str(s), str(int(f["constructive/dim"])), f["constructive/precision"], f["constructive/recall"],
             f["eval/recall_overall"]] for s in seeds for a in ("cons-theory", "cons-16") for f in [res.final(a, s)] if f]
    L = ["## 1. Constructive embedding (Algorithm 1)", "",
         "Tree b=3, D=6 (m = 1,093, s = 7). g(d) = unit Gaussian, f(q) = sum of the unit g(d) over R(q); relevant iff "
         "<f(q), g(d)> >= 1/2.", "", *md_table(["seed", "dim", "precision", "recall", "recall@\\|R(q)\\|"], rows, 3)]
    tasks = [t for s in (0, 1) for t in [res.task("dimension_law", s)] if t]
    if tasks:
        h, w, sh, sw = D.law(tasks)
        L += [f"Dimension law (minimal dim at which the construction reaches precision and recall >= 0.99, mean of "
              f"{len(tasks)} seed(s); Task `dimension_law`):", "",
              *md_table(["height H (width 2)", "m", "min dim"], [[str(a), str(m), f"{v:.0f}"] for a, m, v in h]),
              *md_table(["width W (height 4)", "m", "min dim"], [[str(a), str(m), f"{v:.0f}"] for a, m, v in w]),
              f"Log-log slope of min dim vs H: **{sh:.2f}** (theory 2 for s ln m = H (H-1) ln W; the paper's learned "
              f"embeddings: 2.29). Slope of min dim vs ln W at H = 4: **{sw:.1f}** (linear in ln W as the theory says; "
              "the construction's constant C s (H-1) is larger than the paper's learned-embedding slope 16.5). These "
              "are the construction's dims, which the paper notes are larger than learned ones.", ""]
    return L


def _syn(res, seeds) -> list[str]:
    c = res.config(ST)
    ks = range(c.get("depth", 6) + 1)
    head = ["recipe", "seed", "short", "long", "min bucket", "overall", "exact set", *(f"d{k}" for k in ks), "wall s"]
    keys = (SHORT, LONG, "eval/recall_min", "eval/recall_overall", "eval/exact_set")
    rows = []
    for r in RECIPES:
        fs = [(s, res.final(f"syn-{r}", s), res.run(f"syn-{r}", s)) for s in seeds]
        fs = [x for x in fs if x[1]]
        rows += [[r, str(s), *(f[k] for k in keys), *(D.buckets(f).get(k) for k in ks), f"{run['wall_s']:.0f}"]
                 for s, f, run in fs]
        if fs:
            rows.append([f"**{r} (mean)**", "", *(mean(f[k] for _, f, _ in fs) for k in keys),
                         *(mean(D.buckets(f).get(k) for _, f, _ in fs) for k in ks), ""])
    L = ["## 2. Main claims: synthetic tree (b=3, D=6, dim 16)", "",
         f"{c.get('steps', 0):,} steps of {c.get('batch_size', 0):,} pairs per recipe, gamma {c.get('gamma')}, full softmax, "
         f"T = 20; pretrain-finetune = the same budget split 1 : 0.15 on dist >= {c.get('delta_long')} pairs only "
         "(T = 500, lr x 0.1, Adam state carried, best mean recall of every 10 steps); rebalanced: loss weight 5 on "
         f"dist >= {c.get('delta_long')} for the whole run. Short = dist <= 1, long = dist >= {c.get('delta_long')}, "
         "all 1,093 queries, k = |R(q)|.", "", *md_table(head, rows, 3)]
    m = {r: {k: mean(res.metric(f"syn-{r}", s, k) for s in seeds) for k in (SHORT, LONG, "eval/recall_min")}
         for r in RECIPES}
    if all(v[SHORT] is not None for v in m.values()):
        sl = {r: (m[r][SHORT] + m[r][LONG]) / 2 for r in RECIPES}
        used = [int(f["finetune/steps_used"]) for s in seeds for f in [res.final(PF, s)] if f]
        L += [f"Finetune steps kept by validation: {used}. Short/long mean: standard {sl['standard']:.3f}, rebalanced "
              f"{sl['rebalanced']:.3f}, pretrain-finetune {sl['pretrain_finetune']:.3f}: **"
              f"{'rebalanced' if sl['rebalanced'] > sl['pretrain_finetune'] else 'pretrain-finetune'} wins here** "
              "(reported, not a bar). Worst bucket (min): " + ", ".join(f"{r} {m[r]['eval/recall_min']:.3f}"
                                                                         for r in RECIPES) +
              ". The paper reports pretrain-finetune ahead of rebalancing on its H=4, W=5, dim-3 tree (overall 97% vs "
              "70%, standard 66%); at the spec's b=3, D=6, dim-16 setting the spec's prototype measured rebalancing "
              "ahead on the mean (0.923 vs 0.837).", ""]
    return L


def sections(res) -> str:
    seeds = res.reported_seeds
    L = _cons(res, seeds) + _syn(res, seeds)
    if any(res.seeds(a.id) for a in res.study.arms if a.id.startswith("wn")):
        L += ["WordNet (sections 3-4): the recipe table above compares every arm with the spec's synthetic main-claim "
              "recipe; the spec's WordNet CPU preset is dim 64, batch 1,024, 8,192 uniform + in-batch negatives, lr "
              "1e-3, 6,000 steps, delta_long 5 (jobs/hier_retrieval/wordnet_cpu.yaml; section 3 runs it under --full).",
              ""]
    L += D.reduced_section(res, {"standard": "wn-standard", "rebalanced": "wn-rebalanced",
                                 **{lab: _wn_arm(lab) for lab in WN_PF}})
    four = D.negatives_section(res, "wn-neg-inbatch", "wn-neg-uniform") + D.large_section(
        res, "wnl-standard", "wnl-pretrain_finetune")
    if four:
        L += ["## 4. WordNet at the largest CPU scale that fits ~30 minutes (seed 0)", "", *four]
    L += ["Differences from the paper: no code is public; pair sampling (gamma 0.5), batch size, the finetune lr ratio "
          "(0.1 instead of the paper's 1e-3; section 3 shows both), T as a logit scale, and delta_long are the "
          "spec's reconstructions."]
    return "\n".join(L)


def plots(res, folder) -> list[str]:
    plt = pyplot()

    seeds = res.reported_seeds
    wn = {lab: res.final(a, 0) for lab, a in [("standard", "wn-standard"), ("rebalanced", "wn-rebalanced"),
                                               *((lab, _wn_arm(lab)) for lab in WN_PF)] if res.final(a, 0)}
    tasks = [t for s in (0, 1) for t in [res.task("dimension_law", s)] if t]
    n = 2 + bool(wn)
    fig, ax = plt.subplots(1, n, figsize=(5.2 * n, 4))
    colors = {"standard": "tab:blue", "rebalanced": "tab:orange", "pretrain_finetune": "tab:green"}
    for r in RECIPES:
        ys = np.array([[D.buckets(f).get(k, np.nan) for k in range(7)] for s in seeds for f in [res.final(f"syn-{r}", s)]
                       if f])
        if len(ys):
            ax[0].errorbar(range(7), ys.mean(0), yerr=ys.std(0), marker="o", capsize=3, label=r, color=colors[r])
    ax[0].set(title=f"Synthetic tree b=3 D=6, dim 16 ({len(seeds)} seeds)", xlabel="hierarchy distance",
              ylabel="recall@|R(q)|", ylim=(0, 1.05))
    ax[0].legend()
    if wn:
        ks = [k for k, p in sorted(D.pairs(wn["standard"] if "standard" in wn else next(iter(wn.values()))).items())
              if p >= 50]
        for name, f in wn.items():
            ax[1].plot(ks, [D.buckets(f).get(k) for k in ks], marker="o", label=f"ours: {name}",
                       color=colors.get(name, None))
        for name, vals in D.PAPER_WN64.items():
            ax[1].plot(range(9), np.array(vals) / 100, ls="--", color=colors[name], alpha=0.6, label=f"paper dim 64: {name}")
        ax[1].set(title="WordNet nouns (reduced CPU scale)", xlabel="hierarchy distance", ylabel="recall@|R(q)|",
                  ylim=(0, 1.05))
        ax[1].legend(fontsize=7)
    if tasks:
        h, w, sh, sw = D.law(tasks)
        a = ax[-1]
        a.loglog([r[0] for r in h], [r[2] for r in h], marker="o", label=f"W=2, vs H (slope {sh:.2f})")
        a.set(title="Constructive: min feasible dim", xlabel="height H", ylabel="min dim")
        a2 = a.twiny()
        a2.plot([r[0] for r in w], [r[2] for r in w], marker="s", color="tab:red", label=f"H=4, vs W (slope/ln W {sw:.1f})")
        a2.set_xscale("log")
        a2.set_xlabel("width W (red)")
        a.legend(loc="upper left", fontsize=7)
        a2.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(folder) / f"{SLUG}.png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    out = [f"{SLUG}.png"]
    if D.plot_large(res, "wnl-standard", "wnl-pretrain_finetune", Path(folder) / f"{SLUG}_wordnet_large.png"):
        out.append(f"{SLUG}_wordnet_large.png")
    return out


def study() -> Study:
    return Study(slug=SLUG, title=f"{SLUG}: dual encoders for hierarchical retrieval, pretrain-finetune", arms=_arms(),
                 claims=CLAIMS, tasks=(Task("dimension_law", D.dimension_law, seeds=(0, 1)),), spec_recipe=SPEC_RECIPE,
                 sections=sections, plots=plots,
                 history=("stage", "_time", "val/recall_short", "val/recall_long", "val/recall_d8", "val/recall_overall"),
                 dataset="synthetic trees (b=3, D=6) + WordNet 3.0 nouns (real, Debian wordnet-base)", real_data=True)
