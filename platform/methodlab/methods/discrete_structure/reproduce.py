"""`methodlab reproduce discrete_structure`: the spec's acceptance experiment as a harness study
(methodlab.reproduce). Every arm is a run of the platform's runner on jobs/discrete_structure/{benchmark,
xor_triple,asia}.yaml with overrides; seeds 10-12 (development) run before 0-2 (reported).

Claim A: random ER DAGs, d = 8, >= 3 multi-parent nodes, random_cpt and logistic mechanisms, n = 5,000, general
model (K = 3) vs logistic K = 1 (same DAGMA path); PC and GES are arms of the same fit (`model=pc|ges`), beside,
not gated; CPDAG SHD. Claim B: XOR triple, K = 2 vs K = 1: held-out NLL (nats / row) and edge count. Report only:
pgmpy asia, n = 10,000, seed 0. Task `bounding`: diagnostics.py's bounding experiments of Claim A per seed."""

from __future__ import annotations

import math
from datetime import datetime

from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure

SLUG = "discrete_structure"
BENCH, XOR, ASIA = (f"jobs/{SLUG}/{n}.yaml" for n in ("benchmark", "xor_triple", "asia"))
MECHS = ("random_cpt", "logistic")
MODELS = ("mvb", "logistic", "pc", "ges")
LABEL = {"mvb": "general MVB (K=3)", "logistic": "logistic (K=1)", "pc": "PC (chi-square)", "ges": "GES (BDeu)"}
MODEL = {"mvb": ("model=mvb", "K=3"), "logistic": ("model=mvb", "K=1"), "pc": ("model=pc",), "ges": ("model=ges",)}
# --quick: a third of the path's Adam steps (the DAGMA fits only; PC / GES have no steps)
QUICK = ("inner_steps=500", "last_stage_steps=1000")
# --full: the spec's schedule (SPEC_RECIPE: lr 3e-4, 5,000 / 20,000 Adam steps, s = 1, no weight scaling), the
# unreduced recipe of issue 44 item 3, for every DAGMA fit (PC / GES have no optimiser: their runs are reused)
FULL = ("lr=3e-4", "inner_steps=5000", "last_stage_steps=20000", "s_schedule=[1.0]", "w_scale=none")
NLL, SHD = "eval/heldout_nll", "eval/shd_cpdag"


def a_overrides(mech: str, model: str) -> tuple[str, ...]:
    """One cell of benchmark.yaml's grid as a single fit (setting train): the preset of that job file."""
    return ("setting=train", f"mechanism={mech}", "d=8", "n=5000", *MODEL[model])


# Issue 44, development seeds only: the official DagmaLinear domain rule on the preset, and DagmaLinear.fit's
# defaults (kevinsbello/dagma src/dagma/linear.py: T = 5, mu 1 x 0.1, s 1 .. 0.6, lr 3e-4, 30,000 / 60,000 steps,
# early-stop checks every 1,000) with that rule. Claim A's K = 3 random_cpt cell; diagnostics.official_comparison.
DOMAIN = ("dagma_domain=dagma_linear",)
DAGMA_LINEAR = ("lr=3e-4", "inner_steps=30000", "last_stage_steps=60000", "mu_schedule=[1,0.1,0.01,0.001,0.0001]",
                "s_schedule=[1,0.9,0.8,0.7,0.6]", "check_every=1000", *DOMAIN)


def _arms() -> tuple[Arm, ...]:
    quick = lambda m: QUICK if m in ("mvb", "logistic") else ()  # noqa: E731
    full = lambda m: FULL if m in ("mvb", "logistic") else ()  # noqa: E731
    a = a_overrides("random_cpt", "mvb")
    return (*(Arm(f"A-{mech}-{m}", BENCH, a_overrides(mech, m), quick=quick(m), full=full(m),
                  label=f"{LABEL[m]}, {mech}")
              for mech in MECHS for m in MODELS),
            Arm("A-random_cpt-mvb-dagmadomain", BENCH, (*a, *DOMAIN), seeds="dev", skip_quick=True,
                label="general MVB (K=3), random_cpt, official DAGMA domain rule"),
            Arm("A-random_cpt-mvb-dagmalinear", BENCH, (*a, *DAGMA_LINEAR), seeds="dev", skip_quick=True,
                label="general MVB (K=3), random_cpt, DagmaLinear.fit defaults"),
            *(Arm(f"B-xor-K{k}", XOR, (f"K={k}",), quick=QUICK, full=FULL,
                  label=f"MVB K={k}, XOR triple") for k in (2, 1)),
            *(Arm(f"asia-{m}", ASIA, MODEL[m], quick=quick(m), full=full(m), seeds=(0,),
                  label=f"{LABEL[m]}, asia")
              for m in MODELS))


