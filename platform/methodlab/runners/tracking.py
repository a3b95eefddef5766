"""MLflow and TensorBoard logging for runs and sweeps, always from one process (the local runner, the
Train controller, or the Tune driver), so distributed runs log rank 0's metrics once.

Run ids live in `<run or sweep folder>/tracking.json`: resuming a run or a sweep reopens the same
MLflow runs instead of creating new ones. Everything a tracker needs travels as a plain dict
(`settings(...)`), because Ray pickles callbacks into tuner.pkl and into the Train controller."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

IDS_FILE = "tracking.json"
# Tune's own bookkeeping keys: not method metrics, never logged as curves.
TUNE_KEYS = {"time_this_iter_s", "time_total_s", "timestamp", "pid", "time_since_restore", "iterations_since_restore",
             "training_iteration", "done", "date", "hostname", "node_ip", "trial_id", "experiment_tag", "config",
             "checkpoint_dir_name", "should_checkpoint", "experiment_id"}


def resolve_uri(uri: str | None, cwd: str | Path | None = None) -> tuple[str, str | None]:
    """(tracking URI, artifact root or None). Precedence: the file's `uri` > MLFLOW_TRACKING_URI >
    ./mlruns. A plain folder becomes an SQLite store inside it (MLflow >= 3.13 refuses bare folder
    stores unless MLFLOW_ALLOW_FILE_STORE=true), with artifacts next to the database."""
    raw = uri or os.environ.get("MLFLOW_TRACKING_URI") or "mlruns"
    if "://" in raw or raw.startswith(("sqlite:", "databricks")):
        if raw.startswith("sqlite:///"):
            db = Path(raw.removeprefix("sqlite:///"))
            if not db.is_absolute():  # Tune trials change directory: pin it now, in the driver
                db = (Path(cwd or os.getcwd()) / db).resolve()
            return f"sqlite:///{db}", (db.parent / "artifacts").as_uri()
        return raw, None
    folder = (Path(cwd or os.getcwd()) / Path(raw).expanduser()).resolve()
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


def settings(tracking, experiment: str, cwd: str | Path | None = None) -> dict | None:
    """The job's / search space's `tracking` block -> a picklable dict, or None when both are off."""
    if tracking is None or not (tracking.mlflow or tracking.tensorboard):
        return None
    out: dict[str, Any] = {"mlflow": tracking.mlflow, "tensorboard": tracking.tensorboard,
                           "experiment": tracking.experiment or experiment}
    if tracking.mlflow:
        out["uri"], out["artifacts"] = resolve_uri(tracking.uri, cwd)
    return out


def warn_remote(storage: str) -> None:
    """Run ids and event files live in the run folder, so remote storage runs untracked: say so."""
    import warnings

    warnings.warn(f"tracking is on but storage {storage} is not a local folder: MLflow / TensorBoard logging is "
                  "skipped (use a local or shared-filesystem storage_path)", stacklevel=2)


def numeric(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("_") and k not in TUNE_KEYS
            and math.isfinite(float(v))}


def step_of(metrics: dict, fallback: int) -> int:
    for key in ("step", "epoch", "training_iteration"):
        if isinstance(metrics.get(key), (int, float)):
            return int(metrics[key])
    return fallback


class IdStore:
    """tracking.json of one run or sweep folder: {"run": id, "trials": {trial_id: id}}."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / IDS_FILE

    def read(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, key: str) -> str | None:
        data = self.read()
        return data.get("trials", {}).get(key) if key != "run" else data.get("run")

    def put(self, key: str, run_id: str) -> None:
        data = self.read()
        if key == "run":
            data["run"] = run_id
        else:
            data.setdefault("trials", {})[key] = run_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)


def _client(cfg: dict):
    import logging

    from mlflow.tracking import MlflowClient

    # Its schema migration logs a dozen INFO lines on first use of a new SQLite store.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    if cfg["uri"].startswith("sqlite:///"):
        Path(cfg["uri"].removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=cfg["uri"])


def _experiment_id(client, cfg: dict) -> str:
    exp = client.get_experiment_by_name(cfg["experiment"])
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(cfg["experiment"], artifact_location=cfg.get("artifacts"))
    except Exception:  # created meanwhile by another process
        return client.get_experiment_by_name(cfg["experiment"]).experiment_id


def _params(params: dict) -> dict[str, str]:
    out = {}
    for k, v in params.items():
        s = json.dumps(v) if isinstance(v, (list, dict, tuple)) else str(v)
        out[str(k)[:250]] = s[:6000]  # MLflow's key / value limits
    return out


