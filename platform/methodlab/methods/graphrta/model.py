"""Networks of GraphRTA: masked GNN layers (GCN / GraphSAGE / GAT, pure PyTorch message passing with edge
weights, so an edge flip is a differentiable weight change and nothing needs torch-sparse), the K+1 classifier,
the three-group domain discriminator and the gradient reversal layer."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from methodlab.methods.graphrta.config import Config


class MaskedLinear(nn.Module):
    """y = x (W * M)^T + b. M is a {0,1} buffer (model reprogramming); W*M in forward gives masked entries a
    zero gradient, and `apply_mask` after each optimiser step keeps Adam momentum / weight decay from ever
    resurrecting them."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        nn.init.xavier_uniform_(self.weight)
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        self.register_buffer("mask", torch.ones(d_out, d_in))

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)

    @torch.no_grad()
    def apply_mask(self):
        self.weight.mul_(self.mask)


def _self_loops(edge_index, edge_weight, n):
    loop = torch.arange(n, device=edge_index.device)
    ei = torch.cat([edge_index, torch.stack([loop, loop])], 1)
    ew = torch.cat([edge_weight, torch.ones(n, dtype=edge_weight.dtype, device=edge_weight.device)])
    return ei, ew


def gcn_propagate(h, edge_index, edge_weight, n):
    """D^-1/2 (A_w + I) D^-1/2 h with messages flowing edge_index[0] -> edge_index[1]. Degrees and messages are
    accumulated in the edge weights' dtype (float32): under bf16 autocast only the linear maps run in bf16."""
    ei, ew = _self_loops(edge_index, edge_weight, n)
    deg = torch.zeros(n, dtype=ew.dtype, device=h.device).index_add_(0, ei[1], ew)
    dinv = deg.clamp_min(1e-12).rsqrt()
    norm = dinv[ei[0]] * ew * dinv[ei[1]]
    msg = h[ei[0]] * norm[:, None]
    return torch.zeros(n, h.shape[1], dtype=msg.dtype, device=h.device).index_add_(0, ei[1], msg)


class GCNLayer(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = MaskedLinear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x, edge_index, edge_weight):
        return gcn_propagate(self.lin(x), edge_index, edge_weight, x.shape[0]) + self.bias


class SAGELayer(nn.Module):
    """GraphSAGE-mean with edge weights: W_r x_i + W_n (sum_j w_ji x_j / sum_j w_ji)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = MaskedLinear(d_in, d_out)
        self.lin_nbr = MaskedLinear(d_in, d_out, bias=False)

    def forward(self, x, edge_index, edge_weight):
        n = x.shape[0]
        h = self.lin_nbr(x)
        msg = h[edge_index[0]] * edge_weight[:, None]
        agg = torch.zeros(n, h.shape[1], dtype=msg.dtype, device=x.device).index_add_(0, edge_index[1], msg)
        den = torch.zeros(n, dtype=edge_weight.dtype, device=x.device).index_add_(0, edge_index[1], edge_weight).clamp_min(1e-12)
        return self.lin(x) + agg / den[:, None]


class GATLayer(nn.Module):
    """Single-head GAT; the attention of an edge is scaled by its weight (a flipped-off edge carries nothing)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = MaskedLinear(d_in, d_out, bias=False)
        self.att_src = nn.Parameter(torch.empty(d_out))
        self.att_dst = nn.Parameter(torch.empty(d_out))
        nn.init.normal_(self.att_src, std=d_out ** -0.5)
        nn.init.normal_(self.att_dst, std=d_out ** -0.5)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x, edge_index, edge_weight):
        from torch_geometric.utils import softmax

        n = x.shape[0]
        h = self.lin(x)
        ei, ew = _self_loops(edge_index, edge_weight, n)
        score = F.leaky_relu((h * self.att_src).sum(-1)[ei[0]] + (h * self.att_dst).sum(-1)[ei[1]], 0.2)
        alpha = softmax(score, ei[1], num_nodes=n) * ew
        msg = h[ei[0]] * alpha[:, None]
        return torch.zeros(n, h.shape[1], dtype=msg.dtype, device=x.device).index_add_(0, ei[1], msg) + self.bias


LAYERS = {"gcn": GCNLayer, "sage": SAGELayer, "gat": GATLayer}


class Encoder(nn.Module):
    """f_w: `layers` GNN layers, ReLU after each [P: Z^l = sigma(...)], dropout between them."""

    def __init__(self, d_in, hidden, layers=2, dropout=0.1, backbone="gcn"):
        super().__init__()
        dims = [d_in] + [hidden] * layers
        self.convs = nn.ModuleList(LAYERS[backbone](a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x, edge_index, edge_weight=None):
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.shape[1], dtype=x.dtype, device=x.device)
        h = x
        for i, conv in enumerate(self.convs):
            if i > 0:
                h = F.dropout(h, self.dropout, self.training)
            h = F.relu(conv(h, edge_index, edge_weight))
        return h

    def masked(self) -> list[MaskedLinear]:
        return [m for m in self.modules() if isinstance(m, MaskedLinear)]

    def apply_masks(self):
        for m in self.masked():
            m.apply_mask()


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, coeff):
        ctx.coeff = coeff
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.coeff * g, None


def grl(x, coeff: float = 1.0):
    return GradReverse.apply(x, coeff)


class GraphRTANet(nn.Module):
    """Encoder + classifier g (K+1 logits: K known + the unknown logit; K-way for the threshold baseline) +
    discriminator D over {source, target-known, target-unknown}."""

    def __init__(self, d_in, n_known, hidden=128, layers=2, dropout=0.1, backbone="gcn", unknown_head=True,
                 disc_hidden=None):
        super().__init__()
        self.n_known = n_known
        self.encoder = Encoder(d_in, hidden, layers, dropout, backbone)
        self.classifier = nn.Linear(hidden, n_known + 1 if unknown_head else n_known)
        dh = disc_hidden or hidden
        self.disc = nn.Sequential(nn.Linear(hidden, dh), nn.ReLU(), nn.Linear(dh, 3))

    def forward(self, x, edge_index, edge_weight=None):
        z = self.encoder(x, edge_index, edge_weight)
        return z, self.classifier(z)


def build_net(cfg: Config, n_features: int, n_known: int) -> GraphRTANet:
    return GraphRTANet(n_features, n_known, cfg.hidden, cfg.layers, cfg.dropout, cfg.backbone,
                       unknown_head=cfg.method != "source_threshold", disc_hidden=cfg.disc_hidden)
