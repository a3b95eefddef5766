"""`methodlab reproduce graphrta`: the spec's acceptance experiment. CSBM generator (main claim) and the
WordNet two-view graph, 3 seeds, GraphRTA vs source-only K+1 GCN, the best-threshold baseline (optimistic: tau
chosen on labelled target validation nodes) and the two ablations, every run through the method's own `fit`
(jobs/graphrta/{csbm,wordnet}.yaml settings). Writes reports/graphrta.md (per seed + mean, PASS/FAIL per
claim) and reports/graphrta.png. Metrics: target test nodes (the 80 % outside the validation split)."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 2)
METHODS = ("graphrta", "source_only", "source_threshold", "no_model_rp", "no_graph_rp")
# Each setting is its job file (the config a user runs) plus reporting cadence only.
JOBS = {"csbm": "jobs/graphrta/csbm.yaml", "wordnet": "jobs/graphrta/wordnet.yaml",
        "wordnet_dense": "jobs/graphrta/wordnet.yaml"}
# wordnet_dense (issue 22, item 7; not a spec claim): the WordNet job with the denser target view (lemma words +
# quoted examples + the lemma words of the hypernyms up to 2 links up: 1.9 % empty rows instead of 44 %), to show
# what the features do to every arm. Only GraphRTA and the two source-only baselines.
EXTRA = {"wordnet_dense": {"wordnet_target_view": "lemma_hyper2"}}
SETTING_METHODS = {"wordnet_dense": ("graphrta", "source_only", "source_threshold")}
CADENCE = {"csbm": dict(log_every=20, checkpoint_every=10_000), "wordnet": dict(log_every=10, checkpoint_every=10_000),
           "wordnet_dense": dict(log_every=10, checkpoint_every=10_000)}


def setting_config(name: str) -> dict:
    from methodlab.specs.files import load_job

    return {**load_job(JOBS[name]).config.model_dump(mode="json", exclude_defaults=True), **EXTRA.get(name, {}),
            **CADENCE[name]}


def methods_of(name: str) -> tuple:
    return SETTING_METHODS.get(name, METHODS)


KEYS = ("eval/h_score", "eval/acc_known", "eval/acc_unknown", "eval/acc")


def run_one(job: dict) -> dict:
    from methodlab.core import RunContext
    from methodlab.core.device import set_threads
    from methodlab.methods.graphrta.config import Config
    from methodlab.methods.graphrta.train import fit

    set_threads(1)  # one torch (and BLAS) thread per worker process, as before
    cfg = Config(**job["config"])
    ctx = RunContext(quiet=True)
    t0 = time.perf_counter()
    final = fit(cfg, ctx)
    curve = [(h["epoch"], h["eval/h_score"]) for h in ctx.history if h.get("phase") == 1]
    return {"setting": job["setting"], "method": cfg.method, "seed": cfg.seed, "final": final, "curve": curve,
            "wall_s": time.perf_counter() - t0, "job": job}


def _epochs(name: str) -> int:
    from methodlab.methods.graphrta.config import Config

    return Config(**setting_config(name)).adapt_epochs


def _jobs(settings, seeds, overrides):
    jobs = []
    for name in settings:
        base = setting_config(name)
        for s in seeds:
            for m in methods_of(name):
                jobs.append({"setting": name, "config": {**base, **overrides.get(name, {}), "seed": s, "method": m}})
    return jobs


def _get(results, setting, method, key):
    rs = sorted((r for r in results if r["setting"] == setting and r["method"] == method), key=lambda r: r["seed"])
    return [r["final"][key] for r in rs]


def _table(header, rows):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _pct(v):
    return f"{100 * v:.1f}"


def _carried_over(path: Path, names) -> tuple[dict, list]:
    """Sections and claim rows of settings NOT rerun, copied from the existing report (marked as carried over)."""
    if not names or not path.exists():
        return {}, []
    text = path.read_text()
    sections, claims = {}, []
    for name in names:
        start = text.find(f"## {name}:")
        if start < 0:
            continue
        end = text.find("\n## ", start + 3)
        body = text[start:end if end > 0 else len(text)].rstrip()
        head, _, rest = body.partition("\n")
        sections[name] = f"{head} (carried over from the previous reproduction, not rerun in this invocation)\n{rest}"
        claims += [line for line in text.splitlines() if line.lower().startswith(f"| {name}:")]
    return sections, claims


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False, settings=None,
         overrides: dict | None = None) -> str:
    """`settings` (env METHODLAB_GRAPHRTA_SETTINGS, e.g. "wordnet"): rerun only those settings; the sections and
    claim rows of the others are carried over from the existing report, marked as such."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if settings is None:
        env = os.environ.get("METHODLAB_GRAPHRTA_SETTINGS", "")
        settings = tuple(x.strip() for x in env.split(",") if x.strip()) or tuple(JOBS)
    unknown = [x for x in settings if x not in JOBS]
    if unknown:
        raise ValueError(f"METHODLAB_GRAPHRTA_SETTINGS: unknown setting(s) {unknown}; expected some of {list(JOBS)}")
    carried = _carried_over(out / "graphrta.md", [x for x in JOBS if x not in settings])
    seeds = SEEDS[:1] if quick else SEEDS
    overrides = overrides or ({k: {"adapt_epochs": 40} for k in JOBS} if quick else {})
    # Settings run one after the other (CSBM, the main claim, first); every finished fit is appended to a cache
    # under results/, so an interrupted reproduction resumes with the fits it already has, and the report is
    # rewritten after each setting (a partial report names the settings not run yet).
    cache = Path(os.environ.get("METHODLAB_STORAGE", "results")) / "graphrta-reproduce" / ("quick.jsonl" if quick else "runs.jsonl")
    cache.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(x) for x in cache.read_text().splitlines()] if cache.exists() else []
    results, t0, path = [], time.perf_counter(), None
    for k, name in enumerate(settings):
        jobs = _jobs([name], seeds, overrides)
        have = {(r["setting"], r["method"], r["seed"], json.dumps(r["job"], sort_keys=True)) for r in done}
        todo = [j for j in jobs if (j["setting"], j["config"]["method"], j["config"]["seed"],
                                    json.dumps(j, sort_keys=True)) not in have]
        results += [r for r in done if r["setting"] == name and any(json.dumps(j, sort_keys=True) == json.dumps(r["job"], sort_keys=True) for j in jobs)]
        todo.sort(key=lambda j: j["config"]["method"] in ("source_only", "source_threshold"))  # long fits first
        with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
            for fut in as_completed([pool.submit(run_one, j) for j in todo]):
                r = fut.result()
                results.append(r)
                with open(cache, "a") as fh:
                    fh.write(json.dumps(r) + "\n")
        path = _report(out, results, settings[:k + 1], settings[k + 1:], seeds, quick, workers, overrides,
                       time.perf_counter() - t0, carried)
    return path


