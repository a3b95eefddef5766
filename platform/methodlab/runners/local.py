"""The local runner: `fit` in this process. Same RunContext contract as the Ray runners, same
run-folder layout (job.yaml, metrics.jsonl, checkpoints/checkpoint_<step>/, summary.parquet,
history.parquet); re-running the same name resumes from the newest checkpoint at its step.

The run is opened, reported to and closed through runners/lifecycle.py's RunLifecycle (the run-folder
layout's helpers live there). A run folder is claimed (job.yaml written) at the run's first report, not
before: a run that fails while starting (a missing data file, a bad GPU request) leaves nothing that would
refuse the corrected rerun."""

from __future__ import annotations

from pathlib import Path

from methodlab.core import RunContext
from methodlab.core.registry import get_spec
from methodlab.runners.lifecycle import RunLifecycle, RunResult
from methodlab.runners.progress import Progress


def local_context_args(scaling) -> dict:
    """Device, precision and compilation of an in-process run (local runner, Tune function trial):
    cuda when the job asks for a GPU and torch sees one; a GPU asked for and absent raises here, before
    the run folder is claimed or anything is built."""
    from methodlab.core.device import resolve_device

    return {"device": resolve_device(scaling.use_gpu), "precision": scaling.precision, "compile": scaling.compile}


def run_local(loaded, name: str, storage: str, *, quiet: bool = False, fresh: bool = False) -> RunResult:
    from methodlab.core.device import set_tf32, set_threads, thread_count

    spec = get_spec(loaded.job.method)
    sc = loaded.job.scaling
    device_args = local_context_args(sc)  # before anything is written: a missing GPU is refused here
    # config check against job.yaml, the job record (written at the first report), resume checkpoint, tracker
    run = RunLifecycle.open(loaded, name, storage, "local", slug=spec.slug, fresh=fresh)
    cfg = loaded.config
    total = getattr(cfg, "max_steps", None) or getattr(cfg, "epochs", None)
    progress = Progress(spec.slug, type(cfg).primary_metric, quiet=quiet, total=total, start=run.start_step)
    if run.resume is not None:
        progress.note(f"resuming from {run.resume}")

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        run.report(metrics, ckpt_dir)
        progress.update(metrics)

    ctx = RunContext(seed=cfg.seed, checkpoint=run.resume, report_fn=report, quiet=quiet, run_dir=run.run_dir,
                     **device_args)
    fit = spec.fit_fn(loaded.job.setting)
    # as the Train runner does per worker: torch threads from the job's CPUs (a method config may narrow them)
    threads = set_threads(thread_count(sc.cpus_per_worker, sc.torch_threads))
    if ctx.device.type == "cuda":
        set_tf32(sc.tf32)
    try:
        final = fit(cfg, ctx) or (ctx.history[-1] if ctx.history else {})
    except BaseException:
        progress.done(ok=False)
        run.fail()
        raise
    finally:
        set_threads(threads)  # the caller's setting again (tests and reproductions run in-process)
    progress.done()
    return run.close(final)
