"""`methodlab reproduce rule_unlearning`: the spec's acceptance on the tiny LM. The base is pretrained once (cached);
per seed: RULE (RS -> ReBO GRPO, 80 steps of 16 prompts x 8), RS-only (RULE's own stage-1 evaluation, step 0 of
the same run), GA and NPO (at most 30 s of training each). Writes reports/rule_unlearning.md + a forget-vs-retain
PNG. Every run goes through the method's own fit functions."""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 2)
DEV_SEEDS = (10, 11, 12)
# Tiny-LM recipe (the jobs' presets): the spec's RS lr 1e-3 x 2 epochs with the [RECON] RS data mix (2 answered
# boundary / retain-author questions per refusal, chosen on dev seeds 10-12); RL as the spec's tiny-LM setting.
TINY = dict(rs_lr=1e-3, rs_epochs=2, rs_answer_mix="boundary_retain", rs_answer_ratio=2.0, rl_lr=3e-4, prompts_per_step=16,
            rl_steps=80, log_every=40, checkpoint_every=1000, torch_threads=1)  # 1 thread per run (process pool)
SHOWCASE_RUN = "rule-unlearning-smollm2-showcase"
KEYS = ("eval/forget_acc", "eval/forget_refusal", "eval/forget_named", "eval/forget_quality", "eval/naturalness",
        "eval/neighbour_acc", "eval/neighbour_refusal", "eval/retain_acc", "eval/retain_refusal")


def run_one(job: dict) -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.rule_unlearning import train
    from methodlab.methods.rule_unlearning.config import Config

    t0 = time.perf_counter()
    ctx = RunContext(quiet=True)
    fn = {"rule": train.fit, "baseline": train.fit_baseline}[job["kind"]]
    fn(Config(**job["config"]), ctx)
    res = {"name": job["name"], "seed": job["config"]["seed"], "history": ctx.history, "final": ctx.history[-1],
            "wall_s": time.perf_counter() - t0}
    if os.environ.get("RULE_RUNS_DIR"):  # partial results survive an interrupted reproduction
        import json

        d = Path(os.environ["RULE_RUNS_DIR"])
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{job['name']}_{job['config']['seed']}.json").write_text(json.dumps(res))
    return res


def _pretrain() -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.rule_unlearning import train
    from methodlab.methods.rule_unlearning.config import Config
    from methodlab.methods.rule_unlearning.data import build_splits

    cfg = Config(**TINY)
    ctx = RunContext(quiet=True)
    ctx.limit_threads(cfg.torch_threads)  # one thread, as every run of the reproduction (TINY's torch_threads=1)
    sp = build_splits(cfg)
    t0 = time.perf_counter()
    base, info = train.base_model(cfg, sp, ctx)
    bev = train.base_eval(cfg, sp, base)
    return {**info, **bev, "load_s": time.perf_counter() - t0}


def _rows(results, seeds):
    """name -> seed -> metrics; RS-only is RULE's step-0 evaluation (its own stage-1 checkpoint)."""
    out: dict = {}
    for r in results:
        out.setdefault(r["name"], {})[r["seed"]] = r["final"]
        if r["name"] == "RULE":
            out.setdefault("RS-only", {})[r["seed"]] = {k: v for k, v in r["history"][0].items()}
    return out


