"""Uni-RL on real Ray Train with 2 DDP workers (each with its own Pendulum env and replay shard), then a
resume by name that continues from the checkpoint instead of starting over."""

from __future__ import annotations

import json

import pytest

from methodlab.specs.files import load_job

pytestmark = pytest.mark.ray


def _steps(run_dir):
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_unirl_online_two_workers_then_resume(ray_cluster, tmp_path):
    from methodlab.runners.train import run_train

    over = ["scaling.num_workers=2", "scaling.cpus_per_worker=1", "eval_every=100", "checkpoint_every=200"]
    loaded = load_job("jobs/unirl/online.yaml", overrides=[*over, "online_steps=200"], smoke=True)
    out = run_train(loaded, "ddp", str(tmp_path))
    assert out["metrics"]["step"] == 200 and out["metrics"]["online"] == 1.0
    assert _steps(tmp_path / "ddp") == [100, 200]
    # both ranks report the evaluation of rank 0, so the recorded metric is one finite number per step
    assert all(abs(json.loads(x)["eval/return"]) < 1e4 for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines())
    more = load_job("jobs/unirl/online.yaml", overrides=[*over, "online_steps=300"], smoke=True)
    out2 = run_train(more, "ddp", str(tmp_path))
    assert out2["metrics"]["step"] == 300
    assert _steps(tmp_path / "ddp") == [100, 200, 300], "the resumed run continues at step 200, not from 0"
