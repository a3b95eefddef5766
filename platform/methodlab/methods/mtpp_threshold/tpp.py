"""The point-process maths on padded batches: NLL (density by autograd through Gamma*), mark
probabilities, inverse-CDF time sampling by bisection, mark-given-time scores for the time-first pipeline.

A batch is (marks [B, L] with padding index M, gaps [B, L] raw inter-event times with gap 0 for the first
event, mask [B, L]); event i's history state predicts event i + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methodlab.methods.mtpp_threshold.model import IFNMTPP, LogNormMix


@dataclass(frozen=True)
class TimeStats:
    mean: float  # of training target gaps (IFNMTPP standardisation)
    std: float
    log_mean: float  # of log gaps (LogNormMix)
    log_std: float

    def std_tau(self, tau):
        return (tau - self.mean) / self.std

    @property
    def tau0_value(self) -> float:
        return (0.0 - self.mean) / self.std

    @property
    def tau0(self) -> torch.Tensor:
        """Standardised tau = 0 as a host scalar tensor (tests, CPU callers); device code uses tau0_like."""
        return torch.tensor(self.tau0_value, device="cpu")

    def tau0_like(self, x: torch.Tensor) -> torch.Tensor:
        """Standardised tau = 0, float32 on x's device (a fill, no host-to-device copy)."""
        return torch.full((), self.tau0_value, dtype=torch.float32, device=x.device)


def history_states(model, marks, gaps, stats: TimeStats):
    """LSTM states h [B, L, d_h] after every event (the model input is the event's own standardised gap)."""
    return model.encoder(marks, stats.std_tau(gaps))


def event_nll(model, marks, gaps, mask, stats: TimeStats, *, create_graph: bool, eps: float = 1e-8,
              window_gap=None):
    """Per-target NLL [B, L-1] (0 at padding) and, when `window_gap` [B] is given, the survival NLL [B]
    -log sum_m Gamma*(m, T - t_N) of the window end."""
    M = model.M
    h = history_states(model, marks, gaps, stats)
    tgt_m, tau, tmask = marks[:, 1:].clamp(max=M - 1), gaps[:, 1:], mask[:, 1:]
    if isinstance(model, LogNormMix):
        logp_m = torch.log_softmax(model.mark_head(h[:, :-1]), -1).gather(-1, tgt_m.unsqueeze(-1)).squeeze(-1)
        logp_t = model.log_time_density(h[:, :-1], tau.clamp_min(1e-6 * stats.std), stats.log_mean, stats.log_std)
        return torch.where(tmask, -(logp_m + logp_t), torch.zeros_like(tau)), None
    hist = model.hist_proj(h[:, :-1])
    with torch.enable_grad():
        tau = tau.detach().clone().requires_grad_(True)
        gam = model.gamma_star(hist, stats.std_tau(tau).unsqueeze(-1), stats.tau0_like(hist),
                               marks=tgt_m.unsqueeze(-1)).squeeze(-1)
        # p*(m, tau) = -dGamma*(m, tau)/dtau; every entry depends on its own tau only, so one grad of the sum
        dens = -torch.autograd.grad(gam.sum(), tau, create_graph=create_graph)[0]
    nll = torch.where(tmask, -torch.log(dens.clamp_min(0.0) + eps), torch.zeros_like(dens))
    surv = None
    if window_gap is not None:
        last = mask.sum(1) - 1
        h_last = h[torch.arange(len(last), device=last.device), last]
        g = model.gamma_star(model.hist_proj(h_last), stats.std_tau(window_gap).unsqueeze(-1).expand(-1, M),
                             stats.tau0_like(h_last))
        surv = -torch.log(g.sum(-1) + eps)
    return nll, surv


@torch.no_grad()
def mark_probs_and_states(model, marks, gaps, mask, stats: TimeStats):
    """p*(m) [N, M] for every real target, the (projected) history states [N, d] and targets (N,), (N,)."""
    h = history_states(model, marks, gaps, stats)[:, :-1]
    tmask = mask[:, 1:]
    h = h[tmask]
    if isinstance(model, LogNormMix):
        p = torch.softmax(model.mark_head(h), -1)
    else:
        h = model.hist_proj(h)
        p = model.mark_probs(h, stats.tau0_like(h))
    return p, h, marks[:, 1:][tmask], gaps[:, 1:][tmask]


