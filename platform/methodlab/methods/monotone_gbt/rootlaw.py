"""Root laws f on [-1, 1] of the generalized Bradley-Terry model: P(r | s) = f(r) exp(r s - Phi(s)), Phi the cumulant
generating function. Each law gives Phi, Phi' (= E[r | s]), Phi'' (> 0: the loss is convex), P(r > 0 | s) and a
sampler of r given s. Every function is vectorised over s (numpy) and finite for |s| up to 1e300.

- uniform (the paper's default): Phi = log(sinh s / s); Taylor series near 0, log-space form for large |s|.
- binary (classic Bradley-Terry on r in {-1, 1}): Phi = log cosh s, Phi' = tanh s.
- kary: uniform on K equispaced points of [-1, 1]: Phi = log(sinh(K s/(K-1)) / (K sinh(s/(K-1)))).
- gaussian [RECON]: r ~ N(v s, v) for a base variance v (Phi = v s^2 / 2); not bounded to [-1, 1].
"""

from __future__ import annotations

import numpy as np

SMALL = 1e-3  # |s| below which the uniform Phi uses its Taylor series s^2/6 - s^4/180
SMALL_D = 0.05  # ... and Phi' its series s/3 - s^3/45 + 2 s^5/945 (coth(s) - 1/s cancels below; error < 1e-11 here)
LN2 = float(np.log(2.0))


def _log_sinh_over(s: np.ndarray) -> np.ndarray:
    """log(sinh(|s|)/|s|) for |s| >= SMALL: the direct form below |s| = 20 (no cancellation), the spec's safe form
    |s| - log(2|s|) + log1p(-exp(-2|s|)) above (no overflow)."""
    a = np.abs(s)
    out = np.empty_like(a)
    mid = a < 20.0
    out[mid] = np.log(np.sinh(a[mid]) / a[mid])
    b = a[~mid]
    out[~mid] = b - np.log(2.0 * b) + np.log1p(-np.exp(-2.0 * b))
    return out


def _log_cosh(s: np.ndarray) -> np.ndarray:
    a = np.abs(s)
    return a - LN2 + np.log1p(np.exp(-2.0 * a))


def _log_sinh(a: np.ndarray) -> np.ndarray:
    """log sinh(a) for a > 0."""
    return a - LN2 + np.log1p(-np.exp(-2.0 * a))


class RootLaw:
    name = "base"

    def phi(self, s):  # pragma: no cover - interface
        raise NotImplementedError

    def dphi(self, s):  # pragma: no cover
        raise NotImplementedError

    def d2phi(self, s):  # pragma: no cover
        raise NotImplementedError

    def p_positive(self, s):
        """P(r > 0 | s)."""
        raise NotImplementedError  # pragma: no cover

    def sample(self, s, rng):  # pragma: no cover
        raise NotImplementedError


class Uniform(RootLaw):
    name = "uniform"

    def phi(self, s):
        s = np.asarray(s, dtype=float)
        out = np.empty_like(s)
        small = np.abs(s) < SMALL
        s2 = s[small] ** 2
        out[small] = s2 / 6.0 - s2 * s2 / 180.0
        out[~small] = _log_sinh_over(s[~small])
        return out

    def dphi(self, s):
        """E[r | s] = coth(s) - 1/s (odd, in (-1, 1))."""
        s = np.asarray(s, dtype=float)
        out = np.empty_like(s)
        small = np.abs(s) < SMALL_D
        x = s[small]
        out[small] = x / 3.0 - x ** 3 / 45.0 + 2.0 * x ** 5 / 945.0
        y = s[~small]
        with np.errstate(over="ignore"):
            out[~small] = 1.0 / np.tanh(y) - 1.0 / y
        return out

    def d2phi(self, s):
        """Var[r | s] = 1/s^2 - 1/sinh(s)^2 (in (0, 1/3])."""
        s = np.asarray(s, dtype=float)
        out = np.empty_like(s)
        small = np.abs(s) < 1e-2
        x2 = s[small] ** 2
        out[small] = 1.0 / 3.0 - x2 / 15.0 + 2.0 * x2 * x2 / 189.0
        y = np.abs(s[~small])
        # 1/sinh^2 = 4 e^{-2y} / (1 - e^{-2y})^2, no overflow
        e = np.exp(-2.0 * y)
        out[~small] = 1.0 / y ** 2 - 4.0 * e / (1.0 - e) ** 2
        return np.maximum(out, 0.0)

    def p_positive(self, s):
        """(e^s - 1)/(e^s - e^-s) = sigmoid(s)."""
        s = np.asarray(s, dtype=float)
        return 0.5 * (1.0 + np.tanh(0.5 * s))

    def sample(self, s, rng):
        """Density prop. to exp(r s) on [-1, 1]: u ~ Exp(|s|) truncated to [0, 2] (inverse CDF, no rejection loop),
        r = (1 - u) sign(s); |s| < 1e-6: r ~ U(-1, 1)."""
        s = np.atleast_1d(np.asarray(s, dtype=float))
        v = rng.random(s.shape)
        a = np.abs(s)
        r = np.empty_like(s)
        tiny = a < 1e-6
        r[tiny] = 2.0 * v[tiny] - 1.0
        at = a[~tiny]
        u = -np.log1p(v[~tiny] * np.expm1(-2.0 * at)) / at
        r[~tiny] = (1.0 - np.clip(u, 0.0, 2.0)) * np.sign(s[~tiny])
        return r


