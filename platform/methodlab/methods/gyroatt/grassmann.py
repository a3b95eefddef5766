"""Gyro structure of the Grassmannian Gr(n, p) in the orthonormal-basis view (GyroBN's Grassmannian),
and SPSD(n, p) = Gr(n, p) x SPD(p) componentwise. Log/Exp use only spectral functions of p x p
Gram matrices (atan(s)/s, cos(s), sin(s)/s of A^T A), so gradients never divide by singular-value gaps."""

from __future__ import annotations


import torch

from methodlab.methods.gyroatt import linalg as la
from methodlab.methods.gyroatt.spd import make_spd


def _atan_ratio(lam):  # g(l) = atan(sqrt l)/sqrt l and g'(l)
    lam = lam.clamp_min(0.0)
    r = lam.sqrt()
    small = lam < 1e-8
    rs = torch.where(small, torch.ones_like(r), r)
    ls = torch.where(small, torch.ones_like(lam), lam)
    g = torch.where(small, 1 - lam / 3, torch.atan(rs) / rs)
    dg = torch.where(small, torch.full_like(lam, -1 / 3), (1 / (2 * (1 + ls)) - torch.atan(rs) / (2 * rs)) / ls)
    return g, dg


def _cos_sqrt(lam):
    lam = lam.clamp_min(0.0)
    small = lam < 1e-8
    r = torch.where(small, torch.ones_like(lam), lam).sqrt()
    c = torch.where(small, 1 - lam / 2, torch.cos(r))
    dc = torch.where(small, torch.full_like(lam, -0.5), -torch.sin(r) / (2 * r))
    return c, dc


def _sinc_sqrt(lam):
    lam = lam.clamp_min(0.0)
    small = lam < 1e-6
    ls = torch.where(small, torch.ones_like(lam), lam)
    r = ls.sqrt()
    s = torch.where(small, 1 - lam / 6, torch.sin(r) / r)
    ds = torch.where(small, torch.full_like(lam, -1 / 6), torch.cos(r) / (2 * ls) - torch.sin(r) / (2 * ls * r))
    return s, ds


class _ArccosSq(torch.autograd.Function):
    """theta^2 = arccos(sqrt(c2))^2 with its finite derivative -theta / (sin theta cos theta) (-> -1 at c2 = 1)."""

    @staticmethod
    def forward(ctx, c2):
        c2 = c2.clamp(1e-12, 1.0)
        c = c2.sqrt()
        th = torch.arccos(c.clamp(max=1.0))
        ctx.save_for_backward(c2, th)
        return th * th

    @staticmethod
    def backward(ctx, g):
        c2, th = ctx.saved_tensors
        sc = (c2 * (1 - c2)).clamp_min(0).sqrt()
        d = torch.where(th < 1e-4, -torch.ones_like(th), -th / sc.clamp_min(1e-12))
        return g * d


def gram_fn(a, fn):
    """fn applied to a^T a (p x p)."""
    return la.spectral(a.transpose(-1, -2) @ a, fn)