class RunTracker:
    """One MLflow run and/or one TensorBoard log folder. `key` names it in tracking.json."""

    def __init__(self, cfg: dict, ids_folder: str | Path, key: str, name: str, *, tb_dir: str | Path | None = None,
                 params: dict | None = None, tags: dict | None = None, parent_id: str | None = None):
        self.cfg, self.key = cfg, key
        self.client = self.run_id = self.writer = None
        self.n = 0
        if cfg.get("mlflow"):
            from mlflow.entities import RunStatus

            self.client = _client(cfg)
            store = IdStore(ids_folder)
            self.run_id = store.get(key)
            if self.run_id is not None:
                try:  # reopen: a resumed run continues the same MLflow run
                    self.client.update_run(self.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
                except Exception:
                    self.run_id = None  # the store was wiped; start a new run and remember it
            if self.run_id is None:
                all_tags = {"methodlab.key": key, **(tags or {})}
                if parent_id:
                    all_tags["mlflow.parentRunId"] = parent_id
                run = self.client.create_run(_experiment_id(self.client, cfg), run_name=name,
                                             tags={k: str(v) for k, v in all_tags.items()})
                self.run_id = run.info.run_id
                store.put(key, self.run_id)
                if params:
                    self.log_params(params)
        if cfg.get("tensorboard") and tb_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(tb_dir))

    def log_params(self, params: dict) -> None:
        if self.client is None or not params:
            return
        from mlflow.entities import Param

        items = list(_params(params).items())
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            try:
                self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i:i + 100]])
            except Exception:
                pass  # a resumed run re-logging a param with a new value: keep the first

    def log(self, metrics: dict, step: int | None = None) -> None:
        values = numeric(metrics)
        step = step_of(metrics, self.n) if step is None else step
        self.n += 1
        if self.client is not None and values:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            items = [Metric(k, v, now, step) for k, v in values.items()]
            for i in range(0, len(items), 1000):
                self.client.log_batch(self.run_id, metrics=items[i:i + 1000])
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def set_tag(self, key: str, value: Any) -> None:
        if self.client is not None and value is not None:
            self.client.set_tag(self.run_id, key, str(value)[:5000])

    def log_artifact(self, path: str | Path, subdir: str | None = None) -> None:
        if self.client is not None and path and Path(path).exists():
            self.client.log_artifact(self.run_id, str(path), subdir)

    def finish(self, final: dict | None = None, status: str = "FINISHED") -> None:
        if self.client is not None:
            if final:
                self.log({f"final/{k}": v for k, v in numeric(final).items()}, step=step_of(final, self.n))
            self.client.set_terminated(self.run_id, status=status)
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def plot_history(rows: list[dict], metrics: list[str], out: Path, title: str = "") -> Path | None:
    """A small learning-curve PNG of one run (a tracked artifact)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [m for m in metrics if any(isinstance(r.get(m), (int, float)) for r in rows)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        pts = [(step_of(r, i), r[key]) for i, r in enumerate(rows) if isinstance(r.get(key), (int, float))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", lw=1.2)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def curve_keys(primary: str, rows: list[dict], limit: int = 4) -> list[str]:
    seen = list(dict.fromkeys(k for r in rows for k in numeric(r) if k not in ("step", "epoch")))
    return list(dict.fromkeys([primary] + seen))[:limit]


# ---------------------------------------------------------------------------------------------------
# A single run (local runner in-process; Train V2 through its controller callback)


def open_run(cfg: dict | None, run_dir: Path, name: str, method: str, config: dict) -> RunTracker | None:
    if not cfg:
        return None
    return RunTracker(cfg, run_dir, "run", name, tb_dir=run_dir / "tensorboard", params=config,
                      tags={"methodlab.method": method, "methodlab.run_dir": str(run_dir)})


def finish_run(cfg: dict | None, run_dir: Path, name: str, primary: str, final: dict, checkpoint,
               status: str = "FINISHED", tracker: RunTracker | None = None) -> None:
    """Close a run's MLflow run from the driver: final metrics, checkpoint path, curves artifact."""
    if not cfg or not cfg.get("mlflow"):
        if tracker is not None:
            tracker.finish(status=status)
        return
    from methodlab.runners.results import read_history_jsonl

    if tracker is None:  # Train: the controller logged the curves; reopen the same run by its id
        tracker = RunTracker({**cfg, "tensorboard": False}, run_dir, "run", name)
    rows = read_history_jsonl(run_dir / "metrics.jsonl")
    tracker.set_tag("checkpoint", checkpoint)
    png = plot_history(rows, curve_keys(primary, rows), run_dir / "curves_run.png", name)
    tracker.log_artifact(png, "plots")
    tracker.finish(final, status)


