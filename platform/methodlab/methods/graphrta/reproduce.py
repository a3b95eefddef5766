"""`methodlab reproduce graphrta`: the spec's acceptance experiment as a harness study. Every arm is a run of the
method's own `fit` on jobs/graphrta/{csbm,wordnet}.yaml with `method=` one of GraphRTA, source-only K+1 GCN,
best-threshold (optimistic: tau chosen on labelled target validation nodes) and the two ablations:
- csbm (the main claim): CSBM open-set generator, development seeds 10-12 first, then 0-2;
- wordnet (the real-data claim): the WordNet two-view graph, the same seeds;
- wordnet_dense (issue 22, item 7; not a spec claim): the WordNet job with the denser target view
  (wordnet_target_view=lemma_hyper2), GraphRTA and the two source-only baselines, reported seeds only.
Metrics: the target test nodes (the 80 % outside the labelled validation split). The job file adapts 60 epochs on
WordNet (H falls as adaptation goes on there); `--full` runs WordNet's adapting arms at the spec's 200."""

from __future__ import annotations


from methodlab.reproduce import Arm, Claim, Study
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "graphrta"
METHODS = ("graphrta", "source_only", "source_threshold", "no_model_rp", "no_graph_rp")
LABEL = {"graphrta": "GraphRTA", "source_only": "source-only K+1 GCN", "source_threshold": "best-threshold (reads "
         "target val labels)", "no_model_rp": "w/o model reprogramming", "no_graph_rp": "w/o graph reprogramming"}
SETTINGS = {  # setting -> (job file, extra overrides, methods, seeds, quick overrides)
    "csbm": ("jobs/graphrta/csbm.yaml", (), METHODS, "both", ("adapt_epochs=40",)),
    "wordnet": ("jobs/graphrta/wordnet.yaml", (), METHODS, "both", ("adapt_epochs=20", "pretrain_epochs=150")),
    "wordnet_dense": ("jobs/graphrta/wordnet.yaml", ("wordnet_target_view=lemma_hyper2",),
                      ("graphrta", "source_only", "source_threshold"), "reported", ()),
}
# --full (issue 44, item 5): WordNet's adapting arms at the spec's 200 adaptation epochs (the job file runs 60);
# the source-only arms do not adapt, so their runs are the default mode's.
ADAPTS, FULL_WORDNET = ("graphrta", "no_model_rp", "no_graph_rp"), ("adapt_epochs=200",)
H, AK, AU, ACC, UNK = "eval/h_score", "eval/acc_known", "eval/acc_unknown", "eval/acc", "eval/pred_unknown_rate"


def _arms() -> tuple[Arm, ...]:
    """--quick: CSBM's five arms and WordNet's two of claim W1 (the denser view and WordNet's other baselines wait
    for the default run)."""
    return tuple(Arm(f"{name}-{m}", job, (f"config.method={m}", *extra), quick=quick, seeds=seeds,
                     skip_quick=name == "wordnet_dense" or (name == "wordnet" and m not in ("graphrta", "source_only")),
                     full=FULL_WORDNET if name == "wordnet" and m in ADAPTS else (), label=f"{LABEL[m]}, {name}",
                     spec=None if m in ADAPTS else SOURCE_SPEC)
                 for name, (job, extra, methods, seeds, quick) in SETTINGS.items() for m in methods)


def _gap(setting: str, a: str, b: str):
    """H-score points: arm a minus arm b on the same seed."""
    def value(r, s):
        x, y = r.metric(f"{setting}-{a}", s, H), r.metric(f"{setting}-{b}", s, H)
        return None if x is None or y is None else 100 * (x - y)
    return value


def _pct(arm: str, key: str):
    return lambda r, s: None if r.metric(arm, s, key) is None else 100 * r.metric(arm, s, key)


def _uses(setting: str, *methods: str) -> tuple[str, ...]:
    return tuple(f"{setting}-{m}" for m in methods)


CLAIMS = (
    Claim("M1", "CSBM: H(GraphRTA) - H(source-only K+1), points", _gap("csbm", "graphrta", "source_only"), ">=", 5.0,
          uses=_uses("csbm", "graphrta", "source_only")),
    Claim("M2", "CSBM: H(GraphRTA) - H(best-threshold), points", _gap("csbm", "graphrta", "source_threshold"), ">=",
          -1.0, uses=_uses("csbm", "graphrta", "source_threshold")),
    Claim("M3", "CSBM: GraphRTA a_k (known, class-averaged), % (no collapse to all-unknown)",
          _pct("csbm-graphrta", AK), ">=", 50.0, uses=_uses("csbm", "graphrta")),
    Claim("M4", "CSBM: GraphRTA a_u (unknown recall), % (no collapse to none-unknown)", _pct("csbm-graphrta", AU),
          ">=", 30.0, uses=_uses("csbm", "graphrta")),
    Claim("M5", "CSBM: H(GraphRTA) - H(w/o model reprogramming), points", _gap("csbm", "graphrta", "no_model_rp"),
          ">=", -2.0, uses=_uses("csbm", "graphrta", "no_model_rp")),
    Claim("M6", "CSBM: H(GraphRTA) - H(w/o graph reprogramming), points", _gap("csbm", "graphrta", "no_graph_rp"),
          ">=", -2.0, uses=_uses("csbm", "graphrta", "no_graph_rp")),
    Claim("W1", "WordNet: H(GraphRTA) - H(source-only K+1), points", _gap("wordnet", "graphrta", "source_only"), ">=",
          3.0, uses=_uses("wordnet", "graphrta", "source_only")),
)

