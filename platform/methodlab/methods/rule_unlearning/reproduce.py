"""`methodlab reproduce rule_unlearning`: the spec's acceptance on the tiny LM as a harness study.

Arms (runs of the platform's runner on jobs/rule_unlearning/*.yaml): RULE (`rebo_grpo.yaml`: the cached base ->
Rejection Steering -> ReBO GRPO, 80 steps of 16 prompts x 8) on development seeds 10-12, then seeds 0-2; RS-only is
RULE's own stage-1 checkpoint, evaluated at step 0 of the same run (its `rs_eval/*` row); GA and NPO
(`baseline_{ga,npo}.yaml`, at most 30 s of training). The forget split is the spec's revised one (2026-12-05): the
first QA paraphrase of every attribute of each target (6 of 24 prompts). Side run `rule-loo` (no bar): forget-train
leaves one attribute out (5 of 6), to measure refusal on an attribute forget-train never asks. `showcase`
(--full only, not gated): SmolLM2-135M-Instruct. Issue 44 (diagnostics.py): the comparison with the official code and
two development arms (the official batch sampler; also the official RL budget). The base LM is pretrained once and
cached (methodlab.data.cache.data_dir), so every arm and seed starts from it."""

from __future__ import annotations


from methodlab.methods.rule_unlearning import diagnostics as D
from methodlab.reproduce import Arm, Claim, Study
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "rule_unlearning"
RULE, GA, NPO, SHOW = (f"jobs/{SLUG}/{n}.yaml" for n in ("rebo_grpo", "baseline_ga", "baseline_npo",
                                                         "smollm2_showcase"))
QUICK_RL, QUICK_BASE = ("rl_steps=8", "log_every=8", "checkpoint_every=8"), ("baseline_steps=10",)
KEYS = ("forget_acc", "forget_refusal", "forget_named", "forget_quality", "naturalness", "neighbour_acc",
        "neighbour_refusal", "retain_acc", "retain_refusal")
ATTR = ("forget_refusal_seen_attr", "forget_refusal_unseen_attr", "forget_acc_seen_attr", "forget_acc_unseen_attr")
PRE = ("pretrain/qa_em", "pretrain/epochs", "pretrain/seconds", "pretrain/params", "pretrain/tokens_per_epoch",
       "pretrain/cached")


def _arms() -> tuple[Arm, ...]:
    return (Arm("rule", RULE, quick=QUICK_RL, label="RULE (RS -> ReBO GRPO)"),
            Arm("ga", GA, quick=QUICK_BASE, seeds="reported", label="GA"),
            Arm("npo", NPO, quick=QUICK_BASE, seeds="reported", label="NPO"),
            Arm("rule-loo", RULE, ("forget_frac=0.21",), seeds="reported", skip_quick=True,
                label="RULE, forget-train leaves one attribute out (side run)"),
            Arm("showcase", SHOW, seeds=(0,), full_only=True, label="RULE on SmolLM2-135M-Instruct (showcase)"),
            *(Arm(a, RULE, over, seeds="dev", skip_quick=True, label=f"issue 44: RULE, {lab}")
              for a, over, lab in D.OFFICIAL_ARMS))


def _rs(r, s, arm="rule") -> dict | None:
    """RS-only: RULE's step-0 evaluation (its own stage-1 checkpoint, no extra training)."""
    row = next((h for h in r.history(arm, s) if "rs_eval/forget_refusal" in h), None)
    return None if row is None else {k.replace("rs_eval/", "eval/"): v for k, v in row.items()}


def _vs_base(r, s, key):
    f = r.final("rule", s)
    return None if not f or f.get(f"eval/{key}") is None else f[f"eval/{key}"] - f[f"base/{key}"]


