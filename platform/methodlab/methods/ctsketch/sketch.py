"""Low-rank sketches of sub-program tensors and their contraction with input distributions.

A sub-program with two inputs a, b (domain d each) is a table T[a, b] (numeric output, e.g. a + b) or
T[a, b, y] = 1[c(a, b) = y] (categorical output). The sketch replaces T by
  tt:     cores G1 (1 x d x R), G2 (R x d x R'), [G3 (R' x K x 1)]  (TT-SVD; randomized range finder for big
          unfoldings, best of two draws, as the official HMT sketch)
  cp:     sum_r lam_r a_r (x) b_r [(x) c_r]                          (ALS, best of two inits)
  tucker: core G (R x R [x R]) with factors U_k                       (truncated HOSVD)
and contract(P, Q) = T x_1 P x_2 Q costs O(d R^2) per pair instead of O(d^2). Cores are float64 numpy at build
time (error measured there) and float32 torch constants in the forward pass (never trained), placed once on the
device of the run (`Sketch.to(device)`, or on first use on the inputs' device)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

_FULL_SVD_MAX = 600  # unfoldings with both sides above this use the randomized range finder


def program_tensor(kind: str, d: int) -> np.ndarray:
    """sum: T[a, b] = a + b on {0..d-1}^2.  max: T[a, b, y] = 1[max(a, b) = y] on {0..d-1}^3."""
    a = np.arange(d, dtype=np.float64)
    if kind == "sum":
        return a[:, None] + a[None, :]
    if kind == "max":
        m = np.maximum(a[:, None], a[None, :]).astype(np.int64)
        return (m[:, :, None] == np.arange(d)[None, None, :]).astype(np.float64)
    raise ValueError(f"unknown program {kind!r}")


def _svd_trunc(c: np.ndarray, r: int, rng: np.random.Generator | None):
    """Rank-r factors U (m x r), S (r), Vt (r x n) of c; randomized (HMT, 2 power iterations) when c is big."""
    m, n = c.shape
    if min(m, n) <= _FULL_SVD_MAX or rng is None:
        u, s, vt = np.linalg.svd(c, full_matrices=False)
        return u[:, :r], s[:r], vt[:r]
    k = min(r + 10, m, n)
    y = c @ rng.standard_normal((n, k))
    for _ in range(2):
        q, _ = np.linalg.qr(y)
        y = c @ (c.T @ q)
    q, _ = np.linalg.qr(y)
    ub, s, vt = np.linalg.svd(q.T @ c, full_matrices=False)
    return (q @ ub)[:, :r], s[:r], vt[:r]


@dataclass
class Sketch:
    method: str
    shape: tuple[int, ...]
    parts: dict[str, np.ndarray]
    rel_error: float = float("nan")
    _torch: dict = field(default_factory=dict, repr=False)

    @property
    def categorical(self) -> bool:
        return len(self.shape) == 3

    def dense(self) -> np.ndarray:
        """Materialise T_hat (tests and error measurement; the forward pass never does this)."""
        p = self.parts
        if self.method == "tt":
            out = p["G1"][0]  # d x R
            out = np.einsum("ar,rbs->abs", out, p["G2"])
            if self.categorical:
                return np.einsum("abs,sk->abk", out, p["G3"][:, :, 0])
            return out[:, :, 0]
        if self.method == "cp":
            fs = [p[f"F{k}"] for k in range(len(self.shape))]
            if self.categorical:
                return np.einsum("r,ar,br,kr->abk", p["lam"], *fs)
            return np.einsum("r,ar,br->ab", p["lam"], *fs)
        if self.categorical:
            return np.einsum("xyz,ax,by,kz->abk", p["core"], p["U0"], p["U1"], p["U2"])
        return np.einsum("xy,ax,by->ab", p["core"], p["U0"], p["U1"])

    def t(self, name: str, device=None) -> torch.Tensor:
        """Part `name` as a float32 torch constant on `device` (None: CPU), copied there once and cached."""
        device = torch.device("cpu" if device is None else device)
        key = (name, str(device))
        if key not in self._torch:
            host = torch.from_numpy(np.ascontiguousarray(self.parts[name])).float()
            self._torch[key] = host.to(device)
        return self._torch[key]

    def to(self, device) -> "Sketch":
        """Place every part on `device` now (the forward pass then finds them there)."""
        for name in self.parts:
            self.t(name, device)
        return self

    def contract(self, P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
        """T_hat x_1 P x_2 Q for batches P, Q [..., d] -> [...] (numeric) or [..., K] (categorical), on P's device."""
        dev = P.device
        t = lambda name: self.t(name, dev)  # noqa: E731
        if self.method == "tt":
            v = P @ t("G1")[0]  # [..., R1]
            g2 = t("G2")  # R1 x d x R2
            w = torch.einsum("...r,...d,rds->...s", v, Q, g2)
            if self.categorical:
                return w @ t("G3")[:, :, 0]
            return w[..., 0]
        if self.method == "cp":
            z = (P @ t("F0")) * (Q @ t("F1")) * t("lam")
            return z @ t("F2").T if self.categorical else z.sum(-1)
        pa, qb = P @ t("U0"), Q @ t("U1")
        if self.categorical:
            return torch.einsum("...x,...y,xyz,kz->...k", pa, qb, t("core"), t("U2"))
        return torch.einsum("...x,...y,xy->...", pa, qb, t("core"))


