"""One run's lifecycle, for every runner: `RunLifecycle.open`, `report` per report, then `close` or `fail`.

The run folder, <storage>/<name>/, is the same for every runner:

    job.yaml                             the resolved job; written at the first report (the folder is claimed
                                         then: a run that fails while starting leaves nothing that would refuse
                                         the corrected rerun), and a rerun under another config is refused
    metrics.jsonl                        one row per report: the metrics, `_time` (s since open), `_checkpoint`
    checkpoints/checkpoint_<step:010d>/  the report's checkpoint, named after its step
    summary.parquet, history.parquet     written at close
    tracking.json, tensorboard/          when the job's tracking is on (MLflow / TensorBoard, runners/tracking.py)

What each runner hands to the object, and what stays its own (or Ray's):

* local (runners/local.py, `run_local`): all of it. `open` checks the config against job.yaml, prepares the job
  record and finds the resume checkpoint (the newest good checkpoints/checkpoint_*); `report` writes the row,
  logs it to the tracker and copies the checkpoint atomically (pruned to `run.checkpoint.num_to_keep`); `close`
  and `fail`. The runner keeps the device, threads, progress bar and the call of `fit`.
* Ray Train (runners/train.py, `run_train`, local storage): the driver opens the object (config check, job record,
  tracking settings) and hands it to `MetricsRecorder`, the Train controller's callback, whose copy `report`s every
  rank-0 report (claim, row, tracker: `stored=` the folder Ray persisted). The driver follows the same
  `metrics_file` for its bar (`ReportFollower`) and closes or fails the object. Ray's: persisting, naming (the
  layout above, `checkpoint_dir_name`) and pruning (CheckpointConfig) of checkpoints, and resuming (its snapshot,
  `resume_point` / `repair_snapshot` in train.py). A URI storage has no run folder here: no object, no summary.
* Ray Tune function trials (runners/tune.py, `function_trial`): a `RunLifecycle.recorder` over the trial's own
  record of its reports, <sweep>/trial_reports/<trial id>.jsonl, written before `tune.report` (no job record,
  tracker, checkpoint or summary: the sweep has no job.yaml per trial). Tune's: the trial folder's result.json /
  progress.csv, its checkpoints (`tune.report(checkpoint=...)`) and resume (`tune.get_checkpoint`), tracking (the
  driver's callback) and the sweep's summary (results.write_sweep_summary from Tune's results). Multi-worker
  trials (`driver_trial`) report through Train's TuneReportCallback and use no object.
* the reproduction harness (reproduce/harness.py, `run_one`): runs `run_local` and reads its `RunResult`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import yaml

from methodlab.core.checkpoint import latest_checkpoint
from methodlab.runners import tracking
from methodlab.runners.results import SUMMARY, write_run_summary

if TYPE_CHECKING:
    import pandas as pd

CHECKPOINTS_DIR = "checkpoints"  # <run folder>/checkpoints/checkpoint_<step:010d>/ for every runner
JOB_RECORD = "job.yaml"
METRICS = "metrics.jsonl"


class RunResult(TypedDict):
    """What a runner returns: the run folder, the final metrics, the summary.parquet row (None where none was
    written: a Train run on a URI storage) and the checkpoint the summary names."""

    run_dir: str
    metrics: dict
    summary: pd.DataFrame | None
    checkpoint: str | None


def checkpoint_dir_name(step: int) -> str:
    return f"checkpoint_{int(step):010d}"


def report_step(metrics: dict, fallback: int) -> int:
    """The step a report's checkpoint is named after: its `step`, else its `epoch`, else the report count."""
    return int(metrics.get("step", metrics.get("epoch", fallback)))


