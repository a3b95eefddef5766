"""Linear GBT with a diffusion prior (LGBT-D): scores theta = x^T beta, x in R^{D x A} (a column per alternative),
prior precision P = sigma^-2 I_D + x L x^T, MAP beta* = argmin 1/2 beta^T P beta + sum_n [Phi(d_n) - r_n d_n],
d_n = theta_{a_n} - theta_{b_n}. Strictly convex for sigma < inf; solved by L-BFGS from beta = 0 (the spec's
solver) or by Newton's method (exact to machine precision; used by the finite-difference monotonicity check).

Monotonicity (implicit differentiation of the optimality condition): d theta*/d r_ab = M (e_a - e_b) with
M = x^T (P + x H x^T)^{-1} x, H = sum_n Phi''(d_n) (e_a - e_b)(e_a - e_b)^T. Everything here is numpy/scipy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse

from methodlab.methods.monotone_gbt.rootlaw import RootLaw


# ---------------------------------------------------------------------------------------------- embeddings
def embeddings(kind: str, a: int, x_feat: np.ndarray | None, identity_weight: float = 1.0) -> np.ndarray:
    """x (rows = coordinates of beta, columns = alternatives) of a model kind:
    gbt_embedding = [lambda I_A ; x_feat] (LGBT-D, identity rows on top), gbt = I_A, embedding = x_feat."""
    if kind == "gbt":
        return np.eye(a)
    if x_feat is None or x_feat.shape[0] == 0:
        if kind == "embedding":
            raise ValueError("model 'embedding' needs item features (x_feat has no rows)")
        return identity_weight * np.eye(a)
    if x_feat.shape[1] != a:
        raise ValueError(f"x_feat has {x_feat.shape[1]} columns, expected one per alternative ({a})")
    if kind == "embedding":
        return np.asarray(x_feat, dtype=float)
    if kind == "gbt_embedding":
        return np.vstack([identity_weight * np.eye(a), np.asarray(x_feat, dtype=float)])
    raise ValueError(f"unknown model kind {kind!r}; allowed: gbt_embedding, gbt, embedding")


def n_identity_rows(kind: str, a: int) -> int:
    return {"gbt": a, "gbt_embedding": a, "embedding": 0}[kind]


# ------------------------------------------------------------------------------------------- Laplacians
def laplacian_from_weights(w: np.ndarray, normalise: bool = True) -> np.ndarray:
    """L = diag(W 1) - W of a symmetric weight matrix; `normalise` divides by the mean degree [RECON] so that the
    diffusion weight w means the same on graphs of any density (a genre clique graph has degrees in the hundreds)."""
    w = np.asarray(w, dtype=float)
    w = 0.5 * (w + w.T)
    np.fill_diagonal(w, 0.0)
    deg = w.sum(1)
    lap = np.diag(deg) - w
    if normalise and deg.mean() > 0:
        lap /= deg.mean()
    return lap


def knn_laplacian(x_feat: np.ndarray, k: int = 5) -> np.ndarray:
    """Symmetrised k-nearest-neighbour graph over the alternatives' feature columns, Gaussian weights
    exp(-d^2 / median(d^2)) [RECON: the spec names a weighted similarity graph without its construction]."""
    f = np.asarray(x_feat, dtype=float).T  # [A, D]
    a = f.shape[0]
    sq = (f * f).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * f @ f.T, 0.0)
    np.fill_diagonal(d2, np.inf)
    k = max(1, min(k, a - 1))
    nn = np.argsort(d2, axis=1)[:, :k]
    scale = np.median(d2[np.isfinite(d2)]) or 1.0
    w = np.zeros((a, a))
    rows = np.repeat(np.arange(a), k)
    w[rows, nn.ravel()] = np.exp(-d2[rows, nn.ravel()] / scale)
    return laplacian_from_weights(np.maximum(w, w.T))


def group_laplacian(x_feat: np.ndarray) -> np.ndarray:
    """Clique Laplacian: alternatives sharing a feature (category) are linked with weight = shared count."""
    g = (np.asarray(x_feat) != 0).astype(float)
    return laplacian_from_weights(g.T @ g)


def prior_precision(x: np.ndarray, sigma: float, lap: np.ndarray | None = None) -> np.ndarray:
    p = np.eye(x.shape[0]) / sigma ** 2
    if lap is not None and np.any(lap):
        p = p + x @ lap @ x.T
    return p


# ------------------------------------------------------------------------------------------------ MAP fit
@dataclass
class Comparisons:
    a: np.ndarray  # int [N]
    b: np.ndarray  # int [N]
    r: np.ndarray  # float [N], r > 0: a preferred
    n_items: int

    def __len__(self) -> int:
        return len(self.r)

    def subset(self, idx) -> "Comparisons":
        return Comparisons(self.a[idx], self.b[idx], self.r[idx], self.n_items)

    def incidence(self) -> scipy.sparse.csr_matrix:
        """Signed incidence B [N, A]: row n = e_a - e_b."""
        n = len(self.r)
        rows = np.concatenate([np.arange(n), np.arange(n)])
        cols = np.concatenate([self.a, self.b])
        vals = np.concatenate([np.ones(n), -np.ones(n)])
        return scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(n, self.n_items))


def _scatter(data: Comparisons, v: np.ndarray) -> np.ndarray:
    """B^T v without building B."""
    return (np.bincount(data.a, v, minlength=data.n_items) - np.bincount(data.b, v, minlength=data.n_items))


def loss_and_grad(beta, x, sigma, lap, data: Comparisons, law: RootLaw, lin: np.ndarray | None = None):
    """Negative log posterior (up to constants) and its gradient in beta:
    |beta|^2 / (2 sigma^2) + theta^T L theta / 2 + sum_n [Phi(d_n) - r_n d_n]  (= 1/2 beta^T P beta + ...).
    `lap` is the already weighted A x A Laplacian or None. `lin` (length A) adds -lin . theta (a linear tilt; the
    finite-difference check uses it to perturb r of any pair)."""
    theta = x.T @ beta
    d = theta[data.a] - theta[data.b]
    f = 0.5 * float(beta @ beta) / sigma ** 2 + float(np.sum(law.phi(d) - data.r * d))
    g_theta = _scatter(data, law.dphi(d) - data.r)
    if lap is not None:
        lt = lap @ theta
        f += 0.5 * float(theta @ lt)
        g_theta = g_theta + lt
    if lin is not None:
        f -= float(lin @ theta)
        g_theta = g_theta - lin
    return f, beta / sigma ** 2 + x @ g_theta


def hessian(beta, x, sigma, lap, data: Comparisons, law: RootLaw) -> np.ndarray:
    theta = x.T @ beta
    k = comparison_laplacian(data, law.d2phi(theta[data.a] - theta[data.b]))
    if lap is not None:
        k = k + lap
    return np.eye(x.shape[0]) / sigma ** 2 + x @ k @ x.T


def comparison_laplacian(data: Comparisons, w: np.ndarray | None = None) -> np.ndarray:
    """H = sum_n w_n (e_a - e_b)(e_a - e_b)^T (dense A x A)."""
    a_n = data.n_items
    w = np.ones(len(data)) if w is None else w
    h = np.zeros((a_n, a_n))
    np.add.at(h, (data.a, data.a), w)
    np.add.at(h, (data.b, data.b), w)
    np.add.at(h, (data.a, data.b), -w)
    np.add.at(h, (data.b, data.a), -w)
    return h


@dataclass
class FitResult:
    beta: np.ndarray
    theta: np.ndarray
    loss: float
    iterations: int
    grad_norm: float
    converged: bool


def fit_map(x: np.ndarray, data: Comparisons, law: RootLaw, sigma: float = 1.0, lap: np.ndarray | None = None,
            solver: str = "lbfgs", tol: float = 1e-10, max_iter: int = 15000, beta0: np.ndarray | None = None,
            lin: np.ndarray | None = None) -> FitResult:
    lap = lap if lap is not None and np.any(lap) else None
    beta = np.zeros(x.shape[0]) if beta0 is None else np.array(beta0, dtype=float)
    x_dense = x
    if solver == "lbfgs" and x.size > 40_000 and np.count_nonzero(x) < 0.05 * x.size:
        x = scipy.sparse.csr_matrix(x)  # identity + one-hot / multi-hot blocks: sparse products, same maths
    if solver == "lbfgs":
        res = scipy.optimize.minimize(loss_and_grad, beta, args=(x, sigma, lap, data, law, lin), jac=True, method="L-BFGS-B",
                                      options={"maxiter": max_iter, "gtol": tol, "ftol": 1e-15, "maxcor": 20})
        beta, it = res.x, int(res.nit)
    elif solver == "newton":
        beta, it = _newton(beta, x, sigma, lap, data, law, lin, tol, max_iter)
    else:
        raise ValueError(f"unknown solver {solver!r}")
    f, g = loss_and_grad(beta, x, sigma, lap, data, law, lin)
    gn = float(np.abs(g).max()) if len(g) else 0.0
    return FitResult(beta, x_dense.T @ beta, f, it, gn, gn <= max(1e-5, 100 * tol))  # converged: |grad|_max <= 1e-5


def _newton(beta, x, sigma, lap, data, law, lin, tol, max_iter):
    """Damped Newton; stops at |grad|_max <= tol, or when a full step no longer changes beta (machine precision)."""
    f, g = loss_and_grad(beta, x, sigma, lap, data, law, lin)
    it = 0
    for it in range(1, min(max_iter, 100) + 1):
        if np.abs(g).max() <= tol:
            return beta, it - 1
        h = hessian(beta, x, sigma, lap, data, law)
        step = scipy.linalg.solve(h, g, assume_a="pos")
        t = 1.0
        while True:  # backtracking (Armijo); a strictly convex problem, so this always terminates
            nb = beta - t * step
            nf, ng = loss_and_grad(nb, x, sigma, lap, data, law, lin)
            if nf <= f - 1e-4 * t * float(g @ step) or t < 1e-10:
                break
            t *= 0.5
        small = np.abs(t * step).max() <= 1e-15 * max(1.0, float(np.abs(beta).max()))
        beta, f, g = nb, min(nf, f), ng
        if small:
            break
    return beta, it


def predict_r(theta: np.ndarray, a: np.ndarray, b: np.ndarray, law: RootLaw) -> np.ndarray:
    """E[r | a, b] = Phi'(theta_a - theta_b)."""
    return law.dphi(theta[a] - theta[b])


