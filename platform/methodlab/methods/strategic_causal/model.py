"""The maths of causal strategic classification (methods/strategic_causal.md, "The algorithm").

Coordinates: improvement coordinates x~ = diag(sign) x (larger = better, effort e >= 0 is improvement).
B~ = diag(sign) B diag(sign); C = (I - B~^T)^{-1}, so Delta x~ = C e and C[i, j] = total effect of effort on j on
feature i. Classifier score s = w^T x~ + b ("favourable" iff s >= 0). Gains g = C^T w.

Everything is numpy / scipy; no torch. Immutable features keep their row/column in C and get no effort.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import optimize
from scipy.special import expit, ndtr

# --------------------------------------------------------------------------------------------------
# contribution matrix, gains, best responses
# --------------------------------------------------------------------------------------------------


def improvement_graph(B: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """B~ = diag(sign) B diag(sign): the graph in improvement coordinates."""
    return np.asarray(sign)[:, None] * np.asarray(B, float) * np.asarray(sign)[None, :]


def contribution_matrix(B_tilde: np.ndarray) -> np.ndarray:
    """C = (I - B~^T)^{-1} (B~[k, j] = effect of k on j): C[i, j] = total effect of a unit of effort on j on i."""
    d = len(B_tilde)
    return np.linalg.solve(np.eye(d) - np.asarray(B_tilde, float).T, np.eye(d))


def gains(C: np.ndarray, w: np.ndarray) -> np.ndarray:
    """g = C^T w: total score increase per unit of effort on each feature."""
    return np.asarray(C).T @ np.asarray(w, float)


def _mask(mutable, d) -> np.ndarray:
    return np.ones(d, bool) if mutable is None else np.asarray(mutable, bool)


def best_response(g: np.ndarray, a: np.ndarray, p: float, budget: float = 1.0, mutable=None,
                  tie_tol: float = 1e-12) -> np.ndarray:
    """Closed-form complete-information best response.

    p > 1: e_j = a_j^{p/(p-1)} max(g_j, 0)^{1/(p-1)} (maximiser of g^T e - (1/p) sum (e_j/a_j)^p).
    p = 1 (budget B): all effort on argmax_j a_j g_j with e = a_j B; ties (within tie_tol, relative) split the
    budget equally; no effort if max a_j g_j <= 0. Immutable features get 0."""
    g, a = np.asarray(g, float), np.asarray(a, float)
    m = _mask(mutable, len(g))
    e = np.zeros(len(g))
    if p > 1:
        gp = np.where(m, np.maximum(g, 0.0), 0.0)
        e = a ** (p / (p - 1)) * gp ** (1.0 / (p - 1))
        return e
    if p != 1:
        raise ValueError("cost p must be >= 1")
    score = np.where(m, a * g, -np.inf)
    top = float(np.max(score))
    if not np.isfinite(top) or top <= 0:
        return e
    tied = np.flatnonzero(score >= top - tie_tol * max(1.0, abs(top)))
    e[tied] = a[tied] * budget / len(tied)
    return e


def cost(e: np.ndarray, a: np.ndarray, p: float) -> float:
    """c_p(e) = (1/p) sum (e_j/a_j)^p for p > 1; sum e_j / a_j for p = 1."""
    r = np.asarray(e, float) / np.asarray(a, float)
    return float(np.sum(r)) if p == 1 else float(np.sum(np.abs(r) ** p) / p)


def best_response_numeric(g: np.ndarray, a: np.ndarray, p: float, budget: float = 1.0, mutable=None,
                          cost_fn=None, cost_grad=None) -> np.ndarray:
    """The same best response from a generic convex solver (the check of the closed forms).

    p > 1 (or any convex cost_fn / cost_grad): maximise g^T e - cost(e), e >= 0, by L-BFGS-B.
    p = 1: the linear program max g^T e s.t. sum e_j / a_j <= B, e >= 0 (HiGHS)."""
    g, a = np.asarray(g, float), np.asarray(a, float)
    m = _mask(mutable, len(g))
    idx = np.flatnonzero(m)
    e = np.zeros(len(g))
    if len(idx) == 0:
        return e
    gi, ai = g[idx], a[idx]
    if p == 1 and cost_fn is None:
        res = optimize.linprog(-gi, A_ub=(1.0 / ai)[None, :], b_ub=[budget], bounds=[(0, None)] * len(idx),
                               method="highs")
        e[idx] = res.x
        return e
    if cost_fn is None:
        def cost_fn(x):
            return np.sum((x / ai) ** p) / p

        def cost_grad(x):
            return (x / ai) ** (p - 1) / ai
    x0 = np.zeros(len(idx))
    # the maximiser scale: start where the closed form would be for p = 2, a cheap feasible point
    res = optimize.minimize(lambda x: cost_fn(x) - gi @ x, x0, jac=lambda x: cost_grad(x) - gi,
                            method="L-BFGS-B", bounds=[(0, None)] * len(idx),
                            options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 10_000, "maxcor": 30})
    e[idx] = res.x
    return e


def desirable_share(e: np.ndarray, desirable: np.ndarray) -> float:
    """q(e) = sum_{j in D} e_j / sum_j e_j; NaN when there is no effort."""
    e = np.asarray(e, float)
    tot = float(e.sum())
    return float(e[np.asarray(desirable, bool)].sum() / tot) if tot > 0 else float("nan")


# --------------------------------------------------------------------------------------------------
# the principal's designs
# --------------------------------------------------------------------------------------------------


def logistic_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean logistic loss of score X w + b against y in {0, 1}, and its gradient in theta = (w, b)."""
    z = X @ theta[:-1] + theta[-1]
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    r = (expit(z) - y) / len(y)
    return loss, np.concatenate([X.T @ r, [r.sum()]])


