"""`methodlab reproduce cmcl`: the spec's acceptance experiment.

1. Exactness (deterministic, float64, SGD lr 0.1, no decay): DNS keeps every old score, Vanilla does not.
2. Main claim on the synthetic 6-step binding sequence (D = 64, official AdamW recipe, lambda_min 0.01), 3 seeds:
   DNS (lambda' = 0 and 0.05), one-sided (G - G P), Vanilla, EWC, joint training; plus a frozen-head control
   for the plasticity measure. Every run goes through the method's own `fit`. Writes reports/cmcl.md + .png.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 2)
BASE = dict(data="synthetic", dim=64, optimizer="adamw", lr=1e-4, weight_decay=1e-3, batch_size=64, epochs=5,
            lambda_min=0.01, eval_subsets=5)
RUNS = {  # name -> config overrides
    "DNS": dict(method="dns", lambda_partner=0.0),
    "DNS (lambda'=0.05)": dict(method="dns", lambda_partner=0.05),
    "one-sided": dict(method="one_sided", lambda_partner=0.05),
    "Vanilla": dict(method="vanilla"),
    "EWC": dict(method="ewc"),
    "joint": dict(method="joint"),
    "frozen (control)": dict(method="dns", lr=1e-12),
}
# Plasticity recipe (issue #22 item 5): the same arms, only lr changed, chosen on development seeds 10, 11, 12 as
# the smallest lr of {1e-4, 1e-3, 1.5e-3, 2e-3, 3e-3} (the spec's sweep range tops at 3e-3) at which DNS's
# whole-train-set loss falls >= 20 % in every step of every dev seed (jobs/cmcl/plasticity.yaml).
PLASTIC_LR = 3e-3
PLASTIC_RUNS = [n for n in RUNS if n != "frozen (control)"]  # the frozen control does not depend on lr
KEYS = ("eval/r1", "eval/r5", "eval/r10", "eval/acc", "eval/bwt_r1", "eval/bwt_r10", "eval/bwt_acc")


def run_one(job: dict) -> dict:
    from methodlab.core import RunContext
    from methodlab.core.device import set_threads
    from methodlab.methods.cmcl.config import Config
    from methodlab.methods.cmcl.train import fit

    set_threads(1)  # this worker process is the runner here: the recipe's one thread per fit
    t0 = time.perf_counter()
    ctx = RunContext(quiet=True)
    fit(Config(**job["config"]), ctx)
    return {"name": job["name"], "seed": job["config"]["seed"], "history": ctx.history,
            "final": ctx.history[-1], "wall_s": time.perf_counter() - t0}


def exactness_results() -> dict:
    import torch

    from methodlab.core.device import set_threads
    from methodlab.methods.cmcl import exactness
    from methodlab.methods.cmcl.model import dns_project

    set_threads(1)
    out = {"dns (bias frozen)": exactness.run("dns", train_bias=False)["ratio"],
           "dns (bias projected with I - P~)": exactness.run("dns", project_bias=True)["ratio"],
           "dns (bias trained, unprojected: official)": exactness.run("dns")["ratio"],
           "one-sided (bias frozen)": exactness.run("one_sided", train_bias=False)["ratio"],
           "vanilla (bias frozen)": exactness.run("vanilla", train_bias=False)["ratio"]}
    g = torch.Generator(device="cpu").manual_seed(0)  # a host-side numerical check
    D = 64
    U = torch.linalg.qr(torch.randn(D, 8, generator=g, dtype=torch.float64, device="cpu"))[0]
    V = torch.linalg.qr(torch.randn(D, 8, generator=g, dtype=torch.float64, device="cpu"))[0]
    G = torch.randn(D, D, generator=g, dtype=torch.float64, device="cpu")
    P, Pt, eye = U @ U.T, V @ V.T, torch.eye(D, dtype=torch.float64, device="cpu")
    out["max abs(DNS(G) - (I-P~)G(I-P))"] = float((dns_project(G, P, Pt) - (eye - Pt) @ G @ (eye - P)).abs().max())
    return out


def _fmt(v, nd=2):
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def _vals(results, name, key):
    return [r["final"].get(key, float("nan")) for r in sorted(results, key=lambda r: r["seed"]) if r["name"] == name]


def _mean(v):
    v = [x for x in v if np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _plot(results, names, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        runs = [r for r in results if r["name"] == name]
        if name == "joint":
            y = _mean([r["final"]["eval/r1"] for r in runs])
            ax[0].axhline(y, ls="--", color="grey", label=f"joint (end) {y:.1f}")
            continue
        steps = [h["step"] for h in runs[0]["history"]]
        curve = np.mean([[h["eval/r1"] for h in r["history"]] for r in runs], 0)
        style = dict(ls="--", marker="x") if name == "one-sided" else dict(marker="o")  # one-sided overlays DNS(0)
        ax[0].plot(steps, curve, label=name, **style)
    u = _mean([r["final"]["untrained/r1"] for r in results if r["name"] == "DNS"])
    ax[0].axhline(u, ls=":", color="black", label=f"untrained {u:.1f}")
    ax[0].set(xlabel="continual step t", ylabel="mean R@1 over seen tasks (%)", title="Recall per step (3-seed mean)")
    ax[0].legend(fontsize=7)
    seq = [n for n in names if n not in ("joint", "frozen (control)")]
    b = [_mean(_vals(results, n, "eval/bwt_r1")) for n in seq]
    ax[1].bar(range(len(seq)), b, color=["C0", "C1", "C2", "C3", "C4"][: len(seq)])
    ax[1].set_xticks(range(len(seq)), seq, rotation=20, fontsize=8)
    ax[1].axhline(0, color="black", lw=0.8)
    ax[1].set(ylabel="BWT on R@1 (points)", title="Backward transfer (3-seed mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _share_rows(results, names):
    """Per step t >= 2: mean over seeds and updates of ||projected G|| / ||G|| per projected head."""
    rows = []
    for n in names:
        runs = [r for r in results if r["name"] == n]
        if n == "frozen (control)" or not runs or not any(k.startswith("grad/kept_") for h in runs[0]["history"] for k in h):
            continue
        for kind, label in (("kept_", "applied"), ("kept_dns_", "dual-sided G - P~GP"), ("kept_one_sided_", "one-sided G - GP")):
            if (kind == "kept_dns_" and n.startswith("DNS")) or (kind == "kept_one_sided_" and n == "one-sided"):
                continue  # equal to the applied row
            cells = []
            for t in range(1, len(runs[0]["history"])):
                ks = sorted(k for k in runs[0]["history"][t] if k.startswith("grad/" + kind) and
                            (kind != "kept_" or not k.startswith(("grad/kept_dns_", "grad/kept_one_sided_"))))
                cells.append(" / ".join(f"{k[len('grad/' + kind):]} {_mean([r['history'][t][k] for r in runs]):.2f}"
                                        for k in ks) or "-")
            rows.append((n, label, *cells))
    return rows


def _drop_rows(results, names):
    return [(n, *[_fmt(100 * _mean([r["history"][t]["train/loss_drop"] for r in results if r["name"] == n]), 1)
                  for t in range(len([r for r in results if r["name"] == n][0]["history"]))])
            for n in names if n != "joint"]


PLASTICITY_NOTES = [
    "Development-seed scan (seeds 10, 11, 12; DNS lambda' = 0 and Vanilla, everything official except lr; "
    "`.venv/bin/python` on `fit`, 6-14 s a run; '-' = not run, the rule had already failed on seed 10):",
    "",
    _table(["lr", "DNS min in-step drop % (s10 / s11 / s12)", "DNS R@1 / BWT (mean)", "Vanilla min drop %",
            "Vanilla R@1 / BWT (mean)"],
           [("1e-4 (official)", "1.6 / 1.5 / 2.0", "55.7 / +1.55", "6.1 / 6.1 / 6.3", "44.8 / -5.83"),
            ("1e-3", "13.2 / 15.3 / 15.9", "27.4 / +4.72", "18.5 / 23.8 / 23.7", "28.5 / +3.69"),
            ("1.5e-3", "15.0 / - / -", "29.6 / +4.60 (s10)", "20.9 / - / -", "41.4 / +8.92 (s10)"),
            ("2e-3", "17.3 / 23.6 / 20.2", "42.8 / +11.01", "27.8 / 36.0 / 31.9", "61.2 / +17.15"),
            ("3e-3 (chosen)", "22.9 / 35.5 / 29.4", "46.9 / +5.53", "42.4 / 51.6 / 47.5", "82.0 / +20.45")]),
    "",
    "**Cause.** (1) The official update budget, not the projection threshold, is what keeps the loss from "
    "falling: 160 AdamW updates at lr 1e-4 (each moves a weight by at most ~lr) from the identity heads lower the "
    "whole-train-set loss by only ~6 % even for Vanilla, which projects nothing (kept share 1). Vanilla is the "
    "upper bound of any projected method's plasticity at the same recipe, so at lr 1e-4 the 20 % bar is out of "
    "reach for the paper's method whatever lambda_min is. The spec's prototype figure (~40 %) was the first vs the "
    "last mini-batch (see Notes), not a plasticity measure. (2) The projection then cuts that to about a third to two thirds (DNS 1.7-4.7 % per step against Vanilla's 6-7 %): with "
    "lambda' = 0 the partner second moment has full rank (the feature noise sigma = 0.05 leaves eigenvalues "
    "~1e-4 > 1e-7 * max), so P~ = I and DNS is exactly the one-sided G - GP (identical shares in the table). "
    "Every modality lives in the same rank-16 latent subspace, so a seen head's new inputs lie mostly in span(P) "
    "(rank 9-14 of 64 at lambda_min 0.01): it keeps 20-50 % of the gradient norm (text in step 6: 20 % on the reported seeds, 7 % on dev seed 10). "
    "With lambda' = 0.05 (P~ of rank 4-8) DNS keeps 62-84 % but still falls only ~5 % per step at lr 1e-4. "
    "There is no implementation error: the exactness test still holds to ~1e-15 and the shares match a "
    "brute-force computation (tests/methods/test_cmcl.py::test_kept_gradient_share_against_brute_force).",
    "",
    "**Fix and its price.** lr 3e-3 (top of the spec's sweep range, all arms alike) lifts DNS's smallest in-step "
    "drop from ~2 % to 19-36 %: it passed the 20 % bar on all three dev seeds (22.9 / 35.5 / 29.4 %) and, run "
    "once, on reported seeds 0 and 1 (30.2 / 25.7 %) but not seed 2 (19.4 %); the lowest drops are at t = 4 and "
    "6, where both heads are projected. DNS with lambda' = 0.05 (which keeps more of the gradient) falls >= 33 % "
    "in every step of every reported seed. The lr is not retuned on reported seeds. "
    "But on this generator every step shares one latent space, so a model that learns transfers forwards and "
    "backwards: at lr 3e-3 Vanilla no longer forgets (BWT about +20, R@1 about 80, far above the untrained heads), "
    "and DNS, which freezes the old directions, falls behind it on BWT and final R@1. The spec's caveat (Vanilla's "
    "forgetting is the objective drifting at small lr) is the other face of this. No lr in the scan passes the "
    "plasticity bar and the two DNS-vs-Vanilla bars together: the claims hold at the official lr 1e-4 except "
    "plasticity, and at lr 3e-3 plasticity holds on 5 of the 6 dev and reported seeds (seed 2: 19.4 %) and the DNS-vs-Vanilla claims fail. The main claims table above "
    "stays at the official recipe; the plasticity claim is reported under both.",
]


def _claims(results, names):
    claims = []
    m = {n: {k: _mean(_vals(results, n, k)) for k in KEYS} for n in names}
    dns_b, van_b = m["DNS"]["eval/bwt_r1"], m["Vanilla"]["eval/bwt_r1"]
    claims.append(("DNS mean BWT(R@1) >= -1.5 and >= Vanilla's + 2", f"DNS {dns_b:.2f}, Vanilla {van_b:.2f}",
                   dns_b >= -1.5 and dns_b >= van_b + 2))
    claims.append(("DNS final mean R@1 >= Vanilla's - 1", f"DNS {m['DNS']['eval/r1']:.2f}, Vanilla {m['Vanilla']['eval/r1']:.2f}",
                   m["DNS"]["eval/r1"] >= m["Vanilla"]["eval/r1"] - 1))
    drops = {n: [r["final"]["train/min_loss_drop"] for r in results if r["name"] == n] for n in names if n != "joint"}
    claims.append(("Plasticity: DNS training loss (whole step train set, fixed batches) falls >= 20 % within every "
                   "step, every seed", "min drop per seed: " + ", ".join(f"{100 * d:.1f} %" for d in drops["DNS"]),
                   min(drops["DNS"]) >= 0.20))
    one, d05 = m["one-sided"]["eval/bwt_r1"], m["DNS (lambda'=0.05)"]["eval/bwt_r1"]
    between = min(van_b, d05) - 0.5 <= one <= max(van_b, d05) + 0.5
    claims.append(("one-sided BWT between DNS (lambda'=0.05) and Vanilla, or equal to DNS (+-0.5)",
                   f"one-sided {one:.2f}, DNS(0.05) {d05:.2f}, DNS(0) {dns_b:.2f}, Vanilla {van_b:.2f}",
                   between or abs(one - d05) <= 0.5 or abs(one - dns_b) <= 0.5))
    claims.append(("Joint final mean R@1 >= Vanilla's - 1", f"joint {m['joint']['eval/r1']:.2f}, Vanilla "
                   f"{m['Vanilla']['eval/r1']:.2f}, untrained {_mean(_vals(results, 'DNS', 'untrained/r1')):.2f}",
                   m["joint"]["eval/r1"] >= m["Vanilla"]["eval/r1"] - 1))

    return m, claims


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = SEEDS[:1] if quick else SEEDS
    jobs = [{"name": n, "config": {**BASE, **kw, "seed": s}} for s in seeds for n, kw in RUNS.items()]
    jobs_pl = [{"name": n, "config": {**BASE, **RUNS[n], "lr": PLASTIC_LR, "seed": s}} for s in seeds
               for n in PLASTIC_RUNS]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        fut_exact = pool.submit(exactness_results)
        results_all = list(pool.map(run_one, jobs + jobs_pl))
        results, results_pl = results_all[:len(jobs)], results_all[len(jobs):]
        exact = fut_exact.result()
    wall = time.perf_counter() - t0
    names = list(RUNS)
    claims = []

    ok_exact = (exact["dns (bias frozen)"] <= 1e-4 and exact["dns (bias projected with I - P~)"] <= 1e-4
                and exact["vanilla (bias frozen)"] > 1e-2 and exact["max abs(DNS(G) - (I-P~)G(I-P))"] > 1e-6)
    claims.append(("Exactness: DNS max\\|ds\\| / max\\|s\\| <= 1e-4 on all old pairs (bias frozen / projected), Vanilla > 1e-2, "
                   "and G - P~GP != (I-P~)G(I-P)",
                   f"DNS {exact['dns (bias frozen)']:.1e} / {exact['dns (bias projected with I - P~)']:.1e}; "
                   f"Vanilla {exact['vanilla (bias frozen)']:.1e}", ok_exact))
    m, main_claims = _claims(results, names)
    claims += main_claims
    m_pl, pl_claims = _claims(results_pl, PLASTIC_RUNS)

    _plot(results, names, out / "cmcl.png")
    lines = ["# cmcl (DNS) reproduction", "",
             f"`methodlab reproduce cmcl`{' --quick' if quick else ''}: seeds {list(seeds)}, {len(jobs)} runs at the official recipe + {len(jobs_pl)} at lr {PLASTIC_LR:g} + the "
             f"exactness test in {wall:.0f} s on {workers} worker process(es), 1 torch thread each.", "",
             "Synthetic latent-binding sequence (spec methods/cmcl.md, Data (1)): 6 steps (vision,text) (audio,text) "
             "(depth,vision) (audio,vision) (thermal,vision) (depth,text), D = 64, 2,000 train / 500 test pairs per "
             "step; AdamW lr 1e-4, wd 1e-3 (weights), batch 64, 5 epochs per step, linear decay to 0 within a step; "
             "lambda_min 0.01. Recall over all 500 test pairs of each task (pool 500), both directions, index "
             "tie-break. BWT = mean over tasks i < T of R_{T,i} - R_{i,i}.", "",
             "## Claims", "", _table(["claim", "measured", "result"],
                                     [(c, v, "PASS" if ok else "FAIL") for c, v, ok in claims]), "",
             "## Exactness test (float64, SGD lr 0.1, no weight decay, 50 updates on a new pair sharing `vision`)", "",
             _table(["variant", "max\\|ds\\| / max\\|s\\| on old pairs"], [(k, f"{v:.2e}") for k, v in exact.items()]), "",
             "## Final metrics per method (mean over seeds; per-seed values below)", "",
             _table(["method", "R@1", "R@5", "R@10", "Acc", "BWT R@1", "BWT R@10", "BWT Acc"],
                    [(n, *(_fmt(m[n][k]) if not (n == "joint" and "bwt" in k) else "n/a" for k in KEYS)) for n in names]),
             "", f"Untrained heads (evaluation before step 1): R@1 {_mean(_vals(results, 'DNS', 'untrained/r1')):.2f}, "
             f"R@10 {_mean(_vals(results, 'DNS', 'untrained/r10')):.2f}, Acc {_mean(_vals(results, 'DNS', 'untrained/acc')):.2f}.",
             "", "### Per seed", "",
             _table(["method", "seed", "R@1", "R@10", "Acc", "BWT R@1", "BWT R@10", "min in-step loss drop",
                     "first -> last mini-batch loss (step 1)", "wall s"],
                    [(r["name"], r["seed"], _fmt(r["final"]["eval/r1"]), _fmt(r["final"]["eval/r10"]),
                      _fmt(r["final"].get("eval/acc")), _fmt(r["final"].get("eval/bwt_r1")),
                      _fmt(r["final"].get("eval/bwt_r10")),
                      f"{100 * r['final']['train/min_loss_drop']:.1f} %" if "train/min_loss_drop" in r["final"] else
                      f"{100 * r['final']['train/loss_drop']:.1f} % (whole run)",
                      (f"{r['history'][0]['train/batch_loss_first']:.2f} -> {r['history'][0]['train/batch_loss_last']:.2f}"
                       if "train/batch_loss_first" in r["history"][0] else "n/a"), f"{r['wall_s']:.0f}")
                     for r in sorted(results, key=lambda r: (names.index(r["name"]), r["seed"]))]),
             "", "### In-step training-loss drop per step (whole train set, fixed batches; seed mean, %)", "",
             _table(["method", *[f"t={t}" for t in range(1, 7)]], _drop_rows(results, names)),
             "", "## Plasticity: cause and the lr experiment (issue #22, item 5)", "",
             "Share of the raw weight-gradient norm each projection keeps, ||projected G||_F / ||G||_F, mean over the "
             "step's 160 updates and the seeds (official recipe, lr 1e-4; logged by the method as `grad/kept_<head>`; "
             "on the same gradient also the dual-sided and the one-sided share). Only a head whose modality was seen "
             "before is projected; t = 1 has no projection.", "",
             _table(["method", "projection", *[f"t={t}" for t in range(2, 7)]], _share_rows(results, names)), "",
             f"Same arms, only lr changed to {PLASTIC_LR:g} (jobs/cmcl/plasticity.yaml; chosen on development seeds "
             "10, 11, 12, see the scan below), reported seeds run once:", "",
             _table(["claim", "measured", "result"], [(c, v, "PASS" if ok else "FAIL") for c, v, ok in pl_claims]), "",
             _table(["method", "R@1", "R@5", "R@10", "Acc", "BWT R@1", "BWT R@10", "BWT Acc"],
                    [(n, *(_fmt(m_pl[n][k]) if not (n == "joint" and "bwt" in k) else "n/a" for k in KEYS))
                     for n in PLASTIC_RUNS]), "",
             "In-step loss drop per step at this lr (whole train set, fixed batches; seed mean, %):", "",
             _table(["method", *[f"t={t}" for t in range(1, 7)]], _drop_rows(results_pl, PLASTIC_RUNS)), "",
             "Kept gradient share at this lr:", "",
             _table(["method", "projection", *[f"t={t}" for t in range(2, 7)]], _share_rows(results_pl, PLASTIC_RUNS)), "",
             "Per seed at this lr: " + "; ".join(
                 f"{n} " + ", ".join(f"s{r['seed']} R@1 {_fmt(r['final']['eval/r1'])} BWT {_fmt(r['final'].get('eval/bwt_r1'))}"
                                     + (f" drop {100 * r['final']['train/min_loss_drop']:.1f} %" if 'train/min_loss_drop' in r['final'] else "")
                                     for r in sorted(results_pl, key=lambda r: r["seed"]) if r["name"] == n)
                 for n in PLASTIC_RUNS) + ".", "",
             *PLASTICITY_NOTES,
             "", "## Notes", "",
             "- **Caveat (spec)**: Vanilla's \"forgetting\" on this generator is largely the contrastive objective "
             "drifting away from retrieval (training lowers test R@1 below the untrained heads' for every method that "
             "moves freely, joint included), so DNS wins partly by near-freezing what it has seen; its positive BWT is "
             "this effect, not a stronger model.",
             "- **Plasticity measure**: the loss drop is measured on the step's whole training set in fixed contiguous "
             "batches of 64, before and after the step (same data, same negatives). With the official recipe "
             "(lr 1e-4, 160 updates per step) it falls only a few percent for every method, so the 20 % bar fails. "
             "The spec's prototype figure (3.45 -> 2.02, ~40 %) matches the first vs the last mini-batch of a step "
             "(column above): 2,000 pairs leave a last batch of 16 pairs, whose CE over 16 candidates is lower "
             "(log 16 vs log 64) whatever the model does; the frozen-head control (lr 1e-12) shows the same "
             "first -> last fall, so that measure cannot tell a frozen model from a learning one.",
             "- one-sided uses G - G P (input side only); with lambda' = 0 the partner projector of DNS has full rank "
             "(every positive eigenvalue of the partner second moment counts), P~ = I and DNS equals one-sided.",
             "- Joint: batches drawn per pair in proportion to its size, same total number of updates (960) and one "
             "linear decay; evaluated once at the end (BWT n/a).",
             "- Acc (zero-shot against the class-text anchors through the text head) is 100 % for every method on "
             "this generator: the class means are far apart, so it does not separate methods here.",
             "- EWC: diagonal Fisher (mean squared mini-batch gradient) on head weights and biases, lambda = 1e4. The "
             "spec gives no value; one probe on seed 0 (lambda 1e2: identical to Vanilla; 1e6: heads frozen, no loss "
             "drop) set it between the two.",
             ]
    path = out / "cmcl.md"
    path.write_text("\n".join(lines) + "\n")
    return str(path)
