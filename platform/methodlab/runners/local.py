"""The local runner: `fit` in this process. Same RunContext contract as the Ray runners, same
run-folder layout (metrics.jsonl, checkpoints/, job.yaml, summary.parquet); re-running the same
name resumes from the newest checkpoint at its step."""

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


def persist_checkpoint(src: Path, root: Path, step: int, keep: int | None) -> Path:
    """Copy a filled checkpoint dir to root/checkpoint_<step> atomically, then prune old ones."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"checkpoint_{step:010d}"
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


def check_resume_compatible(run_dir: Path, cfg) -> None:
    """Resuming a run under a different config would silently mix two experiments: refuse it."""
    from methodlab.core.errors import ConfigError

    record = run_dir / "job.yaml"
    if not record.exists():
        return
    old = (yaml.safe_load(record.read_text()) or {}).get("config") or {}
    new = cfg.model_dump(mode="json")
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in type(cfg).resume_may_change)
    if changed:
        raise ConfigError(f"run folder {run_dir} holds a run with a different config ({', '.join(changed)}); "
                          "pass --fresh to start over or --name for a new run")


def write_job_record(run_dir: Path, loaded, name: str, storage: str, runner: str) -> None:
    record = loaded.job.model_dump(mode="json")
    record["config"] = loaded.config.model_dump(mode="json")
    record["run"]["name"], record["run"]["storage_path"] = name, storage
    record["_runner"] = runner
    (run_dir / "job.yaml").write_text(yaml.safe_dump(record, sort_keys=False))


def _set_torch_threads(n: int | None) -> int | None:
    """torch.set_num_threads(n) when n is given; returns the previous count (None when nothing changed)."""
    if not n:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before


def run_local(loaded, name: str, storage: str, *, quiet: bool = False, fresh: bool = False) -> dict:
    spec = get_spec(loaded.job.method)
    run_dir = Path(storage) / name
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    check_resume_compatible(run_dir, loaded.config)
    write_job_record(run_dir, loaded, name, storage, "local")
    ckpt_root = run_dir / "checkpoints"
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
        row = {**metrics, "_time": round(time.time() - t0, 3)}
        if ckpt_dir is not None:
            step = int(metrics.get("step", metrics.get("epoch", len(ctx.history))))
            row["_checkpoint"] = str(persist_checkpoint(ckpt_dir, ckpt_root, step, keep))
        with metrics_file.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if tracker is not None:
            tracker.log(row)
        progress.update(metrics)

    ctx = RunContext(seed=cfg.seed, checkpoint=resume, report_fn=report, quiet=quiet)
    fit = spec.fit_fn(loaded.job.setting)
    threads = _set_torch_threads(loaded.job.scaling.torch_threads)  # as the Train runner does per worker
    try:
        final = fit(cfg, ctx) or (ctx.history[-1] if ctx.history else {})
    except BaseException:
        progress.done(ok=False)
        tracking.finish_run(track, run_dir, name, type(cfg).primary_metric, {}, None, "FAILED", tracker)
        raise
    finally:
        _set_torch_threads(threads)  # the caller's setting again (tests and reproductions run in-process)
    progress.done()
    ckpt = latest_checkpoint(ckpt_root)
    summary = write_run_summary(run_dir, spec.slug, cfg, final, ckpt)
    tracking.finish_run(track, run_dir, name, type(cfg).primary_metric, final, ckpt, tracker=tracker)
    return {"run_dir": str(run_dir), "metrics": final, "summary": summary}
