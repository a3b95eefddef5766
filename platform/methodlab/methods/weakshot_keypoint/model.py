"""Networks and maths of weakshot_keypoint.

- Backbone F: stride-s CNN (dilated residual blocks) -> feature map (B, C, H, W), H = size / s.
- Matching head G (CapeFormer-style): support keypoint features (bilinear at support keypoints) become K tokens,
  refined by self-attention among keypoints and cross-attention to the query map; heatmap logits = token . cell;
  p_j = soft-argmax (cells), c_j = heatmap mass within conf_radius cells of its argmax.
- Keyness head K: one logit per cell. Correspondence head R: L2-normalised descriptor per cell.

All positions inside the model are in CELLS; `cells_to_px` / `px_to_cells` are the one conversion
(cell (i, j) <-> pixel ((j + 0.5) s, (i + 0.5) s)).

Devices: every helper builds its tensors on the device of its inputs. Random window shifts are drawn from the
caller's generator on ITS device (the training loop's host sampler) and copied to the inputs' device."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG = -1e9  # "-inf" logit for windows that leave the map


def px_to_cells(p: torch.Tensor, stride: int) -> torch.Tensor:
    return p / stride - 0.5


def cells_to_px(c: torch.Tensor, stride: int) -> torch.Tensor:
    return (c + 0.5) * stride


def sample_at(fmap: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    """Bilinear features at cell coordinates pts (B, K, 2) [x, y] of fmap (B, C, H, W) -> (B, K, C)."""
    _, _, h, w = fmap.shape
    gx = (pts[..., 0] + 0.5) / w * 2 - 1
    gy = (pts[..., 1] + 0.5) / h * 2 - 1
    grid = torch.stack([gx, gy], -1)[:, :, None, :]
    return F.grid_sample(fmap, grid, mode="bilinear", padding_mode="border", align_corners=False)[..., 0].transpose(1, 2)


def cell_grid(h: int, w: int, device="cpu") -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32, device=device),
                            torch.arange(w, dtype=torch.float32, device=device), indexing="ij")
    return torch.stack([xs, ys], -1).reshape(-1, 2)  # (H*W, 2) [x, y]


def soft_argmax(logits: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """logits (..., H*W) -> expected cell [x, y] (..., 2)."""
    return logits.softmax(-1) @ cell_grid(h, w, logits.device)


def window_cells(center: torch.Tensor, r: int, h: int, w: int):
    """r x r windows of integer cells whose top-left is `center - (r-1)//2` (center: (..., 2) integer [x, y]).
    Returns (idx (..., r*r) flat cell index clamped, valid (..., r*r) bool, coords (..., r*r, 2))."""
    off = torch.arange(r, device=center.device) - (r - 1) // 2
    oy, ox = torch.meshgrid(off, off, indexing="ij")
    xs = center[..., 0:1].long() + ox.reshape(-1)
    ys = center[..., 1:2].long() + oy.reshape(-1)
    valid = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
    idx = ys.clamp(0, h - 1) * w + xs.clamp(0, w - 1)
    return idx, valid, torch.stack([xs, ys], -1).float()


def local_softargmax(score: torch.Tensor, centers: torch.Tensor, r: int, temp: float):
    """Soft-argmax of softmax(score / temp) over the r x r window (cells) centred on round(centers).
    score (B, H, W); centers (B, K, 2) cells -> (B, K, 2) cells, always inside the window (border cells -inf)."""
    b, h, w = score.shape
    c = centers.round().clamp(torch.tensor([0, 0.0], device=centers.device),
                              torch.tensor([w - 1.0, h - 1.0], device=centers.device))
    idx, valid, coords = window_cells(c, r, h, w)
    vals = torch.gather(score.reshape(b, 1, -1).expand(b, idx.shape[1], h * w), 2, idx)
    vals = torch.where(valid, vals / temp, torch.full_like(vals, NEG))
    return (vals.softmax(-1)[..., None] * coords).sum(-2)


def window_shifts(shape, r: int, gen: torch.Generator) -> torch.Tensor:
    """The random window offsets of keyness_window_loss for keypoints of `shape` (B, K, 2), drawn by `gen` on its
    own device (the host sampler): the draw keyness_window_loss makes when it is given no `shift`."""
    half = (r - 1) // 2
    return torch.randint(-half, half + 1, tuple(shape), generator=gen, device=gen.device)


def keyness_window_loss(k: torch.Tensor, kps: torch.Tensor, vis: torch.Tensor, r: int, gen: torch.Generator | None,
                        shift: torch.Tensor | None = None, denom=None):
    """L_key: for each visible keypoint, an r x r window (cells) placed with a random offset that contains the
    keypoint's cell; cross-entropy of the keyness logits over the window's in-map cells with the keypoint's cell
    as target. k (B, H, W); kps (B, K, 2) cells; vis (B, K) bool. Returns (loss, n visible as a 0-d tensor).
    The shifts come from `gen` on its own device (host sampler) and are copied to k's device; or `shift` (B, K, 2),
    drawn before by window_shifts. denom: the loss is the sum over this batch's visible keypoints / denom (a
    rank's part of a larger batch's mean) instead of their mean."""
    b, h, w = k.shape
    cell = kps.round().long()
    cell[..., 0].clamp_(0, w - 1)
    cell[..., 1].clamp_(0, h - 1)
    half = (r - 1) // 2
    if shift is None:
        shift = window_shifts(cell.shape, r, gen)
    shift = shift.to(k.device, non_blocking=True)
    center = cell + shift  # the keypoint lies at offset -shift from the window centre: inside
    idx, valid, _ = window_cells(center, r, h, w)
    vals = torch.gather(k.reshape(b, 1, -1).expand(b, idx.shape[1], h * w), 2, idx)
    vals = torch.where(valid, vals, torch.full_like(vals, NEG))
    target_pos = (half - shift[..., 1]) * r + (half - shift[..., 0])
    m = vis.reshape(-1)
    n = m.sum()
    if n == 0:
        return k.sum() * 0, n
    if denom is not None:
        return F.cross_entropy(vals.reshape(-1, r * r)[m], target_pos.reshape(-1)[m], reduction="sum") / denom, n
    loss = F.cross_entropy(vals.reshape(-1, r * r)[m], target_pos.reshape(-1)[m])
    return loss, n


def corr_infonce(desc_i: torch.Tensor, desc_j: torch.Tensor, kp_i, kp_j, both, tau: float, denom=None):
    """L_corr: InfoNCE over all cells of J for each keypoint of I (descriptor at p_j^I bilinear; the target is the
    cell of p_j^J), symmetric. desc (B, D, H, W) normalised; kp (B, K, 2) cells; both (B, K) bool. denom: sums over
    this batch's keypoints / denom (a rank's part of a larger batch's mean) instead of means."""
    b, d, h, w = desc_i.shape
    if both.sum() == 0:
        return desc_i.sum() * 0

    def one(da, db, ka, kb):
        q = F.normalize(sample_at(da, ka), dim=-1)  # (B, K, D)
        logits = torch.einsum("bkd,bdn->bkn", q, db.reshape(b, d, -1)) / tau
        cell = kb.round().long()
        tgt = cell[..., 1].clamp(0, h - 1) * w + cell[..., 0].clamp(0, w - 1)
        if denom is not None:
            return F.cross_entropy(logits[both], tgt[both], reduction="sum") / denom
        return F.cross_entropy(logits[both], tgt[both])

    return 0.5 * (one(desc_i, desc_j, kp_i, kp_j) + one(desc_j, desc_i, kp_j, kp_i))