# The spec's hyper-parameters (Hyperparameters table; pre-training lr / wd: its small-synthetic-graph values)
SPEC_RECIPE = {"prune_ratio": 0.2, "edge_budget": 0.05, "lambda_x": 1e-3, "lr": 1e-2, "weight_decay": 5e-4,
               "hidden": 128, "layers": 2, "dropout": 0.1, "lr_feat": 1e-3, "lr_adj": 1e-2, "adapt_epochs": 200,
               "pretrain_epochs": 1000, "patience": 100, "backbone": "gcn", "beta_ph": 1.0, "beta_mix": 1.0}
# The arms that never adapt (train.py: n_adapt = 0 unless cfg.adapts) do not read the adaptation loop's epochs or its
# perturbation weight, so the recipe table does not list them against those two fields.
SOURCE_SPEC = {k: v for k, v in SPEC_RECIPE.items() if k not in ("adapt_epochs", "lambda_x")}


def _p(v) -> str:
    return fmt(None if v is None else 100 * v, 1)


def _setting(res, name: str, seeds) -> list[str]:
    methods = [m for m in SETTINGS[name][2] if any(res.final(f"{name}-{m}", s) for s in seeds)]  # the arms run
    if not methods:
        return []
    rows, walls, unk, collapsed = [], [], [], []
    for m in methods:
        arm = f"{name}-{m}"
        col = lambda k: [res.metric(arm, s, k) for s in seeds]  # noqa: E731, B023
        rows.append([LABEL[m], " / ".join(_p(v) for v in col(H)), *(_p(mean(col(k))) for k in (H, AK, AU, ACC))])
        w = [res.run(arm, s)["wall_s"] for s in seeds if res.run(arm, s)]
        walls.append(f"{m} {fmt(mean(w), 0)}")
        unk.append(f"{m} {_p(mean(col(UNK)))} %")
        if m in ("graphrta", "no_model_rp", "no_graph_rp"):
            collapsed += [f"{m} seed {s} (predicts unknown for {_p(res.metric(arm, s, UNK))} % of nodes)"
                          for s in seeds if (res.metric(arm, s, AK) or 1.0) < 0.2]
    cfg = res.config(f"{name}-graphrta")
    head = {"csbm": "CSBM generator (main claim)", "wordnet": "WordNet two-view graph (real data)",
            "wordnet_dense": "WordNet, denser target view lemma_hyper2 (extra, not a spec claim)"}[name]
    out = [f"## {name}: {head}; target test nodes, % (seeds {', '.join(map(str, seeds))})", "",
           f"Adaptation epochs {cfg.get('adapt_epochs')}, lambda_x {cfg.get('lambda_x')}, adapt_lr "
           f"{cfg.get('adapt_lr')}, target view {cfg.get('wordnet_target_view') if cfg.get('data') == 'wordnet' else '—'}.",
           "", *md_table(["method", "H-score per seed", "H-score mean", "a_k (known, class-avg) mean",
                          "a_u (unknown recall) mean", "acc (K+1) mean"], rows),
           "Mean wall time per run (s): " + ", ".join(walls) + ".", "",
           "Collapsed adaptation runs (a_k < 20 %): " + ("; ".join(collapsed) if collapsed else "none") + ".", "",
           "Predicted-unknown share of the target test nodes, mean: " + ", ".join(unk) + "."]
    if name == "wordnet_dense" and "source_only" in methods:
        gap = [_gap(name, "graphrta", "source_only")(res, s) for s in seeds]
        out[-1] += (f" H(GraphRTA) - H(source-only K+1) on this view: {fmt(mean(gap), 1)} points (the spec's bar for "
                    "the WordNet claim, on the spec's view: +3).")
    return out + [""]


