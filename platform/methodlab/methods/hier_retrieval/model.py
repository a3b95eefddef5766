"""The asymmetric dual encoder (two free embedding tables) and the softmax losses of the paper."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class DualEncoder(nn.Module):
    """f(q) = normalise(Q[q]), g(d) = normalise(D[d]); score = cosine. The towers share nothing, because
    relevance is directed (child -> ancestor); `shared=True` is the symmetric ablation (one table)."""

    def __init__(self, n: int, dim: int, std: float, shared: bool = False):
        super().__init__()
        self.shared = shared
        self.query = nn.Parameter(torch.randn(n, dim) * std)  # N(0, 1/dim) init (spec: measured decisive)
        self.doc = None if shared else nn.Parameter(torch.randn(n, dim) * std)

    @property
    def doc_table(self) -> torch.Tensor:
        return self.query if self.shared else self.doc

    def f(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        return F.normalize(self.query if idx is None else self.query[idx], dim=-1)

    def g(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        t = self.doc_table
        return F.normalize(t if idx is None else t[idx], dim=-1)

    def forward(self, q: torch.Tensor, d_pos: torch.Tensor, **loss_kw) -> torch.Tensor:
        """The training loss of a batch of (query, relevant doc) pairs (softmax_loss): what the training loop calls
        through the prepared (device-placed, optionally compiled) module."""
        return softmax_loss(self, q, d_pos, **loss_kw)

    def tables(self) -> dict[str, torch.Tensor]:
        out = {"query": self.query.detach().clone()}
        if not self.shared:
            out["doc"] = self.doc.detach().clone()
        return out

    def load_tables(self, w: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            self.query.copy_(w["query"])
            if not self.shared:
                self.doc.copy_(w["doc"])


def to_logits(cos: torch.Tensor, T: float, mode: str) -> torch.Tensor:
    """scale: T * cos (the spec's reading of the paper's T = 20 / 500); divide: cos / T (literal)."""
    return cos * T if mode == "scale" else cos / T


def softmax_loss(model: DualEncoder, q: torch.Tensor, d_pos: torch.Tensor, *, T: float, temperature_mode: str,
                 full: bool, num_negatives: int, gen: torch.Generator, weight: torch.Tensor | None = None,
                 other_pos=None, in_batch: bool = True, rows: torch.Tensor | None = None,
                 world: int = 1) -> torch.Tensor:
    """Cross-entropy of the positive against the negatives N.
    full:    N = all documents, target = d_pos.
    sampled: candidates = the batch's positives (in-batch) + num_negatives uniform docs shared by the batch;
             target of row i = column i; a copy of row i's own d_pos elsewhere among the candidates is masked.
             in_batch=False: candidates of row i = its own d_pos + the uniform docs only (no other row's positive),
             so the negatives are uniform, as the full softmax's are; popular docs (general ancestors, which are
             the positives of many rows) are not over-sampled as negatives.
    other_pos(q, cand) -> bool mask of candidates relevant to q (mask_other_positives), or None.
    Data parallel: `rows` (this rank's ctx.shard of positions 0..B-1 of the global batch q, d_pos) limits the loss to
    those rows, each against the candidates of the whole batch (in-batch negatives included); the sum over them is
    scaled by world / B, so the mean over the ranks is the global batch's loss (and DDP's mean its gradient)."""
    n = len(q)
    if rows is not None:  # this rank's rows; `d_all` keeps the whole batch's positives for the candidates
        d_all, q, d_pos = d_pos, q[rows], d_pos[rows]
        weight = None if weight is None else weight[rows]
    fq = model.f(q)
    if full:
        cand = None
        logits = to_logits(fq @ model.g().T, T, temperature_mode)
        target = d_pos
    else:
        uni = torch.randint(0, model.query.shape[0], (num_negatives,), generator=gen, device=gen.device).to(q.device)
        if not in_batch:  # column 0 = the row's own positive, then the shared uniform docs
            pos = to_logits((fq * model.g(d_pos)).sum(-1, keepdim=True), T, temperature_mode)
            neg = to_logits(fq @ model.g(uni).T, T, temperature_mode)
            neg = neg.masked_fill(uni[None, :] == d_pos[:, None], float("-inf"))  # an accidental copy of d_pos
            if other_pos is not None:
                neg = neg.masked_fill(other_pos(q, uni), float("-inf"))
            loss = F.cross_entropy(torch.cat([pos, neg], 1), torch.zeros(len(q), dtype=torch.long, device=q.device),
                                   reduction="none")
            return _reduce(loss, weight, rows, n, world)
        cand = torch.cat([d_pos if rows is None else d_all, uni])
        logits = to_logits(fq @ model.g(cand).T, T, temperature_mode)
        here = torch.arange(len(q), device=q.device)
        target = here if rows is None else rows  # row i's column: its own position in the batch
        dup = cand[None, :] == d_pos[:, None]
        dup[here, target] = False
        logits = logits.masked_fill(dup, float("-inf"))
    if other_pos is not None:
        mask = other_pos(q, cand)  # [B, C] relevant docs of each query
        cols = d_pos if cand is None else target
        mask[torch.arange(len(q), device=q.device), cols] = False  # keep the positive itself
        logits = logits.masked_fill(mask, float("-inf"))
    loss = F.cross_entropy(logits, target, reduction="none")
    return _reduce(loss, weight, rows, n, world)


def _reduce(loss: torch.Tensor, weight: torch.Tensor | None, rows: torch.Tensor | None, n: int,
            world: int) -> torch.Tensor:
    """The batch mean (of the weighted row losses); with `rows`, this rank's share of the global batch's mean."""
    if rows is None:
        return loss.mean() if weight is None else (loss * weight).mean()
    return (loss if weight is None else loss * weight).sum() * (world / n)
