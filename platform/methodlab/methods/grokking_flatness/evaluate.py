"""Loss, accuracy and the last-layer geometry on a whole split (no gradient)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from methodlab.methods.grokking_flatness import measures
from methodlab.methods.grokking_flatness.model import ANSWER_POS  # noqa: F401  (index of c in the targets)


def forward_task(model, x: torch.Tensor, task: str):
    """Returns (loss, correct[N] bool, W, phi, logits_at_measure, labels) for a batch of the task.

    Modular: the loss is the mean cross-entropy over the right-hand side (c and the final <eos>);
    an equation is correct only if both are argmax-correct. The loss is float32 also when the forward
    runs under autocast (bf16 / fp16 logits are upcast first)."""
    if task == "digits":
        logits, phi = model(x[0])
        y = x[1]
        return F.cross_entropy(logits.float(), y), logits.argmax(-1) == y, logits, phi, y
    inp, tgt = x[:, :-1], x[:, 1:]
    logits, hidden = model(inp)  # right-hand-side positions only: [B, 2, ...] (predicting c, then <eos>)
    rhs_logits = logits
    rhs_tgt = tgt[:, ANSWER_POS:]
    loss = F.cross_entropy(rhs_logits.float().reshape(-1, rhs_logits.shape[-1]), rhs_tgt.reshape(-1))
    correct = (rhs_logits.argmax(-1) == rhs_tgt).all(-1)
    return loss, correct, logits, hidden, rhs_tgt[:, 0]


def measure_view(W, logits, hidden, task: str, rf_position: str):
    """(W, phi, logits) the relative-flatness measure uses."""
    if task == "digits":
        return W, hidden, logits
    if rf_position == "official_pair":  # grok's logged quantity: product of both RHS logits, concatenated features
        return W, torch.cat([hidden[:, 0], hidden[:, 1]], -1), logits[:, 0] * logits[:, 1]
    return W, hidden[:, 0], logits[:, 0]


@torch.no_grad()
def evaluate_split(model, x, y, task: str, rf_position: str = "answer", chunk: int = 8192) -> dict[str, float]:
    model.eval()
    losses, corrects, phis, logit_list = [], [], [], []
    n = len(y)
    for i in range(0, n, chunk):
        xb = (x[i:i + chunk], y[i:i + chunk]) if task == "digits" else x[i:i + chunk]
        loss, correct, logits, hidden, _ = forward_task(model, xb, task)
        W, phi, lg = measure_view(model.W, logits, hidden, task, rf_position)
        losses.append(loss * len(correct))
        corrects.append(correct)
        phis.append(phi)
        logit_list.append(lg)
    model.train()
    phi, lg = torch.cat(phis), torch.cat(logit_list)
    feats = phi if rf_position == "answer" or task == "digits" else phi[:, : phi.shape[1] // 2]
    return {
        "loss": float(torch.stack(losses).sum() / n),
        "accuracy": float(torch.cat(corrects).float().mean()),
        "rf": float(measures.relative_flatness_trace(W, phi, lg)),
        "cdnv": float(measures.cdnv(feats, y)),
        "nc1": float(measures.nc1(feats, y)),
    }


def evaluate(model, data, cfg) -> dict[str, float]:
    """Namespaced metrics on train and validation splits."""
    tr = evaluate_split(model, data.x_train, data.y_train, cfg.task, cfg.rf_position)
    va = evaluate_split(model, data.x_val, data.y_val, cfg.task, cfg.rf_position)
    out = {f"train/{k}": v for k, v in tr.items() if k in ("loss", "accuracy")}
    out.update({f"val/{k}": v for k, v in va.items() if k in ("loss", "accuracy")})
    out.update({"rf": tr["rf"], "cdnv": tr["cdnv"], "nc1": tr["nc1"], "val/rf": va["rf"], "val/cdnv": va["cdnv"],
                "w_norm": float(model.W.detach().norm())})
    return out
