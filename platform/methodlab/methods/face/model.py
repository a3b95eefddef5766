"""LightGCN / GMF, the FACE module (heads, encoder, greedy distinct-token quantiser, decoder) and the losses."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def norm_adj(n_users: int, n_items: int, train: np.ndarray, device=None) -> torch.Tensor:
    """Symmetric-normalised bipartite adjacency D^-1/2 A D^-1/2 as a sparse COO tensor on `device` (None: CPU)."""
    device = torch.device(device if device is not None else "cpu")
    u = torch.as_tensor(train[:, 0], device=device); i = torch.as_tensor(train[:, 1], device=device) + n_users
    rows = torch.cat([u, i]); cols = torch.cat([i, u])
    n = n_users + n_items
    deg = torch.bincount(rows, minlength=n).float().clamp_min(1)
    vals = deg[rows].rsqrt() * deg[cols].rsqrt()
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n, n), check_invariants=False,
                                   device=device).coalesce()


class CF(nn.Module):
    def __init__(self, n_users: int, n_items: int, d: int, layers: int, kind: str, adj: torch.Tensor | None):
        super().__init__()
        self.n_users, self.n_items, self.layers, self.kind = n_users, n_items, layers, kind
        dev = adj.device if adj is not None else None  # the tables live where the adjacency does (or, without
        # one, where the module is built: ctx.init_module())
        self.user_emb = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_users, d, device=dev)))
        self.item_emb = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_items, d, device=dev)))
        self.adj = adj  # a plain attribute (sparse, not in the state_dict): built on the run's device by norm_adj

    def forward(self, keep_rate: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        # the sparse propagation stays in float32 under autocast (torch's sparse mm backward refuses a
        # half-precision gradient; it is memory-bound, nothing to gain)
        with torch.autocast(self.user_emb.device.type, enabled=False):
            return self._propagate(keep_rate)

    def _propagate(self, keep_rate: float) -> tuple[torch.Tensor, torch.Tensor]:
        ego = torch.cat([self.user_emb, self.item_emb])
        if self.kind == "gmf" or self.layers == 0 or self.adj is None:
            return self.user_emb, self.item_emb
        adj = self.adj
        if keep_rate < 1.0:  # edge dropout, kept edges rescaled by 1/keep_rate
            idx, val = adj.indices(), adj.values()
            keep = torch.rand(val.shape[0], device=val.device) < keep_rate
            # dropped edges get the value 0 (same sums as removing them; no data-dependent shape, no host sync)
            adj = torch.sparse_coo_tensor(idx, torch.where(keep, val / keep_rate, torch.zeros_like(val)), adj.shape,
                                          check_invariants=False, is_coalesced=True, device=val.device)
        out, cur = ego, ego
        for _ in range(self.layers):
            cur = torch.sparse.mm(adj, cur)
            out = out + cur  # sum of layers 0..L
        return out[: self.n_users], out[self.n_users:]


class FACE(nn.Module):
    """x (B x d) -> W concept vectors -> encoder -> greedy distinct VQ onto C = P(E_tok) -> decoder -> x_hat."""

    def __init__(self, d: int, W: int, w: int, h: int, ffn: int, dropout: float, token_table: torch.Tensor,
                 codebook_init: str = "default", normalize_input: bool = False):
        super().__init__()
        self.W, self.w, self.normalize_input = W, w, normalize_input
        A = torch.empty(W, d, w)
        for k in range(W):
            nn.init.orthogonal_(A[k])
        self.A = nn.Parameter(A)
        self.c = nn.Parameter(torch.randn(W, w))
        self.P = nn.Linear(h, w)
        self.enc = nn.TransformerEncoderLayer(w, 1, ffn, dropout, batch_first=True)
        self.dec = nn.TransformerEncoderLayer(w, 1, ffn, dropout, batch_first=True)
        self.out = nn.Linear(W * w, d)
        self.register_buffer("E_tok", token_table.detach().clone(), persistent=False)
        if codebook_init == "unit" and len(token_table) > 1:
            # [RECON] scale P so the mapped codebook has unit-variance coordinates, like the LayerNorm-ed z_e
            # (PyTorch's default init gives rows ~20x shorter than z_e and every entity snaps to the same few tokens)
            with torch.no_grad():
                self.P.bias.zero_()
                C = self.P(self.E_tok)
                self.P.bias.copy_(-C.mean(0) / C.std(0).clamp_min(1e-8))
                self.P.weight.div_(C.std(0).clamp_min(1e-8)[:, None])

    def codebook(self) -> torch.Tensor:
        return self.P(self.E_tok)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalize_input:  # [RECON] x / ||x|| * sqrt(d): the heads see the direction at unit scale
            x = F.normalize(x, dim=-1) * math.sqrt(x.shape[-1])
        H = torch.einsum("bd,kdw->bkw", x, self.A) + self.c
        return self.enc(H)

    def forward(self, x: torch.Tensor):
        z_e = self.encode(x)
        C = self.codebook()
        idx = greedy_distinct(z_e.detach(), C.detach())
        z_q = C[idx]  # (B, W, w): gradient reaches P through the gathered rows only
        l_vq = 0.75 * F.mse_loss(z_q, z_e.detach()) + 0.25 * F.mse_loss(z_e, z_q.detach())
        z_st = z_e + (z_q - z_e).detach()
        x_hat = self.out(self.dec(z_st).flatten(1))
        return {"z_e": z_e, "z_q": z_q, "z_st": z_st, "idx": idx, "l_vq": l_vq, "x_hat": x_hat}

    @torch.no_grad()
    def descriptors(self, x: torch.Tensor, chunk: int = 512) -> torch.Tensor:
        C = self.codebook()
        return torch.cat([greedy_distinct(self.encode(x[s:s + chunk]), C) for s in range(0, len(x), chunk)]) \
            if len(x) else torch.zeros(0, self.W, dtype=torch.long, device=x.device)

    def to_token_space(self, z: torch.Tensor) -> torch.Tensor:
        """t = (z - b_P) pinv(W_P)^T with P's weights detached (pinv under no-grad)."""
        with torch.no_grad():
            pinv = torch.linalg.pinv(self.P.weight)  # (h, w)
            b = self.P.bias.detach()
        return (z - b) @ pinv.T


