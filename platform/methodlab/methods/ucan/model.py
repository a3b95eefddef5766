"""U-CAN's networks and maths: the multi-step displacement network, exact EMD (bijective assignment), Chamfer
distance, the Noise2Noise + consistency loss, k-NN mean smoothing, patch-based inference, and the 2-D
ZS-N2N (+ L_DC) image variant.

Devices: every tensor is built on the device of the tensors (or network) it works with. The exact EMD matching is
scipy's linear_sum_assignment on the host by definition (the float64 cost matrix is copied there, the matched pairs
come back as index tensors on the points' device); the differentiable loss stays on the device."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------------ neighbourhoods
def knn_indices(points: torch.Tensor, k: int) -> torch.Tensor:
    """[N,3] -> [N,k] indices of the k nearest points (the point itself first). No gradient."""
    n = points.shape[0]
    k = min(k, n)
    with torch.no_grad():
        if n <= 4096:
            d = torch.cdist(points, points)
            return d.topk(k, dim=1, largest=False).indices
        from scipy.spatial import cKDTree

        pts = points.detach().double().cpu().numpy()
        _, idx = cKDTree(pts).query(pts, k=k)
        return torch.as_tensor(np.asarray(idx).reshape(n, k), dtype=torch.long, device=points.device)


class DisplacementNet(nn.Module):
    """g_theta(P, s): per point, its k nearest neighbours centred on it -> shared MLP -> max-pool, concat a
    step embedding -> MLP -> 3-D displacement. With local_scale the offsets are divided by the point's mean
    neighbour distance and the displacement multiplied back (so the map is scale-equivariant)."""

    def __init__(self, k: int = 32, enc_widths=(64, 128, 256), head_widths=(128, 64), steps: int = 3,
                 step_embed: int = 16, local_scale: bool = True):
        super().__init__()
        self.k, self.local_scale = k, local_scale
        layers, w = [], 3
        for c in enc_widths:
            layers += [nn.Linear(w, c), nn.ReLU()]
            w = c
        self.encoder = nn.Sequential(*layers)
        self.step_embedding = nn.Embedding(steps, step_embed)
        head, w = [], enc_widths[-1] + step_embed
        for c in head_widths:
            head += [nn.Linear(w, c), nn.ReLU()]
            w = c
        last = nn.Linear(w, 3)
        nn.init.normal_(last.weight, std=1e-3)  # start close to the identity path
        nn.init.zeros_(last.bias)
        self.head = nn.Sequential(*head, last)

    def forward(self, points: torch.Tensor, step: int, idx: torch.Tensor | None = None) -> torch.Tensor:
        """points [N,3] -> displacement [N,3]."""
        if idx is None:
            idx = knn_indices(points, self.k)
        offsets = points[idx] - points[:, None, :]  # [N,k,3]
        if self.local_scale:
            scale = offsets.detach().norm(dim=-1).mean(dim=1, keepdim=True).clamp_min(1e-9)  # [N,1]
            offsets = offsets / scale[:, :, None]
        feat = self.encoder(offsets).max(dim=1).values
        emb = self.step_embedding.weight[step].expand(points.shape[0], -1)
        disp = self.head(torch.cat([feat, emb], dim=1))
        return disp * scale if self.local_scale else disp


def denoise_path(net: DisplacementNet, points: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """[P_0, P_1, ..., P_S]: P_{s+1} = P_s + g(P_s, s); neighbourhoods recomputed on P_s at every step."""
    path = [points]
    for s in range(steps):
        p = path[-1]
        path.append(p + net(p, s))
    return path


def build_net(cfg) -> DisplacementNet:
    """The network on the current default device (callers build it under `ctx.init_module()` / `torch.device`)."""
    return DisplacementNet(cfg.k, tuple(cfg.enc_widths), tuple(cfg.head_widths), cfg.steps, cfg.step_embed,
                           cfg.local_scale)


# ------------------------------------------------------------------ distances
def emd_assignment(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Exact optimal bijection between equal-size sets minimising the summed Euclidean distance."""
    from scipy.optimize import linear_sum_assignment

    if x.shape != y.shape:
        raise ValueError(f"EMD needs equal-size sets, got {tuple(x.shape)} and {tuple(y.shape)}")
    with torch.no_grad():
        cost = torch.cdist(x.detach().double(), y.detach().double()).cpu().numpy()
    return linear_sum_assignment(cost)


def emd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """EMD(X, Y) = min_phi (1/|X|) sum ||x - phi(x)||_2 over bijections; the matching is computed without
    gradient, the loss is differentiable in both sets."""
    r, c = emd_assignment(x, y)
    r, c = torch.as_tensor(r, device=x.device), torch.as_tensor(c, device=y.device)
    return (x[r] - y[c]).norm(dim=1).mean()