@dataclass
class Design:
    """A linear classifier w^T x~ + b with ||w||_2 = 1 (rescaled after the fit) and what produced it."""

    w: np.ndarray
    b: float
    kind: str
    train_loss: float
    info: dict = field(default_factory=dict)


def _normalise(theta: np.ndarray, X, y, kind: str, info: dict) -> Design:
    loss = logistic_loss(theta, X, y)[0]
    w, b = theta[:-1], float(theta[-1])
    nrm = float(np.linalg.norm(w))
    if nrm > 0:
        w, b = w / nrm, b / nrm
    info = {**info, "unnormalised_norm": nrm}
    return Design(w=w, b=b, kind=kind, train_loss=loss, info=info)


def accuracy_only(X: np.ndarray, y: np.ndarray, C_reg: float = 1e6) -> Design:
    """Baseline 1: unpenalised logistic regression (scikit-learn, C = 1e6, max_iter 5000) on x~."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=C_reg, max_iter=5000).fit(X, y)
    theta = np.concatenate([lr.coef_[0], lr.intercept_])
    return _normalise(theta, X, y, "accuracy_only", {"solver": "sklearn lbfgs"})


def _slsqp(X, y, A: np.ndarray, theta0=None, ftol: float = 1e-12, maxiter: int = 2000) -> optimize.OptimizeResult:
    """min mean logistic loss over theta = (w, b) s.t. A w >= 0 (linear, homogeneous in w)."""
    d = X.shape[1]
    Ab = np.hstack([A, np.zeros((len(A), 1))])
    cons = [{"type": "ineq", "fun": lambda t: Ab @ t, "jac": lambda t: Ab}] if len(A) else []
    x0 = np.zeros(d + 1) if theta0 is None else theta0
    return optimize.minimize(lambda t: logistic_loss(t, X, y), x0, jac=True, method="SLSQP", constraints=cons,
                             options={"ftol": ftol, "maxiter": maxiter})


def l2_constraint_rows(C: np.ndarray, a: np.ndarray, mutable, desirable, beta: float) -> np.ndarray:
    """Rows A with A w >= 0 <=> (g_j >= 0 for every mutable j) and sum_D a^2 g >= beta sum_M a^2 g, g = C^T w."""
    a = np.asarray(a, float)
    m, dmask = np.asarray(mutable, bool), np.asarray(desirable, bool) & np.asarray(mutable, bool)
    Ct = np.asarray(C).T
    coef = a ** 2 * (dmask.astype(float) - beta * m.astype(float))
    return np.vstack([Ct[m], (coef @ Ct)[None, :]])


def design_l2(X, y, C: np.ndarray, a, mutable, desirable, beta: float, ftol: float = 1e-12, kind: str = "causal") -> Design:
    """The convex l2 design: min logistic loss s.t. g = C^T w >= 0 on mutable features and the (then linear)
    beta-desirability constraint sum_D a_j^2 g_j >= beta sum_M a_j^2 g_j. With C = I it is the unaware design."""
    A = l2_constraint_rows(C, a, mutable, desirable, beta)
    res = _slsqp(X, y, A, ftol=ftol)
    return _normalise(res.x, X, y, kind, {"solver": "SLSQP", "status": int(res.status), "message": str(res.message),
                                          "nit": int(res.nit), "min_constraint": float(np.min(A @ res.x[:-1]))})


def l1_constraint_rows(C: np.ndarray, a, mutable, desirable, target: int, kappa: float) -> np.ndarray:
    """Rows A with A w >= 0 <=> a_t g_t >= (1 + kappa) a_j g_j for every undesirable mutable j, and g_t >= 0."""
    a = np.asarray(a, float)
    Ct = np.asarray(C).T
    und = np.flatnonzero(np.asarray(mutable, bool) & ~np.asarray(desirable, bool))
    rows = [a[target] * Ct[target] - (1 + kappa) * a[j] * Ct[j] for j in und]
    rows.append(Ct[target])
    return np.vstack(rows)


def design_l1(X, y, C: np.ndarray, a, mutable, desirable, kappa: float, ftol: float = 1e-12, kind: str = "causal") -> Design:
    """The l1 alignment design: for each desirable mutable target t impose a_t g_t >= (1 + kappa) a_j g_j for every
    undesirable mutable j and g_t >= 0 (linear in w); keep the target with the lowest training loss."""
    targets = np.flatnonzero(np.asarray(mutable, bool) & np.asarray(desirable, bool))
    if len(targets) == 0:
        raise ValueError("the l1 alignment design needs at least one desirable mutable feature")
    best, per_target = None, {}
    for t in targets:
        A = l1_constraint_rows(C, a, mutable, desirable, int(t), kappa)
        res = _slsqp(X, y, A, ftol=ftol)
        loss = logistic_loss(res.x, X, y)[0]
        per_target[int(t)] = loss
        if best is None or loss < best[0] - 1e-15:
            best = (loss, int(t), res)
    loss, t, res = best
    return _normalise(res.x, X, y, kind, {"solver": "SLSQP per target", "target": t, "target_losses": per_target,
                                          "status": int(res.status)})


def design_general(X, y, C: np.ndarray, a, mutable, desirable, beta: float, p: float, restarts: int = 20,
                   seed: int = 0, mus=(10.0, 100.0, 1e3, 1e4), start=None, on_restart=None, state=None,
                   margin: float = 1e-3) -> Design:
    """The general (non-convex) design for any p > 1: penalty method
    min loss(w, b) + mu * max(0, beta - q(e*(w)))^2, q from the closed-form best response (g+ = max(g, 0)),
    mu increased over `mus`, L-BFGS-B from several starts (restart 0: the accuracy-only LR; others random).
    The penalty aims at beta + margin (a quadratic penalty converges from the infeasible side).
    Not claimed globally optimal. `on_restart(r, best)` is called after each restart (checkpointing);
    `state` = {"restart": r, "best": (loss, theta)} resumes."""
    a = np.asarray(a, float)
    m, dm = np.asarray(mutable, bool), np.asarray(desirable, bool)
    d = X.shape[1]
    rng = np.random.default_rng(seed)

    def q_of(theta):
        e = best_response(gains(C, theta[:-1]), a, p, mutable=m)
        return desirable_share(e, dm)

    def obj(theta, mu):
        q = q_of(theta)
        q = 0.0 if not np.isfinite(q) else q
        return logistic_loss(theta, X, y)[0] + mu * max(0.0, min(1.0, beta + margin) - q) ** 2

    starts = [np.concatenate([start.w, [start.b]]) if start is not None else np.zeros(d + 1)]
    starts += [rng.standard_normal(d + 1) for _ in range(max(0, restarts - 1))]
    r0 = 0
    best = None
    if state:
        r0, best = int(state["restart"]), (float(state["best"][0]), np.asarray(state["best"][1], float))
    for r in range(r0, restarts):
        theta = starts[r]
        for mu in mus:
            res = optimize.minimize(obj, theta, args=(mu,), method="L-BFGS-B", options={"maxiter": 500})
            theta = res.x
        q = q_of(theta)
        feasible = np.isfinite(q) and q >= beta - 1e-6
        loss = logistic_loss(theta, X, y)[0]
        val = loss if feasible else loss + 1e6 * (beta - (q if np.isfinite(q) else 0.0)) ** 2
        if best is None or val < best[0]:
            best = (val, theta)
        if on_restart is not None:
            on_restart(r + 1, best)
    val, theta = best
    q = q_of(theta)
    return _normalise(theta, X, y, "general", {"solver": "penalty + L-BFGS-B", "restarts": restarts,
                                               "best_value": float(val), "feasible": bool(np.isfinite(q) and q >= beta - 1e-6),
                                               "mus": list(mus)})


# --------------------------------------------------------------------------------------------------
# evaluation of a design under the true C
# --------------------------------------------------------------------------------------------------


def ell1_gain_ratio(g, a, mutable, desirable) -> float:
    """max_{j in U} a_j g_j / max_{j in D} a_j g_j over mutable features (U = undesirable)."""
    a, m, dm = np.asarray(a, float), np.asarray(mutable, bool), np.asarray(desirable, bool)
    ag = a * np.asarray(g, float)
    u, dd = ag[m & ~dm], ag[m & dm]
    if len(u) == 0 or len(dd) == 0 or np.max(dd) <= 0:
        return float("inf") if len(u) and np.max(u) > 0 else float("nan")
    return float(np.max(u) / np.max(dd))


def evaluate_design(des: Design, C: np.ndarray, a, mutable, desirable, p: float, budget: float,
                    X_test: np.ndarray, y_test: np.ndarray, names: list[str]) -> dict:
    """Test accuracy (pre-manipulation) and the induced effort profile under C (the true one)."""
    g = gains(C, des.w)
    e = best_response(g, a, p, budget, mutable)
    q = desirable_share(e, desirable)
    pred = (X_test @ des.w + des.b >= 0).astype(int)
    out = {"accuracy": float(np.mean(pred == y_test)), "q": q, "effort": e, "gains": g}
    tot = e.sum()
    out["shares"] = {n: float(e[j] / tot) if tot > 0 else float("nan") for j, n in enumerate(names)}
    if p == 1:
        out["gain_ratio"] = ell1_gain_ratio(g, a, mutable, desirable)
        out["target"] = names[int(np.argmax(np.where(np.asarray(mutable, bool), np.asarray(a) * g, -np.inf)))] if tot > 0 else None
    return out


# --------------------------------------------------------------------------------------------------
# incomplete information
# --------------------------------------------------------------------------------------------------


def moments_w(C: np.ndarray, mu_w: np.ndarray, Sigma_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """gamma = C^T w with w ~ N(mu_w, Sigma_w), C known: m = C^T mu_w, Sigma = C^T Sigma_w C."""
    C = np.asarray(C)
    return C.T @ mu_w, C.T @ Sigma_w @ C


def moments_mc(B_tilde: np.ndarray, mu_w: np.ndarray, Sigma_w: np.ndarray, sigma_c: float, samples: int,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """gamma = C^T w with every edge of B~ ~ N(B~_kj, sigma_c^2) independently (the support of the graph is known)
    and w ~ N(mu_w, Sigma_w) (pass Sigma_w = 0 for C-only uncertainty): Monte Carlo mean and covariance."""
    rng = np.random.default_rng(seed)
    d = len(B_tilde)
    edges = np.argwhere(np.asarray(B_tilde) != 0)
    Lw = _psd_sqrt(Sigma_w)
    G = np.empty((samples, d))
    for s in range(samples):
        Bs = np.array(B_tilde, float)
        if len(edges):
            Bs[edges[:, 0], edges[:, 1]] += sigma_c * rng.standard_normal(len(edges))
        w = mu_w + Lw @ rng.standard_normal(d)
        G[s] = contribution_matrix(Bs).T @ w
    return G.mean(0), np.cov(G, rowvar=False, bias=False)


def _psd_sqrt(S: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh((S + S.T) / 2)
    return vecs * np.sqrt(np.maximum(vals, 0.0))


def mean_variance_response(m: np.ndarray, Sigma: np.ndarray, a, lam: float, p: float = 2.0, budget: float = 1.0,
                           mutable=None) -> np.ndarray:
    """Risk-averse individual: maximise m^T e - (lam/2) e^T Sigma e - c_p(e), e >= 0 (budget for p = 1).

    p = 2: the non-negative QP min 1/2 e^T Q e - m^T e, Q = diag(a)^{-2} + lam Sigma, solved exactly as NNLS
    (Q = L L^T: min ||L^T e - L^{-1} m||). Without the sign constraint e = Q^{-1} m (semi-closed form).
    Other p > 1: L-BFGS-B; p = 1: SLSQP with the budget. Immutable features get 0."""
    m_all, a = np.asarray(m, float), np.asarray(a, float)
    mk = _mask(mutable, len(m_all))
    idx = np.flatnonzero(mk)
    e = np.zeros(len(m_all))
    if len(idx) == 0:
        return e
    mi, ai = m_all[idx], a[idx]
    S = np.asarray(Sigma, float)[np.ix_(idx, idx)]
    S = (S + S.T) / 2
    if p == 2:
        Q = np.diag(ai ** -2.0) + lam * S
        try:
            L = np.linalg.cholesky(Q)
            x, _ = optimize.nnls(L.T, np.linalg.solve(L, mi), maxiter=50 * len(idx))
            e[idx] = x
            return e
        except (np.linalg.LinAlgError, RuntimeError):  # ill-conditioned Q: the generic solver below
            pass
    if p > 1:
        def f(x):
            return np.sum((x / ai) ** p) / p + 0.5 * lam * x @ S @ x - mi @ x, (x / ai) ** (p - 1) / ai + lam * S @ x - mi
        res = optimize.minimize(f, np.zeros(len(idx)), jac=True, method="L-BFGS-B", bounds=[(0, None)] * len(idx),
                                options={"ftol": 1e-16, "gtol": 1e-13, "maxiter": 10_000})
        e[idx] = res.x
        return e
    # p = 1: concave QP over the budget simplex; start from the risk-neutral corner
    x0 = best_response(mi, ai, 1.0, budget)
    cons = [{"type": "ineq", "fun": lambda x: budget - np.sum(x / ai), "jac": lambda x: -1.0 / ai}]
    res = optimize.minimize(lambda x: (0.5 * lam * x @ S @ x - mi @ x, lam * S @ x - mi), x0, jac=True, method="SLSQP",
                            bounds=[(0, None)] * len(idx), constraints=cons, options={"ftol": 1e-14, "maxiter": 1000})
    e[idx] = np.maximum(res.x, 0.0)
    return e


def prob_response(x: np.ndarray, C: np.ndarray, mu_w: np.ndarray, Sigma_w: np.ndarray, b: float, a, p: float,
                  budget: float = 1.0, mutable=None, restarts: int = 3, seed: int = 0, eps: float = 1e-9) -> np.ndarray:
    """Acceptance-probability individual (exploratory, `responder_objective=prob`, C known, w ~ N(mu_w, Sigma_w)):
    maximise Phi((mu_w^T (x + C e) + b) / sqrt((x + C e)^T Sigma_w (x + C e) + eps)) - c_p(e) (p = 1: budget
    constraint, no cost term). Non-convex: L-BFGS-B / SLSQP from e = 0, the complete-information response and
    random starts; the best value is kept."""
    a = np.asarray(a, float)
    mk = _mask(mutable, len(x))
    idx = np.flatnonzero(mk)
    rng = np.random.default_rng(seed)
    Cm = np.asarray(C)[:, idx]
    ai = a[idx]

    def util(ei):
        z = x + Cm @ ei
        s = (mu_w @ z + b) / np.sqrt(z @ Sigma_w @ z + eps)
        c = 0.0 if p == 1 else np.sum((np.maximum(ei, 0) / ai) ** p) / p
        return -(float(ndtr(s)) - c)

    e_ci = best_response(gains(C, mu_w), a, p, budget, mk)[idx]
    starts = [np.zeros(len(idx)), e_ci] + [np.abs(rng.standard_normal(len(idx))) * (ai * budget if p == 1 else ai)
                                           for _ in range(max(0, restarts - 2))]
    best = (np.inf, np.zeros(len(idx)))
    for s0 in starts:
        if p == 1:
            s0 = s0 * min(1.0, budget / max(np.sum(s0 / ai), 1e-12))
            cons = [{"type": "ineq", "fun": lambda v: budget - np.sum(v / ai)}]
            res = optimize.minimize(util, s0, method="SLSQP", bounds=[(0, None)] * len(idx), constraints=cons,
                                    options={"maxiter": 300})
        else:
            res = optimize.minimize(util, s0, method="L-BFGS-B", bounds=[(0, None)] * len(idx), options={"maxiter": 300})
        if res.fun < best[0]:
            best = (float(res.fun), np.maximum(res.x, 0.0))
    e = np.zeros(len(x))
    e[idx] = best[1]
    return e
