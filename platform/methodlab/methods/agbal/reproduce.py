"""`methodlab reproduce agbal`: the spec's acceptance experiment (Acceptance, revised 2026-12-05) as a harness study.
Every arm is a run of the method's own `fit` (the whole active-learning loop, rounds 0..6) on
jobs/agbal/al_run.yaml (friedman_shift: AGBAL, Random, LCMD without auxiliary data, AGBAL with r = 1; Claims 1, 2)
or jobs/agbal/al_run_hetero.yaml (hetero_1d: AGBAL vs r = 1 with the default krr propagation, Claim 3 and the
surrogate check; nw reported beside it). Claim 2's two arms run seeds 0-9 (the revised bar); development seeds
10-12 run first. Task `oracle`: diagnostics.surrogate_oracle, the surrogate check with the TRUE density ratio."""

from __future__ import annotations

import math

from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "agbal"
FRIEDMAN, HETERO = f"jobs/{SLUG}/al_run.yaml", f"jobs/{SLUG}/al_run_hetero.yaml"
LABEL = {"agbal": "AGBAL", "random": "Random", "lcmd": "LCMD (no aux)", "agbal_unweighted": "AGBAL r=1"}
EXPERIMENTS = {  # experiment -> (job, propagation, strategies)
    "friedman": (FRIEDMAN, "krr", ("agbal", "random", "lcmd", "agbal_unweighted")),
    "hetero": (HETERO, "krr", ("agbal", "agbal_unweighted")),
    "hetero-nw": (HETERO, "nw", ("agbal", "agbal_unweighted")),
    "friedman-nw": (FRIEDMAN, "nw", ("agbal",)),  # the former default, beside Claims 1 and 2 (no bar)
}
CLAIM2_SEEDS = tuple(range(10))  # revised 2026-12-05: mean over seeds 0-9
QUICK = ("rounds=3",)
AUC, LOGR, SP, SPU = "eval/auc_log", "eval/log_rmse", "surrogate/spearman", "surrogate/spearman_unweighted"
UNCAL = "(uncalibrated)"
PAPER = "n/a (not recovered)"


def _seeds(exp: str, m: str):
    if exp == "friedman" and m in ("agbal", "lcmd"):
        return (10, 11, 12, *CLAIM2_SEEDS)
    if exp == "friedman-nw":
        return CLAIM2_SEEDS
    if exp == "hetero-nw" or (exp == "friedman" and m == "agbal_unweighted"):
        return "reported"
    return "both"


def _arms() -> tuple[Arm, ...]:
    side = lambda e, m: e.endswith("-nw") or (e, m) == ("friedman", "agbal_unweighted")  # noqa: E731 - report only
    return tuple(Arm(f"{exp}-{m}", job, (f"strategy={m}", f"propagation={prop}"), seeds=_seeds(exp, m),
                     quick=() if side(exp, m) else QUICK, label=f"{LABEL[m]}, {exp}", skip_quick=side(exp, m))
                 for exp, (job, prop, strategies) in EXPERIMENTS.items() for m in strategies)


def _gap(r, exp: str, base: str, s) -> float | None:
    a, b = r.metric(f"{exp}-agbal", s, AUC), r.metric(f"{exp}-{base}", s, AUC)
    return None if a is None or b is None else b - a


def _gap_nw(r, s, base: str = "friedman-lcmd") -> float | None:
    """A friedman gap with AGBAL under the former default propagation nw (the baselines have no surrogate: the
    same arms as the claims')."""
    a, b = r.metric("friedman-nw-agbal", s, AUC), r.metric(base, s, AUC)
    return None if a is None or b is None else b - a


def _claim2_seeds(r) -> tuple[int, ...]:
    return tuple(r.reported_seeds) if r.quick else CLAIM2_SEEDS


def claim2(r, s) -> float | None:
    g = [_gap(r, "friedman", "lcmd", x) for x in _claim2_seeds(r)]
    return None if any(v is None for v in g) else sum(g) / len(g)


