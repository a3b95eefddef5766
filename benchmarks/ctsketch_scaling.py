"""Time per training step and peak memory of CTSketch sum-N against N, side by side with the exact baselines.

Rows, at batch 16 and 1 thread: median step time (forward + backward + Adam, after 2 warm-up steps) for
N = 16, 64, 256, 1024 with the MLP on 8x8 digits, with LeNet on 28x28 MNIST (distinct-image batching on and off),
and for the tree alone (forward + backward of the contraction on random softmax inputs [16, N, 10], no network);
exact enumeration (full joint table) at N = 2 and 4 only (for N >= 16 the memory it would need is listed), and
exact convolution at every N. Exponent = least-squares slope of log step time on log N over N = 64, 256, 1024.
Pass (spec): MLP and tree-alone exponents <= 1.05; LeNet's <= 1.2 (regression guard). Sketch build time reported
separately. Writes benchmarks/results/ctsketch_scaling.json.
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ctsketch_scaling.py [--reps 5] [--skip-lenet]
"""

from __future__ import annotations

import argparse
import json
import platform as _platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.methods.ctsketch.config import exact_table_bytes
from methodlab.methods.ctsketch.data import load_pools
from methodlab.methods.ctsketch.model import build_net, digit_probs
from methodlab.methods.ctsketch.tree import SumTree, conv_sum_dist, exact_joint_dist

NS = [16, 64, 256, 1024]


def _time(fn, reps: int) -> float:
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _exponent(ns, ts) -> float:
    sel = [(n, t) for n, t in zip(ns, ts) if n >= 64]
    return float(np.polyfit(np.log([n for n, _ in sel]), np.log([t for _, t in sel]), 1)[0])


def net_step(pools, kind: str, n: int, loss_kind: str, distinct: bool, reps: int) -> float:
    net = build_net(kind, pools.side)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    tree = SumTree(n) if loss_kind == "tree" else None
    g = torch.Generator().manual_seed(0)

    def step():
        idx = torch.randint(0, len(pools.y_train), (16, n), generator=g)
        y = pools.y_train[idx].sum(1).float()
        p = digit_probs(net, pools.x_train, idx, distinct)
        if loss_kind == "tree":
            loss = (tree(p) - y).abs().mean()
        else:
            dist = conv_sum_dist(p) if loss_kind == "conv" else exact_joint_dist(p, "sum_N")
            loss = -torch.log(dist.gather(1, y.long()[:, None]).clamp_min(1e-12)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _time(step, reps)


def tree_only(n: int, reps: int) -> float:
    tree = SumTree(n)
    logits = torch.randn(16, n, 10, requires_grad=True)

    def step():
        tree(torch.softmax(logits, -1)).sum().backward()
    return _time(step, reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-lenet", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    res = {"machine": _platform.processor() or _platform.machine(), "threads": args.threads, "batch": 16, "rows": {}}
    t0 = time.perf_counter()
    SumTree(1024)
    res["sketch_build_s_N1024"] = time.perf_counter() - t0
    digits = load_pools("digits8x8", None, 0)
    rows = res["rows"]
    rows["tree_only"] = [tree_only(n, args.reps) for n in NS]
    rows["mlp_ctsketch"] = [net_step(digits, "mlp", n, "tree", True, args.reps) for n in NS]
    rows["mlp_exact_conv"] = [net_step(digits, "mlp", n, "conv", True, args.reps) for n in NS]
    rows["mlp_exact_enum_N2_N4"] = [net_step(digits, "mlp", n, "exact", True, args.reps) for n in (2, 4)]
    res["exact_enum_bytes_per_sample"] = {str(n): exact_table_bytes(n) for n in NS}
    if not args.skip_lenet:
        mnist = load_pools("mnist", None, 0)
        rows["lenet_ctsketch_distinct"] = [net_step(mnist, "lenet", n, "tree", True, max(3, args.reps // 2)) for n in NS]
        rows["lenet_ctsketch_plain"] = [net_step(mnist, "lenet", n, "tree", False, max(3, args.reps // 2)) for n in NS]
    res["N"] = NS
    res["exponent"] = {k: _exponent(NS, v) for k, v in rows.items() if len(v) == len(NS)}
    res["pass"] = {"mlp_linear": res["exponent"]["mlp_ctsketch"] <= 1.05, "tree_linear": res["exponent"]["tree_only"] <= 1.05}
    if "lenet_ctsketch_plain" in res["exponent"]:
        res["pass"]["lenet_guard"] = res["exponent"]["lenet_ctsketch_plain"] <= 1.2
    res["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    out = Path(__file__).parent / "results" / "ctsketch_scaling.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
