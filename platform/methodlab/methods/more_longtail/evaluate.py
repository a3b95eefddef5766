"""Balanced-test metrics: overall / balanced accuracy, Many / Medium / Few accuracy, the per-sample discrepancy
||z_full - z_gen||^2 by group (the mechanism check), and for multi-label mAP (overall and by group) plus the
class-averaged balanced accuracy of the 0.5-threshold decisions."""

from __future__ import annotations

import math

import numpy as np
import torch

GROUP_NAMES = ("many", "medium", "few")


@torch.no_grad()
def logits(net, x: torch.Tensor, batch: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """(z_full, z_gen) in eval mode, in chunks, on x's device."""
    was = net.training
    net.eval()
    zf, zg = [], []
    for i in range(0, len(x), batch):
        a, b = net(x[i:i + batch])
        zf.append(a)
        zg.append(b)
    net.train(was)
    if not zf:
        return torch.zeros(0, device=x.device), torch.zeros(0, device=x.device)
    return torch.cat(zf), torch.cat(zg)


def average_precision(scores: np.ndarray, truth: np.ndarray) -> float:
    """AP of one class (mean precision at each positive, ties broken by order); NaN with no positives."""
    pos = truth.sum()
    if pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    t = truth[order]
    hits = np.cumsum(t)
    prec = hits / np.arange(1, len(t) + 1)
    return float((prec * t).sum() / pos)


def _nanmean(v) -> float:
    v = [x for x in v if not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(v)) if v else float("nan")


def metrics_from_logits(zf: torch.Tensor, zg: torch.Tensor, y: torch.Tensor, groups: np.ndarray, multilabel: bool,
                        prefix: str = "eval") -> dict:
    c = len(groups)
    disc = ((zf - zg) ** 2).sum(1).numpy()
    out: dict = {}
    if multilabel:
        s, t = torch.sigmoid(zf).numpy(), y.numpy()
        ap = np.array([average_precision(s[:, k], t[:, k]) for k in range(c)])
        dec = s >= 0.5
        tpr = [float(dec[t[:, k] == 1, k].mean()) if (t[:, k] == 1).any() else float("nan") for k in range(c)]
        tnr = [float((~dec[t[:, k] == 0, k]).mean()) if (t[:, k] == 0).any() else float("nan") for k in range(c)]
        out[f"{prefix}/mAP"] = _nanmean(ap.tolist())
        out[f"{prefix}/balanced_acc"] = _nanmean([(a + b) / 2 for a, b in zip(tpr, tnr)])
        for g, name in enumerate(GROUP_NAMES):
            out[f"{prefix}/mAP_{name}"] = _nanmean(ap[groups == g].tolist())
        # discrepancy of samples whose labels are all in one group (head-only vs containing a Few label)
        has = [(t[:, groups == g].sum(1) > 0) for g in range(3)]
        sel = {"many": has[0] & ~has[1] & ~has[2], "few": has[2]}
    else:
        pred = zf.argmax(1).numpy()
        yy = y.numpy()
        ok = pred == yy
        per_class = [float(ok[yy == k].mean()) if (yy == k).any() else float("nan") for k in range(c)]
        out[f"{prefix}/acc"] = float(ok.mean()) if len(ok) else float("nan")
        out[f"{prefix}/balanced_acc"] = _nanmean(per_class)
        gy = groups[yy] if len(yy) else yy
        for g, name in enumerate(GROUP_NAMES):
            m = gy == g
            out[f"{prefix}/acc_{name}"] = float(ok[m].mean()) if m.any() else float("nan")
        sel = {"many": gy == 0, "few": gy == 2}
        # the general path alone (W_g, the low-rank part dropped): how much of the decisions B A carries
        okg = zg.argmax(1).numpy() == yy
        out[f"{prefix}/gen_balanced_acc"] = _nanmean([float(okg[yy == k].mean()) if (yy == k).any() else float("nan")
                                                      for k in range(c)])
        out[f"{prefix}/gen_acc_few"] = float(okg[gy == 2].mean()) if (gy == 2).any() else float("nan")
    dm = float(disc[sel["many"]].mean()) if sel["many"].any() else float("nan")
    dfw = float(disc[sel["few"]].mean()) if sel["few"].any() else float("nan")
    out[f"{prefix}/disc_many"] = dm
    out[f"{prefix}/disc_few"] = dfw
    out[f"{prefix}/disc_ratio"] = dfw / dm if dm > 0 and not math.isnan(dfw) else float("nan")
    return out


def evaluate(net, data, prefix: str = "eval", split: str = "test") -> dict:
    x, y = (data.x_test, data.y_test) if split == "test" else (data.x_val, data.y_val)
    if len(x) == 0:
        return {}
    zf, zg = logits(net, x)  # on the run's device; the metrics are numpy on the host (one copy per evaluation)
    return metrics_from_logits(zf.cpu(), zg.cpu(), y.cpu(), data.groups, data.multilabel, prefix)
