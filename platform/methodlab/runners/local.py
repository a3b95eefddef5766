"""The local runner: `fit` in this process. Same RunContext contract as the Ray runners, same
run-folder layout (job.yaml, metrics.jsonl, checkpoints/checkpoint_<step>/, summary.parquet,
history.parquet); re-running the same name resumes from the newest checkpoint at its step.

A run folder is claimed (job.yaml written) at the run's first report, not before: a run that fails while
starting (a missing data file, a bad GPU request) leaves nothing that would refuse the corrected rerun."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from methodlab.core import RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.core.registry import get_spec
from methodlab.runners import tracking
from methodlab.runners.progress import Progress
from methodlab.runners.results import write_run_summary


CHECKPOINTS_DIR = "checkpoints"  # <run folder>/checkpoints/checkpoint_<step:010d>/ for every runner
JOB_RECORD = "job.yaml"


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
    from methodlab.runners.results import SUMMARY

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


def local_context_args(scaling) -> dict:
    """Device, precision and compilation of an in-process run (local runner, Tune function trial):
    cuda when the job asks for a GPU and torch sees one; a GPU asked for and absent raises here, before
    the run folder is claimed or anything is built."""
    from methodlab.core.device import resolve_device

    return {"device": resolve_device(scaling.use_gpu), "precision": scaling.precision, "compile": scaling.compile}


def run_local(loaded, name: str, storage: str, *, quiet: bool = False, fresh: bool = False) -> dict:
    from methodlab.core.device import set_tf32, set_threads, thread_count

    spec = get_spec(loaded.job.method)
    sc = loaded.job.scaling
    device_args = local_context_args(sc)  # before anything is written: a missing GPU is refused here
    run_dir = Path(storage) / name
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    existed = run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    check_resume_compatible(run_dir, loaded.config)
    record = job_record(loaded, name, storage, "local")
    claimed = False
    ckpt_root = run_dir / CHECKPOINTS_DIR
    resume = latest_checkpoint(ckpt_root)
    cfg = loaded.config
    total = getattr(cfg, "max_steps", None) or getattr(cfg, "epochs", None)
    start = int(resume.name.rsplit("_", 1)[-1]) if resume is not None and resume.name.rsplit("_", 1)[-1].isdigit() else 0
    progress = Progress(spec.slug, type(cfg).primary_metric, quiet=quiet, total=total, start=start)
    track = tracking.settings(loaded.job.tracking, spec.slug)
    tracker = tracking.open_run(track, run_dir, name, spec.slug, cfg.model_dump(mode="json"))
    if resume is not None:
        progress.note(f"resuming from {resume}")
    keep = loaded.job.run.checkpoint.num_to_keep
    metrics_file = run_dir / "metrics.jsonl"
    t0 = time.time()

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        nonlocal claimed
        if not claimed:  # the run has started: the folder is this run's from now on
            claim_run(run_dir, record)
            claimed = True
        row = {**metrics, "_time": round(time.time() - t0, 3)}
        if ckpt_dir is not None:
            step = report_step(metrics, len(ctx.history))
            row["_checkpoint"] = str(persist_checkpoint(ckpt_dir, ckpt_root, step, keep))
        with metrics_file.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if tracker is not None:
            tracker.log(row)
        progress.update(metrics)

    ctx = RunContext(seed=cfg.seed, checkpoint=resume, report_fn=report, quiet=quiet, run_dir=run_dir, **device_args)
    fit = spec.fit_fn(loaded.job.setting)
    # as the Train runner does per worker: torch threads from the job's CPUs (a method config may narrow them)
    threads = set_threads(thread_count(sc.cpus_per_worker, sc.torch_threads))
    if ctx.device.type == "cuda":
        set_tf32(sc.tf32)
    try:
        final = fit(cfg, ctx) or (ctx.history[-1] if ctx.history else {})
    except BaseException:
        progress.done(ok=False)
        tracking.finish_run(track, run_dir, name, type(cfg).primary_metric, {}, None, "FAILED", tracker)
        if not claimed:
            drop_unclaimed(run_dir, existed)
        raise
    finally:
        set_threads(threads)  # the caller's setting again (tests and reproductions run in-process)
    progress.done()
    if not claimed:  # a fit that never reported
        claim_run(run_dir, record)
    ckpt = latest_checkpoint(ckpt_root)
    summary = write_run_summary(run_dir, spec.slug, cfg, final, ckpt)
    tracking.finish_run(track, run_dir, name, type(cfg).primary_metric, final, ckpt, tracker=tracker)
    return {"run_dir": str(run_dir), "metrics": final, "summary": summary}
