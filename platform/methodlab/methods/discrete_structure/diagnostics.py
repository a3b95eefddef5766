"""Bounding experiments for Claim A (why the general model's CPDAG SHD stays above the bar), run through the method's
own problem builder, DAGMA path, threshold and selection objective with the benchmark preset:

- `path`: the preset fit itself; its W is also thresholded at several omega (does any threshold rescue it?);
- `known_order`: node j may only use its predecessors in the TRUE topological order (the order search removed):
  the SHD left is estimation (penalty / threshold / sample), the rest of the path's SHD is the order search;
- `oracle_warm`: the last path stage started from the TRUE DAG's refit coefficients (an oracle warm start): if it
  stays near the truth with a lower penalised objective F than the path's endpoint, the truth is a stable, better
  point of the same objective that the path does not reach (an optimisation failure, not the objective's);
- `oracle_init`: the path started from main effects along the true order (N(0, init_scale^2)) at stage 0 and 1:
  an endpoint equal to the zero start's means the path forgets its initialisation (random-order multi-start
  cannot diversify it).

F = training BCE of the order-<=K refit on the thresholded DAG + lambda * sum quasi-MCP(W) (learner.selection_objective).
`methodlab reproduce discrete_structure` runs `run_seed` as the study's task `bounding` (per reported seed, on the
config of arm A-random_cpt-mvb) and renders its rows with `render`."""

from __future__ import annotations

import time

import numpy as np

OMEGAS = (0.1, 0.2, 0.3, 0.5)


def true_order(T: np.ndarray) -> list[int]:
    d, rem, order = len(T), set(range(len(T))), []
    while rem:
        r = min(j for j in rem if not any(T[k, j] for k in rem))
        order.append(r)
        rem.remove(r)
    return order


def _score(data, W, cfg, K):
    from methodlab.methods.discrete_structure import graphs, learner
    from methodlab.methods.discrete_structure import model as M

    T = np.asarray(data.truth)
    dag = M.threshold_to_dag(W, cfg.omega)
    return {"shd": int(graphs.shd_cpdag(graphs.cpdag(dag), graphs.cpdag(T))), "edges": int(dag.sum()),
            "F": float(learner.selection_objective(data.x_train, dag, K, cfg))}


def run_seed(cfg) -> dict:
    """The bounding experiments on one seed's data, `cfg` the arm's resolved config (benchmark preset, K = 3)."""
    from methodlab.core.device import set_threads
    from methodlab.methods.discrete_structure import graphs, learner, train
    from methodlab.methods.discrete_structure import model as M
    from methodlab.methods.discrete_structure.data import build_data

    set_threads(1)  # the recipe: one thread per process (learner calls, not fit: no ctx.limit_threads here)
    seed = cfg.seed
    data = build_data(cfg)
    T = np.asarray(data.truth)
    d = T.shape[0]
    K = cfg.order(d)
    Ct = graphs.cpdag(T)
    out = {"seed": seed, "mechanism": cfg.mechanism, "true_edges": int(T.sum()),
           "F_truth": float(learner.selection_objective(data.x_train, T, K, cfg)),
           "near_constant_nodes": [int(j) for j, m in enumerate(data.x_train.mean(0)) if min(m, 1 - m) < 0.02]}
    prob = train._problem(cfg, data.x_train, None)

    t0 = time.perf_counter()
    st = learner.run_dagma(prob, cfg, learner.new_state(prob, cfg.lr))
    W = learner.weights(prob, st)
    out["path"] = {**_score(data, W, cfg, K), "s": time.perf_counter() - t0}
    out["path_omega"] = {str(om): int(graphs.shd_cpdag(graphs.cpdag(M.threshold_to_dag(W, om)), Ct)) for om in OMEGAS}

    # known order: features of node j only from its predecessors in the true order
    pos = {v: i for i, v in enumerate(true_order(T))}
    cands = [[k for k in range(d) if pos[k] < pos[j]] for j in range(d)]
    subs, mask = M.feature_plan(d, K, candidates=cands, K_cand=K)
    pk = learner.Problem.build(data.x_train, subs, mask, cfg.w_scale)
    t0 = time.perf_counter()
    sk = learner.run_dagma(pk, cfg, learner.new_state(pk, cfg.lr))
    out["known_order"] = {**_score(data, learner.weights(pk, sk), cfg, K), "s": time.perf_counter() - t0}

    # oracle warm start: the last stage from the true DAG's refit coefficients
    subs_r, _, B_r, b_r = learner.refit(data.x_train, T, K, cfg.refit_steps)
    idx = {tuple(s): i for i, s in enumerate(prob.subs)}
    sw = learner.new_state(prob, cfg.lr)
    for f, s in enumerate(subs_r):
        sw.B[idx[tuple(s)]] = B_r[f]
    sw.b = b_r.clone()
    sw.B0, sw.b0, sw.stage = sw.B.clone(), sw.b.clone(), len(cfg.mu_schedule) - 1
    start_shd = _score(data, learner.weights(prob, sw), cfg, K)["shd"]
    t0 = time.perf_counter()
    sw = learner.run_dagma(prob, cfg, sw)
    out["oracle_warm"] = {**_score(data, learner.weights(prob, sw), cfg, K), "shd_at_start": start_shd,
                          "s": time.perf_counter() - t0}

    # oracle initialisation (main effects along the true order) at stages 0 and 1
    for stage in (0, 1):
        g = np.random.default_rng(seed)
        si = learner.new_state(prob, cfg.lr)
        for f, s in enumerate(prob.subs):
            if len(s) == 1:
                for j in range(d):
                    if prob.mask[f, j] and pos[s[0]] < pos[j]:
                        si.B[f, j] = cfg.init_scale * g.standard_normal()
        si.B0, si.stage = si.B.clone(), stage
        t0 = time.perf_counter()
        si = learner.run_dagma(prob, cfg, si)
        out[f"oracle_init_stage{stage}"] = {**_score(data, learner.weights(prob, si), cfg, K), "s": time.perf_counter() - t0}
    return out


