"""The train runner: one method's `fit` in a Ray Train V2 TorchTrainer worker group.

Re-running with the same name and storage path resumes from the newest checkpoint (Ray Train's own
restoration, or failing that the newest checkpoint folder in the run directory). Train V2 keeps no
per-report history, so a controller callback appends every rank-0 report to metrics.jsonl."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ray.train import UserCallback

from methodlab.core import RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.core.registry import get_spec


class MetricsRecorder(UserCallback):
    """Runs on the Train controller: one JSON line per report (rank 0's metrics + checkpoint path), and
    the same report to MLflow / TensorBoard when tracking is on (so every rank's report is logged once)."""

    def __init__(self, path: str, tracking: dict | None = None, run_name: str = "", method: str = "",
                 config: dict | None = None):
        self.path, self.t0 = path, time.time()
        self.tracking, self.run_name, self.method, self.config = tracking, run_name, method, config or {}
        self._tracker = None

    def __getstate__(self):  # the live MLflow client / event writer stay in the process that made them
        return {**self.__dict__, "_tracker": None}

    def after_report(self, run_context, metrics, checkpoint):
        row = {**(metrics[0] if metrics else {}), "_time": round(time.time() - self.t0, 3)}
        if checkpoint is not None:
            row["_checkpoint"] = checkpoint.path
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row, default=float) + "\n")
        if self.tracking:
            from methodlab.runners.tracking import open_run

            if self._tracker is None:
                self._tracker = open_run(self.tracking, Path(self.path).parent, self.run_name, self.method, self.config)
            self._tracker.log(row)


def worker_loop(payload: dict) -> None:
    """Body of every Train worker: rebuild the validated config, wire RunContext to ray.train."""
    import ray.train
    import ray.train.torch
    import torch

    spec = get_spec(payload["method"])
    cfg = spec.config_cls().model_validate(payload["config"])
    if payload.get("torch_threads"):
        torch.set_num_threads(payload["torch_threads"])
    tctx = ray.train.get_context()
    resume = None
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        resume = _verified_or_previous(Path(ckpt.to_directory()), Path(ckpt.path).parent)
    elif payload.get("resume_from"):
        resume = Path(payload["resume_from"])

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)) if ckpt_dir else None)

    ctx = RunContext(rank=tctx.get_world_rank(), world_size=tctx.get_world_size(), device=ray.train.torch.get_device(),
                     seed=cfg.seed, checkpoint=resume, report_fn=report,
                     prepare_model_fn=ray.train.torch.prepare_model, prepare_loader_fn=ray.train.torch.prepare_data_loader)
    spec.fit_fn(payload.get("setting", "train"))(cfg, ctx)


def _verified_or_previous(local: Path, run_dir: Path) -> Path | None:
    """Ray restores its newest checkpoint; if its files differ from their manifest, resume from the newest
    good one of the run instead (latest_checkpoint warns naming the bad file), or from scratch."""
    from methodlab.core.checkpoint import verify_checkpoint
    from methodlab.core.errors import CheckpointError

    try:
        verify_checkpoint(local)
        return local
    except CheckpointError as err:
        print(f"warning: {err}; falling back to the previous good checkpoint", flush=True)
        return latest_checkpoint(run_dir) if run_dir.is_dir() else None


def build_trainer(loaded, name: str, storage: str, *, callbacks=(), resume_from: str | None = None,
                  controller_failure_limit: int = 3):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    job = loaded.job
    sc = job.scaling
    # Train V2 moves each report through a queue of size 1 that the controller drains when it polls, every
    # RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (default 2 s): a worker reporting more often blocks until the next poll
    # (the grokking CPU preset, 50 steps a report at ~32 steps/s, was held to 24.8 steps/s). Poll at 0.2 s
    # unless the user set it; Train passes the driver's value on to the controller.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    resources = {"CPU": sc.cpus_per_worker, **sc.resources_per_worker}
    if sc.use_gpu:
        resources["GPU"] = sc.gpus_per_worker or 1
    ck = job.run.checkpoint
    payload = {"method": job.method, "setting": job.setting, "config": loaded.config.model_dump(mode="json"),
               "torch_threads": sc.torch_threads or max(1, int(sc.cpus_per_worker)), "resume_from": resume_from}
    return TorchTrainer(
        worker_loop,
        train_loop_config=payload,
        scaling_config=ScalingConfig(num_workers=sc.num_workers, use_gpu=sc.use_gpu, resources_per_worker=resources,
                                     placement_strategy=sc.placement_strategy),
        run_config=RunConfig(
            name=name, storage_path=storage,
            checkpoint_config=CheckpointConfig(num_to_keep=ck.num_to_keep, checkpoint_score_attribute=ck.score_attribute,
                                               checkpoint_score_order=ck.score_order),
            # controller_failure_limit: a leaked placement group fails the run instead of hanging it.
            failure_config=FailureConfig(max_failures=job.run.max_failures, controller_failure_limit=controller_failure_limit),
            callbacks=list(callbacks),
        ),
    )


def run_train(loaded, name: str, storage: str, *, address: str | None = None, quiet: bool = False,
              assume_shared_storage: bool = False) -> dict:
    from methodlab.runners.local import check_resume_compatible, write_job_record
    from methodlab.runners.paths import check_shared_storage, is_uri
    from methodlab.runners.ray_session import init_ray
    from methodlab.runners import tracking
    from methodlab.runners.results import write_run_summary

    init_ray(address, quiet=quiet)
    check_shared_storage(storage, assume_shared_storage)  # on a multi-node cluster, before any worker starts
    spec = get_spec(loaded.job.method)
    run_dir = Path(storage) / name
    local = not is_uri(storage)
    resume_from = None
    if local:
        run_dir.mkdir(parents=True, exist_ok=True)
        check_resume_compatible(run_dir, loaded.config)
        write_job_record(run_dir, loaded, name, storage, "train")
        found = latest_checkpoint(run_dir)
        resume_from = str(found) if found else None
    # Tracking needs the run folder for its run ids and event files: local storage only.
    track = tracking.settings(loaded.job.tracking, spec.slug) if local else None
    if not local and tracking.settings(loaded.job.tracking, spec.slug):
        tracking.warn_remote(storage)
    callbacks = [MetricsRecorder(str(run_dir / "metrics.jsonl"), track, name, spec.slug,
                                 loaded.config.model_dump(mode="json"))] if local else []
    trainer = build_trainer(loaded, name, storage, callbacks=callbacks, resume_from=resume_from)
    try:
        result = trainer.fit()
    except BaseException:
        tracking.finish_run(track, run_dir, name, type(loaded.config).primary_metric, {}, None, status="FAILED")
        raise
    final = dict(result.metrics or {})
    if local:
        ckpt = Path(result.checkpoint.path) if result.checkpoint else latest_checkpoint(run_dir)
        write_run_summary(run_dir, spec.slug, loaded.config, final, ckpt)
        tracking.finish_run(track, run_dir, name, type(loaded.config).primary_metric, final, ckpt)
    return {"run_dir": str(run_dir), "metrics": final, "checkpoint": result.checkpoint.path if result.checkpoint else None}