def nmse(theta_hat: np.ndarray, theta_true: np.ndarray) -> float:
    """||c(theta*) - c(theta_true)||^2 / ||c(theta_true)||^2, c(.) subtracts the mean."""
    u = theta_hat - theta_hat.mean()
    v = theta_true - theta_true.mean()
    den = float(v @ v)
    return float((u - v) @ (u - v) / den) if den > 0 else float("nan")


# ------------------------------------------------------------------------------------------- monotonicity
def m_matrix(gram: np.ndarray, h: np.ndarray, sigma: float = 1.0, lap: np.ndarray | None = None) -> np.ndarray:
    """M = x^T (sigma^-2 I + x (L + H) x^T)^{-1} x = sigma^2 (I + sigma^2 X (L + H))^{-1} X, X = x^T x (push-through
    identity; with sigma = 1 and L = 0 this is the paper's (I + X H)^{-1} X)."""
    a = gram.shape[0]
    k = h if lap is None else h + lap
    s2 = sigma ** 2
    return s2 * np.linalg.solve(np.eye(a) + s2 * gram @ k, gram)


def random_laplacian(a: int, rng: np.random.Generator, kind: str = "binary") -> np.ndarray:
    """The official test's random weighted Laplacian: symmetric off-diagonals -|randint(-1, 2)| (binary: an
    unweighted edge with probability 2/3) or -|N(0, 1)| (gaussian); diagonal = minus the row sum."""
    if kind == "binary":
        off = -np.abs(rng.integers(-1, 2, size=(a, a))).astype(float)
    elif kind == "gaussian":
        off = -np.abs(rng.standard_normal((a, a)))
    else:
        raise ValueError(f"unknown laplacian {kind!r}; allowed: binary, gaussian")
    y = np.triu(off, 1)
    y = y + y.T
    np.fill_diagonal(y, -y.sum(1))
    return y


