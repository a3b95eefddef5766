"""Issue 42 item 3: a --smoke run never takes the full run's folder, a run that fails while starting leaves
nothing that refuses the corrected rerun, and re-running a finished run says it is complete (exit 0).
In-process through typer's CliRunner with the local runner (seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from methodlab.cli.main import app

REPO = Path(__file__).resolve().parents[2]


def _named_job(tmp_path: Path, name: str) -> Path:
    """jobs/monotone_gbt/fit.yaml with run.name set, as 134 of the 156 shipped job files have."""
    job = yaml.safe_load((REPO / "jobs/monotone_gbt/fit.yaml").read_text())
    job.setdefault("run", {})["name"] = name
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _run(*argv: str):
    return CliRunner().invoke(app, ["run", *argv])


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def test_run_name_rules():
    from methodlab.runners.paths import run_name

    assert run_name(None, "min_swgg-cfm", "min_swgg", None, "train", smoke=True) == "min_swgg-cfm-smoke"
    assert run_name(None, "min_swgg-cfm", "min_swgg", None, "train", smoke=False) == "min_swgg-cfm"
    assert run_name(None, "x-smoke", "m", None, "train", smoke=True) == "x-smoke"  # not x-smoke-smoke
    assert run_name("mine", "min_swgg-cfm", "min_swgg", None, "train", smoke=True) == "mine"  # --name as given
    assert run_name(None, None, "m", Path("jobs/m/cpu.yaml"), "train", smoke=True) == "m-cpu-smoke"


def test_smoke_run_of_a_named_job_gets_its_own_folder(tmp_path):
    job = _named_job(tmp_path, "mg-named")
    store = tmp_path / "store"
    smoke = _run(str(job), "--local", "--smoke", "--storage", str(store), "-q")
    assert smoke.exit_code == 0, smoke.output
    assert (store / "mg-named-smoke" / "summary.parquet").exists()
    assert not (store / "mg-named").exists(), "the smoke run wrote into the full run's folder"
    # the full run (another config: no smoke preset) then starts in its own folder instead of being refused
    full = _run(str(job), "--local", "n_items=10", "n_comparisons=50", "n_test=400", "sweep_seeds=5", "sweep_n=[50]",
                "--storage", str(store), "-q")  # small, and not the smoke preset's config
    assert full.exit_code == 0, full.output
    assert "different config" not in full.output
    assert (store / "mg-named" / "summary.parquet").exists()


def test_run_failing_at_start_up_leaves_nothing_that_blocks_the_rerun(tmp_path):
    store, missing = tmp_path / "store", tmp_path / "nope.csv"
    bad = _run("jobs/monotone_gbt/fit.yaml", "--local", "--smoke", "data=csv", f"comparisons_path={missing}",
               "--name", "mg", "--storage", str(store), "-q")
    assert bad.exit_code == 2, bad.output
    assert str(missing) in bad.stderr and "Traceback" not in bad.output
    assert not (store / "mg" / "job.yaml").exists(), "a run that never started claimed its folder"
    assert not (store / "mg").exists(), "the failed start left an empty run folder"
    # the corrected command (another config, the same name) runs instead of "holds a run with a different config"
    good = _run("jobs/monotone_gbt/fit.yaml", "--local", "--smoke", "--name", "mg", "--storage", str(store), "-q")
    assert good.exit_code == 0, good.output
    assert (store / "mg" / "summary.parquet").exists()


def test_rerun_of_a_finished_run_says_it_is_complete(tmp_path):
    store = tmp_path / "store"
    args = ["jobs/monotone_gbt/fit.yaml", "--local", "--smoke", "--name", "mg", "--storage", str(store), "-q"]
    first = _run(*args)
    assert first.exit_code == 0, first.output
    run_dir = store / "mg"
    assert _steps(run_dir) == [1]
    again = _run(*args)
    assert again.exit_code == 0, again.output
    lines = [x for x in again.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "already complete" in lines[0] and str(run_dir) in lines[0], again.output
    assert "resuming" not in again.output and _steps(run_dir) == [1], "nothing ran again"
    # --fresh runs a finished run again from the start
    fresh = _run(*args, "--fresh")
    assert fresh.exit_code == 0 and "already complete" not in fresh.output, fresh.output
    assert _steps(run_dir) == [1]


def test_finished_means_this_config_and_a_summary_newer_than_the_record(tmp_path):
    """A longer run under the same name (max_steps raised) continues; so does a resumed run that was
    interrupted after an earlier one had finished (its job.yaml is newer than the old summary)."""
    import os

    from methodlab.methods.grokking_flatness.config import Config
    from methodlab.runners.lifecycle import claim_run, finished_run

    cfg = Config(**Config.smoke)
    record = {"method": "grokking_flatness", "config": cfg.model_dump(mode="json")}
    claim_run(tmp_path, yaml.safe_dump(record))
    assert not finished_run(tmp_path, cfg), "no summary: not finished"
    (tmp_path / "summary.parquet").write_bytes(b"x")
    assert finished_run(tmp_path, cfg)
    assert not finished_run(tmp_path, cfg.model_copy(update={"max_steps": cfg.max_steps + 100}))
    old = (tmp_path / "job.yaml").stat().st_mtime - 60
    os.utime(tmp_path / "summary.parquet", (old, old))
    assert not finished_run(tmp_path, cfg), "summary older than the run's record: that run did not finish"