def bounding(seed: int, inputs: dict, mode: str) -> dict:
    """diagnostics.run_seed on arm A-random_cpt-mvb's config in this mode (the preset, or under --full the spec's
    schedule); its path SHD is that arm's."""
    from methodlab.methods.discrete_structure.diagnostics import run_seed
    from methodlab.specs.files import load_job

    mode_over = FULL if mode == "full" else QUICK if mode == "quick" else ()
    cfg = load_job(BENCH, overrides=[*a_overrides("random_cpt", "mvb"), *mode_over, f"seed={seed}"]).config
    return {**run_seed(cfg), "arm_shd": inputs["A-random_cpt-mvb"].get(SHD)}


def _diff(a, b):
    return None if a is None or b is None else a - b


def _shd(r, arm: str, s) -> float | None:
    return r.metric(arm, s, SHD)


def xor_k2(r, s) -> float | None:
    """K = 2's held-out NLL when it returned one 2-edge v-structure (2 edges, none undirected), else inf."""
    f = r.final("B-xor-K2", s)
    if f is None or f.get(NLL) is None:
        return None
    return float(f[NLL]) if f["eval/n_edges"] == 2 and f["eval/n_undirected"] == 0 else math.inf


UNCAL = "(uncalibrated)"
CLAIMS = (
    Claim("A1", f"random_cpt: general model (K=3) mean CPDAG SHD {UNCAL}",
          lambda r, s: _shd(r, "A-random_cpt-mvb", s), "<=", 3, uses=("A-random_cpt-mvb",)),
    Claim("A2", f"random_cpt: SHD(K=1) - SHD(K=3), mean over seeds {UNCAL}",
          lambda r, s: _diff(_shd(r, "A-random_cpt-logistic", s), _shd(r, "A-random_cpt-mvb", s)), ">=", 2,
          uses=("A-random_cpt-mvb", "A-random_cpt-logistic")),
    Claim("A3", f"logistic data: SHD(K=3) - SHD(K=1), mean over seeds {UNCAL}",
          lambda r, s: _diff(_shd(r, "A-logistic-mvb", s), _shd(r, "A-logistic-logistic", s)), "<=", 1,
          uses=("A-logistic-mvb", "A-logistic-logistic")),
    Claim("B1", "XOR: K=2 held-out NLL (nats / row; exact true model 1.711), counted only when K=2 returns a "
          "2-edge v-structure, inf otherwise; every seed", xor_k2, "<=", 1.73, combine="every", uses=("B-xor-K2",)),
    Claim("B2", "XOR: K=1 held-out NLL (nats / row; exact independence model 2.079), every seed",
          lambda r, s: r.metric("B-xor-K1", s, NLL), ">=", 2.0, combine="every", uses=("B-xor-K1",)),
)

# The spec's recipe (Hyperparameters; acyclicity DAGMA path): lr 3e-4, 5,000 Adam steps per stage and 20,000 in
# the last, mu 1 -> 0.001, s = 1 (a decreasing schedule optional), W unscaled (dividing by sqrt(group size) is its
# conditioning remedy). K follows each claim (3 / 1 / 2), not a recipe key.
SPEC_RECIPE = {"lr": 3e-4, "inner_steps": 5000, "last_stage_steps": 20000, "mu_schedule": [1.0, 0.1, 0.01, 0.001],
               "s_schedule": [1.0], "w_scale": "none", "lam": 0.02, "delta": 0.5, "omega": 0.3, "penalty": "qmcp",
               "acyclicity": "dagma"}


def _f(v, nd: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _mean(v) -> float | None:
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


def _tab(head, rows) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]


def _span(res) -> tuple[float, float]:
    """(minutes from the first run's start to the last run's end, fit-minutes summed) over every run."""
    runs = [r for arm in res.study.arms for s in res.seeds(arm.id) for r in [res.run(arm.id, s)]]
    if not runs:
        return 0.0, 0.0
    t = lambda x: datetime.strptime(x, "%Y-%m-%dT%H:%M:%SZ").timestamp()  # noqa: E731
    return (max(t(r["ended"]) for r in runs) - min(t(r["started"]) for r in runs)) / 60, \
        sum(r["wall_s"] for r in runs) / 60