def persist_checkpoint(src: Path, root: Path, step: int, keep: int | None) -> Path:
    """Copy a filled checkpoint dir to root/checkpoint_<step> atomically, then prune old ones."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_dir_name(step)
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-tmp-", dir=root))
    shutil.copytree(src, tmp, dirs_exist_ok=True)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep:
        olds = sorted(p for p in root.glob("checkpoint_*") if p.is_dir())
        for old in olds[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def recorded_config(run_dir: Path, cfg) -> dict | None:
    """The config in a run folder's job.yaml (as today's config model reads it), or None without one."""
    record = Path(run_dir) / JOB_RECORD
    if not record.exists():
        return None
    old = (yaml.safe_load(record.read_text()) or {}).get("config") or {}
    try:  # a record written by an older version of the config (a renamed choice, a dropped field) reads as today's
        old = type(cfg).model_validate(old).model_dump(mode="json")
    except Exception:
        pass
    return old


def check_resume_compatible(run_dir: Path, cfg) -> None:
    """Resuming a run under a different config would silently mix two experiments: refuse it."""
    from methodlab.core.errors import ConfigError

    old = recorded_config(run_dir, cfg)
    if old is None:
        return
    new = cfg.model_dump(mode="json")
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in type(cfg).resume_may_change)
    if changed:
        raise ConfigError(f"run folder {run_dir} holds a run with a different config ({', '.join(changed)}); "
                          "pass --fresh to start over or --name for a new run")


def finished_run(run_dir: Path, cfg) -> bool:
    """True when the run folder holds a finished run of exactly this config: its summary.parquet was written
    after its job.yaml (a resumed, longer run that was then interrupted has a newer job.yaml) and the recorded
    config equals `cfg` field for field (a larger max_steps is a continuation, not a finished run)."""
    run_dir = Path(run_dir)
    record, summary = run_dir / JOB_RECORD, run_dir / SUMMARY
    if not (record.is_file() and summary.is_file()) or summary.stat().st_mtime < record.stat().st_mtime:
        return False
    return recorded_config(run_dir, cfg) == cfg.model_dump(mode="json")


def job_record(loaded, name: str, storage: str, runner: str) -> str:
    """The resolved job as YAML text (job.yaml of the run folder, written when the run has started)."""
    record = loaded.job.model_dump(mode="json")
    record["config"] = loaded.config.model_dump(mode="json")
    record["run"]["name"], record["run"]["storage_path"] = name, storage
    record["_runner"] = runner
    return yaml.safe_dump(record, sort_keys=False)


def claim_run(run_dir: Path, record: str) -> None:
    """Write job.yaml (atomically): from now on the folder holds this run, and a rerun under another config
    is refused."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{JOB_RECORD}.tmp-{os.getpid()}"
    tmp.write_text(record)
    os.replace(tmp, run_dir / JOB_RECORD)


def write_job_record(run_dir: Path, loaded, name: str, storage: str, runner: str) -> None:
    claim_run(run_dir, job_record(loaded, name, storage, runner))


def drop_unclaimed(run_dir: Path, existed: bool) -> None:
    """After a run that failed before it started: remove the run folder this attempt created if nothing but
    empty folders and hidden markers was written into it (Ray Train's .validate_storage_marker). A folder that
    existed before, or holds any file of the run, is left alone."""
    run_dir = Path(run_dir)
    if existed or not run_dir.is_dir() or (run_dir / JOB_RECORD).exists():
        return
    if all(p.is_dir() or p.name.startswith(".") for p in run_dir.rglob("*")):
        shutil.rmtree(run_dir, ignore_errors=True)


