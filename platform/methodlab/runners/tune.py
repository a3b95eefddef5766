"""The tune runner: Ray Tune with Optuna (seeded) and ASHA over a search_spaces/ file.

Single-worker trials are plain function trainables (no Train worker group: ~20 s cheaper per trial on
small machines), on a GPU share when the space's `trial_resources.gpu` (or the base job's use_gpu) asks
for one: four trials at gpu 0.25 share one GPU. Multi-worker trials are a 0.01-CPU driver that builds a
TorchTrainer named after the trial id (stable across retries and `tune resume`) and forwards its reports
to Tune.

A function trial records its reports through runners/lifecycle.py (RunLifecycle.recorder, its REPORTS_DIR file);
Tune owns the rest of the trial (result.json, checkpoints, resume), and the sweep's summary is written from Tune's
results (results.write_sweep_summary); see lifecycle.py's docstring for who does what."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

import yaml

from methodlab.core import RunContext
from methodlab.core.overrides import apply_overrides, deep_merge
from methodlab.core.registry import get_spec

SWEEP_RECORD = "sweep.yaml"
# Every report of a function trial, appended by the trial itself to <sweep>/trial_reports/<trial id>.jsonl
# before tune.report (local or shared storage only). A trial whose node is lost can have its last checkpoint
# persisted and used for the retry while its result never reached the sweep's driver (measured: step 500
# missing from result.json, the retry resumed at 550); history.parquet fills such gaps from this file.
REPORTS_DIR = "trial_reports"


def _dist(param):
    from ray import tune

    kind = param.kind
    if kind == "loguniform":
        return tune.loguniform(*param.loguniform)
    if kind == "uniform":
        return tune.uniform(*param.uniform)
    if kind == "randint":
        return tune.randint(param.randint[0], param.randint[1] + 1)  # inclusive upper bound in the YAML
    return tune.choice(param.choice if kind == "choice" else param.grid)


def _trial_config(payload: dict, params: dict):
    spec = get_spec(payload["method"])
    data = deep_merge(payload["config"], apply_overrides({}, {k: params[k] for k in payload["params"] if k in params}))
    return spec, spec.config_cls().model_validate(data)


def function_trial(params: dict, payload: dict) -> None:
    """A trial in this worker process: fit() with reports and checkpoints going to Tune."""
    import torch
    from ray import tune

    import ray

    from methodlab.core.device import resolve_device, set_tf32, set_threads
    from methodlab.runners.lifecycle import RunLifecycle

    spec, cfg = _trial_config(payload, params)
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # one "checkpoint created" line per report otherwise
    set_threads(payload.get("torch_threads"))
    # cuda when the trial holds a GPU share (Ray sets CUDA_VISIBLE_DEVICES to it); a share torch cannot see fails
    device = resolve_device(payload.get("trial_gpu", 0) > 0, where="trial_resources.gpu", gpu_ids=ray.get_gpu_ids())
    if device.type == "cuda":
        torch.cuda.set_device(device)
        set_tf32(payload.get("tf32", False))
    ckpt = tune.get_checkpoint()
    resume = Path(ckpt.to_directory()) if ckpt is not None else None
    # the trial's own record of its reports (see REPORTS_DIR); Tune keeps result.json and the checkpoints
    reports = (RunLifecycle.recorder(Path(payload["reports_dir"]) / f"{tune.get_context().get_trial_id()}.jsonl")
               if payload.get("reports_dir") else None)

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        if reports is not None:  # before Tune sees it: see REPORTS_DIR
            reports.report(metrics)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(ckpt_dir)) if ckpt_dir else None)

    trial_dir = tune.get_context().get_trial_dir()
    ctx = RunContext(seed=cfg.seed, checkpoint=resume, report_fn=report, device=device,
                     run_dir=Path(trial_dir) if trial_dir and "://" not in str(trial_dir) else None,
                     precision=payload.get("precision", "fp32"), compile=payload.get("compile", False))
    spec.fit_fn(payload["setting"])(cfg, ctx)


def driver_trial(params: dict, payload: dict) -> None:
    """A multi-worker trial: a TorchTrainer whose reports reach Tune through Train's Tune callback."""
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from methodlab.runners.train import build_trainer
    from methodlab.specs.files import LoadedJob
    from methodlab.specs.job import JobFile

    _, cfg = _trial_config(payload, params)
    job = JobFile.model_validate(payload["job"])
    trial_id = tune.get_context().get_trial_id()
    from methodlab.runners.ray_session import controller_knows_its_cluster

    trainer = build_trainer(LoadedJob(None, job, cfg), f"train-{trial_id}", payload["train_storage"],
                            callbacks=[TuneReportCallback()])
    with controller_knows_its_cluster():  # its PlacementGroupCleaner asks this cluster, not "the" Ray of the machine
        trainer.fit()


