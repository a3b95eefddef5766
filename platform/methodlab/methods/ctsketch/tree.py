"""The compositional program trees of CTSketch and the baselines' output distributions.

sum_N (N = 2^D): level l combines pairs of distributions over {0..d_l-1}, d_l = 9 * 2^l + 1, through the sketch
of T_l[a, b] = a + b; the expected partial sum mu is re-encoded as a distribution over {0..d_{l+1}-1} by the
Gaussian kernel q[x] ~ exp(-(x - mu)^2 / sigma), sigma = max(1 / max(P_first), sigma_floor) (one scalar per
pair over the whole batch, as the official cts_sum.py); the root returns the expected total.
max_N: every level contracts T[a, b, y] = 1[max(a, b) = y]; its output distribution feeds the next level
directly (rank 10 is exact; a lossy sketch is clamped at 0 and renormalised)."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from methodlab.methods.ctsketch.sketch import Sketch, broken, build_sketch


def level_dims(depth: int) -> list[int]:
    """Domain sizes d_0..d_D of partial sums of 2^l digits: 10, 19, 37, 73, ..."""
    return [9 * 2 ** l + 1 for l in range(depth + 1)]


def _no_progress(items, **_):
    return items


def depth_of(n: int) -> int:
    d = int(round(math.log2(n)))
    if 2 ** d != n:
        raise ValueError(f"N={n} is not a power of two")
    return d


class SumTree:
    def __init__(self, n: int, method: str = "tt", rank: int = 2, seed: int = 1234, sigma_floor: float = 4.0,
                 progress=_no_progress, device=None, broken_seed: int | None = None):
        self.n, self.depth, self.sigma_floor = n, depth_of(n), sigma_floor
        self.dims = level_dims(self.depth)
        # one sketch per level; the top levels of N = 1024 (d up to 4,609) take most of the ~20 s
        levels = progress(self.dims[:-1], total=self.depth, desc=f"sketching the {n}-digit sum tree", unit="level")
        self.sketches: list[Sketch] = [build_sketch("sum", d, method, rank, seed) for d in levels]
        if broken_seed is not None:  # Claim B's control: every level's sketch with its last axis permuted
            self.sketches = [broken(sk, broken_seed) for sk in self.sketches]
        if device is not None:  # the cores live on the run's device (copied once, here)
            for sk in self.sketches:
                sk.to(device)

    @property
    def rel_errors(self) -> list[float]:
        return [s.rel_error for s in self.sketches]

    def discretize(self, mu: torch.Tensor, first: torch.Tensor, size: int) -> torch.Tensor:
        # [RECON] sigma keeps its graph (official: Python max of a tensor and the floor); it only matters while
        # max(P_first) < 1/sigma_floor, i.e. early in training.
        sigma = torch.clamp(1.0 / first.amax(dim=(0, 2)), min=self.sigma_floor)  # [pairs]
        grid = torch.arange(size, dtype=mu.dtype, device=mu.device)
        logits = -(grid - mu[..., None]) ** 2 / sigma[:, None]
        return torch.softmax(logits, dim=-1)  # = exp(.) / sum exp(.), the L1 normalisation, overflow-safe

    def __call__(self, probs: torch.Tensor) -> torch.Tensor:
        """probs [B, N, 10] -> expected sum [B]."""
        x = probs
        for l, sk in enumerate(self.sketches):
            P, Q = x[:, 0::2], x[:, 1::2]
            mu = sk.contract(P, Q)  # [B, pairs]
            if l < self.depth - 1:
                x = self.discretize(mu, P, self.dims[l + 1])
            else:
                return mu[:, 0]
        raise AssertionError("unreachable")


class MaxTree:
    def __init__(self, n: int, method: str = "tt", rank: int = 10, seed: int = 1234, device=None):
        self.n, self.depth = n, depth_of(n)
        self.sketch = build_sketch("max", 10, method, rank, seed)
        if device is not None:
            self.sketch.to(device)
        self.lossy = self.sketch.rel_error > 1e-6

    @property
    def rel_errors(self) -> list[float]:
        return [self.sketch.rel_error] * self.depth

    def __call__(self, probs: torch.Tensor) -> torch.Tensor:
        """probs [B, N, 10] -> distribution of the max [B, 10]."""
        x = probs
        for _ in range(self.depth):
            x = self.sketch.contract(x[:, 0::2], x[:, 1::2])
            if self.lossy:
                x = x.clamp_min(0.0)
                x = x / x.sum(-1, keepdim=True).clamp_min(1e-12)
        return x[:, 0]


def make_tree(task: str, n: int, method: str, rank: int, seed: int, sigma_floor: float, progress=_no_progress,
              device=None, broken_seed: int | None = None):
    """`progress(iterable, total=, desc=, unit=)` wraps the per-level sketching (RunContext.progress in a run);
    the sketches' torch cores are placed on `device` (the run's) once; `broken_seed`: Claim B's permuted control."""
    if task == "sum_N":
        return SumTree(n, method, rank, seed, sigma_floor, progress, device, broken_seed)
    return MaxTree(n, method, rank, seed, device)


