"""The feasibility construction (the paper's Algorithm 1, Theorem 3.1) and the dimension law.

g(d) = unit-length Gaussian vector; f_raw(q) = sum of the UNIT g(d) over R(q). Then <f_raw(q), g(d)> = 1 + noise
for relevant d and pure noise N(0, ~s/dim) otherwise, so thresholding at 1/2 solves HR once
dim >= C * s * ln m. (Summing the raw Gaussian vectors instead gives precision ~0.01: the spec measured it.)
The setting 'constructive' (settings.fit_constructive) runs it on the configured hierarchy."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from methodlab.methods.hier_retrieval.data import HRData


def construct(data: HRData, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(f_raw [m, dim], g [m, dim]): Algorithm 1 with unit-length document vectors, drawn on the data's device
    (a CUDA run draws other vectors than a CPU run of the same seed)."""
    dev = data.q.device
    gen = torch.Generator(device=dev).manual_seed(seed)
    g = F.normalize(torch.randn(data.m, dim, generator=gen, device=dev), dim=-1)
    f_raw = torch.zeros(data.m, dim, device=dev).index_add_(0, data.q, g[data.d])
    return f_raw, g


@torch.no_grad()
def threshold_quality(f_raw: torch.Tensor, g: torch.Tensor, data: HRData, queries: torch.Tensor,
                      threshold: float = 0.5, chunk: int = 1024) -> dict[str, float]:
    """Precision and recall of 'relevant iff <f_raw(q), g(d)> >= threshold' over all (q, d) with q in queries."""
    dev = f_raw.device
    counts = torch.zeros(3, dtype=torch.long, device=dev)  # tp, predicted positives, relevant pairs
    offsets, d_all = data.offsets.to(dev), data.d.to(dev)
    for i in range(0, len(queries), chunk):
        qc = queries[i:i + chunk].to(dev)
        S = f_raw[qc] @ g.T
        start, end = offsets[qc], offsets[qc + 1]
        lens = end - start
        n = int(lens.sum())
        local = torch.repeat_interleave(torch.arange(len(qc), device=dev), lens)
        pidx = torch.repeat_interleave(start - torch.cumsum(lens, 0) + lens, lens) + torch.arange(n, device=dev)
        counts[0] += (S[local, d_all[pidx]] >= threshold).sum()
        counts[1] += (S >= threshold).sum()
        counts[2] += n
    tp, pred_pos, n_rel = counts.tolist()
    return {"precision": tp / max(1, pred_pos), "recall": tp / max(1, n_rel)}


def theory_dim(data: HRData, c: float) -> int:
    return int(math.ceil(c * data.s * math.log(data.m)))


def min_feasible_dim(data: HRData, seed: int, target: float = 0.99, threshold: float = 0.5, hi: int = 8192) -> int:
    """Smallest dim (binary search) at which the thresholded construction reaches precision and recall >= target."""
    def ok(dim: int) -> bool:
        f_raw, g = construct(data, dim, seed)
        r = threshold_quality(f_raw, g, data, torch.arange(data.m, device=f_raw.device), threshold)
        return r["precision"] >= target and r["recall"] >= target
    lo = 1
    while not ok(hi) and hi < 65536:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
