"""Recall per hierarchy distance with k = |R(q)| per query (exact inner-product top-k in chunks),
plus the short / long / min / overall summaries and exact-set accuracy (the setting 'eval', settings.fit_eval,
re-scores a checkpoint with them)."""

from __future__ import annotations

import torch

from methodlab.core import RunContext


@torch.no_grad()
def bucket_counts(F: torch.Tensor, G: torch.Tensor, data, queries: torch.Tensor, chunk: int = 1024):
    """hits[delta], pairs[delta] over the relevant pairs of `queries`, and the number of queries whose
    whole relevant set is in their top-|R(q)|. A relevant d is retrieved iff its score >= the k-th best
    score of the query's row (k = |R(q)|), read from the same score matrix, so no set bookkeeping."""
    dev = F.device  # everything on the tables' device (ctx.device in a run); counts read back once, at the end
    maxd = int(data.dist.max()) + 1
    hits = torch.zeros(maxd, dtype=torch.long, device=dev)
    pairs = torch.zeros(maxd, dtype=torch.long, device=dev)
    exact = torch.zeros((), dtype=torch.long, device=dev)
    sizes, offsets, d_all, dist_all = (t.to(dev) for t in (data.sizes, data.offsets, data.d, data.dist))
    for i in range(0, len(queries), chunk):
        qc = queries[i:i + chunk].to(dev)
        S = F[qc] @ G.T  # [B, m]
        k = sizes[qc]
        kth = S.topk(int(k.max()), dim=1).values.gather(1, (k - 1)[:, None]).squeeze(1)
        start, end = offsets[qc], offsets[qc + 1]
        lens = end - start
        local = torch.repeat_interleave(torch.arange(len(qc), device=dev), lens)
        pidx = torch.repeat_interleave(start - torch.cumsum(lens, 0) + lens, lens) + \
            torch.arange(int(lens.sum()), device=dev)
        d, dist = d_all[pidx], dist_all[pidx]
        hit = S[local, d] >= kth[local]
        hits += torch.bincount(dist[hit], minlength=maxd)
        pairs += torch.bincount(dist, minlength=maxd)
        missed = torch.bincount(local[~hit], minlength=len(qc))
        exact += (missed == 0).sum()
    hits, pairs, exact = hits.cpu(), pairs.cpu(), int(exact)
    return hits, pairs, exact


def summarise(hits, pairs, exact: int, n_queries: int, cfg, prefix: str) -> dict[str, float]:
    """Per-distance recall, short (dist <= short_max), long (dist >= delta_long), their mean, the min over
    buckets with >= min_bucket_pairs pairs, overall recall over all pairs, exact-set accuracy."""
    out: dict[str, float] = {}
    rec = hits.double() / pairs.clamp(min=1).double()
    for delta in range(len(pairs)):
        if pairs[delta] > 0:
            out[f"{prefix}/recall_d{delta}"] = float(rec[delta])
            out[f"{prefix}/pairs_d{delta}"] = int(pairs[delta])
    sl = slice(0, cfg.short_max + 1)
    ll = slice(cfg.delta_long, None)
    ratio = lambda s: float(hits[s].sum()) / max(1, int(pairs[s].sum()))  # noqa: E731
    out[f"{prefix}/recall_short"] = ratio(sl)
    out[f"{prefix}/recall_long"] = ratio(ll) if pairs[ll].sum() > 0 else float("nan")
    long_v = out[f"{prefix}/recall_long"]
    out[f"{prefix}/short_long_mean"] = 0.5 * (out[f"{prefix}/recall_short"] + (long_v if long_v == long_v else out[f"{prefix}/recall_short"]))
    big = pairs >= cfg.min_bucket_pairs
    out[f"{prefix}/recall_min"] = float(rec[big].min()) if big.any() else float(rec[pairs > 0].min())
    out[f"{prefix}/recall_overall"] = ratio(slice(None))
    out[f"{prefix}/exact_set"] = exact / max(1, n_queries)
    return out


def evaluate(model, data, cfg, queries: torch.Tensor, prefix: str = "eval") -> dict[str, float]:
    model = RunContext.unwrap(model)  # the tables behind a compiled / DDP wrapper
    with torch.no_grad():
        F, G = model.f(), model.g()
    hits, pairs, exact = bucket_counts(F, G, data, queries, cfg.eval_chunk)
    return summarise(hits, pairs, exact, len(queries), cfg, prefix)