def expected_output(task: str, out: torch.Tensor) -> torch.Tensor:
    """Tree output -> expected program output (the sum tree already returns it)."""
    return out if task == "sum_N" else out @ torch.arange(10, dtype=out.dtype, device=out.device)


# ------------------------------------------------------------------------------------------- baselines
def exact_joint_dist(probs: torch.Tensor, task: str) -> torch.Tensor:
    """Full joint table over the 10^N combinations (Scallop/DeepProbLog semantics), N <= 4 -> [B, K]."""
    b, n, d = probs.shape
    joint = probs[:, 0]
    for i in range(1, n):
        joint = (joint[:, :, None] * probs[:, i, None, :]).reshape(b, -1)
    k = 9 * n + 1 if task == "sum_N" else 10
    out = _joint_outputs(n, d, task, str(probs.device))
    return torch.zeros(b, k, dtype=probs.dtype, device=probs.device).index_add(1, out, joint)


@functools.lru_cache(maxsize=16)
def _joint_outputs(n: int, d: int, task: str, device: str) -> torch.Tensor:
    """Program output of each of the d^n joint combinations (row-major), on `device` (built once)."""
    combos = np.indices((d,) * n).reshape(n, -1)
    out = combos.sum(0) if task == "sum_N" else combos.max(0)
    return torch.from_numpy(out).to(device)


def conv_sum_dist(probs: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the sum by pairwise FFT convolution along the same tree -> [B, 9N + 1]."""
    x = probs
    while x.shape[1] > 1:
        P, Q = x[:, 0::2], x[:, 1::2]
        L = 2 * x.shape[-1] - 1
        nfft = 1 << (L - 1).bit_length()
        x = torch.fft.irfft(torch.fft.rfft(P, nfft) * torch.fft.rfft(Q, nfft), nfft)[..., :L].clamp_min(0.0)
    return x[:, 0]


def cdf_max_dist(probs: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the max: P(max <= y) = prod_i F_i(y) -> [B, 10]."""
    logF = torch.log(torch.cumsum(probs, -1).clamp_min(1e-30)).sum(1)
    F = torch.exp(logF)
    return (F - torch.cat([torch.zeros_like(F[:, :1]), F[:, :-1]], 1)).clamp_min(0.0)


def indecater_loss(probs: torch.Tensor, target: torch.Tensor, task: str, samples: int, gen: torch.Generator) -> torch.Tensor:
    """IndeCateR (icr_sum.py): S joint samples; for every position i and value j, score 1[c(sample with x_i = j) = y];
    surrogate = sum_{i,j} stopgrad(mean_s score) * p_i[j]; loss = -log(surrogate + 1e-8)."""
    b, n, d = probs.shape
    with torch.no_grad():
        s = torch.multinomial(probs.reshape(-1, d), samples, replacement=True, generator=gen)
        s = s.reshape(b, n, samples).transpose(1, 2)  # [B, S, N]
        vals = torch.arange(d, device=probs.device)
        if task == "sum_N":
            rest = s.sum(-1, keepdim=True) - s  # [B, S, N]: sum of the other positions
            out = rest[..., None] + vals  # [B, S, N, d]
        else:
            top2 = s.topk(min(2, n), dim=-1).values
            first, second = top2[..., :1], top2[..., -1:]
            # max of the others: the runner-up at the argmax (equal to the max when it is tied), else the max
            rest = torch.where(s == first, second, first)
            out = torch.maximum(rest[..., None], vals)
        score = (out == target[:, None, None, None]).float().mean(1)  # [B, N, d]
    surrogate = (score * probs).sum((1, 2))
    return -torch.log(surrogate + 1e-8).mean()


def sequence_loss(cfg, tree, probs: torch.Tensor, target: torch.Tensor, gen: torch.Generator | None = None):
    """Training loss of one batch for the configured algorithm (ctsketch or a baseline)."""
    t = target.to(probs.dtype)
    if cfg.algorithm == "indecater":
        gen = gen if gen is not None else torch.Generator(device=probs.device).manual_seed(0)
        return indecater_loss(probs, target, cfg.task, cfg.indecater_samples, gen)
    if cfg.algorithm == "ctsketch" and cfg.task == "sum_N":
        yhat = tree(probs)
        if cfg.loss == "l1":
            return (yhat - t).abs().mean()
        if cfg.loss == "l2":
            return ((yhat - t) ** 2).mean()
        return torch.nn.functional.smooth_l1_loss(yhat, t)
    if cfg.algorithm == "ctsketch":
        dist = tree(probs)
    elif cfg.algorithm == "exact":
        dist = exact_joint_dist(probs, cfg.task)
    else:
        dist = conv_sum_dist(probs) if cfg.task == "sum_N" else cdf_max_dist(probs)
    return -torch.log(dist.gather(1, target[:, None]).clamp_min(1e-12)).mean()
