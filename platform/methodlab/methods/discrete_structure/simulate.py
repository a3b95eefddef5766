"""Setting `simulate`: generator -> data + ground truth, no learning. The checkpoint holds the training rows,
the held-out rows, the variable names and the true adjacency (extras, JSON); `export_dir` also writes them as
CSV files that `data: file` jobs read (train.csv, heldout.csv, truth.csv)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from methodlab.core import RunContext, save_checkpoint
from methodlab.methods.discrete_structure.config import Config
from methodlab.methods.discrete_structure.data import build_data


def export_csv(data, directory: str | Path) -> Path:
    import pandas as pd

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(data.x_train, columns=data.names).to_csv(out / "train.csv", index=False)
    pd.DataFrame(data.x_heldout, columns=data.names).to_csv(out / "heldout.csv", index=False)
    if data.truth is not None:
        pd.DataFrame(data.truth, columns=data.names).to_csv(out / "truth.csv", index=False)
    return out


def fit_simulate(cfg: Config, ctx: RunContext) -> dict:
    data = build_data(cfg)
    truth = data.truth if data.truth is not None else np.zeros((len(data.names),) * 2, dtype=int)
    metrics = {"step": 0, "data/n_train": float(len(data.x_train)), "data/n_heldout": float(len(data.x_heldout)),
               "data/d": float(len(data.names)), "data/true_edges": float(truth.sum()),
               "data/multi_parent_nodes": float((truth.sum(0) >= 2).sum()),
               "data/mean_x": float(np.mean(data.x_train))}
    if cfg.export_dir and ctx.is_main:  # side files: one writer (rank 0)
        export_csv(data, ctx.write_path(cfg.export_dir))  # relative: inside the run folder

    def write(d: Path) -> None:
        save_checkpoint(d, method="discrete_structure", config=cfg, weights={"truth": torch.as_tensor(truth, device="cpu")},
                        state={"step": 0, "final": True, "metrics": metrics},
                        extras={"data": {"names": data.names, "truth": truth.tolist(),
                                         "x_train": data.x_train.tolist(), "x_heldout": data.x_heldout.tolist()}})
    ctx.report(metrics, checkpoint=write)
    return ctx.history[-1]