def _mean(v) -> float:
    return float(np.mean(v)) if len(v) else float("nan")


def render(rows: list[dict]) -> list[str]:
    """Markdown of the bounding experiments (the task's rows, one per seed): a table and its reading."""
    if not rows:
        return []
    n, seeds = len(rows), ", ".join(str(r["seed"]) for r in rows)
    secs = sum(r[k]["s"] for r in rows for k in ("path", "known_order", "oracle_warm", "oracle_init_stage0",
                                                   "oracle_init_stage1"))
    head = ["seed", "true edges", "near-constant", "path SHD (edges)", "path F", "F(true)",
            "path SHD at omega 0.1 / 0.2 / 0.3 / 0.5", "known order SHD (edges)",
            "oracle warm start SHD at start -> end (edges)", "oracle warm F", "oracle init s0 / s1 SHD",
            "s: path / known / warm"]
    body = [[r["seed"], r["true_edges"], ",".join(map(str, r["near_constant_nodes"])) or "-",
             f"{r['path']['shd']} ({r['path']['edges']})", f"{r['path']['F']:.4f}", f"{r['F_truth']:.4f}",
             " / ".join(str(r["path_omega"][str(k)]) for k in OMEGAS),
             f"{r['known_order']['shd']} ({r['known_order']['edges']})",
             f"{r['oracle_warm']['shd_at_start']} -> {r['oracle_warm']['shd']} ({r['oracle_warm']['edges']})",
             f"{r['oracle_warm']['F']:.4f}", f"{r['oracle_init_stage0']['shd']} / {r['oracle_init_stage1']['shd']}",
             f"{r['path']['s']:.0f} / {r['known_order']['s']:.0f} / {r['oracle_warm']['s']:.0f}"] for r in rows]
    mean = {k: _mean([r[k]["shd"] for r in rows]) for k in ("path", "known_order", "oracle_warm")}
    body.append(["mean", "", "", f"{mean['path']:.2f}", "", "", "", f"{mean['known_order']:.2f}",
                 f"{mean['oracle_warm']:.2f}", "", "", ""])
    better = sum(r["oracle_warm"]["F"] < r["path"]["F"] for r in rows)
    same = sum(r["oracle_init_stage0"]["shd"] == r["path"]["shd"] == r["oracle_init_stage1"]["shd"] for r in rows)
    return [f"### Bounding experiments — random_cpt, K = 3, this recipe (seeds {seeds}; the study's task "
            f"`bounding`, diagnostics.py, {secs / 60:.1f} min of fits)", "",
            "Same data, objective and recipe as the K = 3 rows above. *path*: the same fit; *known order*: node j may "
            "only use its predecessors in the true topological order (order search removed; what is left is estimation); "
            "*oracle warm start*: the last path stage (mu = 0.001) started from the true DAG's refit coefficients; "
            "*oracle init s0 / s1*: the path started at stage 0 / 1 from main effects drawn along the true order. "
            "F = refit BCE + lambda * sum quasi-MCP(W) at the thresholded DAG (lower is better); F(true) is the true "
            "DAG's. Near-constant: nodes with marginal P(x = 1) < 0.02 or > 0.98 (their edges are barely identifiable "
            "at n = 5,000).", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in body), "",
            _reading(rows, mean, better, same, n), ""]


