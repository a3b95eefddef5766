"""Shared fixtures: the repo root, a temporary storage folder, and one local Ray cluster per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--global-seed", type=int, default=None, metavar="N",
        help="seed random, numpy's legacy global RNG and torch with N before each test (default: leave them "
             "alone); run the suite under a few values to find tests whose verdict depends on an unseeded draw")


def pytest_report_header(config):
    seed = config.getoption("--global-seed")
    return None if seed is None else f"global seed: {seed} (random, numpy legacy RNG and torch seeded before each test)"


def seed_everything(seed: int) -> None:
    """random, numpy's legacy global RNG and torch's default generators (CPU and, if present, CUDA)."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return
    torch.manual_seed(seed)  # also seeds every CUDA device (lazily when CUDA is not initialised)


@pytest.fixture(autouse=True)
def _global_seed(request):
    """With `--global-seed N`, every test starts from the same RNG state N; without it, nothing changes."""
    seed = request.config.getoption("--global-seed")
    if seed is not None:
        seed_everything(seed)
    yield


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """One embedded Ray for all `ray`-marked tests (2 CPUs, dashboard on for Train-in-Tune cleanup)."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1",
                 logging_level="WARNING", log_to_driver=False)
    yield ray
    try:
        from ray import serve

        serve.shutdown()
    except Exception:
        pass
    ray.shutdown()


@pytest.fixture(scope="session")
def smoke_root(tmp_path_factory):
    return tmp_path_factory.mktemp("smoke")