def worst_violation(m: np.ndarray) -> float:
    """max over rows a of max_{b != a} (M_ab - M_aa); <= tol means every row is maximised on its diagonal."""
    off = m - np.diag(m)[:, None]
    np.fill_diagonal(off, -np.inf)
    return float(off.max()) if m.shape[0] > 1 else -np.inf


def monotonicity_test(gram: np.ndarray, rng: np.random.Generator, nb_iter: int = 100, laplacian: str = "binary",
                      tol: float = 1e-4, sigma: float = 1.0, lap: np.ndarray | None = None) -> dict:
    """The official 'metagood' test: `good` iff no random Laplacian H gives a row of M with an off-diagonal entry
    above the diagonal + tol. Returns good, the worst violation over the draws and the number of failing draws."""
    worst, fails = -np.inf, 0
    for _ in range(nb_iter):
        v = worst_violation(m_matrix(gram, random_laplacian(gram.shape[0], rng, laplacian), sigma, lap))
        worst = max(worst, v)
        fails += v > tol
    return {"good": fails == 0, "worst": float(worst), "failing_draws": int(fails), "draws": int(nb_iter)}


def gram_with_alpha(x_feat: np.ndarray, alpha: float) -> np.ndarray:
    """The density study's tested Gram: x_feat^T x_feat + alpha I_A (embeddings [sqrt(alpha) I ; x_feat])."""
    return x_feat.T @ x_feat + alpha * np.eye(x_feat.shape[1])