def _reading(rows, mean, better: int, same: int, n: int) -> str:
    """The bounding table's reading, every clause conditional on the counts it rests on."""
    warm = (f"Reading: started at the truth, the last stage ends at mean SHD {mean['oracle_warm']:.2f}, at a lower F "
            f"than the path's endpoint on {better} of {n} seeds (mean F "
            f"{_mean([r['oracle_warm']['F'] for r in rows]):.4f} vs {_mean([r['path']['F'] for r in rows]):.4f})")
    warm += (": the true graph's basin is a stable, better point of the same objective that the path does not reach."
             if better == n else ": the objective does not prefer the truth's basin on every seed." if better else
             ": the objective prefers the path's endpoint, so the miss is the objective's, not the path's.")
    init = (f" Started from main effects along the true order, the path ends at the zero start's SHD on {same} of {n} "
            "seeds")
    init += (": it forgets its initialisation in the early (loss-dominated) stages, so random-order multi-starts (the "
             "`restarts` option) cannot diversify it." if same * 2 > n else
             ": the initialisation changes where it ends, so multi-starts (the `restarts` option) can diversify it.")
    best = [min(r["path_omega"].values()) for r in rows]
    rescued = sum(b < r["path"]["shd"] for b, r in zip(best, rows))
    omega = (" No threshold omega rescues the path's W" if not rescued else
             f" Another threshold omega lowers the path's SHD on {rescued} of {n} seeds") + \
        " (best over omega per seed: " + " / ".join(map(str, best)) + ")."
    worse = sum(r["known_order"]["F"] > r["oracle_warm"]["F"] for r in rows)
    known = (f" With the true order given but the path run from zero, the SHD is {mean['known_order']:.2f} (edges "
             + " / ".join(str(r["known_order"]["edges"]) for r in rows) + " vs true "
             + " / ".join(str(r["true_edges"]) for r in rows) + f") at a higher F than the oracle warm start on "
             f"{worse} of {n} seeds")
    known += (": the path's early loss-dominated stages also keep edges it cannot shed later, so both its order "
              "search and its edge selection fall short of the objective's own optimum." if worse * 2 > n else ".")
    return warm + init + omega + known


# ---------------------------------------------------------------------------------------------------------------
# Issue 44: our DAGMA path against the official code (kevinsbello/dagma), and the dev-seed arms that run its rules
# ---------------------------------------------------------------------------------------------------------------
OFFICIAL_ROWS = (
    ("mu schedule", "T = 5: 1, 0.1, ..., 1e-4", "T = 4: 0.1, ..., 1e-4", "1 -> 0.001 (4 stages)",
     "1 / 0.1 / 0.01 / 0.001 (`mu_schedule`)", "= spec; one stage fewer than linear.py (no mu = 1e-4)"),
    ("s per stage", "[1, .9, .8, .7, .6]", "1", "1 (decreasing optional)", "preset 1 / .9 / .8 / .7 (`s_schedule`)",
     "linear.py's first four"),
    ("warm start", "each stage from the last W; Adam moments reset", "model carries on; new Adam per stage", "-",
     "`learner.run_dagma`: last B, b; new Adam per stage", "matches"),
    ("Adam", "betas 0.99 / 0.999, eps 1e-8", "same (torch)", "-", "same (torch)", "matches"),
    ("lr", "3e-4", "2e-4", "3e-4", "preset 1e-2", "spec = linear.py; preset 33x larger"),
    ("Adam steps per stage / last", "30,000 / 60,000 (<= 180,000)", "50,000 / 80,000 (<= 230,000)",
     "5,000 / 20,000 (35,000)", "preset 1,500 / 3,000 (7,500)", "spec = 1/6 and 1/3 of linear.py; preset 1/5 of spec"),
    ("early stop", "relative objective change <= 1e-6, every 1,000 steps", "same", "-",
     "same tol, every `check_every` (preset 250)", "form matches; preset checks 4x as often"),
    ("objective", "mu (score + lambda sum abs(W)) + h_s(W)", "mu (score + lambda sum abs(fc1)) + h_s, weight decay mu "
     "lambda2", "-", "mu (BCE + lambda qMCP(W) + l2 sum B^2) + h_s(W)", "form matches (penalty: the paper's)"),
    ("h", "-log det(sI - W o W) + d log s", "same, W o W = sum of squared fc1 weights per edge", "-",
     "`model.h_dagma`, W o W = sum of squared B per edge group", "matches nonlinear.py's grouped form"),
    ("domain", "exact: inv(sI - W o W) >= 0; outside at iteration 1 or with s <= 0.9: stage again from its start, lr "
     "/ 2, s + 0.1; otherwise undo half the last step, lr / 2 for the rest of the stage",
     "h < 0 (log abs det, sign ignored): stage again from its start, lr / 2 for all later stages, lr decay, s = 1",
     "-", "det > 0 and h >= 0; outside: stage again from its start, lr / 2, s kept (`dagma_domain=restart`)",
     "differs from both: `dagma_domain=dagma_linear` is linear.py's rule"),
    ("init / threshold", "W = 0 / abs(W) < 0.3 -> 0", "fc1 = 0 / group norm < 0.3 -> 0", "-",
     "B = 0 / group norm W < omega = 0.3", "matches"),
)
OFFICIAL_ARMS = (("A-random_cpt-mvb", "preset"), ("A-random_cpt-mvb-dagmadomain", "preset + official domain rule"),
                 ("A-random_cpt-mvb-dagmalinear", "DagmaLinear.fit defaults + official domain rule"))