def _claim_a(res, mech: str, seeds) -> list[str]:
    body = []
    for m in MODELS:
        a = f"A-{mech}-{m}"
        col = lambda k: [res.metric(a, s, k) for s in seeds]  # noqa: E731
        body.append([LABEL[m], *(_f(v, 0) for v in col(SHD)), _f(_mean(col(SHD))),
                     _f(_mean(col("eval/skeleton_precision"))), _f(_mean(col("eval/skeleton_recall"))),
                     _f(_mean(col(NLL)), 4), _f(_mean(col("eval/fit_seconds")), 0)])
    truth = [res.final(f"A-{mech}-mvb", s) or {} for s in seeds]
    return [f"## Claim A — `{mech}` mechanism, d = 8, n = 5,000 (CPDAG SHD per seed)", "",
            *_tab(["method", *(f"seed {s}" for s in seeds), "mean SHD", "skel. precision", "skel. recall",
                   "held-out NLL", "s / fit"], body),
            "True edges per seed: " + ", ".join(_f(t.get("eval/true_edges"), 0) for t in truth)
            + "; true-model held-out NLL: " + ", ".join(_f(t.get("eval/true_model_nll"), 4) for t in truth), ""]


def sections(res) -> str:
    seeds = res.reported_seeds
    span, fit_min = _span(res)
    bench = (res.data.get("recipes") or {}).get("A-random_cpt-mvb", {})
    order = f"development seeds {', '.join(map(str, res.dev_seeds))} first, then the reported seeds" \
        if res.dev_seeds else "no development seeds"
    out = ["## Setting and preset", "",
           "Differentiable structure learning for general binary data (Deng & Aragam, NeurIPS 2025, arXiv "
           f"2509.21658). Runs span {span:.1f} min wall ({fit_min:.1f} run-minutes on the shared machine; {order}). "
           "Preset: jobs/discrete_structure/benchmark.yaml, "
           f"xor_triple.yaml, asia.yaml (K = 3 / 2, lambda {bench.get('lam', '—')}, delta {bench.get('delta', '—')}, "
           f"omega {bench.get('omega', '—')}, DAGMA path mu {' / '.join(f'{v:g}' for v in bench.get('mu_schedule', []))}"
           f" with s {' / '.join(f'{v:g}' for v in bench.get('s_schedule', []))} per stage, Adam lr "
           f"{bench.get('lr', '—'):g} with {bench.get('inner_steps', '—')} / {bench.get('last_stage_steps', '—')} steps "
           f"per stage, w_scale {bench.get('w_scale', '—')}). Paper figures: n/a (not recovered) — the paper's results "
           "are plotted and were not retrievable; PC and GES are the spec's baselines, run on the same data "
           "(arms `model=pc|ges` of the same fit), not gated; their configs carry the preset's optimiser keys unused (the "
           "recipe table lists them too).", ""]
    for mech in MECHS:
        out += _claim_a(res, mech, seeds)
    fr = [(mech, s, f) for mech in MECHS for s in seeds for f in [res.final(f"A-{mech}-mvb", s)]
          if f and "eval/F_truth" in f]
    if fr:
        out += ["### Why the general model misses: penalised objective at the learned vs the true DAG", "",
                "F = training BCE of the order-<=K refit on the DAG + lambda * sum quasi-MCP(W). F(true) < F(learned) "
                "means the DAGMA path stopped in a worse local minimum (a wrong topological order, or edges dropped / "
                "kept on the way): an optimisation failure, not an objective that prefers the wrong graph.", "",
                *_tab(["mechanism", "seed", "F(learned)", "F(true DAG)", "learned edges", "true edges"],
                      [[m, s, _f(f["eval/F_learned"], 4), _f(f["eval/F_truth"], 4), _f(f["eval/n_edges"], 0),
                        _f(f.get("eval/true_edges"), 0)] for m, s, f in fr])]
    from methodlab.methods.discrete_structure.diagnostics import official_comparison, render

    out += render([t for s in seeds for t in [res.task("bounding", s)] if t])
    out += official_comparison(res)
    body = [[f"MVB K={k}", s, _f(f.get(NLL), 4), _f(f.get("eval/n_edges"), 0),
             "yes" if f.get("eval/n_edges") == 2 and f.get("eval/n_undirected") == 0 else "no",
             _f(f.get("eval/true_model_nll"), 4), _f(f.get("eval/fit_seconds"), 0)]
            for k in (2, 1) for s in seeds for f in [res.final(f"B-xor-K{k}", s)] if f]
    out += ["## Claim B — XOR triple (n = 5,000 train, 5,000 held out)", "",
            "Exact references: true model 2 ln 2 + H(0.1) = 1.711 nats / row; independence model 3 ln 2 = 2.079.", "",
            *_tab(["model", "seed", "held-out NLL", "edges", "v-structure", "true-model NLL (sample)", "s / fit"], body)]
    asia = [(m, f) for m in MODELS for f in [res.final(f"asia-{m}", 0)] if f]
    if asia:
        out += ["## Report only — pgmpy asia (n = 10,000, seed 0; not gated: the deterministic `either` node "
                "violates faithfulness)", "",
                *_tab(["method", "CPDAG SHD", "skel. precision", "skel. recall", "held-out NLL", "edges", "s / fit"],
                      [[LABEL[m], _f(f.get(SHD), 0), _f(f.get("eval/skeleton_precision")),
                        _f(f.get("eval/skeleton_recall")), _f(f.get(NLL), 4), _f(f.get("eval/n_edges"), 0),
                        _f(f.get("eval/fit_seconds"), 0)] for m, f in asia])]
    out += _dev(res)
    return "\n".join(out)


