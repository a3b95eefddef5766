"""Forward + backward time of the GyroAtt block alone, per geometry, side by side (issue 7 "Speed";
spec "Acceptance / Ops benchmark").

Fixed input: 64 trials x m = 3 tokens of 16 x 16 SPD matrices (trace-normalised covariances of random
signals + 1e-5 I; Grassmann and SPSD: rank p = 8 from the same covariances), float64, 2 torch threads.
Block = Q/K/V maps, pairwise distances, attention, weighted Frechet mean, gyro bias + power activation,
tangent vectorisation, sum as the loss. Karcher iterations for the iterating geometries (SPD-AIM,
SPSD-AIM, Grassmann): 10 (column 1) and 1 (the training default, column 2). 3 warm-up + 20 timed
repetitions, median. Eigen share: self time of the linalg_eigh ops (forward and the backward of eigvalsh)
in a torch.profiler trace / the total self time of all ops. Goal: every geometry <= 3x SPD-LEM.
    .venv/bin/python benchmarks/gyroatt_ops.py [--threads 2] [--reps 20]
"""

from __future__ import annotations

import argparse
import json
import platform as _platform
import statistics
import time
from pathlib import Path

import torch

from methodlab.methods.gyroatt.grassmann import GEOMETRIES, make_geometry
from methodlab.methods.gyroatt.layers import GyroAttention
from methodlab.methods.gyroatt.model import e2r

ITERATING = {"spd-aim", "spsd-aim", "grassmann"}


def make_block(name: str, iters: int, n: int = 16, p: int = 8):
    geom = make_geometry(name, n, p, iters)
    att = GyroAttention(geom, name, n, p, gen=torch.Generator().manual_seed(0))
    if name.startswith("spd-"):
        bias = torch.zeros(n, n, dtype=torch.float64, requires_grad=True)
    elif name == "grassmann":
        bias = torch.zeros(n - p, p, dtype=torch.float64, requires_grad=True)
    else:
        bias = (torch.zeros(n - p, p, dtype=torch.float64, requires_grad=True),
                torch.zeros(p, p, dtype=torch.float64, requires_grad=True))

    def step(cov):
        out, _ = att(geom.encode(cov))
        loss = geom.tangent(geom.activation(geom.bias(out, bias), "power", 0.5)).sum()
        att.zero_grad(set_to_none=True)
        loss.backward()
        return loss

    return step


def time_block(step, cov, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        step(cov)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step(cov)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def eigh_share(step, cov) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step(cov)
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    eig = sum(e.self_cpu_time_total for e in ev if "eigh" in e.key.lower())
    return eig / total if total else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/gyroatt_ops.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cov = e2r(torch.randn(64, 16, 3 * 86, dtype=torch.float64), 3)
    rows = {}
    for name in GEOMETRIES:
        row = {}
        for iters in (10, 1):
            if iters == 1 and name not in ITERATING:
                continue
            step = make_block(name, iters)
            row[f"ms_iters{iters}"] = 1e3 * time_block(step, cov, 3, args.reps)
            row[f"eigh_share_iters{iters}"] = eigh_share(step, cov)
        rows[name] = row
        print(name, {k: round(v, 3) for k, v in row.items()}, flush=True)
    ref = rows["spd-lem"]["ms_iters10"]
    for name, row in rows.items():
        row["ratio_to_lem"] = row["ms_iters10"] / ref
        if "ms_iters1" in row:
            row["ratio_to_lem_iters1"] = row["ms_iters1"] / ref
        row["within_3x"] = row["ratio_to_lem"] <= 3.0
    result = {"benchmark": "gyroatt_ops", "batch": 64, "tokens": 3, "n": 16, "p": 8, "dtype": "float64",
              "threads": args.threads, "reps": args.reps, "statistic": "median seconds x 1e3 (forward + backward)",
              "machine": _platform.platform(), "processor": _platform.processor(), "torch": torch.__version__,
              "geometries": rows, "all_within_3x": all(r["within_3x"] for r in rows.values())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: round(v["ratio_to_lem"], 2) for k, v in rows.items()}))


if __name__ == "__main__":
    main()
