"""The differentiable program: BCE of the MVB conditionals + lambda * quasi-MCP(W) under DAGMA's central path
(default) or NOTEARS' augmented Lagrangian, Adam inner solves, with a state that checkpoints and resumes at the
saved step. Also the unpenalised refit on a fixed DAG (L-BFGS) and the two-stage candidate selection."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from methodlab.methods.discrete_structure import model as M


@dataclass
class Problem:
    """Design on the unique training rows: features, mask, membership, counts."""
    d: int
    subs: list[tuple[int, ...]]
    mask: torch.Tensor  # (F, d)
    mem: torch.Tensor  # (F, d)
    phi: torch.Tensor  # (U, F)
    x: torch.Tensor  # (U, d)
    counts: torch.Tensor  # (U,)
    scale: torch.Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.mask.device

    @classmethod
    def build(cls, x: np.ndarray, subs, mask: np.ndarray, w_scale: str = "none", device="cpu") -> "Problem":
        """The design on `device` (the run's ctx.device), built once; every step of the path stays there."""
        u, c = M.unique_rows(x)
        d = x.shape[1]
        mask_t = torch.as_tensor(mask, dtype=torch.float64, device=device)
        mem = M.membership(subs, d, device=device)
        scale = None
        if w_scale == "sqrt_group":
            scale = torch.sqrt(torch.clamp(mem.T @ mask_t, min=1.0))
        return cls(d, list(subs), mask_t, mem, M.design(u, subs, device=device),
                   torch.as_tensor(u, dtype=torch.float64, device=device), torch.as_tensor(c, device=device), scale)


@dataclass
class PathState:
    """Everything a resumed run needs: parameters, optimiser, where on the path it stands."""
    B: torch.Tensor
    b: torch.Tensor
    stage: int = 0
    k: int = 0  # step inside the stage
    step: int = 0  # global step
    lr: float = 3e-4
    prev_obj: float | None = None
    B0: torch.Tensor | None = None  # stage start (DAGMA restarts a stage with lr/2 when W leaves the domain)
    b0: torch.Tensor | None = None
    rho: float = 1.0  # NOTEARS
    alpha: float = 0.0
    h_prev: float = float("inf")
    opt_state: dict | None = None
    done: bool = False
    log: list = field(default_factory=list)
    s: float | None = None  # dagma_domain=dagma_linear: this stage's s after DAGMA's +0.1 retries (None: the plan's)
    backtracks: int = 0  # dagma_linear: steps halved back into the domain
    retries: int = 0  # dagma_linear: stages restarted from their start with lr / 2, s + 0.1


def score(prob: Problem, B, b, lam: float, pen: str, delta: float, l2: float):
    z = M.logits(prob.phi, B, prob.mask, b)
    loss = M.bce(z, prob.x, prob.counts)
    W = M.group_weights(B * prob.mask, prob.mem, prob.scale)
    reg = lam * M.penalty(W, pen, delta) + l2 * (B * prob.mask).pow(2).sum()
    return loss, reg, W


def new_state(prob: Problem, lr: float, init_seed: int | None = None, init_scale: float = 0.5, step: int = 0) -> PathState:
    """Zero start, or (multi-start) main effects k -> j drawn N(0, init_scale^2) along a random order, so each
    restart begins inside a different orientation basin."""
    F_ = len(prob.subs)
    B = np.zeros((F_, prob.d), dtype=np.float64)  # drawn on the host (numpy), moved to the problem's device once
    if init_seed is not None:
        g = np.random.default_rng(init_seed)
        pos = {int(v): i for i, v in enumerate(g.permutation(prob.d))}
        mask = prob.mask.cpu().numpy()
        for f, sub in enumerate(prob.subs):
            if len(sub) == 1:
                k = sub[0]
                for j in range(prob.d):
                    if mask[f, j] and pos[k] < pos[j]:
                        B[f, j] = init_scale * g.standard_normal()
    B = torch.as_tensor(B, dtype=torch.float64, device=prob.device)
    b = torch.zeros(prob.d, dtype=torch.float64, device=prob.device)
    return PathState(B=B, b=b, lr=lr, B0=B.clone(), b0=b.clone(), step=step)


def _stage_plan(cfg) -> list[tuple[float, float, int]]:
    T = len(cfg.mu_schedule)
    s = list(cfg.s_schedule) + [cfg.s_schedule[-1]] * T
    return [(cfg.mu_schedule[t], s[t], cfg.last_stage_steps if t == T - 1 else cfg.inner_steps) for t in range(T)]


def in_m_domain(W: torch.Tensor, s: float) -> bool:
    """DAGMA linear.py's domain test: sI - W o W is a nonsingular M-matrix iff its inverse is entrywise >= 0
    (official: any(inv(sI - W o W) + 1e-16 < 0) means outside). Exact, unlike det > 0, which two cycles each
    beyond s pass. One host read."""
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    inv, info = torch.linalg.inv_ex(s * eye - W * W)
    return bool((info == 0) & torch.isfinite(inv).all() & (inv + 1e-16 >= 0).all())


def run_dagma(prob: Problem, cfg, st: PathState, on_step=None) -> PathState:
    """DAGMA central path: for each (mu, s): minimise mu * (BCE + lambda*pen + l2) + h_s(W) with Adam, warm start."""
    if getattr(cfg, "dagma_domain", "restart") == "dagma_linear":
        return _run_dagma_linear(prob, cfg, st, on_step)
    plan = _stage_plan(cfg)
    B, b, opt = _resume_tensors(st)
    while st.stage < len(plan):
        mu, s, steps = plan[st.stage]
        while st.k < steps:
            loss, reg, W = score(prob, B, b, cfg.lam, cfg.penalty, cfg.delta, cfg.l2)
            h = M.h_dagma(W, s)
            # the one host read per step (the path's own branch): left the M-matrix domain -> restart the stage, lr / 2
            if not bool(torch.isfinite(h) & (h >= -1e-10)):
                with torch.no_grad():
                    B.copy_(st.B0)
                    b.copy_(st.b0)
                st.lr *= 0.5
                st.k, st.prev_obj = 0, None
                opt = torch.optim.Adam([B, b], lr=st.lr, betas=(0.99, 0.999))
                if st.lr < 1e-10:
                    raise RuntimeError("DAGMA: learning rate underflow")
                continue
            obj = mu * (loss + reg) + h
            opt.zero_grad(set_to_none=True)
            obj.backward()
            opt.step()
            st.k += 1
            st.step += 1
            if st.k % cfg.check_every == 0:
                o = obj.item()
                if st.prev_obj is not None and abs(st.prev_obj - o) <= cfg.tol * max(1e-12, abs(st.prev_obj)):
                    st.k = steps  # converged
                st.prev_obj = o
            if on_step is not None and (st.step % cfg.log_every == 0 or st.step % cfg.checkpoint_every == 0):
                _sync(st, B, b, opt)
                on_step(st, {"train/loss": loss.item(), "train/h": h.item(), "train/mu": mu})
        opt = _next_stage(st, B, b, cfg, on_step)
    _sync(st, B, b, opt)
    st.done = True
    return st


def _resume_tensors(st: PathState):
    """(B, b, Adam) where the path state left them: its tensors as leaves, the optimiser's saved state if any."""
    B = st.B.clone().requires_grad_(True)
    b = st.b.clone().requires_grad_(True)
    opt = torch.optim.Adam([B, b], lr=st.lr, betas=(0.99, 0.999))
    if st.opt_state is not None:
        opt.load_state_dict(st.opt_state)
    return B, b, opt


def _next_stage(st: PathState, B, b, cfg, on_step):
    """Warm start the next stage from where this one ended, lr back to the configured one, a fresh Adam (as
    DAGMA does between stages); returns that optimiser."""
    st.stage += 1
    st.k, st.prev_obj = 0, None
    st.lr = cfg.lr
    with torch.no_grad():
        st.B0, st.b0 = B.detach().clone(), b.detach().clone()
    opt = torch.optim.Adam([B, b], lr=st.lr, betas=(0.99, 0.999))
    if on_step is not None:
        _sync(st, B, b, opt)
        on_step(st, {"stage_end": True})
    return opt


def _run_dagma_linear(prob: Problem, cfg, st: PathState, on_step=None) -> PathState:
    """The same path with the official DagmaLinear.minimize / fit domain handling (dagma_domain=dagma_linear):
    each new iterate gets the exact M-matrix test for the stage's s; outside, while s > 0.9, the step is halved
    back towards the previous iterate and lr halves for the rest of the stage (Adam's moments kept; at lr <= 1e-16
    the previous iterate ends the stage); when s <= 0.9, or when the stage's start is already outside, the stage
    restarts from its start with lr / 2 and s + 0.1. The next stage starts at the configured lr and the plan's s.
    (Official order: the test runs before the next gradient; here right after the step, the same sequence.)"""
    plan = _stage_plan(cfg)
    B, b, opt = _resume_tensors(st)

    def weights_now() -> torch.Tensor:
        with torch.no_grad():
            return M.group_weights(B * prob.mask, prob.mem, prob.scale)

    def retry_stage(s_now: float):
        """Official fit(): minimize failed -> lr / 2, s + 0.1, the stage again from its start (fresh Adam)."""
        with torch.no_grad():
            B.copy_(st.B0)
            b.copy_(st.b0)
        st.lr *= 0.5
        st.s = s_now + 0.1
        st.k, st.prev_obj = 0, None
        st.retries += 1
        if st.lr < 1e-16:
            raise RuntimeError("DAGMA (dagma_linear): learning rate underflow")
        return torch.optim.Adam([B, b], lr=st.lr, betas=(0.99, 0.999))

    while st.stage < len(plan):
        mu, s_plan, steps = plan[st.stage]
        while st.k < steps:
            s = st.s if st.s is not None else s_plan
            if st.k == 0 and not in_m_domain(weights_now(), s):  # official: outside at iteration 1
                opt = retry_stage(s)
                continue
            loss, reg, W = score(prob, B, b, cfg.lam, cfg.penalty, cfg.delta, cfg.l2)
            h = M.h_dagma(W, s)
            obj = mu * (loss + reg) + h
            opt.zero_grad(set_to_none=True)
            obj.backward()
            prev_B, prev_b = B.detach().clone(), b.detach().clone()
            opt.step()
            st.k += 1
            st.step += 1
            retried = ended = False
            while not in_m_domain(weights_now(), s):
                if s <= 0.9:  # the official comparison (0.8 + 0.1 = 0.9000000000000001 backtracks)
                    opt, retried = retry_stage(s), True
                    break
                with torch.no_grad():  # official: W += lr * grad; lr *= .5; W -= lr * grad
                    B.copy_(prev_B + 0.5 * (B - prev_B))
                    b.copy_(prev_b + 0.5 * (b - prev_b))
                st.lr *= 0.5
                st.backtracks += 1
                for g in opt.param_groups:
                    g["lr"] = st.lr
                if st.lr <= 1e-16:  # official: returns the previous iterate, stage done
                    with torch.no_grad():
                        B.copy_(prev_B)
                        b.copy_(prev_b)
                    st.k, ended = steps, True
                    break
            if retried:
                continue
            if not ended and st.k % cfg.check_every == 0:
                o = obj.item()
                if st.prev_obj is not None and abs(st.prev_obj - o) <= cfg.tol * max(1e-12, abs(st.prev_obj)):
                    st.k = steps  # converged
                st.prev_obj = o
            if on_step is not None and (st.step % cfg.log_every == 0 or st.step % cfg.checkpoint_every == 0):
                _sync(st, B, b, opt)
                on_step(st, {"train/loss": loss.item(), "train/h": h.item(), "train/mu": mu, "train/s": s,
                             "train/lr": st.lr})
        st.s = None
        opt = _next_stage(st, B, b, cfg, on_step)
    _sync(st, B, b, opt)
    st.done = True
    return st


def run_notears(prob: Problem, cfg, st: PathState, on_step=None) -> PathState:
    """NOTEARS: minimise BCE + pen + rho/2 h^2 + alpha h; rho *= 10 until h falls 4x, then alpha += rho h."""
    B = st.B.clone().requires_grad_(True)
    b = st.b.clone().requires_grad_(True)
    while st.stage < cfg.max_outer and st.rho < cfg.rho_max:
        start_B, start_b = B.detach().clone(), b.detach().clone()
        while st.rho < cfg.rho_max:
            with torch.no_grad():
                B.copy_(start_B)
                b.copy_(start_b)
            opt = torch.optim.Adam([B, b], lr=cfg.lr, betas=(0.99, 0.999))
            prev = None
            for k in range(cfg.inner_steps):
                loss, reg, W = score(prob, B, b, cfg.lam, cfg.penalty, cfg.delta, cfg.l2)
                h = M.h_notears(W)
                obj = loss + reg + 0.5 * st.rho * h * h + st.alpha * h
                opt.zero_grad(set_to_none=True)
                obj.backward()
                opt.step()
                st.step += 1
                if (k + 1) % cfg.check_every == 0:
                    o = obj.item()
                    if prev is not None and abs(prev - o) <= cfg.tol * max(1e-12, abs(prev)):
                        break
                    prev = o
            with torch.no_grad():
                h_new = M.h_notears(score(prob, B, b, cfg.lam, cfg.penalty, cfg.delta, cfg.l2)[2]).item()
            if h_new > 0.25 * st.h_prev:
                st.rho *= 10
            else:
                break
        st.h_prev = h_new
        st.alpha += st.rho * h_new
        st.stage += 1
        if on_step is not None:
            _sync(st, B, b, None)
            on_step(st, {"stage_end": True, "train/h": h_new, "train/rho": st.rho})
        if h_new <= cfg.h_tol:
            break
    _sync(st, B, b, None)
    st.done = True
    return st


def _sync(st: PathState, B, b, opt) -> None:
    st.B = B.detach().clone()
    st.b = b.detach().clone()
    st.opt_state = copy.deepcopy(opt.state_dict()) if opt is not None else None


def weights(prob: Problem, st: PathState) -> np.ndarray:
    return weights_of(prob, st.B)


def weights_of(prob: Problem, B: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        W = M.group_weights(B * prob.mask, prob.mem, prob.scale)
    W = W.cpu().numpy().copy()
    W[W < 1e-5] = 0.0
    return W


def candidates_from(W: np.ndarray, threshold: float, max_candidates: int) -> list[list[int]]:
    """Stage-1 candidate parents of each node: neighbours in the symmetrised W above threshold (largest first)."""
    S = np.maximum(W, W.T)
    d = len(S)
    out = []
    for j in range(d):
        order = [int(k) for k in np.argsort(-S[:, j]) if k != j and S[k, j] > threshold]
        out.append(sorted(order[:max_candidates]))
    return out


# ----------------------------------------------------------------------------------------------------------
# refit on a fixed DAG
# ----------------------------------------------------------------------------------------------------------

def refit(x: np.ndarray, dag: np.ndarray, K: int, steps: int = 200, l2: float = 1e-4, device="cpu"):
    """Unpenalised MLE (plus l2) of node j's order-<=K MVB conditional on its learned parents only.
    Returns (subs, mask, B, b), B and b on `device`. With K >= |pa(j)| this is the (l2-smoothed) empirical CPT."""
    d = x.shape[1]
    parents = [sorted(int(k) for k in np.flatnonzero(dag[:, j])) for j in range(d)]
    subs, mask = M.feature_plan(d, K, candidates=parents, K_cand=K)
    prob = Problem.build(x, subs, mask, device=device)
    B = torch.zeros(len(subs), d, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.zeros(d, dtype=torch.float64, device=device, requires_grad=True)
    if steps > 0:
        opt = torch.optim.LBFGS([B, b], lr=1.0, max_iter=steps, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-9, tolerance_change=1e-12, history_size=20)

        def closure():
            opt.zero_grad(set_to_none=True)
            z = M.logits(prob.phi, B, prob.mask, b)
            obj = M.bce(z, prob.x, prob.counts) + l2 * (B * prob.mask).pow(2).sum()
            obj.backward()
            return obj

        opt.step(closure)
    return subs, mask, (B * prob.mask).detach(), b.detach()


def selection_objective(x: np.ndarray, dag: np.ndarray, K: int, cfg, device="cpu") -> float:
    """F at a thresholded solution: training BCE of the refit on the DAG + lambda * sum rho_delta(W_refit)."""
    subs, mask, B, b = refit(x, dag, K, cfg.refit_steps, device=device)
    nll = -float(loglik_rows(x, subs, B, b).mean())
    with torch.no_grad():
        W = M.group_weights(B, M.membership(subs, x.shape[1], device=B.device))
    return nll + cfg.lam * float(M.penalty(W, cfg.penalty, cfg.delta))


def loglik_rows(x: np.ndarray, subs, B: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Per-row log-likelihood under the DAG factorisation (logits clipped to probabilities in [1e-4, 1-1e-4]),
    computed on B's device, returned as a host array."""
    xt = torch.as_tensor(np.asarray(x), dtype=torch.float64, device=B.device)
    z = (M.design(xt, subs) @ B + b).clamp(-M.LOGIT_CLIP, M.LOGIT_CLIP)
    ll = xt * torch.nn.functional.logsigmoid(z) + (1 - xt) * torch.nn.functional.logsigmoid(-z)
    return ll.sum(1).cpu().numpy()


def n_params(B: torch.Tensor, mask: np.ndarray | torch.Tensor) -> int:
    return int(np.asarray(mask).sum()) + B.shape[1]


def log2(x: float) -> float:
    return math.log(x, 2)
