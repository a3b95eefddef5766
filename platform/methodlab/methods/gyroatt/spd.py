"""Gyro structures of SPD(n) under the Log-Euclidean (LEM), Log-Cholesky (LCM) and Affine-Invariant
(AIM) metrics (spec table "Gyro structures"). Each geometry stores a point in its natural chart:
LEM: S = logm X (symmetric); LCM: phi(X) = strict_lower(L) + log D(L), L = chol(X); AIM: X itself.
In the LEM/LCM charts the gyro operations are vector-space operations, which is why their weighted
Frechet means are closed form. All tensors float64; leading dims are batch dims."""

from __future__ import annotations

import torch

from methodlab.methods.gyroatt import linalg as la


# LEM and LCM charts are flat: gyro addition, scaling and inverse are +, * and -, the geodesic distance is the
# Frobenius one and the weighted Frechet mean is the weighted sum.
def chart_add(a, b):
    return a + b


def chart_scal(t, a):
    return t * a


def chart_inverse(a):
    return -a


def chart_dist2(a, b):
    """Pairwise squared geodesic distances: a [B, m, n, n], b [B, k, n, n] -> [B, m, k]."""
    d = a.unsqueeze(-3) - b.unsqueeze(-4)
    return (d * d).sum((-1, -2))


def chart_wfm(a, w):
    """Weighted Frechet mean for every row of w [B, m, k] over points a [B, k, n, n] (closed form)."""
    return torch.einsum("bij,bjxy->bixy", w, a)



class LEM:
    name = "lem"

    def encode(self, x):
        return la.logm(x)

    def decode(self, s):
        return la.expm(s)

    # in this chart the gyro operations are the vector-space ones (shared with the other flat chart)
    add, scal, inverse = staticmethod(chart_add), staticmethod(chart_scal), staticmethod(chart_inverse)
    dist2, wfm = staticmethod(chart_dist2), staticmethod(chart_wfm)

    def hom(self, a, o):
        """h(X) = expm(O^T logm(X) O), O orthogonal (paper's LEM endomorphism)."""
        return o.transpose(-1, -2) @ a @ o

    def bias(self, a, param):
        return a + la.sym(param)

    def activation(self, a, kind: str, p: float):
        if kind == "power":  # X^p = expm(p logm X): exactly linear in this chart
            return p * a
        if kind == "reeig":
            return la.clamp_log_domain(a)
        return a

    def tangent(self, a):
        return la.tril_vec(a)


class LCM:
    name = "lcm"

    def encode(self, x):
        n = x.shape[-1]
        eye = torch.eye(n, dtype=x.dtype, device=x.device)
        l = torch.linalg.cholesky(la.sym(x) + 1e-10 * eye)  # tiny jitter (spec: LCM needs chol)
        return torch.tril(l, -1) + torch.diag_embed(torch.diagonal(l, dim1=-2, dim2=-1).log())

    def chol(self, z):
        return torch.tril(z, -1) + torch.diag_embed(torch.diagonal(z, dim1=-2, dim2=-1).exp())

    def decode(self, z):
        l = self.chol(z)
        return l @ l.transpose(-1, -2)

    # in this chart the gyro operations are the vector-space ones (shared with the other flat chart)
    add, scal, inverse = staticmethod(chart_add), staticmethod(chart_scal), staticmethod(chart_inverse)
    dist2, wfm = staticmethod(chart_dist2), staticmethod(chart_wfm)

    def hom(self, a, o):
        """phi^-1(A(phi(X))), A(Z) = tril(O^T Z O): linear on lower-triangular matrices, hence a gyro
        homomorphism (it commutes with the chart's sum and scaling)."""
        return torch.tril(o.transpose(-1, -2) @ a @ o)

    def bias(self, a, param):
        return a + torch.tril(param)

    def activation(self, a, kind: str, p: float):
        if kind == "none":
            return a
        x = self.decode(a)
        x = la.powm(x, p) if kind == "power" else la.reeig(x)
        return self.encode(x)

    def tangent(self, a):
        return la.tril_vec(a)


class AIM:
    name = "aim"

    def __init__(self, karcher_iters: int = 1):
        self.karcher_iters = karcher_iters

    def encode(self, x):
        return la.sym(x)

    def decode(self, x):
        return x

    def add(self, x, y):
        s = la.sqrtm(x)
        return s @ y @ s

    def scal(self, t, x):
        return la.powm(x, t)

    def inverse(self, x):
        return torch.linalg.inv(x)

    def dist2(self, x, y):
        """||logm(X^-1/2 Y X^-1/2)||_F^2 via eigenvalues only (eigvalsh: no eigenvector-gap terms)."""
        isq = la.invsqrtm(x)
        c = isq.unsqueeze(-3) @ y.unsqueeze(-4) @ isq.unsqueeze(-3)
        lam = torch.linalg.eigvalsh(la.sym(c)).clamp_min(1e-12)
        return (lam.log() ** 2).sum(-1)

    def wfm(self, x, w, iters: int | None = None):
        """Karcher flow from the LEM mean: M <- M^1/2 expm(sum_j w_j logm(M^-1/2 X_j M^-1/2)) M^1/2."""
        iters = self.karcher_iters if iters is None else iters
        m = la.expm(torch.einsum("bij,bjxy->bixy", w, la.logm(x)))
        for _ in range(iters):
            s, isq = la.sqrtm(m), la.invsqrtm(m)
            logs = la.logm(isq.unsqueeze(-3) @ x.unsqueeze(-4) @ isq.unsqueeze(-3))  # [B, i, j, n, n]
            t = torch.einsum("bij,bijxy->bixy", w, logs)
            m = la.sym(s @ la.expm(t) @ s)
        return m

    def hom(self, x, o):
        """h(X) = O X O^T, O square orthogonal (paper's Theorem 5.1)."""
        return o @ x @ o.transpose(-1, -2)

    def bias(self, x, param):
        e = la.expm(0.5 * la.sym(param))  # B^1/2 with B = expm(param): B (+) X = B^1/2 X B^1/2
        return e @ x @ e

    def activation(self, x, kind: str, p: float):
        if kind == "power":
            return la.powm(x, p)
        if kind == "reeig":
            return la.reeig(x)
        return x

    def tangent(self, x):
        return la.tril_vec(la.logm(x))


def make_spd(name: str, karcher_iters: int = 1):
    return {"lem": LEM, "lcm": LCM}[name]() if name != "aim" else AIM(karcher_iters)
