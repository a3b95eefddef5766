"""`methodlab reproduce cmcl`: the spec's acceptance experiment as a harness study (methodlab.reproduce).

Arms: the synthetic 6-step latent-binding sequence (D = 64, official AdamW recipe, lambda_min 0.01) through the
method's own `fit`, from jobs/cmcl/*.yaml: DNS (lambda' = 0 and 0.05), one-sided (G - G P, lambda' = 0.05),
Vanilla, EWC, joint training, and a frozen-head control (lr 1e-12) for the plasticity measure; development seeds
10-12 first, then the reported seeds 0-2. Task `exactness`: the deterministic float64 SGD experiment
(exactness.py). Plasticity is judged under the spec's revised text (2026-12-05): the whole-train-set loss falls
>= 1 % within every step and by >= 0.25x Vanilla's fall in the same step."""

from __future__ import annotations

import math

from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, mean, md_table

SLUG = "cmcl"
J = f"jobs/{SLUG}/"
ARMS = (
    Arm("DNS", J + "synthetic.yaml", label="DNS (lambda' = 0)"),
    Arm("DNS-partner", J + "dns_partner.yaml", label="DNS (lambda' = 0.05)"),
    Arm("one-sided", J + "one_sided.yaml", ("lambda_partner=0.05",), label="one-sided G - GP"),
    Arm("Vanilla", J + "vanilla.yaml", label="Vanilla"),
    Arm("EWC", J + "ewc.yaml", label="EWC (lambda 1e4)"),
    Arm("joint", J + "joint.yaml", label="joint (upper reference)"),
    Arm("frozen", J + "synthetic.yaml", ("lr=1e-12",), label="frozen heads (control, lr 1e-12)"),
)
MODS = ("vision", "text", "audio", "depth", "thermal")
KEYS = ("eval/r1", "eval/r5", "eval/r10", "eval/acc", "eval/bwt_r1", "eval/bwt_r10", "eval/bwt_acc")


def m(r, arm: str, s, key: str) -> float | None:
    return r.metric(arm, s, key)


def diff(a, b) -> float | None:
    return None if a is None or b is None else a - b


def drops(r, arm: str, s) -> list[float]:
    return [x["train/loss_drop"] for x in sorted(r.history(arm, s), key=lambda x: x["step"]) if "train/loss_drop" in x]


def vs_vanilla(r, s) -> float | None:
    """min over steps of DNS's in-step loss fall / Vanilla's in the same step (+-inf where Vanilla's is <= 0)."""
    d, v = drops(r, "DNS", s), drops(r, "Vanilla", s)
    if not d or len(d) != len(v):
        return None
    return min(a / b if b > 0 else (math.inf if a >= 0.25 * b else -math.inf) for a, b in zip(d, v))


def exact(r, key: str) -> float | None:
    t = r.task("exactness", 0)
    return None if t is None else t[key]


def between(r, s) -> float | None:
    """Distance (points) of one-sided's mean BWT from [Vanilla, DNS(0.05)], or from DNS(0.05) / DNS(0): the least."""
    b = {a: mean(m(r, a, x, "eval/bwt_r1") for x in r.reported_seeds) for a in ("one-sided", "DNS-partner", "Vanilla",
                                                                                 "DNS")}
    if any(v is None for v in b.values()):
        return None
    lo, hi = sorted((b["Vanilla"], b["DNS-partner"]))
    one = b["one-sided"]
    return min(max(lo - one, one - hi, 0.0), abs(one - b["DNS-partner"]), abs(one - b["DNS"]))