def official_comparison(res) -> list[str]:
    """Markdown: the per-point verdicts (static) and the development-seed arms that run the official rules."""
    head = ["point", "DAGMA linear.py", "DAGMA nonlinear.py", "spec", "ours", "verdict"]
    out = ["### Official code comparison (issue 44)", "",
           "Official DAGMA: kevinsbello/dagma at 0886168 (2024-01-14), src/dagma/linear.py (`DagmaLinear.fit`, "
           "`minimize`, `_h`, `_func`) and src/dagma/nonlinear.py (`DagmaNonlinear.fit`, `minimize`, "
           "`DagmaMLP.h_func`, `fc1_to_adj`). Ours: learner.py (`run_dagma`, `_stage_plan`, `score`), model.py "
           "(`h_dagma`, `group_weights`), config.py. The paper's own code (Deng & Aragam) was not found: no stored "
           "repository under the authors' names or 'binary' / 'notears' / 'structure_learning' names holds it, the "
           "arXiv id 2509.21658 appears only in paper summaries ('Code: to be confirmed'), and the 'BiNOTEARS' hits "
           "are third-party reimplementations.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
           *("| " + " | ".join(row) + " |" for row in OFFICIAL_ROWS), "",
           "Do DAGMA's official defaults match the spec's schedule? The lr does (3e-4, linear.py; nonlinear.py uses "
           "2e-4) and so do mu 1 -> 0.001 (linear.py's first four stages) and Adam's betas. The step budget does not: "
           "linear.py runs up to 30,000 steps per stage and 60,000 in the last over five stages (180,000), the spec "
           "5,000 / 20,000 over four (35,000); the preset runs 1,500 / 3,000 at lr 1e-2. The preset's lr and steps and "
           "the domain rule are where ours differs in a way that can change the endpoint, so two development-seed arms "
           "run the official rules (claims unchanged; seeds 10-12 first, as the calibration rule asks):", ""]
    dev = res.dev_seeds or ()
    rows = []
    for arm, label in OFFICIAL_ARMS:
        if arm == "A-random_cpt-mvb" and res.mode == "full":  # --full runs this arm at the spec's schedule
            label = "spec schedule (lr 3e-4, 5,000 / 20,000 steps, s = 1, unscaled W)"
        for s in dev:
            f = res.final(arm, s)
            if f is None:
                continue
            rows.append([label, s, f"{f.get('eval/shd_cpdag', float('nan')):.0f}",
                         f"{f.get('eval/n_edges', float('nan')):.0f} / {f.get('eval/true_edges', float('nan')):.0f}",
                         f"{f.get('eval/F_learned', float('nan')):.4f} / {f.get('eval/F_truth', float('nan')):.4f}",
                         f"{f.get('step', 0):.0f}", "-" if "eval/domain_backtracks" not in f else
                         f"{f['eval/domain_backtracks']:.0f} / {f['eval/domain_retries']:.0f}",
                         f"{f.get('eval/fit_seconds', float('nan')):.0f}"])
    if not rows:
        return out + ["Not run in this mode: the arms `A-random_cpt-mvb-dagmadomain` and `A-random_cpt-mvb-dagmalinear` "
                      "run on the development seeds outside --quick.", ""]
    head = ["path", "dev seed", "CPDAG SHD", "edges / true", "F(learned) / F(true)", "steps",
            "backtracks / stage retries", "s / fit"]
    return out + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                  *("| " + " | ".join(str(c) for c in row) + " |" for row in rows), ""]