def _rel_error(T: np.ndarray, sk: Sketch) -> float:
    nt = float(np.linalg.norm(T))
    if T.ndim == 2 and T.size > 4_000_000:  # big level tables: residual in row chunks, never two dense copies
        err2 = 0.0
        for i in range(0, T.shape[0], 256):
            rows = sk_rows(sk, i, min(i + 256, T.shape[0]))
            err2 += float(((T[i:i + 256] - rows) ** 2).sum())
        return math.sqrt(err2) / nt
    return float(np.linalg.norm(T - sk.dense())) / nt


def sk_rows(sk: Sketch, i: int, j: int) -> np.ndarray:
    """Rows i..j of a 2-D T_hat."""
    p = sk.parts
    if sk.method == "tt":
        return p["G1"][0][i:j] @ p["G2"][:, :, 0]
    if sk.method == "cp":
        return (p["F0"][i:j] * p["lam"]) @ p["F1"].T
    return p["U0"][i:j] @ p["core"] @ p["U1"].T


def _hmt_range(c: np.ndarray, r: int, rng: np.random.Generator):
    """The official construction (tt_sketch.hmt_sketch, used by the paper's tensor_sketch.py): Y = C Omega with
    exactly r Gaussian columns (no oversampling, no power iteration), Q = orth(Y), C ~ Q (Q^T C). Not the best rank-r
    approximation when rank(C) > r (a random vector of the range instead of the top singular vector)."""
    q, _ = np.linalg.qr(c @ rng.standard_normal((c.shape[1], r)))
    return q, np.ones(r), q.T @ c


def tt_svd(T: np.ndarray, rank: int, rng: np.random.Generator | None, hmt: bool = False) -> Sketch:
    """TT-SVD (left-to-right sequential truncated SVDs of the unfoldings), rank capped at `rank`; hmt=True uses the
    official randomized range finder `_hmt_range` on every unfolding instead."""
    cores, c, r_prev = [], T, 1
    for k in range(T.ndim - 1):
        c = c.reshape(r_prev * T.shape[k], -1)
        r = min(rank, *c.shape)
        u, s, vt = _hmt_range(c, r, rng) if hmt else _svd_trunc(c, r, rng)
        cores.append(u.reshape(r_prev, T.shape[k], r))
        c, r_prev = s[:, None] * vt, r
    cores.append(c.reshape(r_prev, T.shape[-1], 1))
    return Sketch("tt", T.shape, {f"G{i + 1}": g for i, g in enumerate(cores)})


