"""The tune runner: Ray Tune with Optuna (seeded) and ASHA over a search_spaces/ file.

Single-worker CPU trials are plain function trainables (no Train worker group: ~20 s cheaper per
trial on small machines). Multi-worker or GPU trials are a 0.01-CPU driver that builds a TorchTrainer
named after the trial id (stable across retries and `tune resume`) and forwards its reports to Tune."""

from __future__ import annotations

from pathlib import Path

import yaml

from methodlab.core import RunContext
from methodlab.core.overrides import apply_overrides, deep_merge
from methodlab.core.registry import get_spec

SWEEP_RECORD = "sweep.yaml"


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

    spec, cfg = _trial_config(payload, params)
    if payload.get("torch_threads"):
        torch.set_num_threads(payload["torch_threads"])
    ckpt = tune.get_checkpoint()
    resume = Path(ckpt.to_directory()) if ckpt is not None else None

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(ckpt_dir)) if ckpt_dir else None)

    ctx = RunContext(seed=cfg.seed, checkpoint=resume, report_fn=report)
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
    trainer = build_trainer(LoadedJob(None, job, cfg), f"train-{trial_id}", payload["train_storage"],
                            callbacks=[TuneReportCallback()])
    trainer.fit()


def build_tuner(loaded_space, name: str, storage: str, *, restore: bool = False, quiet: bool = False):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    space = loaded_space.space
    base = loaded_space.base
    job = base.job
    multi = job.scaling.num_workers > 1 or job.scaling.use_gpu
    payload = {"method": job.method, "setting": job.setting, "params": list(space.params),
               "config": deep_merge(job.config, space.config),
               "torch_threads": space.trial_resources.torch_threads, "job": job.model_dump(mode="json"),
               "train_storage": str(Path(storage) / name / "train_runs")}
    if multi:
        trainable = tune.with_resources(tune.with_parameters(driver_trial, payload=payload), {"cpu": 0.01})
    else:
        res = {"cpu": space.trial_resources.cpu, "gpu": space.trial_resources.gpu}
        trainable = tune.with_resources(tune.with_parameters(function_trial, payload=payload), res)
    run_config = tune.RunConfig(
        name=name, storage_path=storage,
        failure_config=tune.FailureConfig(max_failures=space.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=loaded_space.metric,
                                                checkpoint_score_order=loaded_space.mode),
        verbose=0 if quiet else 1,
        progress_reporter=None if quiet else _reporter(loaded_space),
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
    scheduler = (ASHAScheduler(time_attr=sch.time_attr, grace_period=sch.grace_period, max_t=sch.max_t,
                               reduction_factor=sch.reduction_factor)
                 if sch.type == "asha" else FIFOScheduler())
    return tune.Tuner(
        trainable,
        param_space={k: _dist(p) for k, p in space.params.items()},
        tune_config=tune.TuneConfig(metric=loaded_space.metric, mode=loaded_space.mode, num_samples=space.num_samples,
                                    max_concurrent_trials=space.max_concurrent_trials, search_alg=search_alg,
                                    scheduler=scheduler),
        run_config=run_config,
    )


def _reporter(loaded_space):
    from ray import tune

    metrics = {loaded_space.metric: loaded_space.metric.split("/")[-1], loaded_space.space.scheduler.time_attr: "t"}
    return tune.CLIReporter(metric_columns=metrics, parameter_columns=list(loaded_space.space.params),
                            max_report_frequency=15)


def run_tune(loaded_space, name: str, storage: str, *, address: str | None = None, quiet: bool = False,
             restore: bool = False) -> dict:
    from methodlab.runners.ray_session import init_ray
    from methodlab.runners.results import write_sweep_summary

    init_ray(address, quiet=quiet)
    sweep_dir = Path(storage) / name
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not restore:
        record = {"search_space": str(loaded_space.path.resolve()), "name": name, "storage": storage,
                  "metric": loaded_space.metric, "mode": loaded_space.mode,
                  "space": loaded_space.space.model_dump(mode="json"),
                  "base_job": {**loaded_space.base.job.model_dump(mode="json")}}
        (sweep_dir / SWEEP_RECORD).write_text(yaml.safe_dump(record, sort_keys=False))
    tuner = build_tuner(loaded_space, name, storage, restore=restore, quiet=quiet)
    grid = tuner.fit()
    table = write_sweep_summary(sweep_dir, loaded_space.base.job.method, grid, loaded_space.metric, loaded_space.mode,
                                list(loaded_space.space.params))
    best = table.iloc[0].to_dict() if len(table) else {}
    return {"sweep_dir": str(sweep_dir), "best": best, "num_trials": len(table),
            "errors": int((table["status"] == "ERROR").sum()) if len(table) else 0}


def resume_tune(sweep_dir: str | Path, *, address: str | None = None, quiet: bool = False) -> dict:
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
    return run_tune(loaded, rec["name"], rec["storage"], address=address, quiet=quiet, restore=True)