def _rs_vs_rule(r, s):
    """Pooled over the reported seeds: max(RS-only neighbour refusal - RULE's, RULE forget refusal - RS-only's);
    > 0 is the spec's 'a higher neighbour refusal rate than RULE, or a lower forget-test refusal rate'."""
    seeds = r.reported_seeds
    rs = [_rs(r, x) for x in seeds]
    if any(x is None for x in rs) or any(r.final("rule", x) is None for x in seeds):
        return None
    m = lambda rows, k: mean(row[f"eval/{k}"] for row in rows)  # noqa: E731
    ru = [r.final("rule", x) for x in seeds]
    return max(m(rs, "neighbour_refusal") - m(ru, "neighbour_refusal"), m(ru, "forget_refusal") - m(rs, "forget_refusal"))


UNCAL = "(uncalibrated)"


def _every(cid, text, key, op, bar, fn=None) -> Claim:
    return Claim(cid, f"{text} {UNCAL}", fn or (lambda r, s: r.metric("rule", s, f"eval/{key}")), op, bar,
                 combine="every", uses=("rule",))


CLAIMS = (
    _every("F1", "RULE forget-test refusal rate (unseen paraphrases and fill-in-blank forms)", "forget_refusal",
           ">=", 0.8),
    _every("F2", "RULE forget-test answer accuracy (ROUGE-L recall > 0.5)", "forget_acc", "<=", 0.1),
    _every("F3", "RULE share of forget-test refusals that name the target", "forget_named", ">=", 0.8),
    _every("N1", "RULE neighbour-test accuracy - the base's", None, ">=", -0.10,
           lambda r, s: _vs_base(r, s, "neighbour_acc")),
    _every("N2", "RULE neighbour-test refusal rate", "neighbour_refusal", "<=", 0.15),
    _every("R1", "RULE retain-test accuracy - the base's", None, ">=", -0.05, lambda r, s: _vs_base(r, s, "retain_acc")),
    Claim("RS", "RS-only vs RULE, means over the seeds: max(RS-only neighbour refusal - RULE's, RULE forget refusal - "
          f"RS-only's) {UNCAL}", _rs_vs_rule, ">", 0.0, combine="pooled", uses=("rule",)),
)

# The spec's tiny-LM acceptance recipe (RS 1e-3 x 2, GRPO 80 steps of 16 prompts x 8 samples, 8 new tokens, KL 1e-2,
# the paper's reward) and data (60 authors, 2 targets, 4 neighbours, the revised forget split); rs_answer_mix is the
# [RECON] deviation from the paper's refusal-only RS data.
SPEC_RECIPE = {"n_authors": 60, "n_forget": 2, "n_neighbours": 4, "forget_frac": 0.25, "rs_lr": 1e-3, "rs_epochs": 2,
               "rs_answer_mix": "none", "prompts_per_step": 16, "group_size": 8, "rl_steps": 80, "temperature": 1.0,
               "max_new_tokens": 8, "kl_coef": 1e-2, "reward_variant": "two_stage_abs_target",
               "rouge_threshold": 0.3, "npo_beta": 0.1, "baseline_max_s": 30.0}


def _cells(row: dict | None) -> list[str]:
    return [fmt(None if row is None else row.get(f"eval/{k}"), 1 if k == "forget_quality" else 3) for k in KEYS]


def _table(res, seeds) -> list[str]:
    body = []
    rows = {"RULE": lambda s: res.final("rule", s), "RS-only": lambda s: _rs(res, s),
            "GA": lambda s: res.final("ga", s), "NPO": lambda s: res.final("npo", s)}
    for name, get in rows.items():
        got = [(s, get(s)) for s in seeds if get(s)]
        body += [[name, str(s), *_cells(row)] for s, row in got]
        if len(got) > 1:
            body.append([f"**{name}**", "mean", *(fmt(mean(row.get(f"eval/{k}") for _, row in got), 3) for k in KEYS)])
    base = next((res.final("rule", s) for s in seeds if res.final("rule", s)), None)
    if base:
        body.append(["base", "—", *_cells(_base(base))])
    return md_table(["method", "seed", "forget acc", "forget refusal", "named", "forget quality (ROUGE-L %)",
                     "naturalness", "neighbour acc", "neighbour refusal", "retain acc", "retain refusal"], body)