class Binary(RootLaw):
    name = "binary"

    def phi(self, s):
        return _log_cosh(np.asarray(s, dtype=float))

    def dphi(self, s):
        return np.tanh(np.asarray(s, dtype=float))

    def d2phi(self, s):
        t = np.tanh(np.asarray(s, dtype=float))
        return np.maximum(1.0 - t * t, 0.0)

    def p_positive(self, s):
        return 0.5 * (1.0 + np.tanh(np.asarray(s, dtype=float)))  # e^s / (e^s + e^-s)

    def sample(self, s, rng):
        s = np.atleast_1d(np.asarray(s, dtype=float))
        return np.where(rng.random(s.shape) < self.p_positive(s), 1.0, -1.0)


class KAry(RootLaw):
    """Uniform on K equispaced points c_k of [-1, 1]; computed as a log-sum-exp over the points (exact for any s)."""

    name = "kary"

    def __init__(self, k: int = 11):
        if k < 2:
            raise ValueError("kary root law needs K >= 2")
        self.k = int(k)
        self.points = np.linspace(-1.0, 1.0, self.k)

    def _weights(self, s):
        s = np.asarray(s, dtype=float)
        z = s[..., None] * self.points  # [..., K]
        m = np.abs(s)[..., None]
        w = np.exp(z - m)
        return w, m[..., 0]

    def phi(self, s):
        w, m = self._weights(s)
        return m + np.log(w.mean(-1))

    def dphi(self, s):
        w, _ = self._weights(s)
        return (w * self.points).sum(-1) / w.sum(-1)

    def d2phi(self, s):
        w, _ = self._weights(s)
        p = w / w.sum(-1, keepdims=True)
        mu = (p * self.points).sum(-1)
        return np.maximum((p * self.points ** 2).sum(-1) - mu ** 2, 0.0)

    def p_positive(self, s):
        w, _ = self._weights(s)
        return (w * (self.points > 0)).sum(-1) / w.sum(-1)

    def sample(self, s, rng):
        s = np.atleast_1d(np.asarray(s, dtype=float))
        w, _ = self._weights(s)
        cdf = np.cumsum(w / w.sum(-1, keepdims=True), -1)
        idx = (rng.random(s.shape)[..., None] > cdf).sum(-1)
        return self.points[np.minimum(idx, self.k - 1)]


class Gaussian(RootLaw):
    """[RECON] f = N(0, v): Phi = v s^2/2, E[r|s] = v s, r | s ~ N(v s, v)."""

    name = "gaussian"

    def __init__(self, var: float = 1.0):
        self.var = float(var)

    def phi(self, s):
        s = np.asarray(s, dtype=float)
        return 0.5 * self.var * s * s

    def dphi(self, s):
        return self.var * np.asarray(s, dtype=float)

    def d2phi(self, s):
        return np.full(np.shape(s), self.var, dtype=float)

    def p_positive(self, s):
        from scipy.special import ndtr

        return ndtr(np.sqrt(self.var) * np.asarray(s, dtype=float))

    def sample(self, s, rng):
        s = np.atleast_1d(np.asarray(s, dtype=float))
        return self.var * s + np.sqrt(self.var) * rng.standard_normal(s.shape)


def make_law(name: str, k: int = 11, gaussian_var: float = 1.0) -> RootLaw:
    if name == "uniform":
        return Uniform()
    if name == "binary":
        return Binary()
    if name == "kary":
        return KAry(k)
    if name == "gaussian":
        return Gaussian(gaussian_var)
    raise ValueError(f"unknown root law {name!r}; allowed: uniform, binary, kary, gaussian")