class RunLifecycle:
    """One run, opened once (`open`, or `recorder` for a bare reports file), reported to, then closed or failed.

    Picklable: Ray Train pickles it into its controller (inside MetricsRecorder); the live tracker and the config
    model stay in the process that made them, so the driver's copy closes the run (reopening the tracker's MLflow
    run by its id, as tracking.finish_run does)."""

    def __init__(self, run_dir: str | Path, *, name: str = "", slug: str = "", cfg=None, record: str | None = None,
                 track: dict | None = None, keep: int | None = None, existed: bool = True,
                 metrics_file: str | Path | None = None):
        self.run_dir = Path(run_dir)
        self.name, self.slug, self.cfg, self.record, self.track, self.keep = name, slug, cfg, record, track, keep
        self.primary = type(cfg).primary_metric if cfg is not None else None
        self.params = cfg.model_dump(mode="json") if cfg is not None else {}
        self.existed = existed
        self.metrics_file = Path(metrics_file) if metrics_file is not None else self.run_dir / METRICS
        self.checkpoints = self.run_dir / CHECKPOINTS_DIR
        self.claimed = False  # job.yaml written by this object (the first report, or close)
        self.reports = 0
        self.resume: Path | None = None
        self.tracker = None
        self.t0 = time.time()

    @classmethod
    def open(cls, loaded, name: str, storage: str, runner: str, *, slug: str, fresh: bool = False,
             find_resume: bool = True, track_now: bool = True) -> RunLifecycle:
        """The run <storage>/<name> of `loaded`: `fresh` removes an earlier run there first; a folder holding a run
        of another config is refused (ConfigError); `resume` is its newest good checkpoint (or None; not looked
        for without `find_resume`: Ray Train picks its own). job.yaml is written at the first report. `track_now`:
        open the tracker here (the local runner) rather than at the first report (the Train controller's copy)."""
        run_dir = Path(storage) / name
        if fresh and run_dir.exists():
            shutil.rmtree(run_dir)
        existed = run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
        check_resume_compatible(run_dir, loaded.config)
        run = cls(run_dir, name=name, slug=slug, cfg=loaded.config, record=job_record(loaded, name, storage, runner),
                  track=tracking.settings(loaded.job.tracking, slug), keep=loaded.job.run.checkpoint.num_to_keep,
                  existed=existed)
        if find_resume:
            run.resume = latest_checkpoint(run.checkpoints)
        if track_now:
            run._tracker()
        run.t0 = time.time()
        return run

    @classmethod
    def recorder(cls, metrics_file: str | Path) -> RunLifecycle:
        """Only `report` rows into `metrics_file` (no job record, tracker, checkpoints or summary): a Tune function
        trial's own record of its reports."""
        metrics_file = Path(metrics_file)
        return cls(metrics_file.parent, metrics_file=metrics_file)

    def __getstate__(self):
        return {**self.__dict__, "tracker": None, "cfg": None}

    @property
    def start_step(self) -> int:
        """The step the resume checkpoint is named after (0 without one)."""
        tail = self.resume.name.rsplit("_", 1)[-1] if self.resume is not None else ""
        return int(tail) if tail.isdigit() else 0

    def _tracker(self):
        if self.tracker is None and self.track:
            self.tracker = tracking.open_run(self.track, self.run_dir, self.name, self.slug, self.params)
        return self.tracker

    def _claim(self) -> None:
        if self.record is not None and not self.claimed:
            claim_run(self.run_dir, self.record)
            self.claimed = True

    def report(self, metrics: dict, checkpoint_dir: Path | None = None, *, stored: str | None = None) -> dict:
        """One report: claim the folder (first report), persist `checkpoint_dir` (a filled checkpoint folder) as
        checkpoints/checkpoint_<step>, append the row to metrics.jsonl and log it to the tracker. `stored`: where a
        runner that persists its own checkpoints (Ray Train) put this report's. Returns the row."""
        self.reports += 1
        self._claim()
        row = {**metrics, "_time": round(time.time() - self.t0, 3)}
        if checkpoint_dir is not None:
            stored = str(persist_checkpoint(checkpoint_dir, self.checkpoints, report_step(metrics, self.reports),
                                            self.keep))
        if stored is not None:
            row["_checkpoint"] = stored
        self.metrics_file.parent.mkdir(parents=True, exist_ok=True)
        with self.metrics_file.open("a") as fh:
            fh.write(json.dumps(row, default=float) + "\n")
        tracker = self._tracker()
        if tracker is not None:
            tracker.log(row)
        return row

    def close(self, final: dict, checkpoint: str | Path | None = None) -> RunResult:
        """The run finished: job.yaml (also for a fit that never reported), summary.parquet + history.parquet, the
        tracker's final metrics and FINISHED. `checkpoint`: the run's final one (default: the newest good one)."""
        self._claim()
        ckpt = Path(checkpoint) if checkpoint is not None else latest_checkpoint(self.checkpoints)
        summary = write_run_summary(self.run_dir, self.slug, self.cfg, final, ckpt)
        tracking.finish_run(self.track, self.run_dir, self.name, self.primary, final, ckpt, tracker=self.tracker)
        return RunResult(run_dir=str(self.run_dir), metrics=final, summary=summary,
                         checkpoint=str(ckpt) if ckpt is not None else None)

    def fail(self, status: str = "FAILED") -> None:
        """The run failed (or was stopped: status KILLED): the tracker's run ends with `status`, and a folder this
        attempt created and never claimed is removed."""
        tracking.finish_run(self.track, self.run_dir, self.name, self.primary, {}, None, status, self.tracker)
        if not self.claimed:
            drop_unclaimed(self.run_dir, self.existed)
