"""One place that seeds every generator a method may touch."""

from __future__ import annotations

import os
import random

import numpy as np


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def rng_state() -> dict:
    """A JSON-safe summary of the seeds, stored in checkpoint state.json."""
    import torch

    return {"torch_initial_seed": int(torch.initial_seed())}