def _report(out, results, settings, pending, seeds, quick, workers, overrides, wall, carried=({}, [])):
    claims, sections = [], []
    for name in settings:
        rows = []
        for m in methods_of(name):
            vals = {k: _get(results, name, m, k) for k in KEYS}
            per_seed = " / ".join(_pct(v) for v in vals["eval/h_score"])
            rows.append([m, per_seed, *[_pct(float(np.mean(vals[k]))) for k in KEYS]])
        walls = {m: np.mean([r["wall_s"] for r in results if r["setting"] == name and r["method"] == m]) for m in methods_of(name)}
        sections.append(f"## {name}: target test nodes, % (seeds {list(seeds)})\n\n" + _table(
            ["method", "H-score per seed", "H-score mean", "a_k (known, class-avg) mean", "a_u (unknown recall) mean",
             "acc (K+1) mean"], rows) + "\n\nMean wall time per run (s): "
            + ", ".join(f"{m} {walls[m]:.0f}" for m in methods_of(name)))
        collapsed = [f"{m} seed {r['seed']} (predicts unknown for {100 * r['final']['eval/pred_unknown_rate']:.0f} % of nodes)"
                     for m in ("graphrta", "no_model_rp", "no_graph_rp") for r in results
                     if r["setting"] == name and r["method"] == m and r["final"]["eval/acc_known"] < 0.2]
        sections[-1] += ("\n\nCollapsed adaptation runs (a_k < 20 %): " + ("; ".join(collapsed) if collapsed else "none") + ".")
        h = {m: float(np.mean(_get(results, name, m, "eval/h_score"))) for m in methods_of(name)}
        sections[-1] += ("\n\nPredicted-unknown share of the target test nodes, mean: "
                         + ", ".join(f"{m} {100 * float(np.mean(_get(results, name, m, 'eval/pred_unknown_rate'))):.0f} %"
                                     for m in methods_of(name)) + ".")
        if name == "wordnet_dense":
            sections[-1] = sections[-1].replace(f"## {name}:", f"## {name} (WordNet job, wordnet_target_view=lemma_hyper2; "
                                                "extra, not a spec claim):", 1)
            sections[-1] += (f" H(GraphRTA) - H(source-only K+1) on this view: {100 * (h['graphrta'] - h['source_only']):+.1f} "
                             "points (the spec's bar for the WordNet claim, on the spec's view: +3).")
        if name == "csbm":
            ak = float(np.mean(_get(results, name, "graphrta", "eval/acc_known")))
            au = float(np.mean(_get(results, name, "graphrta", "eval/acc_unknown")))
            claims += [
                ("CSBM: H(GraphRTA) >= H(source-only K+1) + 5", h["graphrta"] - h["source_only"], h["graphrta"] >= h["source_only"] + 0.05),
                ("CSBM: H(GraphRTA) >= H(best-threshold) - 1", h["graphrta"] - h["source_threshold"], h["graphrta"] >= h["source_threshold"] - 0.01),
                ("CSBM: a_k >= 50 and a_u >= 30 (no collapse)", min(ak - 0.5, au - 0.3), ak >= 0.5 and au >= 0.3),
                ("CSBM: H(GraphRTA) >= H(w/o model RP) - 2", h["graphrta"] - h["no_model_rp"], h["graphrta"] >= h["no_model_rp"] - 0.02),
                ("CSBM: H(GraphRTA) >= H(w/o graph RP) - 2", h["graphrta"] - h["no_graph_rp"], h["graphrta"] >= h["no_graph_rp"] - 0.02),
            ]
        if name == "wordnet":
            claims.append(("WordNet: H(GraphRTA) >= H(source-only K+1) + 3", h["graphrta"] - h["source_only"],
                           h["graphrta"] >= h["source_only"] + 0.03))
    claim_rows = [[c, f"{100 * v:+.1f}", "PASS" if ok else "FAIL"] for c, v, ok in claims]
    order = list(JOBS)
    if carried[0]:  # settings not rerun: their sections and claim rows as the previous report had them
        sections = [carried[0].get(n) or sections[settings.index(n)] for n in order if n in carried[0] or n in settings]
        old_rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in carried[1]]
        claim_rows = [r for r in old_rows] + claim_rows if order[0] in carried[0] else claim_rows + old_rows
    png = _plot(results, settings, out / ("graphrta.png" if not carried[0] else "graphrta_rerun.png"))
    lines = ["# graphrta (GraphRTA) reproduction", "",
             f"Seeds {list(seeds)}{' (QUICK: reduced)' if quick else ''}; {len(results)} fits on {workers} worker(s), "
             f"wall time {wall / 60:.1f} min in this invocation (fits cached from an earlier one are reused; the fits "
             f"themselves took {sum(r['wall_s'] for r in results) / 60:.0f} min summed over workers)."
             + (f" NOT RUN (yet): {', '.join(pending)}." if pending else "")
             + (f" Rerun in this invocation ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): {', '.join(settings)}; carried over from the previous report (not rerun): "
                f"{', '.join(carried[0])}." if carried[0] else "") + " Every number is the output of the method's own `fit` "
             "(jobs/graphrta/csbm.yaml, jobs/graphrta/wordnet.yaml; wordnet_dense: the WordNet job with "
             "wordnet_target_view=lemma_hyper2; overrides: " + repr(overrides) + ").", "",
             "## Claims (differences in H-score points)", "",
             _table(["claim", "value (points)", "result"], claim_rows),
             "", *[s + "\n" for s in sections],
             "## Notes", "",
             f"- Adaptation epochs: CSBM {_epochs('csbm')}, WordNet {_epochs('wordnet')} (spec default 200), as in the "
             "job files. On WordNet the "
             "H-score falls as adaptation goes on (development seed 10 with lambda_x 0.1: 53.2 before adaptation, 54.3 "
             "after 40 epochs, 47.3 after 200), so 200 epochs would only widen the shortfall below.",
             "- WordNet uses lambda_x = 0.1 (spec default 1e-3, range 0..0.1): its L1-normalised bag-of-words rows have an "
             "L2 norm of about 0.3 (CSBM rows: about 8), so under 1e-3 the feature perturbation grew as large as the "
             "features themselves and every graph-reprogramming run drifted to 'unknown' (development seed 10: H 33.9 "
             "after 60 epochs, and 39.4 on the reported seeds in the previous run); with 0.1 it ends at 54.2.",
             "- best-threshold (`source_threshold`) chooses tau on the grid 0.05..0.95 on the labelled target "
             "validation split (20 %, stratified): optimistic, GraphRTA never reads target labels.",
             "- [I] choices that differ from the spec text, each a config field: `unk_loss=balanced` (w_i -> unknown and "
             "(1 - w_i) -> not unknown, each side averaged over its own soft mass), `bmm_prior=equal` (the BMM posterior "
             "w uses mixing weights 0.5/0.5), `adv_form=grl2` (the encoder's reversed terms are the 2-way "
             "{source, target-known} CE), `adapt_lr=3e-4` with a DANN ramp of the GRL coefficient.",
             "- Why: the unknown supervision feeds back on itself (more nodes predicted unknown -> the BMM's unknown "
             "component and its mixing weight grow -> larger w -> more unknown). With the spec's one-sided form, or the "
             "two-sided form averaged over all nodes with the fitted prior, runs drift to predicting 'unknown' everywhere. "
             "These two settings were chosen on CSBM seeds 10-12, not on the reported seeds 0-2. There, binary + fitted "
             "prior gave H 80.1 / 14.4 / 76.1 (seed 11 collapsed), balanced + equal 82.8 / 60.6 / 82.7.",
             "- WordNet falls short, and why (measured on development seed 10, H-score after 60 epochs, start 53.2): the "
             "source-only K+1 model already predicts 'unknown' for about 74 % of target nodes (the true share is 40 %). "
             "On the lemma view about 45 % of the rows are empty, the known logits are weak, and the unknown logit wins; "
             "the placeholder term trains it as every node's runner-up. Every adaptation term then reinforces that "
             "majority. With lambda_x 1e-3 no variant ended above its start: defaults 33.9; w_unk = 0: 47.2; w_adv = 0: "
             "50.6; w_unk = w_adv = 0 (L_cls + L_ent only): 48.9; adapt_lr 1e-4: 49.0; w_ent = 0: 28.9; w_ent = 0.1: "
             "27.6; lr_feat 1e-2 / 1e-1: 17.7 / 23.0; grl_coeff 3: 37.9; encoder's unknown push off: 48.7. A smaller "
             "feature perturbation stops the collapse: lr_feat 1e-4 / 1e-5: 53.5 / 54.0; lambda_x 0.1: 54.2. The gain over "
             "the start stays near 1 point, and faster adaptation drifts again: lambda_x 0.1 with adapt_lr 1e-3 gives 49.8, "
             "with 3e-3 43.8. The best-threshold baseline reaches 64.5 only by reading target labels.",
             "- Issue 22, item 7 (WordNet +0.6 of +3): is it the features? Measured on development seeds 10, 11, 12, "
             "every arm on the same features, H-score % (source-only K+1 -> GraphRTA, 60 epochs). Target views "
             "(config `wordnet_target_view`; source view unchanged: gloss definitions): `lemma` (the spec's view: "
             "lemma words + quoted examples) has 44.1 % empty target rows (45.4 % of unknown-class rows), "
             "`lemma_hyper1` (+ the lemma words of the direct hypernyms, from the whole of WordNet) 11.1 %, `lemma_hyper2` "
             "(+ two links up) 1.9 %; vocabulary 2,000 (the spec's maximum) would leave 34.9 % empty on the lemma view. "
             "lemma: 53.2 -> 54.2, 52.9 -> 52.3, 52.8 -> 53.9 (GraphRTA - source-only +0.5). lemma_hyper1: "
             "74.9 -> 70.7, 73.5 -> 68.5, 74.4 -> 71.2 (-4.1; best-threshold 76.8 / 76.4 / 77.1). lemma_hyper2 "
             "(seed 10): 80.4 -> 75.9 (-4.4); with beta_ph = beta_mix = 0.3 (all arms): 79.0 -> 79.0. Denser features "
             "lift every arm by 20-27 points, and GraphRTA's margin over source-only gets worse, not better, so the "
             "shortfall is not in the features. The spec's lemma view stays the WordNet default; the denser view is "
             "reported above as `wordnet_dense` (seeds 0-2).",
             "- Is 'unknown' mis-handled? Source-only predicts 'unknown' for 74 % of target nodes on the lemma view "
             "(true share 40 %), but for 4.6 % of its own source validation nodes (seed 10), and its K-way argmax is right "
             "for 75 % of the known target nodes, yet 61 % of them get 'unknown': the unknown logit wins on shifted "
             "rows (81 % of the known nodes with an empty row, 46 % of those with words). There is no threshold in the K+1 "
             "arms; the same head on the lemma_hyper1 view predicts 'unknown' for 51 % (30 % of known nodes). So it is "
             "the K+1 head under the domain shift, the same for every arm, not a mis-set threshold.",
             "- Where GraphRTA loses on the denser views (lemma_hyper1, seed 10, 20 adaptation epochs, start 74.9): the "
             "H-score drops within 2 epochs (71.6) and the predicted-unknown share rises from 51 % to 63 %. Ablations: "
             "defaults 70.7; w_adv = 0: 70.6; w_ent = 0: 69.0; lr_feat 1e-5 (Delta X frozen): 73.3 (75.9 after 2 "
             "epochs); w_unk = 0: 74.4 (unknown share 55 %). The soft unknown supervision is the main driver; its weights "
             "come from the Beta mixture: fitted on the source-only model's u, the known component is narrow (Beta(4.8, "
             "29), mean 0.14) and the unknown one J-shaped (Beta(1.09, 0.27)), so w > 0.5 from u = 0.3 on: 60 % of nodes "
             "get w > 0.5 (argmax: 51 %, truth 40 %). Replacing w by u itself (config bmm_warmup >= epochs; diagnostic, "
             "not the paper's method) on lemma_hyper2 seed 10: 81.3 against 75.9 with the BMM (source-only 80.4). "
             "GraphRTA's unknown terms push towards 'unknown'; that lifts CSBM, where source-only under-predicts it "
             "(a_u 40 %), and costs WordNet, where source-only already over-predicts it on every view tried. The "
             "best-threshold baseline (tau read from labelled target nodes) shows the room a better unknown boundary "
             "would give; nothing in GraphRTA's unsupervised objective finds it here.",
             "- No official code could be read; the paper's citation / arxiv tables are not reproduced here.",
             "", f"![H-score per method and adaptation curves]({png.name})", ""]
    path = out / "graphrta.md"
    path.write_text("\n".join(lines))
    return str(path)


