"""The spec's sanity checks of the stage-1 heads on novel test images (windows and pairs drawn with eval seed 0).

- keyness: for each visible keypoint an r x r window (cells) with a random offset containing its cell; correct if
  the keypoint's cell is among the head's top 3 of the window's in-map cells. Chance = mean of 3 / valid cells.
  A Harris corner response (skimage, average-pooled to cells) is ranked in the same windows.
- correspondence: pairs (I, J) of the same novel class; for each keypoint visible in both, the argmax over J's
  cells of cos(r_I(p_j^I), r_J(.)) is correct if its cell centre lies within 0.1 x max(bbox_J w, h) px of p_j^J.
  The identity copy p_j^J := p_j^I is scored with the same radius; chance = disc area / image area.
Windows and pairs are drawn by a host generator (the same draws on every device); scores on the net's device."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from methodlab.methods.weakshot_keypoint.model import cells_to_px, px_to_cells, sample_at, window_cells


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