@torch.no_grad()
def greedy_distinct(z: torch.Tensor, C: torch.Tensor, chunk_rows: int = 2048) -> torch.Tensor:
    """For each entity, slot k takes the nearest codebook row (squared L2) not taken by slots < k.

    Slot k can lose at most k <= W-1 of its nearest rows to earlier slots, so its pick is always among its
    W nearest rows: one (n*W x V') distance pass + top-W, then the greedy rule on the (n, W, W) candidate
    lists (same picks as masking the full distance matrix slot by slot, ~W times fewer passes over it).
    ||z||^2 is dropped: it is constant per row and does not move the argmin. Distances in float32 (also under
    autocast: a half-precision distance would tie near codes)."""
    n, W, w = z.shape
    if n == 0:
        return torch.zeros(0, W, dtype=torch.long, device=z.device)
    with torch.autocast(z.device.type, enabled=False):
        return _greedy_distinct(z.float(), C.float(), chunk_rows)


def _greedy_distinct(z: torch.Tensor, C: torch.Tensor, chunk_rows: int) -> torch.Tensor:
    n, W, w = z.shape
    K = min(W, C.shape[0])
    cn = (C * C).sum(1)
    zf = z.reshape(n * W, w)
    cand = torch.cat([torch.addmm(cn, zf[s:s + chunk_rows], C.T, beta=1.0, alpha=-2.0)
                      .topk(K, dim=1, largest=False, sorted=True).indices
                      for s in range(0, n * W, chunk_rows)]).reshape(n, W, K)
    out = torch.empty(n, W, dtype=torch.long, device=z.device)
    out[:, 0] = cand[:, 0, 0]
    for k in range(1, W):
        used = (cand[:, k, :, None] == out[:, None, :k]).any(-1)  # (n, K): candidate already taken
        out[:, k] = cand[:, k].gather(1, (~used).to(torch.int8).argmax(1, keepdim=True)).squeeze(1)
    return out


@torch.no_grad()
def greedy_distinct_reference(z: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The slot-by-slot masked form of greedy_distinct (full distance matrix per slot); kept for tests."""
    n, W, _ = z.shape
    taken = torch.zeros(n, C.shape[0], dtype=torch.bool, device=z.device)
    cn = (C * C).sum(1)
    out = torch.empty(n, W, dtype=torch.long, device=z.device)
    ar = torch.arange(n, device=z.device)
    for k in range(W):
        d = (z[:, k] * z[:, k]).sum(1, keepdim=True) - 2 * z[:, k] @ C.T + cn
        d = d.masked_fill(taken, math.inf)
        j = d.argmin(1)
        out[:, k] = j
        taken[ar, j] = True
    return out


def bpr_loss(u: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return F.softplus((u * q).sum(-1) - (u * p).sum(-1)).mean()


def info_nce(c: torch.Tensor, e: torch.Tensor, tau: float) -> torch.Tensor:
    """One-directional InfoNCE, rows c_i against profile embeddings e_j, positives on the diagonal."""
    return F.cross_entropy(c @ e.T / tau, torch.arange(len(c), device=c.device))


def info_nce_part(c: torch.Tensor, e: torch.Tensor, target: torch.Tensor, tau: float, n_total: int) -> torch.Tensor:
    """A share of info_nce over n_total rows (data parallel): some of the rows, c, against ALL the profile
    embeddings e (constants), `target` each row's own profile in e; the rows' cross-entropies summed over n_total,
    so the shares of disjoint row sets add up to info_nce of all the rows."""
    return F.cross_entropy(c @ e.T / tau, target, reduction="sum") / n_total


def lm_encode(bb, fm: FACE, z_st: torch.Tensor, prompt_ids: list[int]) -> torch.Tensor:
    """[CLS] + prompt + t_1 , t_2 , ... t_W + [SEP] as inputs_embeds -> mean-pooled, normalised embedding."""
    n, W, _ = z_st.shape
    t = fm.to_token_space(z_st)  # (n, W, h)
    tab = bb.table
    comma = tab[bb.comma]
    parts = [t[:, 0:1]]
    for k in range(1, W):
        parts += [comma.expand(n, 1, -1), t[:, k:k + 1]]
    head = [bb.bos] if bb.bos is not None else []
    pre = tab[torch.tensor(head + list(prompt_ids), dtype=torch.long, device=tab.device)].expand(n, -1, -1)
    seq = [pre, *parts]
    if bb.eos is not None:
        seq.append(tab[bb.eos].expand(n, 1, -1))
    emb = torch.cat(seq, 1)
    return bb.pool(emb, torch.ones(n, emb.shape[1], dtype=torch.long, device=emb.device))