def chamfer(x: torch.Tensor, y: torch.Tensor, squared: bool = True) -> torch.Tensor:
    """mean_x min_y d(x,y) + mean_y min_x d(x,y), with squared distances by default (ScoreDenoise's CD)."""
    if x.shape[0] > 4096 or y.shape[0] > 4096:
        return torch.as_tensor(chamfer_np(x.detach().cpu().numpy(), y.detach().cpu().numpy(), squared), device=x.device)
    d = torch.cdist(x, y)
    if squared:
        d = d * d
    return d.min(dim=1).values.mean() + d.min(dim=0).values.mean()


def chamfer_np(x: np.ndarray, y: np.ndarray, squared: bool = True) -> float:
    from scipy.spatial import cKDTree

    dx, _ = cKDTree(y).query(x)
    dy, _ = cKDTree(x).query(y)
    if squared:
        dx, dy = dx ** 2, dy ** 2
    return float(dx.mean() + dy.mean())


def ucan_loss(net: DisplacementNet, pa: torch.Tensor, pb: torch.Tensor, cfg) -> tuple[torch.Tensor, dict]:
    """L = EMD(D(P^a), P^b) + EMD(D(P^b), P^a) + lambda_DC * dist(D(P^a), D(P^b)) for one patch pair.
    The parts (n2n, dc) are detached 0-d tensors on the patches' device (read them at report time)."""
    path_a, path_b = denoise_path(net, pa, cfg.steps), denoise_path(net, pb, cfg.steps)
    da, db = path_a[-1], path_b[-1]
    n2n = emd(da, pb) + emd(db, pa)
    if cfg.intermediate_n2n and cfg.steps > 1:
        for s in range(1, cfg.steps):
            w = s / cfg.steps
            n2n = n2n + w * (emd(path_a[s], pb) + emd(path_b[s], pa))
    if cfg.lambda_dc > 0:
        dc = emd(da, db) if cfg.dc_distance == "emd" else chamfer(da, db, squared=False)
    else:
        dc = torch.zeros((), device=pa.device)
    loss = n2n + cfg.lambda_dc * dc
    return loss, {"n2n": n2n.detach(), "dc": dc.detach()}


# ------------------------------------------------------------------ baselines
def knn_mean_smoothing(points: np.ndarray, k: int, iters: int) -> np.ndarray:
    """Laplacian (k-NN mean) smoothing: each point moves to the mean of its k nearest neighbours (itself
    included), `iters` times."""
    from scipy.spatial import cKDTree

    x = np.asarray(points, dtype=np.float64)
    k = min(k, len(x))
    for _ in range(iters):
        _, idx = cKDTree(x).query(x, k=k)
        x = x[np.asarray(idx).reshape(len(x), k)].mean(axis=1)
    return x


# ------------------------------------------------------------------ inference
def farthest_point_sampling(points: np.ndarray, m: int, start: int = 0) -> np.ndarray:
    n = len(points)
    m = min(m, n)
    chosen = np.empty(m, dtype=np.int64)
    chosen[0] = start
    d = np.linalg.norm(points - points[start], axis=1)
    for i in range(1, m):
        chosen[i] = int(d.argmax())
        d = np.minimum(d, np.linalg.norm(points - points[chosen[i]], axis=1))
    return chosen


@torch.no_grad()
def denoise_cloud(net: DisplacementNet, points: np.ndarray, steps: int, patch_size: int = 1000,
                  normalise: bool = True) -> np.ndarray:
    """Denoise a single cloud of any size: normalise to the unit bounding sphere, split into overlapping patches
    (FPS seeds, the patch_size nearest points of each seed, ~3x coverage), run the S steps per patch, keep each
    point's prediction from the patch whose seed is nearest among those containing it, map back."""
    from scipy.spatial import cKDTree

    device = next(net.parameters()).device  # patches go to the network's device; results come back to the host
    x = np.asarray(points, dtype=np.float64)
    n = len(x)
    if normalise:
        centre = x.mean(0)
        radius = float(np.linalg.norm(x - centre, axis=1).max())
        radius = radius if np.isfinite(radius) and radius > 1e-12 else 1.0
        xn = (x - centre) / radius
    else:
        centre, radius, xn = np.zeros(3), 1.0, x
    if n <= patch_size:
        out = denoise_path(net, torch.as_tensor(xn, dtype=torch.float32, device=device),
                           steps)[-1].cpu().double().numpy()
    else:
        n_seeds = int(math.ceil(3 * n / patch_size))
        seeds = farthest_point_sampling(xn, n_seeds)
        tree = cKDTree(xn)
        out = np.empty_like(xn)
        best = np.full(n, np.inf)
        pending = list(seeds)
        done_seeds = set()
        while pending:
            s = pending.pop()
            if s in done_seeds:
                continue
            done_seeds.add(s)
            _, idx = tree.query(xn[s], k=patch_size)
            idx = np.asarray(idx).reshape(-1)
            pred = denoise_path(net, torch.as_tensor(xn[idx], dtype=torch.float32, device=device),
                                steps)[-1].cpu().double().numpy()
            dseed = np.linalg.norm(xn[idx] - xn[s], axis=1)
            better = dseed < best[idx]
            out[idx[better]] = pred[better]
            best[idx[better]] = dseed[better]
            if not pending:
                missing = np.flatnonzero(~np.isfinite(best))
                if len(missing):
                    pending.append(int(missing[0]))
    return out * radius + centre