def cp_als(T: np.ndarray, rank: int, rng: np.random.Generator, iters: int = 300) -> Sketch:
    """CP (PARAFAC) by alternating least squares from a random start."""
    fs = [rng.standard_normal((n, rank)) for n in T.shape]
    letters = "abc"[:T.ndim]
    for _ in range(iters):
        for k in range(T.ndim):
            others = [fs[j] for j in range(T.ndim) if j != k]
            gram = np.ones((rank, rank))
            for f in others:
                gram *= f.T @ f
            spec = ",".join(letters[j] + "r" for j in range(T.ndim) if j != k)
            mttkrp = np.einsum(f"{letters},{spec}->{letters[k]}r", T, *others)
            fs[k] = np.linalg.lstsq(gram.T, mttkrp.T, rcond=None)[0].T
    lam = np.ones(rank)
    for k in range(T.ndim):
        nrm = np.linalg.norm(fs[k], axis=0) + 1e-300
        fs[k], lam = fs[k] / nrm, lam * nrm
    return Sketch("cp", T.shape, {"lam": lam, **{f"F{k}": f for k, f in enumerate(fs)}})


def tucker_hosvd(T: np.ndarray, rank: int) -> Sketch:
    us = []
    for k in range(T.ndim):
        unf = np.moveaxis(T, k, 0).reshape(T.shape[k], -1)
        u, _, _ = np.linalg.svd(unf, full_matrices=False)
        us.append(u[:, :min(rank, T.shape[k])])
    core = np.einsum("ab,ax,by->xy", T, *us) if T.ndim == 2 else np.einsum("abk,ax,by,kz->xyz", T, *us)
    return Sketch("tucker", T.shape, {"core": core, **{f"U{k}": u for k, u in enumerate(us)}})


@functools.lru_cache(maxsize=64)
def build_sketch(kind: str, d: int, method: str, rank: int, seed: int) -> Sketch:
    """Sketch of one level's table; stochastic builds run twice and keep the smaller relative error.
    Cached per process: the sketches are constants of the program, built once before training."""
    T = program_tensor(kind, d)
    draws = []
    for j in range(2):
        rng = np.random.default_rng(seed + j)
        if method == "tt":
            sk = tt_svd(T, rank, rng)
            if max(T.shape) <= _FULL_SVD_MAX:  # deterministic: a second draw would be identical
                sk.rel_error = _rel_error(T, sk)
                return _check(sk)
        elif method == "tt_hmt":  # official construction; stochastic at every size: always two draws
            sk = tt_svd(T, rank, rng, hmt=True)
        elif method == "cp":
            sk = cp_als(T, rank, rng, iters=300 if T.size <= 1_000_000 else 30)
        else:
            sk = tucker_hosvd(T, rank)
            sk.rel_error = _rel_error(T, sk)
            return _check(sk)
        sk.rel_error = _rel_error(T, sk)
        draws.append(sk)
    return _check(min(draws, key=lambda s: s.rel_error))


def broken(sk: Sketch, seed: int) -> Sketch:
    """Claim B's broken control: the sketch with its last axis (the second operand's, of a 2-D numeric table)
    permuted by a fixed random permutation of `seed`: T_hat'[a, b] = T_hat[a, perm(b)], so the same rank and
    Frobenius norm, the wrong program. Its rel_error is measured against the true table."""
    if sk.categorical:
        raise ValueError("broken sketch: numeric (2-D) tables only")
    perm = np.random.default_rng(seed).permutation(sk.shape[1])
    p = dict(sk.parts)
    if sk.method == "tt":
        p["G2"] = p["G2"][:, perm, :]
    elif sk.method == "cp":
        p["F1"] = p["F1"][perm]
    else:
        p["U1"] = p["U1"][perm]
    out = Sketch(sk.method, sk.shape, p)
    out.rel_error = _rel_error(program_tensor("sum", sk.shape[0]), out)
    return _check(out)


def _check(sk: Sketch) -> Sketch:
    if not math.isfinite(sk.rel_error) or not all(np.isfinite(v).all() for v in sk.parts.values()):
        # the official script silently skips training on a NaN sketch; fail loudly instead
        raise FloatingPointError(f"{sk.method} sketch of shape {sk.shape} is not finite (rel. error {sk.rel_error})")
    return sk
