"""Exact nearest-neighbour search of the hier_retrieval Predictor on WordNet's size (82,115 docs, dim 64):
chunked matmul + running top-k vs one full matmul + top-k, one thread, side by side. Writes
benchmarks/results/hier_retrieval_search.json."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from methodlab.methods.hier_retrieval.predictor import Predictor


def main(n: int = 82_115, dim: int = 64, k: int = 50, reps: int = 20) -> dict:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    Fq, G = F.normalize(torch.randn(n, dim, generator=g), dim=-1), F.normalize(torch.randn(n, dim, generator=g), dim=-1)
    pred = Predictor(Fq, G, torch.zeros((0, 2), dtype=torch.long), [""] * n, [""] * n, "bench", 0)
    out = {"n_docs": n, "dim": dim, "k": k, "threads": 1}
    for batch in (1, 64):
        q = Fq[:batch]
        for name, fn in (("chunked", lambda: pred.search(q, k)), ("full", lambda: (q @ G.T).topk(k, dim=1))):
            fn()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            out[f"{name}_batch{batch}_ms"] = (time.perf_counter() - t) / reps * 1e3
        s, i = pred.search(q, k)
        assert torch.equal(i, (q @ G.T).topk(k, dim=1).indices)
    out["chunked_over_full_batch64"] = out["chunked_batch64_ms"] / out["full_batch64_ms"]
    path = Path(__file__).parent / "results" / "hier_retrieval_search.json"
    path.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