def corr_local_target(desc_a, desc_b, pa, pb_center, r: int, tau: float):
    """v = soft-argmax over the r x r window of B around pb_center of softmax(cos(r_A(pa), r_B(.)) / tau)."""
    b, d, h, w = desc_b.shape
    q = F.normalize(sample_at(desc_a, pa), dim=-1)  # (B, K, D)
    sim = torch.einsum("bkd,bdn->bkn", q, desc_b.reshape(b, d, -1))  # (B, K, HW)
    c = pb_center.round().clamp(torch.tensor([0, 0.0], device=pb_center.device),
                                torch.tensor([w - 1.0, h - 1.0], device=pb_center.device))
    idx, valid, coords = window_cells(c, r, h, w)
    vals = torch.gather(sim, 2, idx)
    vals = torch.where(valid, vals / tau, torch.full_like(vals, NEG))
    return (vals.softmax(-1)[..., None] * coords).sum(-2)


def corr_transfer_loss(p_i, p_j, v_j, u_i, wgt, mask, n=None):
    """L_ct = sum_j w_j (||p_j^J - sg(v_j)||_1 + ||p_j^I - sg(u_j)||_1) / #gated (symmetric); n: the count to
    divide by when the batch is a rank's part of a larger one (its #gated), else this batch's."""
    n = mask.sum().clamp(min=1) if n is None else n
    l = (p_j - v_j.detach()).abs().sum(-1) + (p_i - u_i.detach()).abs().sum(-1)
    return (wgt.detach() * l * mask).sum() / n


