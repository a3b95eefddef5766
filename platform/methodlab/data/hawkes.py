"""Multivariate Hawkes processes with exponential kernels: Ogata thinning in numpy, and the exact
next-event mark/time distribution given a history (the oracle of a marked temporal point process).

Intensity of mark m:  lambda_m(t) = mu_m + sum_{t_j < t} alpha[m, m_j] * beta_m * exp(-beta_m (t - t_j))
(row m = receiving mark, column n = exciting mark; the kernel of each pair integrates to alpha[m, n]).
"""

from __future__ import annotations

import numpy as np

# The fixed imbalanced 5-mark process of methods/mtpp_threshold.md (stationary rates 0.60/0.25/0.10/0.04/0.01).
HAWKES_MU = np.array([0.42, 0.17, 0.0625, 0.01, 0.002])
HAWKES_ALPHA = np.zeros((5, 5))
HAWKES_ALPHA[0, 0], HAWKES_ALPHA[1, 1], HAWKES_ALPHA[1, 0] = 0.3, 0.2, 0.05
HAWKES_ALPHA[2, 1], HAWKES_ALPHA[3, 2], HAWKES_ALPHA[4, 3] = 0.15, 0.3, 0.2
HAWKES_BETA = np.array([1.0, 1.0, 1.0, 5.0, 10.0])
# Calibration set: homogeneous Poisson with the same stationary mark shares, total rate 1.
POISSON_MU = np.array([0.60, 0.25, 0.10, 0.04, 0.01])


def stationary_rates(mu, alpha) -> np.ndarray:
    """(I - alpha)^-1 mu: the long-run event rate of every mark (needs spectral radius < 1)."""
    return np.linalg.solve(np.eye(len(mu)) - np.asarray(alpha), np.asarray(mu))


def simulate_hawkes(mu, alpha, beta, n_seqs: int, n_events: int, rng: np.random.Generator):
    """Ogata thinning: each sequence is the first `n_events` events of a process started empty at t=0.
    Between events every intensity decays, so the total intensity right after the current time bounds it."""
    mu, alpha, beta = np.asarray(mu, float), np.asarray(alpha, float), np.asarray(beta, float)
    out = []
    for _ in range(n_seqs):
        t, excite = 0.0, np.zeros(len(mu))  # excite_m = sum_j alpha[m, m_j] beta_m exp(-beta_m (t - t_j))
        times, marks = np.empty(n_events), np.empty(n_events, dtype=np.int64)
        k = 0
        while k < n_events:
            bound = float((mu + excite).sum())
            w = rng.exponential(1.0 / bound)
            t += w
            excite = excite * np.exp(-beta * w)
            lam = mu + excite
            if rng.uniform() * bound <= lam.sum():  # accept with prob lambda(t) / bound
                m = int(rng.choice(len(mu), p=lam / lam.sum()))
                times[k], marks[k] = t, m
                excite = excite + alpha[:, m] * beta
                k += 1
        out.append((times, marks))
    return out


def _grid(total_rate: float) -> np.ndarray:
    """Quadrature nodes for s in [0, s_max]: fine near 0 (decays as fast as beta = 10), coarse in the tail."""
    s_max = 45.0 / total_rate  # survival below exp(-45) beyond
    return np.unique(np.concatenate([np.linspace(0, 2.0, 801), np.linspace(2.0, max(s_max, 4.0), 1500)]))


def next_event_oracle(times, marks, mu, alpha, beta):
    """True p(m) and E[tau | m] of the NEXT event after every event i of one sequence (given events 0..i).

    p(m) = int_0^inf lambda_m(s) exp(-Lambda(s)) ds, with Lambda(s) = sum_m mu_m s + excite_m (1 - e^{-beta_m s}) / beta_m.
    Returns arrays [n, M] (row i: after event i)."""
    mu, alpha, beta = np.asarray(mu, float), np.asarray(alpha, float), np.asarray(beta, float)
    n, M = len(times), len(mu)
    excite = np.zeros((n, M))
    cur, last = np.zeros(M), 0.0
    for i, (t, m) in enumerate(zip(times, marks)):
        cur = cur * np.exp(-beta * (t - last)) + alpha[:, m] * beta
        excite[i], last = cur, t
    s = _grid(float(mu.sum()))
    decay = np.exp(-beta[None, :] * s[:, None])  # [S, M]
    lam = mu[None, None, :] + excite[:, None, :] * decay[None]  # [n, S, M]
    big_lam = (mu[None, None, :] * s[None, :, None] + excite[:, None, :] * (1 - decay[None]) / beta).sum(-1)  # [n, S]
    dens = lam * np.exp(-big_lam)[..., None]  # p(m, s)
    p = np.trapezoid(dens, s, axis=1)
    mean = np.trapezoid(dens * s[None, :, None], s, axis=1) / np.maximum(p, 1e-300)
    return p / p.sum(1, keepdims=True), mean


def hawkes_splits(n_train=1500, n_val=300, n_test=300, n_events=40, seed=0, poisson=False):
    """Train / val / test sequences of the spec's generator (one rng, drawn in that order)."""
    rng = np.random.default_rng(seed)
    if poisson:
        mu, alpha, beta = POISSON_MU, np.zeros((5, 5)), np.ones(5)
    else:
        mu, alpha, beta = HAWKES_MU, HAWKES_ALPHA, HAWKES_BETA
    seqs = simulate_hawkes(mu, alpha, beta, n_train + n_val + n_test, n_events, rng)
    return seqs[:n_train], seqs[n_train:n_train + n_val], seqs[n_train + n_val:], (mu, alpha, beta)
