"""Issue 42 item 4: one run-folder layout. A Ray Train run folder holds what a --local one does (job.yaml,
metrics.jsonl, checkpoints/checkpoint_<step:010d>/, summary.parquet, history.parquet), not Ray's
checkpoint_<timestamp>/ folders at its top; either runner resumes the other's checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from methodlab.specs.files import load_job

JOB = "jobs/grokking_flatness/cpu.yaml"


def _layout(run_dir: Path) -> tuple[list[str], list[str]]:
    top = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir() and not p.name.startswith("."))
    return top, ckpts


@pytest.mark.ray
def test_train_and_local_runs_have_the_same_layout(ray_cluster, tmp_path):
    from methodlab.runners.local import run_local
    from methodlab.runners.train import run_train

    over = ["scaling.cpus_per_worker=1", "max_steps=150", "log_every=50", "checkpoint_every=50"]  # num_to_keep: 2
    run_train(load_job(JOB, overrides=over, smoke=True), "train", str(tmp_path), quiet=True)
    run_local(load_job(JOB, overrides=over, smoke=True), "local", str(tmp_path), quiet=True)
    train, local = tmp_path / "train", tmp_path / "local"
    assert _layout(train) == _layout(local) == (
        ["checkpoints", "history.parquet", "job.yaml", "metrics.jsonl", "summary.parquet"],
        ["checkpoint_0000000100", "checkpoint_0000000150"])
    # beside the checkpoints, Train keeps only Ray's list of them (its resume needs it)
    extra = {p.name for p in (train / "checkpoints").iterdir() if p.is_file() and not p.name.startswith(".")}
    assert extra == {"checkpoint_manager_snapshot.json"}
    for run_dir in (train, local):
        summary = pd.read_parquet(run_dir / "summary.parquet")
        assert summary["checkpoint"].iloc[0] == str(run_dir / "checkpoints" / "checkpoint_0000000150")
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["_checkpoint"] for r in rows] == [str(run_dir / "checkpoints" / f"checkpoint_{s:010d}")
                                                   for s in (50, 100, 150)]
    # the other runner picks the Train run up from its checkpoints/ (same layout, same resume)
    out = run_local(load_job(JOB, overrides=[*over[:1], "max_steps=200", *over[2:]], smoke=True), "train",
                    str(tmp_path), quiet=True)
    steps = [json.loads(x)["step"] for x in (train / "metrics.jsonl").read_text().splitlines()]
    assert steps == [50, 100, 150, 200] and out["metrics"]["step"] == 200


def _ckpt(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "state.json").write_text("{}")
    return d


def _snapshot(root: Path, names: list[str]) -> None:
    entries = [{"checkpoint_dir_name": n, "metrics": {}} for n in names]
    (root / "checkpoint_manager_snapshot.json").write_text(json.dumps(
        {"checkpoint_results": entries, "latest_checkpoint_result": entries[-1] if entries else None}))


def test_a_step_reported_again_never_shares_a_folder_with_a_kept_checkpoint(tmp_path):
    """Ray deletes a pruned checkpoint by its path: a step re-reported after a restart gets its own folder when
    Ray still lists the old one, and replaces a folder Ray never registered (left by a killed run)."""
    from methodlab.runners.train import step_checkpoint_name

    assert step_checkpoint_name(50, tmp_path) == "checkpoint_0000000050"
    assert step_checkpoint_name(50, None) == "checkpoint_0000000050"
    _ckpt(tmp_path, "checkpoint_0000000050")
    orphan = _ckpt(tmp_path, "checkpoint_0000000100")
    _snapshot(tmp_path, ["checkpoint_0000000050"])
    assert step_checkpoint_name(50, tmp_path) == "checkpoint_0000000050-1"
    assert step_checkpoint_name(100, tmp_path) == "checkpoint_0000000100" and not orphan.exists()
    (tmp_path / "checkpoint_manager_snapshot.json").write_text("{trunc")  # unreadable: never reuse a folder
    _ckpt(tmp_path, "checkpoint_0000000100")
    assert step_checkpoint_name(100, tmp_path) == "checkpoint_0000000100-1"


def test_an_unusable_ray_snapshot_is_moved_aside(tmp_path):
    """Ray Train refuses to start from a snapshot listing a missing checkpoint ("corrupted run directory"):
    the rerun moves it aside and resumes from the newest good checkpoint folder instead."""
    from methodlab.runners.train import repair_snapshot

    assert repair_snapshot(tmp_path) is None  # no snapshot
    _ckpt(tmp_path, "checkpoint_0000000050")
    _snapshot(tmp_path, ["checkpoint_0000000050"])
    assert repair_snapshot(tmp_path) is None  # consistent: left alone
    _snapshot(tmp_path, ["checkpoint_0000000050", "checkpoint_0000000100"])
    aside = repair_snapshot(tmp_path)
    assert aside is not None and aside.exists() and not (tmp_path / "checkpoint_manager_snapshot.json").exists()
    (tmp_path / "checkpoint_manager_snapshot.json").write_text('{"checkpoint_res')  # cut short by a kill
    assert repair_snapshot(tmp_path) is not None