# ------------------------------------------------------------------ 2-D image variant (ZS-N2N + L_DC)
class ZSN2N(nn.Module):
    """ZS-N2N's tiny denoiser: h = 3x3 conv (C->48) LReLU 3x3 conv (48->48) LReLU 1x1 conv (48->C); f(x) = x - h(x)."""

    def __init__(self, channels: int = 1, width: int = 48):
        super().__init__()
        self.c1 = nn.Conv2d(channels, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, width, 3, padding=1)
        self.c3 = nn.Conv2d(width, channels, 1)
        self.act = nn.LeakyReLU(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.c3(self.act(self.c2(self.act(self.c1(x)))))


def pair_downsample(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ZS-N2N's two 2x2 diagonal-average downsamplers: D1 = mean of (top-left, bottom-right),
    D2 = mean of (top-right, bottom-left). y [B,C,H,W] with even H, W."""
    c = y.shape[1]
    f1 = torch.tensor([[[[0.0, 0.5], [0.5, 0.0]]]], dtype=y.dtype, device=y.device).repeat(c, 1, 1, 1)
    f2 = torch.tensor([[[[0.5, 0.0], [0.0, 0.5]]]], dtype=y.dtype, device=y.device).repeat(c, 1, 1, 1)
    d1 = torch.nn.functional.conv2d(y, f1, stride=2, groups=c)
    d2 = torch.nn.functional.conv2d(y, f2, stride=2, groups=c)
    return d1, d2


def zsn2n_loss(f: ZSN2N, y: torch.Tensor, consistency: bool, lambda_dc: float = 1.0) -> tuple[torch.Tensor, dict]:
    """L_res + L_cons (ZS-N2N) [+ lambda * L_DC, L_DC = ||f(D1 y) - f(D2 y)||^2 (mean squared error)]."""
    d1, d2 = pair_downsample(y)
    fd1, fd2 = f(d1), f(d2)
    mse = lambda a, b: ((a - b) ** 2).mean()  # noqa: E731
    l_res = 0.5 * (mse(d1, fd2) + mse(d2, fd1))
    fy1, fy2 = pair_downsample(f(y))
    l_cons = 0.5 * (mse(fy1, fd1) + mse(fy2, fd2))
    loss = l_res + l_cons
    l_dc = mse(fd1, fd2)
    if consistency:
        loss = loss + lambda_dc * l_dc
    return loss, {"res": l_res.detach(), "cons": l_cons.detach(), "dc": l_dc.detach()}


def psnr(x: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((np.clip(x, 0, 1) - ref) ** 2))
    return 10 * math.log10(1.0 / max(mse, 1e-20))


def fit_zsn2n(noisy: np.ndarray, iters: int, consistency: bool, lr: float = 1e-3, decay_every: int = 1000,
              width: int = 48, lambda_dc: float = 1.0, seed: int = 0, clean: np.ndarray | None = None,
              log_every: int = 0, callback=None, device=None, ctx=None) -> tuple[np.ndarray, dict]:
    """Zero-shot fit on one noisy image [H,W] or [H,W,C] in [0,1] (even sides); -> (denoised, info).
    Runs on `ctx.device` with the run's precision (ctx.autocast / backward / optimizer_step) when a RunContext is
    given, else plainly on `device` (None: CPU). The loss is read on the host only at log points and at the end."""
    if ctx is None:  # a plain fp32 context on `device` (reproductions and tests call without a run)
        from methodlab.core import RunContext

        ctx = RunContext(device=device)
    device = ctx.device
    torch.manual_seed(seed)
    y = torch.as_tensor(noisy, dtype=torch.float32, device=device)
    y = y[None, None] if y.ndim == 2 else y.permute(2, 0, 1)[None]
    with device:
        f = ZSN2N(y.shape[1], width)
    opt = torch.optim.Adam(f.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=decay_every, gamma=0.5)
    info = {"loss": float("nan"), "curve": []}
    last = None
    for it in range(iters):
        with ctx.autocast():
            loss, parts = zsn2n_loss(f, y, consistency, lambda_dc)
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.optimizer_step(opt)
        sched.step()
        last = loss.detach()
        if log_every and ((it + 1) % log_every == 0 or it + 1 == iters):
            with torch.no_grad():
                out = torch.clamp(f(y), 0, 1)[0].permute(1, 2, 0).squeeze(-1).cpu().numpy()
            row = {"iter": it + 1, "loss": loss.item(), **{k: float(v) for k, v in parts.items()}}
            if clean is not None:
                row["psnr"] = psnr(out, clean)
            info["curve"].append(row)
            if callback is not None:
                callback(row)
    if last is not None:
        info["loss"] = float(last)
    with torch.no_grad():
        out = torch.clamp(f(y), 0, 1)[0].permute(1, 2, 0).cpu().numpy()
    out = out[..., 0] if np.asarray(noisy).ndim == 2 else out
    return out, info
