"""Integration-free mark probabilities (IFNMTPP) vs numerical integration of the same model's density.

For one IFNMTPP (spec sizes: d 64 / 64, L 3, M = 5 and M = 16 marks) and N history states, side by side:
  - closed form: p*(m) = Gamma*(m, 0), one forward pass;
  - numerical: p*(m) = int_0^T p*(m, tau) dtau with p*(m, tau) = -dGamma*/dtau by autograd on K trapezoid
    nodes (what an intensity-based MTPP must do to predict the mark first), K = 64 and 256;
and the accuracy of the numerical value against the closed form (max abs error). Pass: closed form at least
10x faster than K = 64 quadrature at M = 16.
    .venv/bin/python benchmarks/mtpp_threshold_integration.py [--n 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import platform as _platform
import statistics
import time
from pathlib import Path

import torch

from methodlab.methods.mtpp_threshold.model import IFNMTPP
from methodlab.methods.mtpp_threshold.tpp import TimeStats

STATS = TimeStats(mean=1.0, std=1.0, log_mean=0.0, log_std=1.0)


def timed(fn, reps=3):
    ts, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def numerical(model, hist, K, T):
    taus = torch.linspace(0, T, K)
    t = taus[None, :, None].expand(hist.shape[0], K, model.M).clone().requires_grad_(True)
    marks = torch.arange(model.M).expand(hist.shape[0], K, model.M)
    g = model.gamma_star(hist[:, None, :], STATS.std_tau(t), STATS.tau0, marks=marks)
    dens = -torch.autograd.grad(g.sum(), t)[0]
    return torch.trapezoid(dens, taus, dim=1).detach()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows, goals = [], []
    for M in (5, 16):
        torch.manual_seed(0)
        model = IFNMTPP(M, 64, 64, 3, 10.0)
        hist = model.hist_proj(torch.randn(args.n, 64)).detach()
        with torch.no_grad():
            t_cf, p = timed(lambda: model.mark_probs(hist, STATS.tau0))
        row = {"marks": M, "histories": args.n, "closed_form_s": round(t_cf, 5)}
        for K in (64, 256):
            t_num, pn = timed(lambda: numerical(model, hist, K, T=30.0))
            row[f"quadrature_K{K}_s"] = round(t_num, 4)
            row[f"speedup_K{K}"] = round(t_num / t_cf, 1)
            row[f"max_abs_err_K{K}"] = float((pn - p).abs().max())
        rows.append(row)
        if M == 16:
            goals.append({"name": "closed-form p*(m) speed-up over K=64 quadrature, M=16", "value": row["speedup_K64"],
                          "goal": ">= 10", "met": row["speedup_K64"] >= 10})
    out = {"name": "mtpp_threshold_integration", "title": "mtpp_threshold: integration-free p*(m) vs quadrature",
           "date": time.strftime("%Y-%m-%d"), "machine": f"{_platform.machine()}, {args.threads} thread(s)",
           "versions": f"torch {torch.__version__}", "rows": rows, "goals": goals,
           "notes": "Same random IFNMTPP; quadrature integrates the autograd density over [0, 30] (standardised tau ~ 30 std)."}
    path = Path(__file__).resolve().parent / "results" / "mtpp_threshold_integration.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