class Grassmann:
    name = "grassmann"

    def __init__(self, n: int, p: int, karcher_iters: int = 1):
        if not 0 < p < n:
            raise ValueError(f"Grassmann rank p={p} must satisfy 0 < p < n={n}")
        self.n, self.p, self.karcher_iters = n, p, karcher_iters

    def identity(self, dtype=torch.float64, device=None):
        return torch.eye(self.n, self.p, dtype=dtype, device=device)

    def encode(self, x):
        return la.eigh_top(x, self.p)[0]

    def decode(self, u):
        return u

    def log(self, m, u):
        """Riemannian log at m of span(u): A = (I - m m^T) u (m^T u)^-1 = Q S R^T -> Q atan(S) R^T."""
        mu = m.transpose(-1, -2) @ u
        num = u - m @ mu
        a = torch.linalg.solve(mu.transpose(-1, -2), num.transpose(-1, -2)).transpose(-1, -2)
        return a @ gram_fn(a, _atan_ratio)

    def exp(self, m, t):
        """Exp at m of tangent t = Q S R^T: m R cos S R^T + Q sin S R^T, re-orthonormalised."""
        return la.qr_orth(m @ gram_fn(t, _cos_sqrt) + t @ gram_fn(t, _sinc_sqrt))

    def log_id(self, u):
        """B with [0; B] = log of u at I_{n,p}."""
        return self.log(self.identity(u.dtype, u.device).expand(*u.shape[:-2], self.n, self.p), u)[..., self.p:, :]

    def omega(self, b):
        z = torch.zeros(*b.shape[:-2], self.p, self.p, dtype=b.dtype, device=b.device)
        z2 = torch.zeros(*b.shape[:-2], self.n - self.p, self.n - self.p, dtype=b.dtype, device=b.device)
        top = torch.cat([z, -b.transpose(-1, -2)], -1)
        bottom = torch.cat([b, z2], -1)
        return torch.cat([top, bottom], -2)

    def add(self, u, v):
        """U (+) V = expm(Omega_U) V."""
        return torch.linalg.matrix_exp(self.omega(self.log_id(u))) @ v

    def scal(self, t, u):
        """t (x) U = expm(t Omega_U) I_{n,p}."""
        return torch.linalg.matrix_exp(t * self.omega(self.log_id(u)))[..., :, : self.p]

    def inverse(self, u):
        return self.scal(-1.0, u)

    def dist2(self, u, v):
        """Pairwise squared geodesic distance sum theta_k^2, cos^2 theta = eig((U^T V)(U^T V)^T)."""
        m = u.unsqueeze(-3).transpose(-1, -2) @ v.unsqueeze(-4)
        c2 = torch.linalg.eigvalsh(la.sym(m @ m.transpose(-1, -2)))
        return _ArccosSq.apply(c2).sum(-1)

    def wfm(self, u, w, iters: int | None = None):
        """Start at the projection-metric mean (top-p eigvecs of sum_j w_j U_j U_j^T), then Karcher flow."""
        iters = self.karcher_iters if iters is None else iters
        proj = u @ u.transpose(-1, -2)
        m = la.eigh_top(torch.einsum("bij,bjxy->bixy", w, proj), self.p)[0]
        for _ in range(iters):
            logs = self.log(m.unsqueeze(-3), u.unsqueeze(-4))  # [B, i, j, n, p]
            m = self.exp(m, torch.einsum("bij,bijxy->bixy", w, logs))
        return m

    def hom(self, u, mats):
        """h(U) = diag(M1, M2) U with M1 in O(p), M2 in O(n - p): fixes I_{n,p}, commutes with (+) and (x)."""
        m1, m2 = mats
        return torch.cat([m1 @ u[..., : self.p, :], m2 @ u[..., self.p:, :]], -2)

    def bias(self, u, b):
        """B (+) U with the bias point B = Exp_{I_{n,p}}([0; b]) parametrised by its log b."""
        return torch.linalg.matrix_exp(self.omega(b)) @ u

    def activation(self, u, kind: str, p: float):
        return la.qr_orth(u)  # spec: re-orthonormalise the subspace factor

    def tangent(self, u):
        return la.tril_vec(u @ u.transpose(-1, -2))


class SPSD:
    """(U, S): U in Gr(n, p) aligned to I_{n,p} (polar factor of its top block), S = U^T Sigma U in SPD(p)."""

    def __init__(self, n: int, p: int, spd: str, karcher_iters: int = 1):
        self.gr = Grassmann(n, p, karcher_iters)
        self.spd = make_spd(spd, karcher_iters)
        self.n, self.p, self.name = n, p, f"spsd-{spd}"

    def encode(self, x):
        u = la.eigh_top(x, self.p)[0]
        u1 = u[..., : self.p, :]
        o = u1 @ la.invsqrtm(u1.transpose(-1, -2) @ u1)  # polar factor: removes the p x p rotation ambiguity
        u = u @ o.transpose(-1, -2)
        return u, self.spd.encode(u.transpose(-1, -2) @ x @ u)

    def decode(self, a):
        return a[0], self.spd.decode(a[1])

    def add(self, a, b):
        return self.gr.add(a[0], b[0]), self.spd.add(a[1], b[1])

    def scal(self, t, a):
        return self.gr.scal(t, a[0]), self.spd.scal(t, a[1])

    def inverse(self, a):
        return self.gr.inverse(a[0]), self.spd.inverse(a[1])

    def dist2(self, a, b):
        return self.gr.dist2(a[0], b[0]) + self.spd.dist2(a[1], b[1])

    def wfm(self, a, w):
        return self.gr.wfm(a[0], w), self.spd.wfm(a[1], w)

    def hom(self, a, mats):
        m1, m2, o = mats
        return self.gr.hom(a[0], (m1, m2)), self.spd.hom(a[1], o)

    def bias(self, a, params):
        return self.gr.bias(a[0], params[0]), self.spd.bias(a[1], params[1])

    def activation(self, a, kind: str, p: float):
        return self.gr.activation(a[0], kind, p), self.spd.activation(a[1], kind, p)

    def tangent(self, a):
        return torch.cat([self.gr.tangent(a[0]), self.spd.tangent(a[1])], -1)


GEOMETRIES = ("spd-aim", "spd-lem", "spd-lcm", "spsd-aim", "spsd-lem", "spsd-lcm", "grassmann")


def make_geometry(name: str, n: int, p: int, karcher_iters: int = 1):
    if name.startswith("spd-"):
        return make_spd(name[4:], karcher_iters)
    if name.startswith("spsd-"):
        return SPSD(n, p, name[5:], karcher_iters)
    if name == "grassmann":
        return Grassmann(n, p, karcher_iters)
    raise ValueError(f"unknown geometry {name!r}; allowed: {', '.join(GEOMETRIES)}")