DNS_BIAS = ("dns (bias frozen)", "dns (bias projected with I - P~)")
CLAIMS = (
    Claim("X1", "exactness (float64, SGD lr 0.1, no decay, 50 updates on a new pair sharing `vision`): DNS max abs(ds) / "
          "max abs(s) on all old pairs, the larger of bias frozen / bias projected with (I - P~)",
          lambda r, s: None if exact(r, DNS_BIAS[0]) is None else max(exact(r, k) for k in DNS_BIAS), "<=", 1e-4,
          combine="pooled", uses=("exactness",)),
    Claim("X2", "same experiment: Vanilla (bias frozen) max abs(ds) / max abs(s)", lambda r, s: exact(r, "vanilla (bias frozen)"),
          ">", 1e-2, combine="pooled", uses=("exactness",)),
    Claim("X3", "the DNS update G - P~GP is not the two-sided product (I-P~)G(I-P): max abs difference on a random "
          "example", lambda r, s: exact(r, "max abs(DNS(G) - (I-P~)G(I-P))"), ">", 1e-6, combine="pooled",
          uses=("exactness",)),
    Claim("B1", "synthetic 6 steps: DNS BWT on R@1 (points), mean over seeds", lambda r, s: m(r, "DNS", s, "eval/bwt_r1"),
          ">=", -1.5, uses=("DNS",)),
    Claim("B2", "DNS BWT(R@1) - Vanilla's (points), mean over seeds",
          lambda r, s: diff(m(r, "DNS", s, "eval/bwt_r1"), m(r, "Vanilla", s, "eval/bwt_r1")), ">=", 2.0,
          uses=("DNS", "Vanilla")),
    Claim("R1", "DNS final mean R@1 - Vanilla's (points), mean over seeds",
          lambda r, s: diff(m(r, "DNS", s, "eval/r1"), m(r, "Vanilla", s, "eval/r1")), ">=", -1.0, uses=("DNS", "Vanilla")),
    Claim("P1", "plasticity (revised 2026-12-05): DNS's loss on the step's whole training set, before vs after the "
          "step: smallest fall over the 6 steps, every seed", lambda r, s: m(r, "DNS", s, "train/min_loss_drop"), ">=",
          0.01, combine="every", uses=("DNS",)),
    Claim("P2", "plasticity (revised): smallest ratio over the steps of DNS's in-step fall to Vanilla's in the same "
          "step, every seed", vs_vanilla, ">=", 0.25, combine="every", uses=("DNS", "Vanilla")),
    Claim("O", "one-sided (lambda' = 0.05) BWT between DNS (lambda' = 0.05) and Vanilla, or equal to DNS: distance in "
          "points (the spec says 'report it': tolerance 0.5 uncalibrated)", between, "<=", 0.5, combine="pooled",
          uses=("one-sided", "DNS-partner", "Vanilla", "DNS")),
    Claim("J", "joint final mean R@1 - Vanilla's (points), mean over seeds",
          lambda r, s: diff(m(r, "joint", s, "eval/r1"), m(r, "Vanilla", s, "eval/r1")), ">=", -1.0,
          uses=("joint", "Vanilla")),
)
# The official recipe (spec: Optimiser / schedule, Acceptance main claim).
SPEC_RECIPE = {"optimizer": "adamw", "lr": 1e-4, "weight_decay": 1e-3, "batch_size": 64, "epochs": 5,
               "lr_schedule": "linear", "lambda_min": 0.01, "temperature": 1.0, "symmetric": False, "dim": 64,
               "n_train": 2000, "n_test": 500}


def _final_table(res, seeds) -> list[str]:
    rows = [[a.label, *(("n/a" if a.id == "joint" and "bwt" in k else fmt(mean(m(res, a.id, s, k) for s in seeds), 2))
                        for k in KEYS)] for a in res.study.arms if res.seeds(a.id)]
    unt = {k: mean(m(res, "DNS", s, f"untrained/{k}") for s in seeds) for k in ("r1", "r10", "acc")}
    return [*md_table(["method", "R@1", "R@5", "R@10", "Acc", "BWT R@1", "BWT R@10", "BWT Acc"], rows),
            f"Untrained heads (evaluation before step 1): R@1 {fmt(unt['r1'], 2)}, R@10 {fmt(unt['r10'], 2)}, Acc "
            f"{fmt(unt['acc'], 2)}.", ""]


def _per_seed(res, seeds) -> list[str]:
    rows = []
    for a in res.study.arms:
        for s in (x for x in seeds if res.final(a.id, x)):
            f, h = res.final(a.id, s), res.history(a.id, s)
            first = h[0] if h and "train/batch_loss_first" in h[0] else None
            drop = f"{fmt(100 * f['train/min_loss_drop'], 1)} %" if "train/min_loss_drop" in f else \
                f"{fmt(100 * f['train/loss_drop'], 1)} % (whole run)"
            rows.append([a.label, str(s), fmt(f["eval/r1"], 2), fmt(f["eval/r10"], 2), fmt(f.get("eval/acc"), 2),
                         fmt(f.get("eval/bwt_r1"), 2), drop, f"{first['train/batch_loss_first']:.2f} -> "
                         f"{first['train/batch_loss_last']:.2f}" if first else "n/a", fmt(res.run(a.id, s)["wall_s"], 0)])
    return md_table(["method", "seed", "R@1", "R@10", "Acc", "BWT R@1", "min in-step loss fall",
                     "first -> last mini-batch loss (step 1)", "wall s"], rows)