def recording_asha(log_path: str | None, **kwargs):
    """ASHA that appends each early stop (trial id, time attribute) to the sweep folder: Tune marks the
    last result of a stopped trial `done` just like a finished one, so the decision is recorded here."""
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    class RecordingASHA(ASHAScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            decision = super().on_trial_result(tune_controller, trial, result)
            t = result.get(self._time_attr)
            if log_path and decision == TrialScheduler.STOP and isinstance(t, (int, float)) and t < self._max_t:
                with open(log_path, "a") as fh:
                    fh.write(json.dumps({"trial_id": trial.trial_id, "at": t}) + "\n")
            return decision

    return RecordingASHA(**kwargs)


def sweep_tracking(loaded_space) -> dict | None:
    """The search space's `tracking` block, or else its base job's."""
    from methodlab.runners.tracking import settings

    block = loaded_space.space.tracking or loaded_space.base.job.tracking
    return settings(block, loaded_space.base.job.method)


def build_callbacks(loaded_space, name: str, storage: str, quiet: bool) -> list:
    from methodlab.runners.paths import is_uri
    from methodlab.runners.progress import tune_console
    from methodlab.runners.tracking import tune_callback

    space = loaded_space.space
    callbacks = [] if quiet else [tune_console(loaded_space.metric, space.scheduler.time_attr, list(space.params),
                                              str(Path(storage) / name), space.num_samples)]
    track = sweep_tracking(loaded_space)
    if track and is_uri(storage):
        from methodlab.runners.tracking import warn_remote

        warn_remote(storage)
    elif track:  # run ids and event files live in the sweep folder
        callbacks.append(tune_callback(track, str(Path(storage) / name), name, loaded_space.metric,
                                       space.model_dump(mode="json")["params"], loaded_space.base.job.method))
    return callbacks


def sweep_checkpoint_config(loaded_space):
    """A trial keeps every checkpoint it reports (Ray's default; the base job's `run.checkpoint` applies to
    `methodlab run`). With num_to_keep = K, Tune forces an experiment-state snapshot each time a trial has
    checkpointed K times: short trials that checkpoint every second or two (the demo sweep) then force
    several snapshots in 5 s ("snapshotting has been triggered multiple times ... may become a
    bottleneck"), and each forced snapshot waits for the sync. Checkpoints per trial are set by the
    method's `checkpoint_every` (a space can raise it in its `config:`); ASHA stops most trials early."""
    from ray import tune

    return tune.CheckpointConfig(num_to_keep=None, checkpoint_score_attribute=loaded_space.metric,
                                 checkpoint_score_order=loaded_space.mode)


def build_tuner(loaded_space, name: str, storage: str, *, restore: bool = False, quiet: bool = False):
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    from methodlab.core.device import thread_count
    from methodlab.runners.paths import is_uri
    from methodlab.runners.results import EARLY_STOPS

    space = loaded_space.space
    base = loaded_space.base
    job = base.job
    multi = job.scaling.num_workers > 1
    res = trial_resources(loaded_space)
    payload = {"method": job.method, "setting": job.setting, "params": list(space.params),
               "config": deep_merge(job.config, space.config),
               "torch_threads": thread_count(res["cpu"], space.trial_resources.torch_threads),
               "trial_gpu": res["gpu"], "precision": job.scaling.precision, "compile": job.scaling.compile,
               "tf32": job.scaling.tf32, "job": job.model_dump(mode="json"),
               "train_storage": str(Path(storage) / name / "train_runs"),
               "reports_dir": None if is_uri(storage) else str(Path(storage) / name / REPORTS_DIR)}
    if multi:
        trainable = tune.with_resources(tune.with_parameters(driver_trial, payload=payload), {"cpu": 0.01})
    else:
        trainable = tune.with_resources(tune.with_parameters(function_trial, payload=payload), res)
    run_config = tune.RunConfig(
        name=name, storage_path=storage,
        failure_config=tune.FailureConfig(max_failures=space.max_failures),
        checkpoint_config=sweep_checkpoint_config(loaded_space),
        # Tune's own output lists every metric of every trial; our console callback shows the key ones.
        verbose=0,
        callbacks=build_callbacks(loaded_space, name, storage, quiet),
    )
    if restore:
        return tune.Tuner.restore(str(Path(storage) / name), trainable=trainable, resume_errored=True)
    if space.search_alg.type == "optuna":
        search_alg = OptunaSearch(metric=loaded_space.metric, mode=loaded_space.mode, seed=space.search_alg.seed,
                                  points_to_evaluate=space.search_alg.points_to_evaluate or None)
    else:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        search_alg = BasicVariantGenerator(points_to_evaluate=space.search_alg.points_to_evaluate or None,
                                           random_state=space.search_alg.seed)
    sch = space.scheduler
    stops_log = None if is_uri(storage) else str(Path(storage) / name / EARLY_STOPS)
    scheduler = (recording_asha(stops_log, time_attr=sch.time_attr,
                                grace_period=sch.grace_period, max_t=sch.max_t, reduction_factor=sch.reduction_factor)
                 if sch.type == "asha" else FIFOScheduler())
    return tune.Tuner(
        trainable,
        param_space={k: _dist(p) for k, p in space.params.items()},
        tune_config=tune.TuneConfig(metric=loaded_space.metric, mode=loaded_space.mode, num_samples=space.num_samples,
                                    max_concurrent_trials=space.max_concurrent_trials, search_alg=search_alg,
                                    scheduler=scheduler,
                                    # a single-worker trial is a function in a 1-CPU actor: keep the actor (its
                                    # imported Ray, Tune, torch and method) for the next trial instead of
                                    # starting a process per trial (launch -> first report 3.5 s -> 0.04 s,
                                    # benchmarks/tune_overhead.py). fit() seeds and builds everything per trial.
                                    reuse_actors=not multi),
        run_config=run_config,
    )


def trial_resources(loaded_space) -> dict:
    """CPU and GPU of one single-worker trial: the space's trial_resources; a base job with use_gpu and no
    gpu share in the space gets its gpus_per_worker (default a whole GPU)."""
    tr, sc = loaded_space.space.trial_resources, loaded_space.base.job.scaling
    gpu = tr.gpu if tr.gpu > 0 else ((sc.gpus_per_worker or 1.0) if sc.use_gpu else 0.0)
    return {"cpu": tr.cpu, "gpu": gpu}


def check_sweep_gpus(loaded_space, autoscaling: bool = False) -> None:
    """A sweep whose trials need GPUs on a cluster that has none is refused before any trial (not left
    pending forever)."""
    from methodlab.runners.ray_session import check_cluster_gpus

    sc = loaded_space.base.job.scaling
    if sc.num_workers > 1:
        check_cluster_gpus((sc.gpus_per_worker or 1) if sc.use_gpu else 0, what="the base job's scaling.use_gpu: "
                           "every Train worker", field="scaling.use_gpu", autoscaling=autoscaling)
    else:
        check_cluster_gpus(trial_resources(loaded_space)["gpu"], what="trial_resources.gpu: every trial",
                           field="trial_resources.gpu", autoscaling=autoscaling)


@contextlib.contextmanager
def legacy_output():
    """Ray 2.60's default output engine prints its own banner and tables even at verbose=0; the legacy
    engine at verbose=0 prints nothing, which leaves the console to our key-metrics callback."""
    old = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RAY_AIR_NEW_OUTPUT", None)
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = old


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep; its state and the trials' checkpoints are saved in `sweep_dir`."""

    def __init__(self, sweep_dir: str):
        super().__init__(sweep_dir)
        self.sweep_dir = sweep_dir


@contextlib.contextmanager
def stop_on_sigint(say, force_after_s: float = 6.0):
    """Ctrl-C during tuner.fit(): Tune's own graceful stop (trials stopped, experiment state and every trial
    checkpoint saved, `tune resume` continues), reached through SIGUSR1, which Tune handles as it handles
    SIGINT; Tune's SIGINT handler itself is switched off so that the interruption is known here (Tune returns
    a normal-looking result after it). If that stop takes more than `force_after_s`, or on a second Ctrl-C,
    KeyboardInterrupt ends the wait (the sweep state saved at the stop's start stays). Yields a dict whose
    "interrupted" says whether it happened. A no-op outside the main thread."""
    import signal
    import threading

    state = {"interrupted": False}
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
        yield state
        return
    previous = signal.getsignal(signal.SIGINT)
    old_env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    timer: list = []

    def handler(signum, frame):
        if state["interrupted"] or signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise KeyboardInterrupt  # again, the deadline, or Tune not listening yet: stop waiting
        state["interrupted"] = True
        # Tune's own lines ("Press CTRL+C ... to skip", "Resume experiment with: Tuner.restore(...)") name its API,
        # not the command: the CLI prints `methodlab tune resume DIR` instead
        logging.getLogger("ray.tune.tune").setLevel(logging.ERROR)
        say("interrupted: stopping the trials and saving the sweep state (Ctrl-C again to stop at once)")
        t = threading.Timer(force_after_s, os.kill, (os.getpid(), signal.SIGINT))
        t.daemon = True
        t.start()
        timer.append(t)
        os.kill(os.getpid(), signal.SIGUSR1)

    signal.signal(signal.SIGINT, handler)
    try:
        yield state
    finally:
        for t in timer:
            t.cancel()
        signal.signal(signal.SIGINT, previous)
        if old_env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = old_env


def run_tune(loaded_space, name: str, storage: str, *, address: str | None = None, quiet: bool = False,
             restore: bool = False, assume_shared_storage: bool = False, autoscaling: bool = False) -> dict:
    from methodlab.runners.paths import check_shared_storage
    from methodlab.runners.ray_session import init_ray
    from methodlab.runners.results import read_early_stops, write_sweep_summary

    init_ray(address, quiet=quiet)
    check_shared_storage(storage, assume_shared_storage)  # on a multi-node cluster, before any trial starts
    check_sweep_gpus(loaded_space, autoscaling)
    sweep_dir = Path(storage) / name
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not restore:
        record = {"search_space": str(loaded_space.path.resolve()), "name": name, "storage": storage,
                  "metric": loaded_space.metric, "mode": loaded_space.mode,
                  "space": loaded_space.space.model_dump(mode="json"),
                  "base_job": {**loaded_space.base.job.model_dump(mode="json")},
                  "tracking": sweep_tracking(loaded_space)}
        (sweep_dir / SWEEP_RECORD).write_text(yaml.safe_dump(record, sort_keys=False))
    tuner = build_tuner(loaded_space, name, storage, restore=restore, quiet=quiet)

    def say(text: str) -> None:
        import sys

        print(f"[tune] {text}", file=sys.stderr, flush=True)

    with legacy_output(), stop_on_sigint(say) as stop:
        grid = tuner.fit()
    if stop["interrupted"]:
        raise SweepInterrupted(str(sweep_dir))
    table = write_sweep_summary(sweep_dir, loaded_space.base.job.method, grid, loaded_space.metric, loaded_space.mode,
                                list(loaded_space.space.params), early_stops=read_early_stops(sweep_dir),
                                reports_dir=sweep_dir / REPORTS_DIR)
    # the store resolved at the start (a resume from another directory must close the same parent run)
    track = (yaml.safe_load((sweep_dir / SWEEP_RECORD).read_text()) or {}).get("tracking")
    if track and track.get("mlflow"):
        from methodlab.runners.report_html import build_report
        from methodlab.runners.tracking import finish_sweep

        finish_sweep(track, sweep_dir, name, table, build_report(sweep_dir))
    best = table.iloc[0].to_dict() if len(table) else {}
    return {"sweep_dir": str(sweep_dir), "best": best, "num_trials": len(table),
            "errors": int((table["status"] == "ERROR").sum()) if len(table) else 0}


def resume_tune(sweep_dir: str | Path, *, address: str | None = None, quiet: bool = False,
                assume_shared_storage: bool = False, autoscaling: bool = False) -> dict:
    """Finish an interrupted sweep from its folder alone: the search space and base job recorded at
    start are re-validated, then Tune restores its own state (finished trials are not repeated)."""
    from methodlab.core.errors import MethodlabError
    from methodlab.specs.files import load_search_space

    sweep_dir = Path(sweep_dir).resolve()
    record_path = sweep_dir / SWEEP_RECORD
    if not record_path.exists():
        raise MethodlabError(f"{record_path}: not found; `tune resume` takes a folder written by `methodlab tune`")
    rec = yaml.safe_load(record_path.read_text())
    loaded = load_search_space(record_path, raw=rec["space"], base_raw=rec["base_job"])
    return run_tune(loaded, rec["name"], rec["storage"], address=address, quiet=quiet, restore=True,
                    assume_shared_storage=assume_shared_storage, autoscaling=autoscaling)