def _round0(r, arm: str, s, key: str) -> float | None:
    h = r.history(arm, s)
    return h[0].get(key) if h else None


CLAIMS = (
    Claim("1", f"friedman_shift: AUC_log(Random) - AUC_log(AGBAL), mean over seeds {UNCAL}",
          lambda r, s: _gap(r, "friedman", "random", s), ">=", 0.05, uses=("friedman-agbal", "friedman-random"),
          paper=PAPER),
    Claim("2", f"friedman_shift: AUC_log(LCMD without aux) - AUC_log(AGBAL), mean over seeds 0-9 (revised "
          "2026-12-05)", claim2, ">=", 0.02, combine="pooled", uses=("friedman-agbal", "friedman-lcmd"), paper=PAPER),
    Claim("3", f"hetero_1d, krr propagation: AUC_log(AGBAL r=1) - AUC_log(AGBAL), mean over seeds {UNCAL}",
          lambda r, s: _gap(r, "hetero", "agbal_unweighted", s), ">=", 0.02,
          uses=("hetero-agbal", "hetero-agbal_unweighted"), paper=PAPER),
    Claim("S", f"hetero_1d after round 0 (krr): Spearman(u, true squared error on the pool) with the estimated "
          f"ratio, mean over seeds {UNCAL}; r=1 and the true ratio reported below, without a bar (revised 2026-12-05)",
          lambda r, s: _round0(r, "hetero-agbal", s, SP), ">=", 0.3, uses=("hetero-agbal",), paper=PAPER),
)

# The spec's CPU acceptance setting and its defaults (Acceptance; Hyperparameters, propagation revised to krr).
SPEC_RECIPE = {"hidden": [128, 128], "n0": 64, "batch_size": 64, "rounds": 6, "epochs": 100, "n_aux": 2000,
               "n_pool": 5000, "n_test": 5000, "kernel": "ll", "propagation": "krr", "selection": "lcmd",
               "combine": "product", "ratio_model": "logistic", "ratio_clip": [0.01, 100.0], "activation": "silu",
               "lr": 1e-3, "train_on_aux": False}


def oracle(seed: int, inputs: dict, mode: str) -> dict:
    """diagnostics.surrogate_oracle on the config of arm hetero-agbal for this seed and mode (Task.configs)."""
    from methodlab.methods.agbal.config import Config
    from methodlab.methods.agbal.diagnostics import surrogate_oracle

    return surrogate_oracle(Config.model_validate(inputs["config"]["hetero-agbal"]))


def _se(v) -> float | None:
    v = [x for x in v if x is not None]
    if len(v) < 2:
        return None
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))


def _experiment(res, exp: str, seeds) -> list[str]:
    job, prop, strategies = EXPERIMENTS[exp]
    rows = []
    for m in strategies:
        arm = f"{exp}-{m}"
        auc = [res.metric(arm, s, AUC) for s in seeds]
        if all(v is None for v in auc):
            continue
        curves = [[h.get(LOGR) for h in res.history(arm, s)] for s in seeds if res.history(arm, s)]
        n = min((len(c) for c in curves), default=0)
        walls = [res.run(arm, s)["wall_s"] for s in seeds if res.run(arm, s)]
        rows.append([LABEL[m], " / ".join(fmt(v, 3) for v in auc), fmt(mean(auc), 3),
                     " ".join(fmt(mean(c[k] for c in curves), 3) for k in range(n)), fmt(mean(walls), 0)])
    if not rows:
        return []
    return [f"### {exp} ({job}, propagation {prop})", "",
            *md_table(["strategy", "AUC_log per seed " + ", ".join(map(str, seeds)), "mean",
                       "mean ln RMSE, rounds 0..R", "s per run"], rows)]