def _steps(res, seeds) -> list[str]:
    rows, share = [], []
    for a in res.study.arms:
        if a.id == "joint" or not res.seeds(a.id):
            continue
        per = [drops(res, a.id, s) for s in seeds if drops(res, a.id, s)]
        rows.append([a.label, *(fmt(100 * mean(d[t] for d in per), 1) for t in range(len(per[0])))] if per else [a.label])
        hs = [sorted(res.history(a.id, s), key=lambda x: x["step"]) for s in seeds if res.history(a.id, s)]
        for kind, what in (("kept_", "applied"), ("kept_dns_", "dual-sided G - P~GP"), ("kept_one_sided_", "one-sided G - GP")):
            keys = [f"grad/{kind}{mod}" for mod in MODS]
            if not hs or a.id == "frozen" or not any(k in x for x in hs[0] for k in keys):
                continue
            cells = [" / ".join(f"{k.split('_')[-1]} {fmt(mean(h[t].get(k) for h in hs), 2)}" for k in keys
                                if k in hs[0][t]) or "—" for t in range(1, len(hs[0]))]
            share.append([a.label, what, *cells])
    return ["### In-step training-loss fall per step (whole train set, fixed batches; mean over seeds, %)", "",
            *md_table(["method", *(f"t={t}" for t in range(1, 7))], rows),
            "### Share of the raw weight-gradient norm each projection keeps (||projected G|| / ||G||, mean over the "
            "step's updates and the seeds; t = 1 has no projection)", "",
            *md_table(["method", "projection", *(f"t={t}" for t in range(2, 7))], share)]


def sections(res) -> str:
    seeds = res.reported_seeds
    return "\n".join([
        "## Setting", "", "DNS (Liu, Xia, Ng, Chua; NeurIPS 2025, arXiv 2503.14963) on the spec's synthetic latent-binding "
        "sequence: 6 steps (vision,text) (audio,text) (depth,vision) (audio,vision) (thermal,vision) (depth,text), D = "
        "64, 2,000 train / 500 test pairs per step; AdamW lr 1e-4, wd 1e-3, batch 64, 5 epochs per step, linear decay "
        "within a step; lambda_min 0.01. Recall over all 500 test pairs of each task, both directions, index tie-break; "
        "BWT = mean over tasks i < T of R_{T,i} - R_{i,i}. The paper's figures are for the 11-step ImageBind / "
        "LanguageBind / UniBind benchmark (e.g. ImageBind DNS Acc 52.52, BWT_A -0.02; Vanilla 47.32 / -5.72), not "
        "this generator, so no claim carries a paper number.", "",
        "## Exactness (float64, SGD lr 0.1, no weight decay, 50 updates on a new pair sharing `vision`)", "",
        *md_table(["variant", "max abs(ds) / max abs(s) on old pairs"], [[k, f"{v:.2e}"] for k, v in
                                                                  (res.task("exactness", 0) or {}).items()]),
        "## Final metrics per method (mean over the reported seeds)", "", *_final_table(res, seeds),
        "### Per seed", "", *_per_seed(res, seeds), *_steps(res, seeds),
        "## Notes", "",
        "- Caveat (spec): Vanilla's \"forgetting\" on this generator is largely the contrastive objective drifting away "
        "from retrieval (training lowers test R@1 below the untrained heads' for every method that moves freely, "
        "joint included), so DNS wins partly by near-freezing what it has seen; its BWT is this effect, not a "
        "stronger model.",
        "- Plasticity (revised bar): the fall is measured on the step's whole training set in fixed batches before and "
        "after the step. At the official recipe (160 AdamW updates at lr 1e-4) even Vanilla, which projects nothing, "
        "falls only a few percent; the frozen control (lr 1e-12) falls 0, so the bar tells a learning model from a "
        "frozen one. The first vs last mini-batch column shows why the spec's old 20 % figure was no plasticity "
        "measure: the frozen control has the same first -> last fall (the last batch holds 16 pairs, hence a lower "
        "CE). The legacy report's lr 3e-3 experiment answered the old bar and is not rerun here.",
        "- With lambda' = 0 the partner second moment has full rank, P~ = I and DNS equals one-sided G - GP (same "
        "shares in the table above); lambda' = 0.05 keeps only strong partner directions.",
        "- Joint: batches drawn per pair in proportion to its size, the sequential run's total number of updates and "
        "one linear decay; evaluated once at the end (BWT n/a). EWC: diagonal Fisher on head weights and biases, "
        "lambda 1e4 (not given by the spec; one probe on seed 0 placed it between 'equal to Vanilla' and 'frozen').",
        ""])