def _dev(res) -> list[str]:
    dev = res.dev_seeds
    if not dev:
        return []
    shd = [[mech, LABEL[m], *(_f(_shd(res, f"A-{mech}-{m}", s), 0) for s in dev),
            _f(_mean([_shd(res, f"A-{mech}-{m}", s) for s in dev]))] for mech in MECHS for m in MODELS]
    return [f"## Development seeds {', '.join(map(str, dev))} (the same recipe, run before the reported seeds)", "",
            *_tab(["mechanism", "method", *(f"SHD seed {s}" for s in dev), "mean"], shd),
            "The preset's own choices (w_scale sqrt_group over the spec's unscaled W; s 1 / .9 / .8 / .7 over s = 1; "
            "the CPU step budget) were made on these seeds before this study existed; those fits and their figures "
            "are recorded in reports/legacy/discrete_structure_calibration.json (not runs of this study, so not rendered "
            "here).", ""]


def plots(res, folder) -> list[str]:
    plt = pyplot()
    import numpy as np

    seeds = res.reported_seeds
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, m in enumerate(MODELS):
        means = [_mean([_shd(res, f"A-{mech}-{m}", s) for s in seeds]) for mech in MECHS]
        ax[0].bar(np.arange(len(MECHS)) + (i - 1.5) * 0.2, [math.nan if v is None else v for v in means], 0.2,
                  label=LABEL[m])
    ax[0].axhline(3, color="k", ls=":", lw=1, label="Claim A bar (3)")
    ax[0].set_xticks(range(len(MECHS)), MECHS)
    ax[0].set_ylabel("mean CPDAG SHD (d = 8)")
    ax[0].legend(fontsize=7)
    for k, c in ((2, "C0"), (1, "C1")):
        pts = [(s, res.metric(f"B-xor-K{k}", s, NLL)) for s in seeds]
        pts = [p for p in pts if p[1] is not None]
        ax[1].scatter([p[0] for p in pts], [p[1] for p in pts], color=c, label=f"MVB K={k}")
    ax[1].axhline(2 * math.log(2) + 0.325083, color="C0", ls=":", lw=1, label="true model 1.711")
    ax[1].axhline(3 * math.log(2), color="C1", ls=":", lw=1, label="independence 2.079")
    ax[1].set_xticks(list(seeds))
    ax[1].set_xlabel("seed")
    ax[1].set_ylabel("held-out NLL (nats / row)")
    ax[1].set_title("XOR triple")
    ax[1].legend(fontsize=7)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=110)


def study() -> Study:
    return Study(slug=SLUG, title=SLUG, arms=_arms(), claims=CLAIMS,
                 dataset="simulated ER DAGs and the XOR triple; pgmpy asia network (report only)", real_data=False,
                 tasks=(Task("bounding", bounding, seeds="reported", needs=("A-random_cpt-mvb",)),),
                 spec_recipe=SPEC_RECIPE, sections=sections, plots=plots)
