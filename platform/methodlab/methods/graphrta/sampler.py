"""Pure-PyTorch neighbour sampler with NeighborLoader's batch layout (PyG's NeighborLoader needs pyg-lib or
torch-sparse, neither installable here). CSR over in-edges (messages flow edge_index[0] -> edge_index[1]);
uniform sampling without replacement, vectorised over the frontier (random keys, one sort per hop, no
Python loop over nodes). Each node is expanded once, at the hop it is first reached, like NeighborLoader. The CSR,
the id map and every sampled index live on the device of edge_index (the generator's); the size of each hop is
read on the host (it sizes the next tensors), as in any neighbour sampler."""

from __future__ import annotations

import torch
from torch_geometric.data import Data


class NeighborSampler:
    def __init__(self, edge_index: torch.Tensor, num_nodes: int, fanouts: list[int], generator=None):
        dst = edge_index[1]
        dev = self.device = edge_index.device
        perm = torch.argsort(dst, stable=True)
        self.col = edge_index[0][perm]  # source node of each in-edge, grouped by destination
        self.eid = perm  # global edge id of each CSR entry
        self.rowptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dev)
        self.rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        self.n, self.fanouts, self.gen = num_nodes, list(fanouts), generator
        self._local = torch.full((num_nodes,), -1, dtype=torch.long, device=dev)  # global -> local id, reset after each batch

    def _sample_hop(self, frontier: torch.Tensor, k: int):
        """For every frontier node, min(deg, k) distinct in-edges uniformly at random -> CSR positions."""
        dev = self.device
        start, deg = self.rowptr[frontier], self.rowptr[frontier + 1] - self.rowptr[frontier]
        total = int(deg.sum())
        if total == 0:
            return torch.empty(0, dtype=torch.long, device=dev), torch.empty(0, dtype=torch.long, device=dev)
        seg = torch.repeat_interleave(torch.arange(len(frontier), device=dev), deg, output_size=total)
        offs = torch.arange(total, device=dev) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg, output_size=total)
        pos = start[seg] + offs
        if k >= 0:
            key = seg.double() + torch.rand(total, generator=self.gen, dtype=torch.float64, device=dev)  # shuffle inside segments
            order = torch.argsort(key)
            rank = torch.arange(total, device=dev) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg,
                                                                              output_size=total)
            keep = order[rank < k]  # sorted order keeps segments contiguous, so rank is the in-segment rank
            pos, seg = pos[keep], seg[keep]
        return pos, frontier[seg]

    def sample(self, seeds: torch.Tensor, x=None, y=None) -> Data:
        seeds = seeds.long()
        n_id = [seeds]
        self._local[seeds] = torch.arange(len(seeds), device=self.device)
        count = len(seeds)
        frontier = seeds
        rows, cols, eids, n_nodes, n_edges = [], [], [], [len(seeds)], []
        for k in self.fanouts:
            pos, dst = self._sample_hop(frontier, k)
            src = self.col[pos]
            new = torch.unique(src[self._local[src] < 0])
            if len(new):  # first-reached order is not needed; unique ids, appended after all known nodes
                self._local[new] = torch.arange(count, count + len(new), device=self.device)
                count += len(new)
                n_id.append(new)
            rows.append(src)
            cols.append(dst)
            eids.append(self.eid[pos])
            n_nodes.append(len(new))
            n_edges.append(len(pos))
            frontier = new
        n_id = torch.cat(n_id)
        src, dst = torch.cat(rows), torch.cat(cols)
        batch = Data(edge_index=torch.stack([self._local[src], self._local[dst]]), n_id=n_id, e_id=torch.cat(eids),
                     input_id=torch.arange(len(seeds), device=self.device), batch_size=len(seeds), num_sampled_nodes=n_nodes,
                     num_sampled_edges=n_edges, num_nodes=len(n_id))
        if x is not None:
            batch.x = x[n_id]
        if y is not None:
            batch.y = y[n_id]
        self._local[n_id] = -1
        return batch

