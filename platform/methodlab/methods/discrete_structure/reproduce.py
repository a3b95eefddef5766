"""`methodlab reproduce discrete_structure`: the spec's acceptance experiment, every run through the method's own
`fit` (the settings of jobs/discrete_structure/{benchmark,xor_triple,asia}.yaml).

Claim A: random ER DAGs, d = 8, >= 3 multi-parent nodes, random_cpt and logistic mechanisms, n = 5,000,
general model (K = 3) vs logistic K = 1 (same DAGMA path), PC and GES beside; CPDAG SHD.
Claim B: XOR triple, K = 2 vs K = 1: held-out NLL (nats / row) and edge count.
Report only: pgmpy asia, n = 10,000, seed 0. Seeds 0, 1, 2 (the reported run); `seeds=(10, 11, 12)` is the
development run whose figures calibrate nothing silently: they are written to reports/discrete_structure_dev.json
and shown in the report."""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

SLUG = "discrete_structure"
JOBS = {"benchmark": "jobs/discrete_structure/benchmark.yaml", "xor": "jobs/discrete_structure/xor_triple.yaml",
        "asia": "jobs/discrete_structure/asia.yaml"}
MODELS = ("mvb", "logistic", "pc", "ges")
LABEL = {"mvb": "general MVB (K=3)", "logistic": "logistic (K=1)", "pc": "PC (chi-square)", "ges": "GES (BDeu)"}
BENCH_ONLY = ("bench_mechanisms", "bench_d", "bench_n", "bench_seeds", "bench_models")
KEYS = ("eval/shd_cpdag", "eval/skeleton_precision", "eval/skeleton_recall", "eval/heldout_nll", "eval/n_edges",
        "eval/n_undirected", "eval/true_model_nll", "eval/fit_seconds", "eval/true_edges", "eval/F_learned", "eval/F_truth")


def job_config(name: str) -> dict:
    from methodlab.specs.files import load_job

    cfg = load_job(JOBS[name]).config.model_dump(mode="json", exclude_defaults=True)
    return {k: v for k, v in cfg.items() if k not in BENCH_ONLY}


def _overrides(model: str, K: int | None) -> dict:
    return {"mvb": {"model": "mvb", "K": K}, "logistic": {"model": "mvb", "K": 1},
            "pc": {"model": "pc"}, "ges": {"model": "ges"}}[model]


def run_one(job: dict) -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.discrete_structure.config import Config
    from methodlab.methods.discrete_structure.train import fit

    cfg = Config(**{**job["config"], "torch_threads": 1})  # the recipe: parallel processes, one torch thread each
    t0 = time.perf_counter()
    out = fit(cfg, RunContext(quiet=True))
    return {**{k: job[k] for k in ("claim", "mechanism", "model", "seed")}, "wall_s": time.perf_counter() - t0,
            **{k: float(out[k]) for k in KEYS if k in out}}


def build_jobs(seeds, quick: bool = False) -> list[dict]:
    jobs = []
    bench = job_config("benchmark")
    for mech in ("random_cpt", "logistic"):
        for s in seeds:
            for m in MODELS:
                c = {**bench, "d": 8, "n": 5000, "mechanism": mech, "seed": s, **_overrides(m, bench.get("K", 3))}
                jobs.append({"claim": "A", "mechanism": mech, "model": m, "seed": s, "config": c})
    xor = job_config("xor")
    for s in seeds:
        for K in (2, 1):
            jobs.append({"claim": "B", "mechanism": "xor_triple", "model": f"K={K}", "seed": s,
                         "config": {**xor, "seed": s, "K": K}})
    if not quick:
        asia = job_config("asia")
        for m in MODELS:
            jobs.append({"claim": "asia", "mechanism": "asia", "model": m, "seed": 0,
                         "config": {**asia, "seed": 0, **_overrides(m, asia.get("K", 3))}})
    return jobs


def _sel(rows, claim, mech, model):
    return sorted((r for r in rows if r["claim"] == claim and r["mechanism"] == mech and r["model"] == model),
                  key=lambda r: r["seed"])