def _plot(results, settings, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2 * len(settings), figsize=(7 * len(settings) * 2 // 2 + 2, 4.2))
    ax = np.atleast_1d(ax)
    for j, name in enumerate(settings):
        a = ax[2 * j]
        for i, m in enumerate(METHODS):
            v = 100 * np.array(_get(results, name, m, "eval/h_score"))
            a.bar(i, v.mean() if len(v) else 0, color=f"C{i}", alpha=0.7)
            a.scatter([i] * len(v), v, c="k", s=10)
        a.set_xticks(range(len(METHODS)), METHODS, rotation=30, fontsize=7)
        a.set_title(f"{name}: target H-score\n(bars: mean, dots: seeds)", fontsize=9)
        a.set_ylabel("H-score %")
        b = ax[2 * j + 1]
        for i, m in enumerate(("graphrta", "no_model_rp", "no_graph_rp")):
            curves = [r["curve"] for r in results if r["setting"] == name and r["method"] == m and r["curve"]]
            if curves:
                n = min(len(c) for c in curves)
                xs = [c[0] - curves[0][0][0] for c in curves[0][:n]]  # seeds stop pre-training at different epochs
                b.plot(xs, 100 * np.mean([[c[1] for c in cv[:n]] for cv in curves], 0), label=m)
        b.set_title(f"{name}: H-score during adaptation\n(mean of seeds)", fontsize=9)
        b.set(xlabel="adaptation epoch", ylabel="H-score %")
        b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