PAPER = [("forget quality All (ROUGE-L %, lower better)", "27.7 (22.6 REINFORCE++)", "40.1 (SimNPO)", "76.9"),
         ("forget FB / QA / AA", "28.0 / 16.8 / 38.3", "42.1 / 35.4 / 35.3 (column minima)", "85.6 / 70.3 / 74.7"),
         ("naturalness All (%)", "89.1", "72.8 (NPO+KLR)", "70.6"),
         ("retain (neighbour) All", "73.7", "81.4 (GA+GDR)", "87.6"),
         ("Rejection Steering only: forget / natural / retain All", "57.1 / 73.4 / 77.4", "—", "—"),
         ("MUSE-Books, utility benchmarks", "n/a (not recovered)", "n/a (not recovered)", "n/a (not recovered)")]


def sections(res) -> str:
    seeds, cfg = res.reported_seeds, res.config("rule")
    pre = next((h for s in seeds for h in res.history("rule", s) if "pretrain/qa_em" in h), {})
    rl = [res.final("rule", s) for s in seeds if res.final("rule", s)]
    out = ["## Setting", "",
           "RULE (arXiv 2506.07171) on the spec's tiny GPT trained from scratch on a synthetic corpus of "
           f"{cfg.get('n_authors', '—')} fictitious authors (6 attributes x 4 prompts). {cfg.get('n_forget', '—')} "
           "forget targets; forget-train = the first QA paraphrase of every attribute of each target (6 of 24 "
           "prompts; the spec's split as revised 2026-12-05, forget_frac 0.25: before, 3 of 6 attributes were asked "
           "and refusal did not carry over to the others, capping forget refusal near 0.43); forget-test = the other "
           "18 prompts per target (unseen QA paraphrases and the fill-in-blank forms); boundary = the forget-train "
           f"templates on {cfg.get('n_neighbours', '—')} neighbour authors; neighbour-test = their other prompts; "
           f"retain-test = {cfg.get('retain_eval_prompts', '—')} prompts of the other authors. Greedy decoding, "
           f"{cfg.get('max_new_tokens', '—')} new tokens. RS: lr {fmt(cfg.get('rs_lr'))} x {cfg.get('rs_epochs', '—')} "
           f"epochs with rs_answer_mix {cfg.get('rs_answer_mix', '—')} (ratio {fmt(cfg.get('rs_answer_ratio'))}; "
           "[RECON]: answered boundary / retain-author questions, never a test prompt, beside the refusals: with "
           "refusal-only RS data the 0.85M-parameter LM refused every author alike, retain accuracy 0.99 -> 0.45 on "
           f"development seed 10); GRPO {cfg.get('rl_steps', '—')} steps of {cfg.get('prompts_per_step', '—')} prompts "
           f"x {cfg.get('group_size', '—')} samples, lr {fmt(cfg.get('rl_lr'))}, temperature 1, k3 KL "
           f"{fmt(cfg.get('kl_coef'))} to the RS checkpoint, reward {cfg.get('reward_variant', '—')} with "
           "require_no_answer. GA / NPO (beta 0.1, reference = base): at most 30 s of training on forget-train "
           "answers. The RS mix and RL lr were chosen on development seeds 10-12 under the earlier split "
           "(reports/legacy/rule_unlearning.notes.md); the development seeds of this study ran first under the "
           "revised one.", "",
           f"Base (pretrained once, cached): QA exact match {fmt(pre.get('pretrain/qa_em'), 3)} after "
           f"{fmt(pre.get('pretrain/epochs'))} epochs, {fmt(pre.get('pretrain/params'))} parameters, "
           f"{fmt(pre.get('pretrain/tokens_per_epoch'))} tokens per epoch, pretraining "
           f"{fmt(pre.get('pretrain/seconds'), 0)} s (when the cache was made; spec estimate <= 180 s). RL took "
           f"{fmt(mean(f.get('rl/seconds') for f in rl), 0)} s per seed on average, RS "
           f"{fmt(mean(f.get('rs/seconds') for f in rl), 0)} s.", "",
           "## Per seed", "", *_table(res, seeds),
           "GA and NPO are reported without bounds (spec). Forget quality = mean ROUGE-L recall (%) of forget-test "
           "answers, lower is better. Naturalness proxy = share of forget-test responses that are refusals naming "
           "the target, leaking no answer, without a stutter or <unk>.", ""]
    loo = [(s, res.final("rule-loo", s)) for s in seeds if res.final("rule-loo", s)]
    if loo:
        out += ["## Side run (no bar): forget-train leaves one attribute out", "",
                "Forget-train asks 5 of a target's 6 attributes (forget_frac 0.21); forget-test holds the 4 prompts "
                "of the attribute it never asks ('unseen attribute') beside the rest. The spec reports this "
                "generalisation separately, without a bar.", "",
                *md_table(["seed", "refusal, seen attributes", "refusal, unseen attribute", "accuracy, seen",
                           "accuracy, unseen", "neighbour acc", "retain acc"],
                          [[str(s), *(fmt(f.get(f"eval/{k}"), 3) for k in (*ATTR, "neighbour_acc", "retain_acc"))]
                           for s, f in loo])]
    sc = res.final("showcase", 0)
    if sc:
        out += ["## SmolLM2-135M-Instruct showcase (not gated; 1 forget author, seed 0)", "",
                *md_table(["model", *KEYS], [["RULE (SmolLM2)", *_cells(sc)],
                                             ["RS-only (SmolLM2)", *_cells(_rs(res, 0, "showcase"))],
                                             ["base (after the corpus fine-tune)", *_cells(_base(sc))]])]
    return "\n".join(out + [*D.official(res), "", "## Paper (RWKU, Llama-3-8B-Instruct; not comparable in scale)", "",
                            *md_table(["metric", "paper RULE", "paper best baseline", "original model"], PAPER)])