def sections(res) -> str:
    from methodlab.methods.agbal.diagnostics import official_comparison

    seeds = res.reported_seeds
    cfg = res.config("friedman-agbal")
    out = ["## Setting", "",
           f"MLP {'x'.join(map(str, cfg.get('hidden', [])))} ({cfg.get('activation', '—')}, Adam lr "
           f"{cfg.get('lr', '—')}, "
           f"{cfg.get('epochs', '—')} epochs per round, batch {cfg.get('train_batch', '—')}, cosine decay), n0 = "
           f"{cfg.get('n0', '—')}, b = {cfg.get('batch_size', '—')}, R = {cfg.get('rounds', '—')} rounds, aux "
           f"{cfg.get('n_aux', '—')}, pool {cfg.get('n_pool', '—')}, test {cfg.get('n_test', '—')}, base kernel "
           f"{cfg.get('kernel', '—')}; AGBAL = {cfg.get('selection', '—')} on the surrogate-scaled kernel sqrt(u(x)) "
           f"k(x, x') sqrt(u(x')), u = {cfg.get('propagation', '—')} propagation of r(x_a) l_a with an RBF on the "
           f"last-layer features (width {cfg.get('bandwidth', '—')} x median pairwise distance); density ratio = "
           f"{cfg.get('ratio_model', '—')} regression on {cfg.get('ratio_features', '—')} features, clipped to "
           f"{cfg.get('ratio_clip', '—')}, self-normalised. hetero_1d trains with "
           f"{res.config('hetero-agbal').get('activation', '—')} and lr {res.config('hetero-agbal').get('lr', '—')} "
           "(jobs/agbal/al_run_hetero.yaml: the spec's SiLU / lr 1e-3 MLP never learns the sin(12 x) bump in 100 "
           "epochs; the recipe table lists it). AUC_log = mean over rounds 1..R of ln(test RMSE); lower is better; "
           "a gap of 0.05 is about 5 % lower RMSE in geometric mean. Paper figures: none could be recovered.", "",
           "## AUC_log and learning curves per strategy", ""]
    for exp in EXPERIMENTS:
        out += _experiment(res, exp, seeds)
    c2 = [s for s in (*res.dev_seeds, *_claim2_seeds(res))]
    rows = [[s, "development" if s in res.dev_seeds else "reported", fmt(res.metric("friedman-lcmd", s, AUC), 3),
             fmt(res.metric("friedman-agbal", s, AUC), 3), fmt(_gap(res, "friedman", "lcmd", s), 3),
             fmt(res.metric("friedman-nw-agbal", s, AUC), 3), fmt(_gap_nw(res, s), 3)] for s in c2]
    g = [_gap(res, "friedman", "lcmd", s) for s in _claim2_seeds(res)]
    gn = [_gap_nw(res, s) for s in _claim2_seeds(res)]
    c1n = [_gap_nw(res, s, "friedman-random") for s in seeds]
    out += ["## Claim 2 per seed (AGBAL vs LCMD without auxiliary data, friedman_shift)", "",
            "The claim is judged with the spec's default propagation (krr since the 2026-12-05 revision); AGBAL with "
            "the former default nw (arm friedman-nw-agbal, no bar) is shown beside it against the same LCMD runs.", "",
            *md_table(["seed", "set", "AUC_log LCMD", "AUC_log AGBAL (krr)", "gap (krr)", "AUC_log AGBAL (nw)",
                       "gap (nw)"], rows),
            f"Seeds {', '.join(map(str, _claim2_seeds(res)))}: krr mean gap {fmt(mean(g), 3)} (standard error "
            f"{fmt(_se(g), 3)}; AGBAL ahead on {sum(1 for v in g if v is not None and v > 0)} of "
            f"{sum(1 for v in g if v is not None)} seeds); nw mean gap {fmt(mean(gn), 3)} (standard error "
            f"{fmt(_se(gn), 3)}). Claim 1 with nw, AUC_log(Random) - AUC_log(AGBAL nw) on the reported seeds: "
            f"{' / '.join(fmt(v, 3) for v in c1n)}. The spec's revision cites main's Claim 2 figure +0.032 +- 0.005 "
            "over 30 other seeds, measured with nw.", "", *official_comparison()]
    rows = []
    for s in seeds:
        t = res.task("oracle", s) or {}
        rows.append([s, *(fmt(_round0(res, a, s, k), 3) for a in ("hetero-agbal", "hetero-nw-agbal") for k in (SP, SPU)),
                     *(fmt(t.get(f"{p}/true"), 3) for p in ("krr", "nw")),
                     f"{fmt(t.get('relerr_logistic'), 3)} / {fmt(t.get('relerr_mlp'), 3)}",
                     fmt(_round0(res, "hetero-agbal", s, "surrogate/h_prop"), 3)])
    out += ["## Surrogate check (hetero_1d, after round 0)", "",
            "Spearman(u, true squared error on the unlabelled pool) of the round-0 model: with the estimated "
            "(logistic) ratio (the claim, krr), with r = 1, and with the analytic ratio (task `oracle`, the same "
            "round-0 model retrained by diagnostics.surrogate_oracle); plus the median relative error of the logistic "
            "and an MLP ratio estimate against the analytic ratio, and the propagation kernel width h.", "",
            *md_table(["seed", "krr: estimated", "krr: r=1", "nw: estimated", "nw: r=1", "krr: true ratio",
                       "nw: true ratio", "ratio rel. error logistic / mlp", "h"], rows)]
    if any(res.task("oracle", s) for s in seeds):
        out += ["Oracle task, all ratios (Spearman per seed):", "",
                *md_table(["seed", *(f"{p}: {n}" for p in ("krr", "nw") for n in ("logistic", "mlp", "true", "r=1"))],
                          [[s, *(fmt((res.task("oracle", s) or {}).get(f"{p}/{n}"), 3) for p in ("krr", "nw")
                                 for n in ("logistic", "mlp", "true", "r=1"))] for s in seeds])]
    out += ["Why Claim 3 is judged with krr (the spec's revision): under Nadaraya-Watson propagation r cancels "
            "between numerator and denominator inside each kernel neighbourhood (spec: Pitfalls), even with the true "
            "ratio, so nw cannot show a weighting effect; with krr r scales the auxiliary losses directly. The nw "
            "arms above are reported without a bar.", ""]
    return "\n".join(out)