class _RankSum(torch.autograd.Function):
    """Sum over the ranks (ctx.all_reduce) whose gradient is the sum over the ranks of the incoming gradients: the
    differentiable collective of a batch statistic shared by all ranks."""

    @staticmethod
    def forward(fctx, t, run_ctx):
        fctx.run_ctx = run_ctx
        return run_ctx.all_reduce(t.detach().clone(), op="sum")

    @staticmethod
    def backward(fctx, g):
        return fctx.run_ctx.all_reduce(g.detach().clone(), op="sum"), None


class RankSyncedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are those of the whole global batch, all ranks' images together
    (what SyncBatchNorm does, through the run's ctx.all_reduce: any device, no DDP): two collectives forward (the
    sum and count, then the centred sum of squares) and two backward. Each rank's forward, and the sum of the ranks'
    gradients, are then those of one worker's whole batch; the running statistics are the same on every rank.
    In eval mode (or on one worker) it is the plain BatchNorm2d."""

    run_ctx = None  # the RunContext, set by sync_batchnorm

    def forward(self, x):
        ctx = self.run_ctx
        if not self.training or ctx is None or ctx.world_size <= 1:
            return super().forward(x)
        return self._synced(x, ctx)

    @torch.compiler.disable  # collectives inside: run eagerly (a graph break) under a compiled backbone
    def _synced(self, x, ctx):
        xf = x.float()
        c = xf.shape[1]
        head = _RankSum.apply(torch.cat([xf.sum((0, 2, 3)), xf.new_full((1,), xf.numel() / max(c, 1))]), ctx)
        n = head[-1].detach()
        mean = head[:-1] / n
        d = xf - mean.view(1, c, 1, 1)
        var = _RankSum.apply((d * d).sum((0, 2, 3)), ctx) / n  # two-pass: no cancellation
        y = d * torch.rsqrt(var + self.eps).view(1, c, 1, 1)
        if self.affine:
            y = y * self.weight.view(1, c, 1, 1) + self.bias.view(1, c, 1, 1)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(var.detach() * (n / (n - 1).clamp(min=1)), alpha=m)
        return y.to(x.dtype)


def sync_batchnorm(module: nn.Module, run_ctx) -> nn.Module:
    """Every BatchNorm2d of `module` as a RankSyncedBatchNorm2d on `run_ctx` (same parameters, buffers and
    state_dict names), in place; call before an optimiser is built over the parameters."""
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm2d:
            dev = next(iter([*child.parameters(), *child.buffers()])).device
            new = RankSyncedBatchNorm2d(child.num_features, child.eps, child.momentum, child.affine,
                                        child.track_running_stats, device=dev)
            new.load_state_dict(child.state_dict())
            new.train(child.training)
            new.run_ctx = run_ctx
            setattr(module, name, new)
        else:
            sync_batchnorm(child, run_ctx)
    return module


class Block(nn.Module):
    def __init__(self, c: int, dil: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=dil, dilation=dil, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn(self.conv(x)))


class Backbone(nn.Module):
    def __init__(self, c: int, stride: int):
        super().__init__()
        layers = [nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
        s = 2
        while s < stride:
            layers += [nn.Conv2d(c, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
            s *= 2
        layers += [Block(c, 1), Block(c, 2), Block(c, 4)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class MatchLayer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, 1, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, 1, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, t, mem, pad):
        t = self.n1(t + self.self_attn(t, t, t, key_padding_mask=pad, need_weights=False)[0])
        t = self.n2(t + self.cross_attn(t, mem, mem, need_weights=False)[0])
        return self.n3(t + self.ffn(t))


class KeypointNet(nn.Module):
    """Class-agnostic support/query keypoint model with keyness and correspondence heads."""

    def __init__(self, channels: int = 32, embed: int = 32, stride: int = 2, match_layers: int = 1, conf_radius: int = 1):
        super().__init__()
        self.stride, self.conf_radius = stride, conf_radius
        self.backbone = Backbone(channels, stride)
        self.key_head = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.Conv2d(channels, 1, 1))
        self.corr_head = nn.Conv2d(channels, embed, 1)
        self.q_proj = nn.Conv2d(channels, embed, 1)
        self.s_proj = nn.Linear(channels, embed)
        self.layers = nn.ModuleList(MatchLayer(embed) for _ in range(match_layers))
        self.scale = nn.Parameter(torch.tensor(float(embed) ** -0.5 * 4))
        self.register_buffer("mean", torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1))

    def features(self, img_u8: torch.Tensor) -> torch.Tensor:
        """img (B, H, W, 3) uint8 -> feature map (B, C, H/s, W/s)."""
        x = img_u8.permute(0, 3, 1, 2).float() / 255.0 - self.mean
        return self.backbone(x)

    def heads(self, f: torch.Tensor):
        return self.key_head(f)[:, 0], F.normalize(self.corr_head(f), dim=1)

    def match(self, f_sup: torch.Tensor, sup_kps_px: torch.Tensor, sup_valid: torch.Tensor, f_q: torch.Tensor):
        """Heatmap logits (B, K, H*W) of the support keypoints in the query; invalid keypoints still get a map."""
        b, _, h, w = f_q.shape
        tok = self.s_proj(sample_at(f_sup, px_to_cells(sup_kps_px, self.stride)))
        mem = self.q_proj(f_q).flatten(2).transpose(1, 2)  # (B, HW, D)
        pad = ~sup_valid
        pad = pad & ~pad.all(-1, keepdim=True)  # a fully padded row would give NaN attention
        for layer in self.layers:
            tok = layer(tok, mem, pad)
        return torch.einsum("bkd,bnd->bkn", tok, mem) * self.scale

    def decode(self, logits: torch.Tensor, h: int, w: int):
        """Heatmap logits -> (positions in cells (B, K, 2), confidences (B, K))."""
        pos = soft_argmax(logits, h, w)
        prob = logits.softmax(-1)
        arg = prob.argmax(-1)
        ax, ay = arg % w, arg // w
        idx, valid, _ = window_cells(torch.stack([ax, ay], -1), 2 * self.conf_radius + 1, h, w)
        conf = (torch.gather(prob, 2, idx) * valid).sum(-1)
        return pos, conf

    def forward(self, sup_img, sup_kps_px, sup_valid, q_img):
        f_s, f_q = self.features(sup_img), self.features(q_img)
        logits = self.match(f_s, sup_kps_px, sup_valid, f_q)
        h, w = f_q.shape[-2:]
        pos, conf = self.decode(logits, h, w)
        return cells_to_px(pos, self.stride), conf


def pose_loss(logits: torch.Tensor, pos_cells: torch.Tensor, tgt_cells: torch.Tensor, mask: torch.Tensor, h: int, w: int,
              sigma: float, denom=None):
    """L_pose: CE of the heatmap against a Gaussian (sigma cells) at the target + L1 of the soft-argmax (cells),
    averaged over the masked keypoints (or summed over them / denom: a rank's part of a larger batch's mean)."""
    if mask.sum() == 0:
        return logits.sum() * 0
    g = cell_grid(h, w, logits.device)
    d2 = ((g[None, None] - tgt_cells[:, :, None]) ** 2).sum(-1)
    target = torch.softmax(-d2 / (2 * sigma ** 2), -1)
    ce = -(target * logits.log_softmax(-1)).sum(-1)
    l1 = (pos_cells - tgt_cells).abs().sum(-1)
    return ((ce + l1) * mask).sum() / (mask.sum() if denom is None else denom)


def keyness_peaks(k: torch.Tensor, n: int, nms: int = 2) -> torch.Tensor:
    """n distinct local maxima of a keyness map (H, W) with non-maximum suppression radius `nms` cells -> (n, 2)
    cells [x, y] (greedy; if fewer peaks exist the suppression radius shrinks)."""
    h, w = k.shape
    for rad in range(nms, -1, -1):
        score = k.clone()
        out = []
        for _ in range(n):
            v, i = score.reshape(-1).max(0)
            if v <= NEG / 2:
                break
            y, x = int(i) // w, int(i) % w
            out.append([x, y])
            score[max(0, y - rad):y + rad + 1, max(0, x - rad):x + rad + 1] = NEG
        if len(out) == n:
            return torch.tensor(out, dtype=torch.float32, device=k.device)
    raise ValueError(f"cannot place {n} distinct peaks on a {h}x{w} map")
