"""`methodlab reproduce unirl`: Claims A-C of the spec on Pendulum-v1, 3 seeds, reduced to ~10 minutes
on a shared 2-core CPU (scale below; the report states it).

A  offline: Uni-RL SQL (alpha 1) on the stored medium-replay set vs BC; per-seed score = mean normalised
   score of the last 3 evaluations; PASS if mean SQL >= 75 and >= mean BC + 40.
B  online: Uni-RL (periodic pi_ref); PASS if every seed's final deterministic return (10 episodes) >= -300.
C  the reference policy is used: Uni-RL vs the same run with ref_mode=buffer (nothing else changed);
   PASS if mean normalised return >= ablation - 10 AND mean actor log-std <= ablation - 0.75.
Context (not claims): IVR's original extractor offline, SAC online, the alpha curve (1 seed each).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 2)
# Spec scale: A 20k gradient steps (eval / 5k), B and C 15k env steps, 256x256 networks. Measured on this
# shared machine: ~25 steps/s at 256x256 and ~100 at 64x64 with 1 thread, so the default is reduced.
SCALE = {
    "full": {"offline_hidden": [128, 128], "online_hidden": [64, 64], "offline_steps": 8000, "offline_eval": 2000,
             "online_steps": 10000, "online_eval": 1000, "start_steps": 1000, "context": True},
    "quick": {"offline_hidden": [64, 64], "online_hidden": [64, 64], "offline_steps": 3000, "offline_eval": 1000,
              "online_steps": 3000, "online_eval": 1000, "start_steps": 500, "context": False},
}


def _jobs(sc: dict) -> list[tuple[str, int, dict]]:
    common = {"eval_episodes": 10, "torch_threads": 1}
    off = {**common, "hidden": sc["offline_hidden"], "regime": "offline", "dataset": "pendulum-v1-medium-replay", "max_steps": sc["offline_steps"],
           "eval_every": sc["offline_eval"], "checkpoint_every": sc["offline_steps"]}
    on = {**common, "hidden": sc["online_hidden"], "regime": "online", "online_steps": sc["online_steps"], "start_steps": sc["start_steps"],
          "eval_every": sc["online_eval"], "checkpoint_every": sc["online_steps"], "alg": "SQL", "alpha": 1.0}
    jobs = []
    for s in SEEDS:  # longest first, so two workers finish together
        jobs.append(("unirl_online", s, {**on, "seed": s}))
        jobs.append(("ablation_buffer", s, {**on, "seed": s, "ref_mode": "buffer"}))
        jobs.append(("sql_offline", s, {**off, "seed": s, "alg": "SQL", "alpha": 1.0}))
    if sc["context"]:
        jobs.append(("sac_online", 0, {**on, "seed": 0, "learner": "sac"}))
        jobs.append(("ivr_awr_offline", 0, {**off, "seed": 0, "extractor": "ivr_awr", "normalize_weights": False}))
    jobs += [("bc_offline", s, {**off, "seed": s, "learner": "bc"}) for s in SEEDS]
    return jobs


def _run(job: tuple[str, int, dict]) -> dict:
    import torch

    torch.set_num_threads(1)
    from methodlab.core import RunContext
    from methodlab.methods.unirl.config import Config
    from methodlab.methods.unirl.train import fit

    name, seed, over = job
    ctx = RunContext(quiet=True)
    t0 = time.time()
    fit(Config.model_validate(over), ctx)
    return {"name": name, "seed": seed, "history": ctx.history, "wall": time.time() - t0}


def _last3(h: list[dict]) -> float:
    return float(np.mean([r["eval/normalized_score"] for r in h[-3:]]))


def _fmt(xs) -> str:
    return " / ".join(f"{x:.1f}" for x in xs)


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> str:
    sc = SCALE["quick" if quick else "full"]
    t0 = time.time()
    jobs = _jobs(sc)
    # ProcessPoolExecutor: a worker killed from outside fails the run instead of hanging it (multiprocessing.Pool hangs)
    results = []
    with ProcessPoolExecutor(max(1, workers), mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_run, j) for j in jobs]
        for fut in as_completed(futures):
            r = fut.result()
            results.append(r)
            print(f"[unirl reproduce] {len(results)}/{len(jobs)} {r['name']} seed {r['seed']}: "
                  f"score {r['history'][-1]['eval/normalized_score']:.1f} in {r['wall']:.0f}s "
                  f"({(time.time() - t0) / 60:.1f} min)", flush=True)
    order = {(n, s): i for i, (n, s, _) in enumerate(jobs)}
    results.sort(key=lambda r: order[(r["name"], r["seed"])])
    wall = time.time() - t0
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["name"], []).append(r)
    for v in by.values():
        v.sort(key=lambda r: r["seed"])

    # --- claims -------------------------------------------------------------------------------------
    sql = [_last3(r["history"]) for r in by["sql_offline"]]
    bc = [_last3(r["history"]) for r in by["bc_offline"]]
    a_pass = np.mean(sql) >= 75 and np.mean(sql) >= np.mean(bc) + 40
    b_ret = [r["history"][-1]["eval/return"] for r in by["unirl_online"]]
    b_pass = all(x >= -300 for x in b_ret)
    u_sc = [r["history"][-1]["eval/normalized_score"] for r in by["unirl_online"]]
    ab_sc = [r["history"][-1]["eval/normalized_score"] for r in by["ablation_buffer"]]
    ab_ret = [r["history"][-1]["eval/return"] for r in by["ablation_buffer"]]
    u_ls = [r["history"][-1]["actor/log_std_mean"] for r in by["unirl_online"]]
    ab_ls = [r["history"][-1]["actor/log_std_mean"] for r in by["ablation_buffer"]]
    c1, c2 = np.mean(u_sc) >= np.mean(ab_sc) - 10, np.mean(u_ls) <= np.mean(ab_ls) - 0.75
    c_pass = c1 and c2

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "unirl.png"
    _plot(by, png)
    P = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    lines = [
        "# Uni-RL reproduction (Pendulum-v1, reduced scale)", "",
        f"Written by `methodlab reproduce unirl`{' --quick' if quick else ''} in {wall / 60:.1f} min with {workers} "
        "worker processes (1 torch thread each) on a shared 2-core CPU.", "",
        "**Scale (reduced, stated honestly).** The spec's acceptance runs use 256x256 networks, 20k offline gradient "
        "steps (evaluation every 5k) and 15k online env steps. On this shared machine a 256x256 learner runs at about "
        f"25 gradient steps/s, so this run uses {sc['offline_hidden'][0]}-wide 2-layer networks offline and "
        f"{sc['online_hidden'][0]}-wide ones online (every network of a run), {sc['offline_steps']} offline gradient steps (evaluation every {sc['offline_eval']}) and {sc['online_steps']} "
        f"online env steps (evaluation every {sc['online_eval']}, start_steps {sc['start_steps']}). Everything else is "
        "the spec's default: SQL, alpha 1, lr 3e-4, batch 256, gamma 0.99, tau 0.005, closed-form self-normalised "
        "weights, pi_ref refreshed every 1,000 gradient steps, 10 deterministic evaluation episodes. The offline data "
        "is the stored, checksummed `pendulum-v1-medium-replay` set (50,000 transitions, mean episode return -1277). "
        "Normalised score: 100 (R - R_random) / (R_expert - R_random), R_random = -1197.18 (measured), R_expert = -150.", "",
        "## Claims", "",
        "| claim | measure | Uni-RL per seed | mean | baseline / ablation per seed | mean | verdict |",
        "|---|---|---|---|---|---|---|",
        f"| A offline | norm. score, mean of last 3 evals | {_fmt(sql)} | {np.mean(sql):.1f} | BC {_fmt(bc)} | "
        f"{np.mean(bc):.1f} | {P(a_pass)} (>= 75 and >= BC + 40) |",
        f"| B online | final return (10 episodes) | {_fmt(b_ret)} | {np.mean(b_ret):.1f} | - | - | {P(b_pass)} (every seed >= -300) |",
        f"| C (i) | final norm. score | {_fmt(u_sc)} | {np.mean(u_sc):.1f} | ref_mode=buffer {_fmt(ab_sc)} | "
        f"{np.mean(ab_sc):.1f} | {P(c1)} (>= ablation - 10) |",
        f"| C (ii) | actor log-std (mean over dims) | {_fmt(u_ls)} | {np.mean(u_ls):.2f} | ref_mode=buffer {_fmt(ab_ls)} | "
        f"{np.mean(ab_ls):.2f} | {P(c2)} (<= ablation - 0.75) |",
        "", f"Claim C ablation's own final returns: {_fmt(ab_ret)} (mean {np.mean(ab_ret):.1f}).", "",
    ]
    if sc["context"]:
        lines += ["## Context runs (1 seed, not claims)", "", "| run | final norm. score | mean of last 3 | final return |",
                  "|---|---|---|---|"]
        for name in ("ivr_awr_offline", "sac_online"):
            for r in by.get(name, []):
                h = r["history"]
                lines.append(f"| {name} | {h[-1]['eval/normalized_score']:.1f} | {_last3(h):.1f} | {h[-1]['eval/return']:.1f} |")
        lines.append("")
    lines += ["## Learning curves", "", f"![curves]({png.name})", "",
              "## Per-run wall time (s)", "", "| run | seed | wall |", "|---|---|---|"]
    lines += [f"| {r['name']} | {r['seed']} | {r['wall']:.0f} |" for r in results]
    lines += ["", "## Notes", "",
              "- Uni-RL's own tables were not readable (spec: [RECON] items): the extraction weights, the reference "
              "policy refresh and the online schedule are the platform's reconstruction behind config flags.",
              "- On Pendulum the over-constrained reference (ref_mode=buffer) is expected to reach about the same return "
              "(1-D actions, the buffer covers them); Claim C's discriminating check is the log-std: with pi_ref the "
              "policy narrows as it improves, with the buffer as reference it stays as wide as the buffer's actions.",
              "- Claim A at this scale: the spec's bar (>= 75) was measured with 256x256 networks after 10-20k steps; "
              "with 128-wide networks and 8k steps SQL reaches about 45 (BC about 0, so the '>= BC + 40' part holds). "
              "A 64-wide offline learner stayed near 0 in a calibration run, a 128-wide one peaked at 64 by 7.5k steps: "
              "network width, not the method's maths, is what this reduced scale cuts. Full scale: "
              "`methodlab run jobs/unirl/offline.yaml` (256x256, 20k steps).",
              "- The performance gap of the paper belongs to a harder task (HalfCheetah-v5 / Hopper-v5 online, 1e5+ "
              "steps): `methodlab run jobs/unirl/online.yaml env=Hopper-v5 online_steps=100000` (hours on CPU), not run here."]
    path = out / "unirl.md"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _plot(by: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    panels = [(axes[0], ["sql_offline", "bc_offline", "ivr_awr_offline", "sql_alpha0.1", "sql_alpha3"],
               "eval/normalized_score", "A: offline (gradient steps)"),
              (axes[1], ["unirl_online", "ablation_buffer", "sac_online"], "eval/normalized_score", "B/C: online (env steps)"),
              (axes[2], ["unirl_online", "ablation_buffer"], "actor/log_std_mean", "C: actor log-std (online)")]
    colors = {"sql_offline": "C0", "bc_offline": "C1", "ivr_awr_offline": "C2", "sql_alpha0.1": "C4", "sql_alpha3": "C5",
              "unirl_online": "C0", "ablation_buffer": "C3", "sac_online": "C2"}
    for ax, names, key, title in panels:
        for name in names:
            runs = by.get(name, [])
            for i, r in enumerate(runs):
                xs = [h["step"] for h in r["history"]]
                ys = [h.get(key, np.nan) for h in r["history"]]
                ax.plot(xs, ys, color=colors[name], alpha=0.35 if len(runs) > 1 else 0.9, lw=1)
            if len(runs) > 1:
                xs = [h["step"] for h in runs[0]["history"]]
                ys = np.mean([[h.get(key, np.nan) for h in r["history"]] for r in runs], 0)
                ax.plot(xs, ys, color=colors[name], lw=2.5, label=f"{name} (mean of {len(runs)})")
            elif runs:
                ax.lines[-1].set_label(name)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
