"""runners/lifecycle.py (issue 41 item 7): one object opens, records and closes a run for every runner. Driven here
by a trivial fit on a temp folder: open, report (rows, checkpoints, pruning), close, fail, resume, the config check,
the copy Ray Train pickles into its controller, and the Tune trial's reports-only recorder."""

from __future__ import annotations

import json
from copy import deepcopy

import pandas as pd
import pytest
import torch

from methodlab.core import RunContext
from methodlab.core.checkpoint import save_checkpoint
from methodlab.core.errors import ConfigError
from methodlab.runners.lifecycle import RunLifecycle
from methodlab.specs.files import load_job

SLUG = "grokking_flatness"


def _loaded(*over: str):
    return load_job(None, data={"method": SLUG}, overrides=list(over), smoke=True)


def _fit(run: RunLifecycle, cfg, upto: int) -> dict:
    """A trivial fit: one report per step from the resume point, a checkpoint every step."""
    ctx = RunContext(seed=cfg.seed, checkpoint=run.resume, report_fn=run.report)
    for step in range(run.start_step + 1, upto + 1):
        ctx.report({"step": step, "val/accuracy": step / 10},
                   checkpoint=lambda d, s=step: save_checkpoint(d, method=SLUG, config=cfg, weights={"w": torch.ones(1)},
                                                                state={"step": s}))
    return ctx.history[-1]


def _rows(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_open_report_close_then_resume(tmp_path):
    loaded = _loaded("max_steps=3")
    run = RunLifecycle.open(loaded, "r", str(tmp_path), "local", slug=SLUG)
    run_dir = tmp_path / "r"
    assert run.run_dir == run_dir and run.resume is None and run.start_step == 0
    assert run_dir.is_dir() and not (run_dir / "job.yaml").exists(), "claimed at the first report, not at open"
    final = _fit(run, loaded.config, 3)
    assert (run_dir / "job.yaml").exists() and run.claimed
    rows = _rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3] and all(isinstance(r["_time"], float) for r in rows)
    assert [r["_checkpoint"] for r in rows] == [str(run_dir / "checkpoints" / f"checkpoint_{s:010d}") for s in (1, 2, 3)]
    # run.checkpoint.num_to_keep (2): the oldest is pruned
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["checkpoint_0000000002", "checkpoint_0000000003"]
    out = run.close(final)
    assert set(out) == {"run_dir", "metrics", "summary", "checkpoint"}
    assert out["run_dir"] == str(run_dir) and out["metrics"]["step"] == 3
    assert out["checkpoint"] == str(run_dir / "checkpoints" / "checkpoint_0000000003")
    summary = pd.read_parquet(run_dir / "summary.parquet")
    assert summary.equals(out["summary"]) and summary["best"].iloc[0] == pytest.approx(0.3)
    assert len(pd.read_parquet(run_dir / "history.parquet")) == 3

    # the same name again, a longer run: resumes from the newest checkpoint at its step
    more = _loaded("max_steps=5")
    again = RunLifecycle.open(more, "r", str(tmp_path), "local", slug=SLUG)
    assert again.resume == run_dir / "checkpoints" / "checkpoint_0000000003" and again.start_step == 3
    _fit(again, more.config, 5)
    assert [r["step"] for r in _rows(run_dir)] == [1, 2, 3, 4, 5]
    assert again.close({"step": 5})["checkpoint"].endswith("checkpoint_0000000005")

    # another config in the same folder is refused; fresh starts over
    with pytest.raises(ConfigError, match="different config"):
        RunLifecycle.open(_loaded("max_steps=5", "lr=0.5"), "r", str(tmp_path), "local", slug=SLUG)
    fresh = RunLifecycle.open(_loaded("max_steps=5", "lr=0.5"), "r", str(tmp_path), "local", slug=SLUG, fresh=True)
    assert fresh.resume is None and not (run_dir / "metrics.jsonl").exists()


def test_fail_drops_only_an_unclaimed_folder_it_created(tmp_path):
    run = RunLifecycle.open(_loaded(), "early", str(tmp_path), "local", slug=SLUG)
    run.fail()  # failed while starting: as if it had not been started
    assert not (tmp_path / "early").exists()
    run = RunLifecycle.open(_loaded(), "late", str(tmp_path), "local", slug=SLUG)
    run.report({"step": 1})
    run.fail()
    assert (tmp_path / "late" / "job.yaml").exists() and len(_rows(tmp_path / "late")) == 1
    (tmp_path / "before").mkdir()
    RunLifecycle.open(_loaded(), "before", str(tmp_path), "local", slug=SLUG).fail()
    assert (tmp_path / "before").is_dir(), "a folder that existed before is left alone"


def test_a_serialised_copy_records_and_the_original_closes(tmp_path):
    """Ray Train: the driver's object travels to the controller (MetricsRecorder), whose copy writes the rows of
    checkpoints Ray persisted; the driver closes the run (job.yaml again, summary)."""
    loaded = _loaded()
    run = RunLifecycle.open(loaded, "t", str(tmp_path), "train", slug=SLUG, find_resume=False, track_now=False)
    # deepcopy goes through the same __getstate__ Ray's serialiser uses (and unpickles nothing: safe defaults)
    copy = deepcopy(run)
    assert copy.cfg is None and copy.tracker is None and copy.primary == "val/accuracy"
    copy.report({"step": 7, "val/accuracy": 0.5}, stored="/ray/put/it/here")
    assert _rows(tmp_path / "t")[0]["_checkpoint"] == "/ray/put/it/here"
    assert not run.claimed and (tmp_path / "t" / "job.yaml").exists()
    out = run.close({"step": 7, "val/accuracy": 0.5}, None)
    assert out["checkpoint"] is None and out["summary"]["iterations"].iloc[0] == 1


def test_recorder_writes_rows_only(tmp_path):
    """A Tune function trial's own record of its reports: rows, no job record, checkpoints or summary."""
    rec = RunLifecycle.recorder(tmp_path / "trial_reports" / "abc.jsonl")
    rec.report({"step": 1, "loss": 0.5})
    rec.report({"step": 2, "loss": 0.25})
    rows = [json.loads(x) for x in (tmp_path / "trial_reports" / "abc.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 0.5), (2, 0.25)] and "_checkpoint" not in rows[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["abc.jsonl", "trial_reports"]
