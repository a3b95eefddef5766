"""Real Ray Train (2 DDP workers, resume by name) and Ray Tune (Optuna + ASHA, summary, tune resume)."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pytest
import yaml

from methodlab.specs.files import load_job, load_search_space

pytestmark = pytest.mark.ray


def test_train_two_workers_then_resume(ray_cluster, tmp_path):
    from methodlab.runners.train import run_train

    over = ["scaling.num_workers=2", "scaling.cpus_per_worker=1", "max_steps=100", "checkpoint_every=50"]
    loaded = load_job("jobs/grokking_flatness/cpu.yaml", overrides=over, smoke=True)
    out = run_train(loaded, "ddp", str(tmp_path))
    assert out["metrics"]["step"] == 100
    steps = [json.loads(x)["step"] for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [50, 100], "the controller callback must record every report"
    # same name + storage: continues from the checkpoint at step 100, not from 0
    more = load_job("jobs/grokking_flatness/cpu.yaml", overrides=[*over[:2], "max_steps=150", "checkpoint_every=50"], smoke=True)
    out2 = run_train(more, "ddp", str(tmp_path))
    steps = [json.loads(x)["step"] for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [50, 100, 150] and out2["metrics"]["step"] == 150
    summary = pd.read_parquet(tmp_path / "ddp" / "summary.parquet")
    assert summary["checkpoint"].iloc[0] and summary["config/max_steps"].iloc[0] == 150


def _space(tmp_path, repo, **extra):
    data = yaml.safe_load((repo / "search_spaces/grokking_flatness/regularizers.yaml").read_text())
    data["base_job"] = str(repo / "jobs/grokking_flatness/cpu.yaml")
    data["config"] = {**Config_smoke(), "max_steps": 200, "log_every": 50, "checkpoint_every": 50}
    data["scheduler"].update(grace_period=100, max_t=200)
    data.update(extra)
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def Config_smoke():  # noqa: N802 - the method's own smoke preset, as a sweep's fixed config
    from methodlab.methods.grokking_flatness.config import Config

    return dict(Config.smoke)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_tune_sweep_optuna_asha_and_resume(ray_cluster, tmp_path, repo):
    from methodlab.runners.tune import resume_tune, run_tune

    loaded = load_search_space(_space(tmp_path, repo))
    warnings = _Records()
    state_log = logging.getLogger("ray.tune.execution.experiment_state")
    state_log.addHandler(warnings)
    try:
        out = run_tune(loaded, "sweep", str(tmp_path / "store"), quiet=True)
    finally:
        state_log.removeHandler(warnings)
    # trials checkpoint every 50 steps, a second or less apart: with CheckpointConfig(num_to_keep=2) Tune
    # forced a snapshot every 2 checkpoints and warned "snapshotting has been triggered multiple times"
    assert not [m for m in warnings.messages if "snapshot" in m], warnings.messages
    table = pd.read_parquet(tmp_path / "store" / "sweep" / "summary.parquet")
    assert len(table) == 4 and out["errors"] == 0
    # the four fixed points come first, one per regularizer
    assert set(table["config/reg"]) == {"none", "collapse_prevent", "collapse_encourage", "anti_flat"}
    assert table["checkpoint"].notna().all()
    vals = table["checkpoint_metric"].tolist()
    assert vals == sorted(vals, reverse=True), "best first"
    hist = pd.read_parquet(tmp_path / "store" / "sweep" / "history.parquet")
    assert {"step", "val/accuracy", "rf", "cdnv", "trial_id"} <= set(hist.columns)
    # resuming a finished sweep repeats nothing
    again = resume_tune(tmp_path / "store" / "sweep", quiet=True)
    assert again["num_trials"] == 4
    hist2 = pd.read_parquet(tmp_path / "store" / "sweep" / "history.parquet")
    assert len(hist2) == len(hist)


def test_tune_multi_worker_trials_drive_a_torchtrainer(ray_cluster, tmp_path, repo):
    """num_workers > 1: each trial is a 0.01-CPU driver that runs a 2-worker TorchTrainer named after the trial."""
    from methodlab.runners.tune import run_tune

    job = yaml.safe_load((repo / "jobs/grokking_flatness/cpu.yaml").read_text())
    job["scaling"] = {"num_workers": 2, "cpus_per_worker": 0.99}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    space = {"base_job": str(tmp_path / "job.yaml"), "num_samples": 2, "max_concurrent_trials": 1,
             "config": {**Config_smoke(), "max_steps": 100, "log_every": 50, "checkpoint_every": 50},
             "search_alg": {"type": "optuna", "seed": 0}, "scheduler": {"type": "fifo"},
             "params": {"reg": {"choice": ["none", "collapse_encourage"]}}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    out = run_tune(load_search_space(tmp_path / "space.yaml"), "multi", str(tmp_path / "store"), quiet=True)
    table = pd.read_parquet(tmp_path / "store" / "multi" / "summary.parquet")
    assert out["errors"] == 0 and len(table) == 2
    assert (table["final/step"] == 100).all()
    runs = sorted(p.name for p in (tmp_path / "store" / "multi" / "train_runs").iterdir())
    assert len(runs) == 2 and all(r.startswith("train-") for r in runs)