def plots(res, folder) -> list[str]:
    plt = pyplot()

    seeds = res.reported_seeds
    fig, axes = plt.subplots(1, len(EXPERIMENTS), figsize=(5 * len(EXPERIMENTS), 3.8))
    for ax, (exp, (_, prop, strategies)) in zip(axes, EXPERIMENTS.items()):
        for i, m in enumerate(strategies):
            curves = [[h.get(LOGR) for h in res.history(f"{exp}-{m}", s)] for s in seeds]
            curves = [c for c in curves if c]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            x = list(range(n))
            ax.plot(x, [mean(c[k] for c in curves) for k in x], marker="o", ms=3, label=LABEL[m], color=f"C{i}")
            ax.fill_between(x, [min(c[k] for c in curves) for k in x], [max(c[k] for c in curves) for k in x],
                            color=f"C{i}", alpha=0.15)
        ax.set(title=f"{exp} ({prop}): ln test RMSE (mean, min-max of seeds)", xlabel="round (acquired batches)",
               ylabel="ln RMSE")
        ax.title.set_fontsize(9)
        if ax.lines:
            ax.legend(fontsize=7)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=90)


def study() -> Study:
    return Study(slug=SLUG, title="agbal (AGBAL)", arms=_arms(), claims=CLAIMS,
                 tasks=(Task("oracle", oracle, seeds="reported", configs=("hetero-agbal",)),), spec_recipe=SPEC_RECIPE, sections=sections,
                 plots=plots, history=(LOGR, SP, SPU, "surrogate/h_prop"),
                 dataset="synthetic covariate-shift regression (friedman_shift, hetero_1d)", real_data=False)