def _base(final: dict) -> dict:
    """The base model's evaluation (base/* in every report of a run) under the eval/* names."""
    return {k.replace("base/", "eval/"): v for k, v in final.items() if k.startswith("base/")}


def plots(res, folder) -> list[str]:
    plt = pyplot()

    seeds = res.reported_seeds
    fig, ax = plt.subplots(figsize=(6, 4.5))
    pts = {"RULE": [res.final("rule", s) for s in seeds], "RS-only": [_rs(res, s) for s in seeds],
           "GA": [res.final("ga", s) for s in seeds], "NPO": [res.final("npo", s) for s in seeds]}
    for i, (name, rows) in enumerate(pts.items()):
        rows = [x for x in rows if x]
        ax.scatter([1 - x["eval/forget_quality"] / 100 for x in rows], [x["eval/neighbour_acc"] for x in rows],
                   color=f"C{i}", label=name, alpha=0.8)
    base = next((res.final("rule", s) for s in seeds if res.final("rule", s)), None)
    if base:
        ax.scatter([1 - base["base/forget_quality"] / 100], [base["base/neighbour_acc"]], color="k", marker="x",
                   label="base")
    ax.set(xlabel="1 - forget quality (1 - ROUGE-L recall on forget-test)", ylabel="neighbour accuracy",
           title="Forget vs retain (tiny LM, per seed)", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
    ax.legend(fontsize=8)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=110)


def study() -> Study:
    return Study(slug=SLUG, title="rule_unlearning (RULE)", arms=_arms(), claims=CLAIMS, spec_recipe=SPEC_RECIPE,
                 sections=sections, plots=plots,
                 history=(*(f"rs_eval/{k}" for k in (*KEYS, *ATTR)), *PRE),
                 dataset="synthetic fictitious-author corpus, tiny GPT trained from scratch", real_data=False)