def sections(res) -> str:
    out = ["## Setting", "",
           "GraphRTA (Zhang, He; NeurIPS 2025, arXiv 2510.18363). The paper reports citation graphs (e.g. A→C H-score "
           "66.33 against source-only 41.02; C→D 65.99 against 56.13) that ship no offline copy, so the claims run on "
           "the spec's CSBM generator and WordNet graph, where the paper gives no figure. best-threshold chooses tau on "
           "the grid 0.05..0.95 on the labelled target validation split (20 %, stratified): optimistic, GraphRTA never "
           "reads target labels.", ""]
    for name in SETTINGS:
        out += _setting(res, name, res.reported_seeds)
    if res.dev_seeds:
        for name in ("csbm", "wordnet"):
            dev = _setting(res, name, res.dev_seeds)
            if dev:
                out += [dev[0].replace("## ", "## Development seeds, ", 1), *dev[1:]]
    out += ["## Notes", "",
            "- [I] choices that differ from the spec text, each a config field of the job files: `unk_loss=balanced` "
            "(w_i -> unknown and (1 - w_i) -> not unknown, each side averaged over its own soft mass), `bmm_prior=equal` "
            "(the BMM posterior w uses mixing weights 0.5/0.5), `adv_form=grl2` (the encoder's reversed terms are the "
            "2-way {source, target-known} CE), `adapt_lr=3e-4` with a DANN ramp of the GRL coefficient; they were "
            "chosen on CSBM development seeds 10-12 before this harness (the recipe table above lists every spec key "
            "the job files change).",
            "- WordNet runs lambda_x = 0.1 (spec default 1e-3, range 0..0.1; its L1-normalised bag-of-words rows have an "
            "L2 norm of about 0.3, CSBM rows about 8): the job file's calibrated value. Adaptation: "
            f"{res.config('wordnet-graphrta').get('adapt_epochs')} epochs on WordNet in this report (the job file "
            "adapts 60, the spec 200; `--full` runs 200; the source-only arms do not adapt, their adapt_epochs is "
            "unused).",
            "- The investigation of the WordNet shortfall (issue 22, item 7: feature views, the unknown share, the "
            "BMM-driven drift) was measured by ad-hoc development runs before this harness; its figures are in "
            "[legacy/graphrta.md](legacy/graphrta.md) and were not rerun here.",
            "- The official code (github.com/cszhangzhen/GraphRTA) could not be read (below); the paper's citation / "
            "arxiv tables are not reproduced here.", ""]
    from methodlab.methods.graphrta.diagnostics import official_comparison

    out += official_comparison()
    return "\n".join(out)


def plots(res, folder) -> list[str]:
    plt = pyplot()
    import numpy as np

    seeds = res.reported_seeds
    names = [n for n in SETTINGS if any(res.final(f"{n}-{m}", s) for m in SETTINGS[n][2] for s in seeds)]
    if not names:
        return []
    fig, ax = plt.subplots(1, 2 * len(names), figsize=(7 * len(names) + 2, 4.2))
    ax = np.atleast_1d(ax)
    for j, name in enumerate(names):
        a, methods = ax[2 * j], [m for m in SETTINGS[name][2] if any(res.final(f"{name}-{m}", s) for s in seeds)]
        for i, m in enumerate(methods):
            v = 100 * np.array([x for x in (res.metric(f"{name}-{m}", s, H) for s in seeds) if x is not None])
            a.bar(i, v.mean() if len(v) else 0, color=f"C{i}", alpha=0.7)
            a.scatter([i] * len(v), v, c="k", s=10)
        a.set_xticks(range(len(methods)), methods, rotation=30, fontsize=7)
        a.set_title(f"{name}: target H-score\n(bars: mean, dots: seeds)", fontsize=9)
        a.set_ylabel("H-score %")
        b = ax[2 * j + 1]
        for m in ("graphrta", "no_model_rp", "no_graph_rp"):
            curves = [[(h["epoch"], h[H]) for h in res.history(f"{name}-{m}", s) if h.get("phase") == 1 and H in h]
                      for s in seeds]
            curves = [c for c in curves if c]
            if curves:
                n = min(len(c) for c in curves)
                xs = [c[0] - curves[0][0][0] for c in curves[0][:n]]  # seeds stop pre-training at different epochs
                b.plot(xs, 100 * np.mean([[c[1] for c in cv[:n]] for cv in curves], 0), label=m)
        b.set_title(f"{name}: H-score during adaptation\n(mean of seeds)", fontsize=9)
        b.set(xlabel="adaptation epoch", ylabel="H-score %")
        b.legend(fontsize=7)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=90)


def study() -> Study:
    return Study(slug=SLUG, title="graphrta (GraphRTA)", arms=_arms(), claims=CLAIMS, spec_recipe=SPEC_RECIPE,
                 sections=sections, plots=plots, history=("epoch", "phase", H),
                 dataset="CSBM open-set generator (synthetic) and the WordNet 3.0 two-view noun graph (real)",
                 real_data=True)