@torch.no_grad()
def invert_cdf(model, hist, marks, u, stats: TimeStats, tol: float = 1e-4, max_steps: int = 50):
    """Solve F*(tau | m) = u for tau by bisection in standardised time; hist [N, d_I], marks and u [N, S].
    F*(tau | m) = 1 - Gamma_hat(m, tau) / Gamma_hat(m, 0) (the normaliser cancels). Returns raw tau [N, S]."""
    ginf = model.g_inf(hist).unsqueeze(1) if model.removes_tail else None  # [N, 1, 1]: tau-free, computed once

    def tail(x):
        return model.gamma_hat(hist.unsqueeze(1), x.unsqueeze(-1), marks.unsqueeze(-1), ginf).squeeze(-1)

    lo = stats.tau0_like(u).expand_as(u).clone()
    g0 = tail(lo).clamp_min(1e-12)

    def cdf(x):
        return 1.0 - tail(x) / g0

    hi = lo + 4.0
    for _ in range(40):  # double the bracket until F*(hi) > u everywhere
        short = cdf(hi) <= u
        if not short.any():
            break
        hi = torch.where(short, lo + 2.0 * (hi - lo), hi)
    for _ in range(max_steps):
        if float((hi - lo).max()) < tol:
            break
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < u
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    return (0.5 * (lo + hi)) * stats.std + stats.mean


def _chunks(n: int, size: int):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


@torch.no_grad()
def expected_time_given_mark(model, hist, mark, stats, n_samples, gen, tol=1e-4, max_steps=50, chunk=2048):
    """Monte-Carlo E[tau | m]: mean of S inverse-transform samples (u ~ U(0,1)) per event; hist [N, d_I], mark [N]."""
    out = []
    for sl in _chunks(len(mark), chunk):  # u drawn on hist's device, by a generator on that device
        u = torch.rand(sl.stop - sl.start, n_samples, generator=gen, device=hist.device)
        m = mark[sl].unsqueeze(1).expand(-1, n_samples)
        out.append(invert_cdf(model, hist[sl], m, u, stats, tol, max_steps).mean(1))
    return torch.cat(out) if out else torch.zeros(0, device=hist.device)


@torch.no_grad()
def expected_time_marginal(model, hist, p, stats, n_samples, gen, tol=1e-4, max_steps=50, chunk=2048):
    """Monte-Carlo E[tau] over the joint: m_s ~ p*(m), tau_s ~ F*(. | m_s) (time-first pipeline, step 1)."""
    out = []
    for sl in _chunks(len(p), chunk):
        m = torch.multinomial(p[sl].clamp_min(0) + 1e-12, n_samples, replacement=True, generator=gen)
        u = torch.rand(m.shape, generator=gen, device=hist.device)
        out.append(invert_cdf(model, hist[sl], m, u, stats, tol, max_steps).mean(1))
    return torch.cat(out) if out else torch.zeros(0, device=hist.device)


def mark_given_time(model, hist, tau, stats, chunk=4096):
    """p*(m | tau) proportional to p*(m, tau) = -dGamma*(m, tau)/dtau for every mark; tau [N] raw."""
    M, outs = model.M, []
    for sl in _chunks(len(tau), chunk):
        with torch.enable_grad():
            t = tau[sl].detach().unsqueeze(-1).expand(-1, M).clone().requires_grad_(True)
            marks = torch.arange(M, device=t.device).expand(t.shape[0], M)
            gam = model.gamma_star(hist[sl].detach(), stats.std_tau(t), stats.tau0_like(t), marks=marks)
            dens = -torch.autograd.grad(gam.sum(), t)[0]
        dens = dens.clamp_min(0) + 1e-30
        outs.append(dens / dens.sum(-1, keepdim=True))
    return torch.cat(outs) if outs else torch.zeros(0, M, device=hist.device)
