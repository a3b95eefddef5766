"""Evaluation: per-digit accuracy from argmax p_i on the whole test pool (and per class), task accuracy (the
program applied to the argmaxes equals the target) on test sequences and on N = 4 test sequences, and the tree's
expected output error e = mean |yhat - y| / N. Validation uses sequences from the train pool."""

from __future__ import annotations

import torch

from methodlab.methods.ctsketch.data import Sequences, program, sample_sequences
from methodlab.methods.ctsketch.tree import expected_output, sequence_loss


@torch.no_grad()
def pool_probs(net, x: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    return torch.cat([torch.softmax(net(x[i:i + chunk]), -1) for i in range(0, len(x), chunk)])


def n4_sequences(cfg, labels: torch.Tensor) -> Sequences:
    """1,000 fixed N = 4 test sequences (Claim A's task accuracy at sum-4 / Claim E's max-4)."""
    gen = torch.Generator(device=labels.device).manual_seed(cfg.seed + 777)
    return sample_sequences(labels, 1000, 4, cfg.task, gen)


@torch.no_grad()
def evaluate(cfg, net, pools, seqs: dict, tree, n4: Sequences | None = None, with_val: bool = True) -> dict[str, float]:
    was = net.training
    net.eval()
    pt = pool_probs(net, pools.x_test)
    pred = pt.argmax(-1)
    m = {"eval/digit_acc": float((pred == pools.y_test).float().mean())}
    for c in range(10):
        sel = pools.y_test == c
        m[f"eval/class_acc_{c}"] = float((pred[sel] == c).float().mean()) if sel.any() else float("nan")
        if sel.any():  # what an expected-sum loss sees of class c: the mean of E_p[digit], and where argmax sends it
            m[f"eval/class_mean_{c}"] = float((pt[sel] @ torch.arange(10, dtype=pt.dtype, device=pt.device)).mean())
            m[f"eval/class_top_{c}"] = int(torch.bincount(pred[sel], minlength=10).argmax())
    te = seqs["test"]
    m["eval/task_acc"] = float((program(cfg.task, pred[te.idx]) == te.target).float().mean())
    if n4 is not None:
        m["eval/task_acc_n4"] = float((program(cfg.task, pred[n4.idx]) == n4.target).float().mean())
    n = te.idx.shape[1]
    if tree is not None:
        yh = torch.cat([expected_output(cfg.task, tree(pt[te.idx[i:i + 50]])) for i in range(0, len(te.idx), 50)])
        diff = (yh - te.target.float()) / n
        m.update({"eval/e": float(diff.abs().mean()), "eval/signed": float(diff.mean()),
                  "eval/e_centered": float((diff - diff.mean()).abs().mean())})
    if with_val:
        ptr = pool_probs(net, pools.x_train)
        va = seqs["val"]
        pv = ptr.argmax(-1)
        m["val/digit_acc"] = float((pv[va.idx] == va.digits).float().mean())
        m["val/task_acc"] = float((program(cfg.task, pv[va.idx]) == va.target).float().mean())
        losses = [float(sequence_loss(cfg, tree, ptr[va.idx[i:i + 50]], va.target[i:i + 50])) * len(va.idx[i:i + 50])
                  for i in range(0, len(va.idx), 50)]
        m["val/loss"] = sum(losses) / len(va.idx)
    net.train(was)
    return m