def plots(res, folder) -> list[str]:
    plt = pyplot()

    seeds = res.reported_seeds
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    seq = [a for a in res.study.arms if a.id != "joint" and res.seeds(a.id)]
    for a in seq:
        hs = [sorted(res.history(a.id, s), key=lambda x: x["step"]) for s in seeds if res.history(a.id, s)]
        if hs:
            ax[0].plot([x["step"] for x in hs[0]], [mean(h[t].get("eval/r1") for h in hs) for t in range(len(hs[0]))],
                       marker="x" if a.id == "one-sided" else "o", ls="--" if a.id == "one-sided" else "-", label=a.label)
    j = mean(m(res, "joint", s, "eval/r1") for s in seeds)
    if j is not None:
        ax[0].axhline(j, ls="--", color="grey", label=f"joint (end) {j:.1f}")
    ax[0].set(xlabel="continual step t", ylabel="mean R@1 over seen tasks (%)", title="Recall per step (seed mean)")
    ax[0].legend(fontsize=7)
    b = [mean(m(res, a.id, s, "eval/bwt_r1") for s in seeds) for a in seq]
    ax[1].bar(range(len(seq)), [math.nan if v is None else v for v in b], color=[f"C{i}" for i in range(len(seq))])
    ax[1].set_xticks(range(len(seq)), [a.id for a in seq], rotation=20, fontsize=8)
    ax[1].axhline(0, color="black", lw=0.8)
    ax[1].set(ylabel="BWT on R@1 (points)", title="Backward transfer (seed mean)")
    return save_figure(fig, folder, f"{SLUG}.png", dpi=110)


def exactness(seed: int, inputs: dict, mode: str) -> dict:
    """The spec's exactness experiment (exactness.run) per variant, and the dual- vs two-sided projection check."""
    import torch

    from methodlab.core.device import set_threads
    from methodlab.methods.cmcl import exactness as ex
    from methodlab.methods.cmcl.model import dns_project

    set_threads(1)
    out = {"dns (bias frozen)": ex.run("dns", train_bias=False)["ratio"],
           "dns (bias projected with I - P~)": ex.run("dns", project_bias=True)["ratio"],
           "dns (bias trained, unprojected: official)": ex.run("dns")["ratio"],
           "one-sided (bias frozen)": ex.run("one_sided", train_bias=False)["ratio"],
           "vanilla (bias frozen)": ex.run("vanilla", train_bias=False)["ratio"]}
    g = torch.Generator(device="cpu").manual_seed(0)
    U, V = (torch.linalg.qr(torch.randn(64, 8, generator=g, dtype=torch.float64))[0] for _ in range(2))
    G = torch.randn(64, 64, generator=g, dtype=torch.float64)
    P, Pt, eye = U @ U.T, V @ V.T, torch.eye(64, dtype=torch.float64)
    out["max abs(DNS(G) - (I-P~)G(I-P))"] = float((dns_project(G, P, Pt) - (eye - Pt) @ G @ (eye - P)).abs().max())
    return out


def study() -> Study:
    keys = ("eval/r1", "train/loss_drop", "train/batch_loss_first", "train/batch_loss_last",
            *(f"grad/{k}{mod}" for k in ("kept_", "kept_dns_", "kept_one_sided_") for mod in MODS))
    return Study(slug=SLUG, title="cmcl (DNS, NeurIPS 2025)", arms=ARMS, claims=CLAIMS,
                 tasks=(Task("exactness", exactness, seeds=(0,)),), spec_recipe=SPEC_RECIPE, sections=sections,
                 plots=plots, history=keys, dataset="synthetic latent-binding sequence (6 steps, D = 64)",
                 real_data=False)
