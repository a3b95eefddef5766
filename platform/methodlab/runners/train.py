"""The train runner: one method's `fit` in a Ray Train V2 TorchTrainer worker group.

The run folder has the local runner's layout: job.yaml, metrics.jsonl, checkpoints/checkpoint_<step:010d>/,
summary.parquet, history.parquet. Ray Train's experiment folder is <run folder>/checkpoints (so its
checkpoint_manager_snapshot.json sits beside the checkpoints it lists) and every checkpoint is reported under
its step's name. Re-running with the same name and storage path resumes from the newest checkpoint (Ray
Train's own restoration, or failing that the newest good checkpoint folder in the run folder). Train V2 keeps
no per-report history, so a controller callback appends every rank-0 report to metrics.jsonl, which the
driver follows for its progress bar. Ctrl-C stops the run within seconds; its checkpoints stay."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from ray.train import UserCallback

from methodlab.core import RunContext, faults
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.core.registry import get_spec
from methodlab.runners.lifecycle import CHECKPOINTS_DIR, RunLifecycle, RunResult, checkpoint_dir_name, report_step

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's list of the checkpoints it keeps (in checkpoints/)


class MetricsRecorder(UserCallback):
    """Runs on the Train controller: the run's RunLifecycle (runners/lifecycle.py) records each report there: job.yaml
    at the first report (the run folder is claimed once the run runs), one metrics.jsonl row (rank 0's metrics +
    the checkpoint folder Ray persisted), and the same row to MLflow / TensorBoard when tracking is on (so every
    rank's report is logged once). The driver's copy of the object closes the run."""

    def __init__(self, run):
        self.run = run

    def after_report(self, run_context, metrics, checkpoint):
        self.run.report(metrics[0] if metrics else {}, stored=checkpoint.path if checkpoint is not None else None)


def worker_loop(payload: dict) -> None:
    """Body of every Train worker: rebuild the validated config, wire RunContext to ray.train."""
    import ray.train
    import ray.train.torch
    import torch

    from methodlab.core.device import set_tf32, set_threads

    quiet_ray_train_reports()
    spec = get_spec(payload["method"])
    cfg = spec.config_cls().model_validate(payload["config"])
    set_threads(payload.get("torch_threads"))
    tctx = ray.train.get_context()
    device = ray.train.torch.get_device()  # the worker's GPU when use_gpu (Ray sets CUDA_VISIBLE_DEVICES), else cpu
    if payload.get("use_gpu") and device.type != "cuda":
        from methodlab.core.device import resolve_device

        device = resolve_device(True, gpu_ids=ray.get_gpu_ids())  # raises: Ray gave a GPU torch cannot see
    if device.type == "cuda":
        torch.cuda.set_device(device)
        set_tf32(payload.get("tf32", False))
    resume = None
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        resume = _verified_or_previous(Path(ckpt.to_directory()), Path(ckpt.path).parent)
    elif payload.get("resume_from"):
        resume = Path(payload["resume_from"])

    ckpt_root = Path(payload["run_dir"]) / CHECKPOINTS_DIR if payload.get("run_dir") else None

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        if ckpt_dir is None:
            ray.train.report(metrics)
            return
        # named after its step, as the local runner names them (rank 0 names it; Ray syncs the name to all ranks)
        name = step_checkpoint_name(report_step(metrics, len(ctx.history)), ckpt_root)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(ckpt_dir)), checkpoint_dir_name=name)

    ctx = RunContext(rank=tctx.get_world_rank(), world_size=tctx.get_world_size(), device=device,
                     precision=payload.get("precision", "fp32"), compile=payload.get("compile", False),
                     seed=cfg.seed, checkpoint=resume, report_fn=report,
                     run_dir=Path(payload["run_dir"]) if payload.get("run_dir") else None,
                     prepare_model_fn=ray.train.torch.prepare_model, prepare_loader_fn=ray.train.torch.prepare_data_loader)
    faults.install_collective_guard(ctx.device, ctx.rank)  # a no-op unless the collective probe is on (tests)
    spec.fit_fn(payload.get("setting", "train"))(cfg, ctx)


def quiet_ray_train_reports() -> None:
    """Ray Train logs one INFO line per report with the whole metrics dict from every worker ("Reporting training
    result 1: TrainingReport(...)"). Its logger is named after the module's file path, so neither the `ray.train`
    logger's level nor RunConfig's LoggingConfig reaches it: raise that logger to WARNING (in the worker)."""
    try:
        from ray.train.v2._internal.execution import context as train_context
    except ImportError:  # another Train generation: nothing to silence
        return
    logging.getLogger(train_context.__file__).setLevel(logging.WARNING)
    logging.getLogger("ray.train").setLevel(logging.WARNING)


def _registered_checkpoints(root: Path) -> set[str] | None:
    """Checkpoint folder names Ray Train's snapshot lists (None: no snapshot, or one that does not parse)."""
    try:
        state = json.loads((root / SNAPSHOT).read_text())
        entries = list(state.get("checkpoint_results") or []) + [state.get("latest_checkpoint_result") or {}]
        return {e["checkpoint_dir_name"] for e in entries if e.get("checkpoint_dir_name")}
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def step_checkpoint_name(step: int, root: Path | None) -> str:
    """checkpoint_<step:010d>. If a folder of that name exists (a step reported again after a restart): one Ray
    Train never registered (left by a killed run) is replaced; one it still lists gets a fresh `-<n>` name, since
    Ray deletes a checkpoint by its path when it prunes, and two entries must never share a folder."""
    import shutil

    name = checkpoint_dir_name(step)
    if root is None or not (root / name).exists():
        return name
    registered = _registered_checkpoints(root)
    if registered is not None and name not in registered:
        shutil.rmtree(root / name, ignore_errors=True)
        return name
    n = 1
    while (root / f"{name}-{n}").exists():
        n += 1
    return f"{name}-{n}"


def repair_snapshot(root: Path) -> Path | None:
    """Ray Train refuses to start from a snapshot that does not parse or that lists a checkpoint folder that is
    gone ("running in a corrupted run directory"). Move such a snapshot aside (the rerun then resumes from the
    newest good checkpoint folder instead) and return its new path; None when there was nothing to repair."""
    path = root / SNAPSHOT
    if not path.is_file():
        return None
    registered = _registered_checkpoints(root)
    if registered is not None and all((root / name).is_dir() for name in registered):
        return None
    aside = root / f".{SNAPSHOT}.unusable-{int(time.time())}"
    os.replace(path, aside)
    return aside


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
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from methodlab.core.device import thread_count

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
               "torch_threads": thread_count(sc.cpus_per_worker, sc.torch_threads), "resume_from": resume_from,
               "use_gpu": sc.use_gpu, "precision": sc.precision, "compile": sc.compile, "tf32": sc.tf32,
               # side files land in the run folder when the storage is a local path (a URI: a worker temp folder)
               "run_dir": None if "://" in str(storage) else str(Path(storage) / name)}
    return TorchTrainer(
        worker_loop,
        train_loop_config=payload,
        scaling_config=ScalingConfig(num_workers=sc.num_workers, use_gpu=sc.use_gpu, resources_per_worker=resources,
                                     placement_strategy=sc.placement_strategy),
        run_config=RunConfig(
            # Ray Train's experiment folder is the run folder's checkpoints/ (the README's layout, as --local)
            name=CHECKPOINTS_DIR, storage_path=run_folder(storage, name),
            # ray.train's own INFO lines (resources requested, worker group started, each checkpoint created)
            logging_config=LoggingConfig(log_level="WARNING"),
            checkpoint_config=CheckpointConfig(num_to_keep=ck.num_to_keep, checkpoint_score_attribute=ck.score_attribute,
                                               checkpoint_score_order=ck.score_order),
            # controller_failure_limit: a leaked placement group fails the run instead of hanging it.
            failure_config=FailureConfig(max_failures=job.run.max_failures, controller_failure_limit=controller_failure_limit),
            callbacks=list(callbacks),
        ),
    )


def run_folder(storage: str, name: str) -> str:
    """<storage>/<name> as a path or, for a URI storage, a URI."""
    from methodlab.runners.paths import is_uri

    return f"{storage.rstrip('/')}/{name}" if is_uri(storage) else str(Path(storage) / name)


class ReportFollower(threading.Thread):
    """The driver's progress bar for a Train run: follows the metrics.jsonl the controller's MetricsRecorder
    appends to (the same Progress as a --local run: bar, rate, time left, the key metric)."""

    def __init__(self, path: Path, progress, every_s: float = 0.25):
        super().__init__(name="methodlab-progress", daemon=True)
        self.path, self.progress, self.every = Path(path), progress, every_s
        self.offset = self.path.stat().st_size if self.path.exists() else 0  # rows of earlier runs are not news
        self.started_at, self.rows, self.run_t0 = time.time(), 0, progress.t0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            self.poll()
        self.poll()

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in chunk[: end + 1].decode("utf-8", "replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if self.rows == 0:  # start-up (Ray, the worker group) is over: rate and time left count from here
                self.progress.note(f"Ray Train workers reporting after {time.time() - self.started_at:.0f}s")
                pos = row.get("step", row.get("epoch"))
                if isinstance(pos, (int, float)):
                    self.progress.t0, self.progress.first_pos = time.time(), float(pos)
            self.rows += 1
            self.progress.update(row)

    def stop(self) -> None:
        """Stop following (after a last read); the bar's clock is the run's again (for "finished in ...")."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=2)
        self.progress.t0 = self.run_t0


def resume_point(run_dir: Path) -> Path | None:
    """The checkpoint a Train rerun of this folder starts from: the newest one Ray Train's snapshot lists (Ray
    restores that one, though a killed run may have left newer folders it never registered), else the newest
    good checkpoint folder of the run."""
    from methodlab.core.checkpoint import verify_checkpoint
    from methodlab.core.errors import CheckpointError

    root = Path(run_dir) / CHECKPOINTS_DIR
    try:
        latest = json.loads((root / SNAPSHOT).read_text()).get("latest_checkpoint_result") or {}
        name = latest.get("checkpoint_dir_name")
    except (OSError, ValueError, TypeError, AttributeError):
        name = None
    if name and (root / name).is_dir():
        try:
            verify_checkpoint(root / name)
            return root / name
        except CheckpointError:
            pass
    return latest_checkpoint(run_dir)


def _start_step(run_dir: Path) -> int:
    ckpt = resume_point(run_dir)
    try:
        return int(json.loads((ckpt / "state.json").read_text()).get("step", 0)) if ckpt else 0
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def stop_train_run(controllers: list, wait_s: float = 4.0) -> None:
    """After Ctrl-C: ask the Train controller to abort (it stops its workers; checkpoints already persisted
    stay), and kill it if that takes longer than `wait_s`."""
    import ray

    for controller in controllers:
        try:
            ray.get(controller.abort.remote(), timeout=wait_s)
        except BaseException:  # exits itself (RayActorError), timed out, or a second Ctrl-C: kill it below
            pass
        try:
            ray.kill(controller, no_restart=True)
        except BaseException:
            pass


def run_train(loaded, name: str, storage: str, *, address: str | None = None, quiet: bool = False,
              assume_shared_storage: bool = False, autoscaling: bool = False) -> RunResult:
    from methodlab.runners import tracking
    from methodlab.runners.paths import check_shared_storage, is_uri
    from methodlab.runners.progress import Progress
    from methodlab.runners.ray_session import check_cluster_gpus, controller_knows_its_cluster, init_ray

    init_ray(address, quiet=quiet)
    check_shared_storage(storage, assume_shared_storage)  # on a multi-node cluster, before any worker starts
    sc = loaded.job.scaling
    check_cluster_gpus((sc.gpus_per_worker or 1) if sc.use_gpu else 0, what="scaling.use_gpu: every worker",
                       field="scaling.use_gpu", autoscaling=autoscaling)
    spec = get_spec(loaded.job.method)
    cfg = loaded.config
    run_dir = Path(storage) / name
    local = not is_uri(storage)
    resume_from, run = None, None  # run: the run's RunLifecycle (local storage only; a URI has no run folder here)
    total = getattr(cfg, "max_steps", None) or getattr(cfg, "epochs", None)
    progress = Progress(spec.slug, type(cfg).primary_metric, quiet=quiet, total=total,
                        start=_start_step(run_dir) if local else 0)
    if local:
        # config check and job record (written by the controller's copy at the first report, with the row and the
        # tracker's log); Ray Train restores its own checkpoints, so the object looks for none
        run = RunLifecycle.open(loaded, name, storage, "train", slug=spec.slug, find_resume=False, track_now=False)
        aside = repair_snapshot(run_dir / CHECKPOINTS_DIR)
        if aside is not None:
            progress.note(f"warning: Ray Train's snapshot did not match the checkpoint folders (moved to {aside}); "
                          "resuming from the newest good checkpoint")
        found = latest_checkpoint(run_dir)  # the workers' start when Ray Train has no snapshot to restore from
        resume_from = str(found) if found else None
        start = resume_point(run_dir)
        if start is not None:
            progress.note(f"resuming from {start}")
    elif tracking.settings(loaded.job.tracking, spec.slug):
        tracking.warn_remote(storage)  # tracking needs the run folder for its run ids and event files
    callbacks = [MetricsRecorder(run)] if run is not None else []
    trainer = build_trainer(loaded, name, storage, callbacks=callbacks, resume_from=resume_from)
    controllers: list = []
    if hasattr(trainer, "_register_sigint_handler"):
        # Ray's own SIGINT handler waits on a graceful abort without a limit (138 s seen) and then exits 0 or 1;
        # ours below (KeyboardInterrupt) stops the run within seconds and exits 130 with a resume hint.
        trainer._register_sigint_handler = controllers.append
    follower = ReportFollower(run.metrics_file, progress) if run is not None and not progress.quiet else None
    if follower is not None:
        follower.start()
    try:
        with controller_knows_its_cluster():
            result = trainer.fit()
    except KeyboardInterrupt:
        if follower is not None:
            follower.stop()
        progress.done(ok=False)
        stop_train_run(controllers)
        if run is not None:  # stopped before its first report: as if it had not been started
            run.fail("KILLED")
        raise
    except BaseException:
        if follower is not None:
            follower.stop()
        progress.done(ok=False)
        if run is not None:
            run.fail()
        raise
    if follower is not None:
        follower.stop()
    progress.done()
    final = dict(result.metrics or {})
    if run is None:
        return RunResult(run_dir=str(run_dir), metrics=final, summary=None,
                         checkpoint=result.checkpoint.path if result.checkpoint else None)
    # job.yaml again, as the controller wrote it at the first report (also for a fit that never reported)
    return run.close(final, Path(result.checkpoint.path) if result.checkpoint else latest_checkpoint(run_dir))
