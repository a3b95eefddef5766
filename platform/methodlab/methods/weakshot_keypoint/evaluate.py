"""PCK on novel classes. PCK@a: a visible ground-truth keypoint counts as correct if the prediction lies within
a * max(bbox w, h) input pixels of it (bbox = the ground-truth box, as in MP-100). Mean over keypoints of a class,
then over classes. With support_shots 0 the pseudo-keypoints are matched to the class's keypoint ids by a
Hungarian assignment fitted on the labelled novel *validation* images, then applied to the test images.

The spec's sanity checks of the heads (`sanity_metrics`, config `sanity_checks`; novel test images, windows and
pairs drawn with eval seed 0):
- keyness: for each visible keypoint an r x r window (cells) with a random offset containing its cell; correct if
  the keypoint's cell is among the head's top 3 of the window's in-map cells. Chance = mean of 3 / valid cells.
  A Harris corner response (skimage, average-pooled to cells) is ranked in the same windows.
- correspondence: pairs (I, J) of the same novel class; for each keypoint visible in both, the argmax over J's
  cells of cos(r_I(p_j^I), r_J(.)) is correct if its cell centre lies within 0.1 x max(bbox_J w, h) px of p_j^J.
  The identity copy p_j^J := p_j^I is scored with the same radius; chance = disc area / image area.
Windows and pairs are drawn by a host generator (the same draws on every device); scores on the net's device."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.methods.weakshot_keypoint.model import cells_to_px, local_softargmax, px_to_cells, sample_at, window_cells


def pck_hits(pred: torch.Tensor, gt: torch.Tensor, vis: torch.Tensor, bbox: torch.Tensor, thr: float):
    """pred, gt (n, K, 2) px; vis (n, K) bool; bbox (n, 4) -> (correct count, visible count)."""
    norm = bbox[:, 2:].max(-1).values.clamp(min=1e-6)
    d = (pred - gt).norm(dim=-1) / norm[:, None]
    ok = (d <= thr) & vis
    return int(ok.sum()), int(vis.sum())


@torch.no_grad()
def predict(net, data, idx: torch.Tensor, support, batch: int = 64, polish: dict | None = None):
    """Predictions (n, K, 2) px and confidences (n, K) for images idx of one class given its support
    (image uint8 (S, S, 3), keypoints px (K, 2), valid (K,) bool)."""
    was = net.training
    net.eval()
    s_img, s_kps, s_valid = support
    f_s = net.features(s_img[None])
    out_p, out_c = [], []
    for i in range(0, len(idx), batch):
        q = data.take(idx[i:i + batch])
        f_q = net.features(q)
        n = len(q)
        logits = net.match(f_s.expand(n, -1, -1, -1), s_kps[None].expand(n, -1, -1), s_valid[None].expand(n, -1), f_q)
        h, w = f_q.shape[-2:]
        pos, conf = net.decode(logits, h, w)
        if polish is not None:
            k, _ = net.heads(f_q)
            pos = polish_positions(k, pos, polish["window"], polish["margin"])
        out_p.append(cells_to_px(pos, net.stride))
        out_c.append(conf)
    net.train(was)
    return torch.cat(out_p), torch.cat(out_c)


def polish_positions(k: torch.Tensor, pos: torch.Tensor, r: int, margin: float) -> torch.Tensor:
    """Test-time polish: move p_j to the keyness maximum inside W(p_j) if the keyness gain exceeds margin."""
    b, h, w = k.shape
    q = local_softargmax(k, pos, r, 1e-3)  # ~hard argmax in the window
    def at(p):
        c = p.round().long()
        return k[torch.arange(b, device=k.device)[:, None], c[..., 1].clamp(0, h - 1), c[..., 0].clamp(0, w - 1)]
    gain = at(q) - at(pos)
    return torch.where((gain > margin)[..., None], q, pos)


def fit_assignment(pred: torch.Tensor, gt: torch.Tensor, vis: torch.Tensor, bbox: torch.Tensor) -> list[int]:
    """Hungarian matching of predicted (pseudo) keypoints a to ground-truth ids b minimising the mean normalised
    distance over the images where b is visible. Returns perm with perm[b] = a."""
    from scipy.optimize import linear_sum_assignment

    norm = bbox[:, 2:].max(-1).values.clamp(min=1e-6)
    d = (pred[:, :, None, :] - gt[:, None, :, :]).norm(dim=-1) / norm[:, None, None]  # (n, A, B)
    v = vis[:, None, :].float()
    cost = ((d * v).sum(0) / v.sum(0).clamp(min=1)).cpu().numpy()
    cost[:, (vis.sum(0) == 0).cpu().numpy()] = 1.0
    rows, cols = linear_sum_assignment(cost)
    perm = [0] * gt.shape[1]
    for a, b in zip(rows, cols):
        perm[b] = int(a)
    return perm


def evaluate(net, data, supports: dict, thresholds=(0.05, 0.1, 0.2), assignments: dict | None = None,
             splits=("novel_val", "novel_test"), polish: dict | None = None) -> tuple[dict, dict]:
    """Metrics {eval/pck@t (test), eval/val_pck@t, eval/pck@t/cls<c>} and predictions per class for reuse.
    `assignments`: class -> perm (support_shots 0); None -> identity."""
    metrics, per = {}, {}
    for split in splits:
        tag = "val_" if split == "novel_val" else ""
        per_class = {t: [] for t in thresholds}
        for c in data.novel_classes:
            idx = data.index(split, c)
            if len(idx) == 0:
                continue
            kc = data.k_of_class[c]
            pred, _ = predict(net, data, idx, supports[c], polish=polish)
            gt, vis, bbox = data.labels(idx)
            gt, vis = gt[:, :kc], vis[:, :kc]
            if assignments is not None and c in assignments:
                pred = pred[:, assignments[c]]
            pred = pred[:, :kc]
            for t in thresholds:
                hit, n = pck_hits(pred, gt, vis, bbox, t)
                per_class[t].append(hit / max(n, 1))
                if split == "novel_test":
                    metrics[f"eval/pck@{t}/cls{c}"] = hit / max(n, 1)
        for t in thresholds:
            metrics[f"eval/{tag}pck@{t}"] = float(np.mean(per_class[t])) if per_class[t] else 0.0
    return metrics, per


def support_copy_pck(data, supports: dict, thresholds=(0.05, 0.1, 0.2)) -> dict:
    """Reference row: support keypoints mapped by the support-bbox -> query-bbox similarity (no model)."""
    out = {t: [] for t in thresholds}
    for c in data.novel_classes:
        idx = data.index("novel_test", c)
        sup = data.index("novel_support", c)
        kc = data.k_of_class[c]
        s_kps, _, s_box = data.labels(sup)
        gt, vis, bbox = data.labels(idx)
        sc = bbox[:, 2:].max(-1).values / s_box[0, 2:].max().clamp(min=1e-6)
        s_c = s_box[0, :2] + s_box[0, 2:] / 2
        q_c = bbox[:, :2] + bbox[:, 2:] / 2
        pred = (s_kps[0, :kc][None] - s_c) * sc[:, None, None] + q_c[:, None]
        for t in thresholds:
            hit, n = pck_hits(pred, gt[:, :kc], vis[:, :kc], bbox, t)
            out[t].append(hit / max(n, 1))
    return {f"eval/pck@{t}": float(np.mean(v)) for t, v in out.items()}


# ------------------------------------------------------------------------------------------- sanity checks
def harris_cells(images: torch.Tensor, stride: int) -> torch.Tensor:
    from skimage.color import rgb2gray
    from skimage.feature import corner_harris

    out = []
    for im in images.cpu().numpy():
        r = corner_harris(rgb2gray(im), sigma=1.0)
        out.append(torch.from_numpy(r).float())
    return F.avg_pool2d(torch.stack(out)[:, None], stride)[:, 0].to(images.device)


def _topk_hits(score: torch.Tensor, kps_c: torch.Tensor, vis: torch.Tensor, r: int, gen: torch.Generator, top: int = 3):
    b, h, w = score.shape
    cell = kps_c.round().long()
    cell[..., 0].clamp_(0, w - 1)
    cell[..., 1].clamp_(0, h - 1)
    half = (r - 1) // 2
    shift = torch.randint(-half, half + 1, cell.shape, generator=gen, device=gen.device).to(score.device)
    idx, valid, _ = window_cells(cell + shift, r, h, w)
    vals = torch.gather(score.reshape(b, 1, -1).expand(b, idx.shape[1], h * w), 2, idx)
    vals = torch.where(valid, vals, torch.full_like(vals, -float("inf")))
    tgt = (half - shift[..., 1]) * r + (half - shift[..., 0])
    tv = torch.gather(vals, 2, tgt[..., None])[..., 0]
    rank = (vals > tv[..., None]).sum(-1)  # cells strictly better than the keypoint's cell
    m = vis
    return (rank[m] < top).float(), (top / valid.sum(-1).float())[m]


@torch.no_grad()
def keyness_check(net, data, r: int, seed: int = 0) -> dict:
    net.eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    hits, chance, harris = [], [], []
    for c in data.novel_classes:
        idx = data.index("novel_test", c)
        kps, vis, _ = data.labels(idx)
        kc = data.k_of_class[c]
        kps, vis = kps[:, :kc], vis[:, :kc]
        k, _ = net.heads(net.features(data.take(idx)))
        st = gen.get_state()
        h1, ch = _topk_hits(k, px_to_cells(kps, net.stride), vis, r, gen)
        gen.set_state(st)  # the same windows for Harris
        h2, _ = _topk_hits(harris_cells(data.take(idx), net.stride), px_to_cells(kps, net.stride), vis, r, gen)
        hits.append(h1)
        chance.append(ch)
        harris.append(h2)
    return {"keyness_top3": float(torch.cat(hits).mean()), "keyness_chance": float(torch.cat(chance).mean()),
            "harris_top3": float(torch.cat(harris).mean()), "n": int(torch.cat(hits).numel())}


@torch.no_grad()
def correspondence_check(net, data, pairs_per_class: int = 200, seed: int = 0, radius: float = 0.1) -> dict:
    net.eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    hits, ident = [], []
    size = data.size
    for c in data.novel_classes:
        idx = data.index("novel_test", c)
        kc = data.k_of_class[c]
        kps, vis, bbox = data.labels(idx)
        _, desc = net.heads(net.features(data.take(idx)))
        b, d, h, w = desc.shape
        a = torch.randint(len(idx), (pairs_per_class,), generator=gen, device="cpu")
        o = (a + 1 + torch.randint(len(idx) - 1, (pairs_per_class,), generator=gen, device="cpu")) % len(idx)
        a, o = a.to(desc.device), o.to(desc.device)
        q = F.normalize(sample_at(desc[a], px_to_cells(kps[a, :kc], net.stride)), dim=-1)  # (P, K, D)
        sim = torch.einsum("pkd,pdn->pkn", q, desc[o].reshape(pairs_per_class, d, -1))
        arg = sim.argmax(-1)
        cell = torch.stack([arg % w, arg // w], -1).float()
        pred = cells_to_px(cell, net.stride)
        rad = radius * bbox[o, 2:].max(-1).values[:, None]
        both = vis[a, :kc] & vis[o, :kc]
        hits.append(((pred - kps[o, :kc]).norm(dim=-1) <= rad)[both].float())
        ident.append(((kps[a, :kc] - kps[o, :kc]).norm(dim=-1) <= rad)[both].float())
    test = (data.split == 3).to(data.device)
    mean_box = float(data._bbox[test][:, 2:].max(-1).values.mean()) if bool(test.any()) else size
    return {"corr_top1": float(torch.cat(hits).mean()), "identity_copy": float(torch.cat(ident).mean()),
            "corr_chance": math.pi * (radius * mean_box) ** 2 / size ** 2, "n": int(torch.cat(hits).numel())}


def sanity_metrics(net, data, window: int, pairs_per_class: int = 200) -> dict:
    """Both sanity checks of the heads as sanity/* metrics (eval seed 0)."""
    key, corr = keyness_check(net, data, window, seed=0), correspondence_check(net, data, pairs_per_class, seed=0)
    key["keyness_n"], corr["corr_n"] = key.pop("n"), corr.pop("n")
    return {f"sanity/{k}": float(v) for k, v in {**key, **corr}.items()}