def predicted_response(m: np.ndarray, a: int, b: int) -> tuple[float, float]:
    """(d theta_a / d r_ab, d theta_b / d r_ab) = (M_aa - M_ab, M_ba - M_bb)."""
    return float(m[a, a] - m[a, b]), float(m[b, a] - m[b, b])


def fd_check(x: np.ndarray, data: Comparisons, law: RootLaw, sigma: float = 1.0, lap: np.ndarray | None = None,
             eps: float = 1e-4, pairs: list[tuple[int, int]] | None = None, tol: float = 1e-6) -> dict:
    """Finite differences against the M-matrix prediction. Perturbing r_ab by eps (for a compared pair) or adding
    the tilt eps (theta_a - theta_b) (any pair: a comparison of zero curvature) moves the MAP solution by
    eps M (e_a - e_b) to first order. Per ordered pair: refit exactly (Newton from the optimum), read the signs of
    theta_a' - theta_a and theta_b' - theta_b; `agree` when FD and M say the same thing about monotonicity
    (theta_a up and theta_b down, within tol relative to the response's size)."""
    base = fit_map(x, data, law, sigma, lap, solver="newton", tol=1e-13)
    m = x.T @ scipy.linalg.solve(hessian(base.beta, x, sigma, lap, data, law), x, assume_a="pos")
    a_n = data.n_items
    pairs = pairs if pairs is not None else [(i, j) for i in range(a_n) for j in range(a_n) if i != j]
    agree, rel_errs, fd_viol, m_viol = 0, [], 0, 0
    for a, b in pairs:
        lin = np.zeros(a_n)
        lin[a], lin[b] = eps, -eps
        fit = fit_map(x, data, law, sigma, lap, solver="newton", tol=1e-13, beta0=base.beta, lin=lin)
        dtheta = (fit.theta - base.theta) / eps
        pred = m[:, a] - m[:, b]
        scale = max(float(np.abs(pred).max()), 1e-12)
        rel_errs.append(float(np.abs(dtheta - pred).max() / scale))
        fd_ok = dtheta[a] >= -tol * scale and dtheta[b] <= tol * scale
        m_ok = pred[a] >= -tol * scale and pred[b] <= tol * scale
        fd_viol += not fd_ok
        m_viol += not m_ok
        agree += fd_ok == m_ok
    n = max(1, len(pairs))
    return {"pairs": len(pairs), "agree": agree / n, "max_rel_err": float(max(rel_errs) if rel_errs else 0.0),
            "median_rel_err": float(np.median(rel_errs) if rel_errs else 0.0), "fd_violations": fd_viol,
            "m_violations": m_viol, "m": m, "theta": base.theta}