# ---------------------------------------------------------------------------------------------------
# A sweep: the Tune driver's callback


def tune_callback(cfg: dict, sweep_dir: str, sweep_name: str, primary: str, space_params: dict, method: str):
    """A ray.tune.Callback: one parent MLflow run for the sweep and one nested run per trial."""
    from ray import tune

    class SweepTracking(tune.Callback):
        def __init__(self):
            self.cfg, self.sweep_dir, self.sweep_name, self.primary = cfg, sweep_dir, sweep_name, primary
            self.space_params, self.method = space_params, method
            self._live: dict = {}

        def __getstate__(self):  # Tune pickles callbacks into tuner.pkl: keep only the settings
            state = dict(self.__dict__)
            state["_live"] = {}
            return state

        def _parent(self) -> RunTracker | None:
            if "parent" not in self._live:
                self._live["parent"] = RunTracker(
                    {**self.cfg, "tensorboard": False}, self.sweep_dir, "run", self.sweep_name,
                    params={f"space/{k}": v for k, v in self.space_params.items()},
                    tags={"methodlab.method": self.method, "methodlab.sweep_dir": self.sweep_dir,
                          "methodlab.metric": self.primary})
            return self._live["parent"]

        def _trial(self, trial) -> RunTracker:
            key = trial.trial_id
            if key not in self._live:
                parent = self._parent()
                self._live[key] = RunTracker(
                    self.cfg, self.sweep_dir, key, key, tb_dir=Path(self.sweep_dir) / "tensorboard" / key,
                    params=dict(trial.config or {}), parent_id=parent.run_id,
                    tags={"methodlab.trial_id": key, "methodlab.method": self.method})
                self._live[key].rows = []
            return self._live[key]

        def setup(self, **info):
            self._parent()

        def on_trial_start(self, iteration, trials, trial, **info):
            self._trial(trial)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            tr = self._trial(trial)
            tr.rows.append({k: v for k, v in result.items() if isinstance(v, (int, float))})
            tr.log(result)

        def _close(self, trial, status: str):
            tr = self._trial(trial)
            last = dict(trial.last_result or {})
            ckpt = getattr(trial.checkpoint, "path", None) if trial.checkpoint else last.get("checkpoint_path")
            tr.set_tag("checkpoint", ckpt)
            from methodlab.runners.results import read_early_stops

            stops = read_early_stops(self.sweep_dir)
            tr.set_tag("methodlab.stopped_by_scheduler", trial.trial_id in stops)
            if trial.trial_id in stops:
                tr.set_tag("methodlab.stopped_at", stops[trial.trial_id])
            if tr.client is not None and tr.rows:
                png = plot_history(tr.rows, curve_keys(self.primary, tr.rows),
                                   Path(self.sweep_dir) / "plots" / f"{trial.trial_id}.png", trial.trial_id)
                tr.log_artifact(png, "plots")
            tr.finish(last, status)
            self._live.pop(trial.trial_id, None)

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._close(trial, "FINISHED")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._close(trial, "FAILED")

    return SweepTracking()


def finish_sweep(cfg: dict | None, sweep_dir: Path, sweep_name: str, table, report: Path | None) -> None:
    """Close the parent run after the summary exists: best trial, summary and report as artifacts."""
    if not cfg or not cfg.get("mlflow"):
        return
    parent = RunTracker({**cfg, "tensorboard": False}, sweep_dir, "run", sweep_name)
    if len(table):
        best = table.iloc[0]
        parent.set_tag("best_trial", best.get("trial_id"))
        parent.set_tag("best_checkpoint", best.get("checkpoint"))
        val = best.get("checkpoint_metric")
        if isinstance(val, (int, float)) and math.isfinite(float(val)):
            parent.log({f"best/{best.get('metric')}": float(val)}, step=0)
    parent.log_artifact(sweep_dir / "summary.parquet")
    if report is not None:
        parent.log_artifact(report)
        for png in sorted((report.parent / "report_files").glob("*.png")) if (report.parent / "report_files").exists() else []:
            parent.log_artifact(png, "plots")
    parent.finish(status="FINISHED")