def _mean(v):
    v = [x for x in v if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else float("nan")


def _table(header, rows):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def _f(v, nd=2):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def claims(rows) -> dict:
    out = {}
    shd = {(mech, m): _mean([r["eval/shd_cpdag"] for r in _sel(rows, "A", mech, m)])
           for mech in ("random_cpt", "logistic") for m in MODELS}
    out["A1"] = {"desc": "random_cpt: general model mean CPDAG SHD <= 3", "bar": "<= 3",
                 "value": shd[("random_cpt", "mvb")], "pass": shd[("random_cpt", "mvb")] <= 3}
    gap = shd[("random_cpt", "logistic")] - shd[("random_cpt", "mvb")]
    out["A2"] = {"desc": "random_cpt: mean SHD(K=1) - mean SHD(K=3) >= 2", "bar": ">= 2", "value": gap, "pass": gap >= 2}
    diff = shd[("logistic", "mvb")] - shd[("logistic", "logistic")]
    out["A3"] = {"desc": "logistic data: mean SHD(K=3) <= mean SHD(K=1) + 1", "bar": "<= +1", "value": diff,
                 "pass": diff <= 1}
    b2 = _sel(rows, "B", "xor_triple", "K=2")
    b1 = _sel(rows, "B", "xor_triple", "K=1")
    ok2 = [r["eval/n_edges"] == 2 and r["eval/n_undirected"] == 0 and r["eval/heldout_nll"] <= 1.73 for r in b2]
    out["B1"] = {"desc": "XOR: K=2 returns a 2-edge v-structure and held-out NLL <= 1.73 nats, every seed",
                 "bar": "2 edges, v-structure, <= 1.73", "value": max([r["eval/heldout_nll"] for r in b2], default=float("nan")),
                 "pass": bool(b2) and all(ok2)}
    out["B2"] = {"desc": "XOR: K=1 held-out NLL >= 2.0 nats, every seed", "bar": ">= 2.0",
                 "value": min([r["eval/heldout_nll"] for r in b1], default=float("nan")),
                 "pass": bool(b1) and all(r["eval/heldout_nll"] >= 2.0 for r in b1)}
    return out


def _s_text() -> str:
    try:
        return " / ".join(f"{v:g}" for v in job_config("benchmark").get("s_schedule", [1.0]))
    except Exception:  # pragma: no cover - the report must still render
        return "n/a"


def _diagnostics_lines(out_dir: Path) -> list[str]:
    """Bounding experiments of Claim A (diagnostics.py), rendered from reports/discrete_structure_diagnostics.json."""
    f = out_dir / f"{SLUG}_diagnostics.json"
    if not f.exists():
        return []
    dg = json.loads(f.read_text())
    rows = dg["rows"]
    seeds = ", ".join(str(r["seed"]) for r in rows)
    lines = [f"### Bounding experiments — random_cpt, K = 3, this preset (seeds {seeds}; "
             f"`python -m methodlab.methods.discrete_structure.diagnostics {','.join(str(r['seed']) for r in rows)}`, "
             f"{dg['wall_s'] / 60:.1f} min)", "",
             "Same data, objective and preset as the K = 3 rows above. *path*: the preset fit; *known order*: node j may "
             "only use its predecessors in the true topological order (order search removed; what is left is estimation); "
             "*oracle warm start*: the last path stage (mu = 0.001) started from the true DAG's refit coefficients; "
             "*oracle init s0 / s1*: the path started at stage 0 / 1 from main effects drawn along the true order. "
             "F = refit BCE + lambda * sum quasi-MCP(W) at the thresholded DAG (lower is better); F(true) is the true DAG's. "
             "Near-constant: nodes with marginal P(x = 1) < 0.02 or > 0.98 (their edges are barely identifiable at n = 5,000).", "",
             _table(["seed", "true edges", "near-constant", "path SHD (edges)", "path F", "F(true)",
                     "path SHD at omega 0.1 / 0.2 / 0.3 / 0.5", "known order SHD (edges)", "oracle warm start SHD at start -> end (edges)",
                     "oracle warm F", "oracle init s0 / s1 SHD", "s: path / known / warm"],
                    [[r["seed"], r["true_edges"], ",".join(map(str, r["near_constant_nodes"])) or "-",
                      f"{r['path']['shd']} ({r['path']['edges']})", _f(r["path"]["F"], 4), _f(r["F_truth"], 4),
                      " / ".join(str(r["path_omega"][k]) for k in ("0.1", "0.2", "0.3", "0.5")),
                      f"{r['known_order']['shd']} ({r['known_order']['edges']})",
                      f"{r['oracle_warm']['shd_at_start']} -> {r['oracle_warm']['shd']} ({r['oracle_warm']['edges']})",
                      _f(r["oracle_warm"]["F"], 4),
                      f"{r['oracle_init_stage0']['shd']} / {r['oracle_init_stage1']['shd']}",
                      f"{r['path']['s']:.0f} / {r['known_order']['s']:.0f} / {r['oracle_warm']['s']:.0f}"] for r in rows]
                    + [["mean", "", "", _f(_mean([r["path"]["shd"] for r in rows])), "", "", "",
                        _f(_mean([r["known_order"]["shd"] for r in rows])), _f(_mean([r["oracle_warm"]["shd"] for r in rows])),
                        "", "", ""]]), ""]
    n = len(rows)
    better = sum(r["oracle_warm"]["F"] < r["path"]["F"] for r in rows)
    same = sum(r["oracle_init_stage0"]["shd"] == r["path"]["shd"] and r["oracle_init_stage1"]["shd"] == r["path"]["shd"]
               for r in rows)
    lines += [f"Reading: started at the truth, the last stage stays near it (mean SHD "
              f"{_mean([r['oracle_warm']['shd'] for r in rows]):.2f}) at a lower F than the path's endpoint on {better} of {n} "
              f"seeds (mean F {_mean([r['oracle_warm']['F'] for r in rows]):.4f} vs {_mean([r['path']['F'] for r in rows]):.4f}): "
              "the true graph's basin is a stable, better point of the same objective that the path does not reach. "
              f"Started from main effects along the true order, the path ends at the zero start's SHD on {same} of {n} seeds: "
              "it forgets its initialisation in the early (loss-dominated) stages, so random-order multi-starts (the `restarts` "
              "option) cannot diversify it. No threshold omega rescues the path's W (best over omega per seed: "
              + " / ".join(str(min(r["path_omega"].values())) for r in rows) + "). With the true order given but the path "
              f"run from zero, the SHD is {_mean([r['known_order']['shd'] for r in rows]):.2f} (edges "
              + " / ".join(str(r["known_order"]["edges"]) for r in rows) + f" vs true "
              + " / ".join(str(r["true_edges"]) for r in rows) + ") at a higher F than the oracle warm start on "
              f"{sum(r['known_order']['F'] > r['oracle_warm']['F'] for r in rows)} of {n} seeds: the path's early loss-dominated "
              "stages also keep edges it cannot shed later, so both its order search and its edge selection fall short of "
              "the objective's own optimum.", ""]
    return lines


def write_report(rows, out_dir: Path, wall: float, seeds, dev_rows=None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    cl = claims(rows)
    lines = [f"# discrete_structure — reproduction", "",
             "Differentiable structure learning for general binary data (Deng & Aragam, NeurIPS 2025, arXiv 2509.21658). "
             "Written by `methodlab reproduce discrete_structure`; the claims and per-seed tables were measured in this run "
             f"(seeds {', '.join(map(str, seeds))}; wall time {wall / 60:.1f} min on the shared 2-core CPU machine, 2 worker "
             "processes); the development sections at the end were measured before it, on seeds 10, 11, 12. "
             "Preset: jobs/discrete_structure/benchmark.yaml, xor_triple.yaml, asia.yaml (K = 3 / 2, lambda 0.02, delta 0.5, "
             f"omega 0.3, DAGMA path mu 1 -> 0.001 with s {_s_text()} per stage, Adam lr 1e-2 with 1,500 / 3,000 steps "
             "per stage, W / sqrt(group size)). "
             "Paper figures: n/a (not recovered) — the paper's results are plotted and were not retrievable.", "",
             "## Claims", "",
             _table(["claim", "spec bar", "measured", "paper", "result"],
                    [[c["desc"], c["bar"], _f(c["value"]), "n/a (not recovered)", "PASS" if c["pass"] else "FAIL"]
                     for c in cl.values()]), ""]
    for mech in ("random_cpt", "logistic"):
        lines += [f"## Claim A — `{mech}` mechanism, d = 8, n = 5,000 (CPDAG SHD per seed)", ""]
        body = []
        for m in MODELS:
            rs = _sel(rows, "A", mech, m)
            body.append([LABEL[m]] + [f"{r['eval/shd_cpdag']:.0f}" for r in rs]
                        + [_f(_mean([r["eval/shd_cpdag"] for r in rs])),
                           _f(_mean([r["eval/skeleton_precision"] for r in rs])),
                           _f(_mean([r["eval/skeleton_recall"] for r in rs])),
                           _f(_mean([r.get("eval/heldout_nll") for r in rs]), 4),
                           _f(_mean([r["wall_s"] for r in rs]), 0), "n/a (not recovered)"])
        truth = _sel(rows, "A", mech, "mvb")
        lines += [_table(["method"] + [f"seed {s}" for s in seeds]
                         + ["mean SHD", "skel. precision", "skel. recall", "held-out NLL", "s / fit", "paper"], body), "",
                  "True edges per seed: " + ", ".join(f"{r.get('eval/true_edges', float('nan')):.0f}" for r in truth)
                  + "; true-model held-out NLL: " + ", ".join(_f(r.get("eval/true_model_nll"), 4) for r in truth), ""]
    fr = [r for r in _sel(rows, "A", "random_cpt", "mvb") + _sel(rows, "A", "logistic", "mvb") if "eval/F_truth" in r]
    if fr:
        lines += ["### Why the general model misses: penalised objective at the learned vs the true DAG", "",
                  "F = training BCE of the order-<=K refit on the DAG + lambda * sum quasi-MCP(W). F(true) < F(learned) means "
                  "the DAGMA path stopped in a worse local minimum (a wrong topological order, or edges dropped / kept "
                  "on the way): an optimisation failure, not an objective that prefers the wrong graph.", "",
                  _table(["mechanism", "seed", "F(learned)", "F(true DAG)", "learned edges", "true edges"],
                         [[r["mechanism"], r["seed"], _f(r["eval/F_learned"], 4), _f(r["eval/F_truth"], 4),
                           f"{r['eval/n_edges']:.0f}", f"{r.get('eval/true_edges', float('nan')):.0f}"] for r in fr]), ""]
    lines += _diagnostics_lines(out_dir)
    lines += ["## Claim B — XOR triple (n = 5,000 train, 5,000 held out)", "",
              "Exact references: true model 2 ln 2 + H(0.1) = 1.711 nats / row; independence model 3 ln 2 = 2.079.", ""]
    body = []
    for K in ("K=2", "K=1"):
        for r in _sel(rows, "B", "xor_triple", K):
            vs = r["eval/n_edges"] == 2 and r["eval/n_undirected"] == 0
            body.append([f"MVB {K}", r["seed"], f"{r['eval/heldout_nll']:.4f}", f"{r['eval/n_edges']:.0f}",
                         "yes" if vs else "no", _f(r.get("eval/true_model_nll"), 4), f"{r['wall_s']:.0f}"])
    lines += [_table(["model", "seed", "held-out NLL", "edges", "v-structure", "true-model NLL (sample)", "s / fit"], body), ""]
    asia = [r for r in rows if r["claim"] == "asia"]
    if asia:
        lines += ["## Report only — pgmpy asia (n = 10,000, seed 0; not gated: the deterministic `either` node "
                  "violates faithfulness)", "",
                  _table(["method", "CPDAG SHD", "skel. precision", "skel. recall", "held-out NLL", "edges", "s / fit"],
                         [[LABEL[r["model"]], f"{r['eval/shd_cpdag']:.0f}", _f(r["eval/skeleton_precision"]),
                           _f(r["eval/skeleton_recall"]), _f(r.get("eval/heldout_nll"), 4), f"{r['eval/n_edges']:.0f}",
                           f"{r['wall_s']:.0f}"] for r in sorted(asia, key=lambda r: MODELS.index(r["model"]))]), ""]
    if dev_rows:
        dc = claims(dev_rows)
        lines += ["## Development seeds 10, 11, 12 (measured before the reported seeds; thresholds uncalibrated)", "",
                  "Full grid with the spec's default unscaled group norm (`w_scale: none`); the reported run above uses "
                  "`w_scale: sqrt_group`, chosen from the single dev fits listed below.", "",
                  _table(["claim", "spec bar", "measured on dev seeds (w_scale none)", "result"],
                         [[c["desc"], c["bar"], _f(c["value"]), "PASS" if c["pass"] else "FAIL"] for c in dc.values()]), ""]
    cal = out_dir / f"{SLUG}_calibration.json"
    if cal.exists():
        c = json.loads(cal.read_text())
        keys = sorted({k for r in c["runs"] for k in r if k not in ("mechanism", "seed", "shd")})
        lines += ["### Dev-seed fits run while choosing the preset", "", c["note"], "",
                  _table(["mechanism", "seed"] + keys + ["CPDAG SHD"],
                         [[r["mechanism"], r["seed"]] + [r.get(k, "") for k in keys] + [r["shd"]] for r in c["runs"]]), ""]
        if c.get("diagnostic"):
            dg = c["diagnostic"]
            lines += ["### Diagnostic: the same fit with the true topological order given (dev seeds, random_cpt)", "",
                      c["diagnostic_note"], "",
                      _table(["seed", "CPDAG SHD (true order given)", "edges", "true edges", "s / fit"],
                             [[r["seed"], r["known_order_shd"], r["edges"], r["true_edges"], r["s"]] for r in dg]
                             + [["mean", _f(_mean([r["known_order_shd"] for r in dg])), "", "", ""]]), ""]
    lines += ["## Plot", "", f"![SHD and XOR likelihood]({SLUG}.png)", ""]
    path = out_dir / f"{SLUG}.md"
    path.write_text("\n".join(lines))
    _plot(rows, out_dir / f"{SLUG}.png")
    return path


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    mechs = ("random_cpt", "logistic")
    width = 0.2
    for i, m in enumerate(MODELS):
        means = [_mean([r["eval/shd_cpdag"] for r in _sel(rows, "A", mech, m)]) for mech in mechs]
        ax[0].bar(np.arange(len(mechs)) + (i - 1.5) * width, means, width, label=LABEL[m])
    ax[0].axhline(3, color="k", ls=":", lw=1, label="Claim A bar (3)")
    ax[0].set_xticks(range(len(mechs)), mechs)
    ax[0].set_ylabel("mean CPDAG SHD (d = 8)")
    ax[0].legend(fontsize=7)
    for K, c in (("K=2", "C0"), ("K=1", "C1")):
        rs = _sel(rows, "B", "xor_triple", K)
        ax[1].scatter([r["seed"] for r in rs], [r["eval/heldout_nll"] for r in rs], color=c, label=f"MVB {K}")
    ax[1].axhline(2 * math.log(2) + 0.325083, color="C0", ls=":", lw=1, label="true model 1.711")
    ax[1].axhline(3 * math.log(2), color="C1", ls=":", lw=1, label="independence 2.079")
    ax[1].set_xlabel("seed")
    ax[1].set_ylabel("held-out NLL (nats / row)")
    ax[1].set_title("XOR triple")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_jobs(jobs, workers: int) -> list[dict]:
    rows = []
    if workers <= 1:
        for j in jobs:
            rows.append(run_one(j))
        return rows
    # longest first: the general-model fits, then the rest
    order = sorted(jobs, key=lambda j: (j["model"] not in ("mvb", "K=2"), j["claim"]))
    from methodlab.core.device import set_threads

    # the recipe: parallel processes, one thread each (torch and BLAS), set once per worker process
    with ProcessPoolExecutor(max_workers=workers, initializer=set_threads, initargs=(1,)) as pool:
        futs = [pool.submit(run_one, j) for j in order]
        for f in as_completed(futs):
            r = f.result()
            rows.append(r)
            print(f"  {r['claim']} {r['mechanism']} {r['model']} seed {r['seed']}: "
                  f"SHD {r.get('eval/shd_cpdag', float('nan')):.0f} NLL {r.get('eval/heldout_nll', float('nan')):.4f} "
                  f"({r['wall_s']:.0f} s)", flush=True)
    return rows


def rerender(out_dir: str = "reports") -> Path:
    """Write the report again from reports/discrete_structure.json (no fitting)."""
    out = Path(out_dir)
    res = json.loads((out / f"{SLUG}.json").read_text())
    dev_file = out / f"{SLUG}_dev.json"
    dev_rows = json.loads(dev_file.read_text())["rows"] if dev_file.exists() else None
    return write_report(res["rows"], out, res["wall_s"], tuple(res["seeds"]), dev_rows)


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False, seeds=(0, 1, 2)) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = tuple(seeds)
    t0 = time.perf_counter()
    rows = run_jobs(build_jobs(seeds, quick), workers)
    wall = time.perf_counter() - t0
    dev = seeds == (10, 11, 12)
    (out / f"{SLUG}{'_dev' if dev else ''}.json").write_text(json.dumps({"seeds": seeds, "wall_s": wall, "rows": rows}, indent=1))
    if dev:
        print(json.dumps({k: (v["value"], v["pass"]) for k, v in claims(rows).items()}))
        return out / f"{SLUG}_dev.json"
    dev_file = out / f"{SLUG}_dev.json"
    dev_rows = json.loads(dev_file.read_text())["rows"] if dev_file.exists() else None
    return write_report(rows, out, wall, seeds, dev_rows)


if __name__ == "__main__":  # pragma: no cover
    import sys

    main(seeds=tuple(int(s) for s in sys.argv[1].split(",")) if len(sys.argv) > 1 else (0, 1, 2))