def _mean(v):
    v = [x for x in v if x is not None and np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _claims(rows, base, seeds):
    rule = rows["RULE"]
    c = []

    def every(name, bar, key, op, thr):
        vals = [rule[s][key] for s in seeds]
        ok = all(op(v, thr) for v in vals)
        c.append((name, bar, ", ".join(f"{v:.3f}" for v in vals) + f" (mean {_mean(vals):.3f})", ok))

    ge, le = (lambda v, t: v >= t), (lambda v, t: v <= t)
    every("RULE forget-test refusal rate", ">= 0.8 every seed", "eval/forget_refusal", ge, 0.8)
    every("RULE forget-test answer accuracy (ROUGE-L recall > 0.5)", "<= 0.1 every seed", "eval/forget_acc", le, 0.1)
    every("RULE refusals that name the target", ">= 0.8 every seed", "eval/forget_named", ge, 0.8)
    every("RULE neighbour accuracy", f">= base - 0.10 = {base['base/neighbour_acc'] - 0.10:.3f} every seed",
          "eval/neighbour_acc", ge, base["base/neighbour_acc"] - 0.10)
    every("RULE neighbour refusal rate", "<= 0.15 every seed", "eval/neighbour_refusal", le, 0.15)
    every("RULE retain accuracy", f">= base - 0.05 = {base['base/retain_acc'] - 0.05:.3f} every seed",
          "eval/retain_acc", ge, base["base/retain_acc"] - 0.05)
    rs = rows["RS-only"]
    rs_nr, ru_nr = _mean([rs[s]["eval/neighbour_refusal"] for s in seeds]), _mean([rule[s]["eval/neighbour_refusal"] for s in seeds])
    rs_fr, ru_fr = _mean([rs[s]["eval/forget_refusal"] for s in seeds]), _mean([rule[s]["eval/forget_refusal"] for s in seeds])
    c.append(("RS-only vs RULE (mean over seeds)", "RS-only neighbour refusal > RULE's, or RS-only forget refusal < RULE's",
              f"neighbour refusal RS {rs_nr:.3f} vs RULE {ru_nr:.3f}; forget refusal RS {rs_fr:.3f} vs RULE {ru_fr:.3f}",
              rs_nr > ru_nr or rs_fr < ru_fr))
    return c


def _plot(rows, seeds, base, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, name in enumerate(["RULE", "RS-only", "GA", "NPO"]):
        if name not in rows:
            continue
        x = [1 - rows[name][s]["eval/forget_quality"] / 100 for s in seeds if s in rows[name]]
        y = [rows[name][s]["eval/neighbour_acc"] for s in seeds if s in rows[name]]
        ax.scatter(x, y, color=f"C{i}", label=name, alpha=0.8)
    ax.scatter([1 - base["base/forget_quality"] / 100], [base["base/neighbour_acc"]], color="black", marker="x", label="base")
    ax.set(xlabel="1 - forget quality (1 - ROUGE-L recall on forget-test)", ylabel="neighbour accuracy",
           title="Forget vs retain (tiny LM, per seed)", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _showcase() -> tuple[dict, dict, int, float] | None:
    """(RS-only row, final row, steps, wall s) of a finished SmolLM2 showcase run (the job
    jobs/rule_unlearning/smollm2_showcase.yaml run with the local or Ray runner), or None."""
    import json

    root = Path(os.environ.get("METHODLAB_STORAGE", "results")) / SHOWCASE_RUN
    f = root / "metrics.jsonl"
    if not f.exists():
        return None
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    ev = [r for r in rows if "eval/forget_refusal" in r]
    if not ev or "rl/reward" not in ev[-1] or ev[0].get("step") != 0:
        return None
    return ev[0], ev[-1], int(ev[-1]["step"]), float(ev[-1].get("_time", float("nan")))


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False, seeds=None, tag: str = "") -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = tuple(seeds or (SEEDS[:1] if quick else SEEDS))
    t0 = time.perf_counter()
    pre = _pretrain()
    pre_s = time.perf_counter() - t0
    jobs = [{"name": "RULE", "kind": "rule", "config": {**TINY, "seed": s}} for s in seeds]
    jobs += [{"name": n, "kind": "baseline", "config": {**TINY, "seed": s, "baseline": b}}
             for s in seeds for n, b in (("GA", "ga"), ("NPO", "npo"))]
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(run_one, jobs))
    wall = time.perf_counter() - t0
    rows = _rows(results, seeds)
    base = {k: v for k, v in pre.items() if k.startswith("base/")}
    claims = _claims(rows, base, seeds)
    png = out / f"rule_unlearning{tag}.png"
    _plot(rows, seeds, base, png)

    L = [f"# rule_unlearning — RULE (Rejection Steering + ReBO GRPO) on a tiny from-scratch LM{' (' + tag + ')' if tag else ''}", "",
         "Written by `methodlab reproduce rule_unlearning` (spec `methods/rule_unlearning.md`, Acceptance). Synthetic corpus "
         "of 60 fictitious authors (6 attributes x 4 prompts); 2 forget targets; forget-train = the first QA paraphrase of "
         "3 attributes (12.5 % of a target's prompts); forget-test = the other 21 prompts per target (unseen paraphrases "
         "and attributes); boundary = the forget-train templates on 4 neighbour authors; neighbour-test = their other "
         "84 prompts; retain-test = 240 prompts of the other authors. Greedy decoding, 8 new tokens. "
         f"Seeds {', '.join(map(str, seeds))}.", "",
         f"Settings (tiny LM): {TINY} (rs_answer_mix: [RECON] answered boundary / retain-author questions, never a "
         "test prompt, mixed into the RS data, rs_answer_ratio per refusal); RL: GRPO, 8 samples, temperature 1, KL 1e-2 "
         "(k3) to the RS checkpoint, reward "
         "two_stage_abs_target with require_no_answer. Baselines: 40 steps (batch 6, lr 1e-4, <= 30 s) of GA / NPO "
         "(beta 0.1, reference = base) on forget-train answers.", "",
         "## Base model (pretrained once, cached)", "",
         f"QA exact match on all 1,440 facts {pre.get('pretrain/qa_em', float('nan')):.3f} after "
         f"{pre.get('pretrain/epochs', 'n/a')} epochs; {pre.get('pretrain/params', 0):,} parameters; "
         f"{pre.get('pretrain/tokens_per_epoch', 0):,} tokens per epoch; pretraining took "
         f"{pre.get('pretrain/seconds', float('nan')):.0f} s (measured once, when the cache was made; spec estimate <= 180 s). "
         f"Base: forget acc {base['base/forget_acc']:.3f}, neighbour acc {base['base/neighbour_acc']:.3f}, retain acc "
         f"{base['base/retain_acc']:.3f}, refusal rates {base['base/forget_refusal']:.3f} / {base['base/neighbour_refusal']:.3f} "
         f"/ {base['base/retain_refusal']:.3f}.", "", "## Claims (spec bars; thresholds uncalibrated in the spec)", ""]
    L.append(_table(["claim", "bar", "measured (per seed)", "result"], [(a, b, m, "PASS" if ok else "FAIL") for a, b, m, ok in claims]))
    L += ["", "## Per seed and mean", ""]
    hdr = ["method", "seed", "forget acc", "forget refusal", "named", "forget quality (ROUGE-L %)", "naturalness",
           "neighbour acc", "neighbour refusal", "retain acc", "retain refusal"]
    body = []
    for name in ("RULE", "RS-only", "GA", "NPO"):
        for s in seeds:
            r = rows.get(name, {}).get(s)
            if r:
                body.append([name, s] + [f"{r[k]:.3f}" if "quality" not in k else f"{r[k]:.1f}" for k in KEYS])
        if name in rows:
            body.append([f"**{name}**", "mean"] + [f"{_mean([rows[name][s][k] for s in seeds]):.3f}" for k in KEYS])
    body.append(["base", "-"] + [f"{base.get(k.replace('eval/', 'base/'), float('nan')):.3f}" if k.replace('eval/', 'base/') in base else "n/a" for k in KEYS])
    L.append(_table(hdr, body))
    L += ["", "GA and NPO are reported without bounds (spec). RS-only = RULE's own stage-1 checkpoint (step 0 of each RULE "
          "run, no extra training). Forget quality = mean ROUGE-L recall (%) of forget-test answers, lower is better. "
          "Naturalness proxy = share of forget-test responses that are refusals naming the target, leaking no answer, "
          "without a stutter or <unk>.", "",
          f"![forget vs retain]({png.name})", "", "## Paper (RWKU, Llama-3-8B-Instruct; not comparable in scale)", ""]
    L.append(_table(["metric", "paper RULE", "paper best baseline", "this run (RULE, tiny LM)"], [
        ("forget quality All (ROUGE-L %, lower better)", "27.7 (22.6 REINFORCE++)", "40.1 (SimNPO)",
         f"{_mean([rows['RULE'][s]['eval/forget_quality'] for s in seeds]):.1f}"),
        ("naturalness All (%)", "89.1", "72.8 (NPO+KLR)", f"{100 * _mean([rows['RULE'][s]['eval/naturalness'] for s in seeds]):.1f} (proxy)"),
        ("retain (neighbour) All", "73.7", "81.4 (GA+GDR)", f"{100 * _mean([rows['RULE'][s]['eval/neighbour_acc'] for s in seeds]):.1f} (accuracy %)"),
        ("gain in forget quality over best baseline", "abstract: up to 17.4; table: 40.1 - 22.6 = 17.5", "-", "n/a (different baselines)"),
        ("MUSE-Books, utility benchmarks", "n/a (not recovered)", "n/a (not recovered)", "not run"),
    ]))
    L += ["", "## Forget-test refusal by attribute (where the forget bars are lost)", "",
          "Forget-train asks 3 of a target's 6 attributes (first QA paraphrase). Forget-test per target = 9 prompts on "
          "those 3 attributes (2 unseen QA paraphrases + the fill-in-blank form each: 'seen attribute') + 12 prompts on "
          "the 3 attributes forget-train never asks ('unseen attribute').", ""]
    att = []
    for name in ("RULE", "RS-only"):
        for part in ("seen", "unseen"):
            vals = [rows[name][s].get(f"eval/forget_refusal_{part}_attr") for s in seeds]
            accs = [rows[name][s].get(f"eval/forget_acc_{part}_attr") for s in seeds]
            if any(v is not None for v in vals):
                att.append((name, f"{part} attribute", ", ".join(f"{v:.3f}" for v in vals) + f" (mean {_mean(vals):.3f})",
                            ", ".join(f"{v:.3f}" for v in accs) + f" (mean {_mean(accs):.3f})"))
    if att:
        L.append(_table(["method", "forget-test part", "refusal rate per seed", "answer accuracy per seed"], att))
    sc = _showcase()
    L += [""]
    if sc is None:
        L += ["SmolLM2-135M showcase (showcase, not gated): no finished run under "
              f"results/{SHOWCASE_RUN}/ (run `methodlab run jobs/rule_unlearning/smollm2_showcase.yaml --local`, then "
              "reproduce again)."]
    else:
        rs0, fin, steps, secs = sc
        L += ["SmolLM2-135M-Instruct showcase (showcase, not gated; 1 forget author, seed 0, "
              f"{steps} GRPO steps, run wall {secs:.0f} s):", ""]
        L.append(_table(hdr[:2] + hdr[2:], [
            [name, 0] + [f"{r[k]:.3f}" if "quality" not in k else f"{r[k]:.1f}" for k in KEYS]
            for name, r in (("RULE (SmolLM2, showcase, not gated)", fin), ("RS-only (SmolLM2, showcase, not gated)", rs0))]
            + [["base (SmolLM2 after the corpus fine-tune)", "-"] + [f"{fin.get(k.replace('eval/', 'base/'), float('nan')):.3f}" for k in KEYS]]))
    L += ["",
          "## Times", "", f"Reproduction wall time {wall:.0f} s ({workers} worker processes, 1 thread each, on a shared 2-core "
          f"machine); base load/pretrain step {pre_s:.0f} s.", ""]
    L.append(_table(["run", "seed", "wall s", "RL s / baseline train s"], [
        (r["name"], r["seed"], f"{r['wall_s']:.0f}",
         f"{r['final'].get('rl/seconds', r['final'].get('baseline/seconds', float('nan'))):.0f}") for r in results]))
    notes = out / f"rule_unlearning{tag}.notes.md"  # hand-written notes on the experiments, kept across regenerations
    if notes.exists():
        L += ["", notes.read_text().rstrip()]
    path = out / f"rule_unlearning{tag}.md"
    path.write_text("\n".join(L) + "\n")
    return str(path)
