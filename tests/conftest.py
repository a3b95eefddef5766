"""Shared fixtures: the repo root, a temporary storage folder, and one local Ray cluster per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
