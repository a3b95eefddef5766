"""Tracking and results end to end: a real 3-trial sweep (Optuna + ASHA) with MLflow (SQLite store in a
tmp folder) and TensorBoard on; nested runs match the Tune trials one to one, curves read back with
TensorBoard's own event reader, `methodlab results` writes report.html and headless Chromium renders it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from methodlab.specs.files import load_job, load_search_space

pytestmark = pytest.mark.ray
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if shutil.os.path.exists("/usr/bin/chromium") else None)
MAX_T = 150


def _client(uri_folder):
    from mlflow.tracking import MlflowClient

    from methodlab.runners.tracking import resolve_uri

    return MlflowClient(resolve_uri(str(uri_folder))[0])


def _smoke():
    from methodlab.methods.grokking_flatness.config import Config

    return dict(Config.smoke)


@pytest.fixture(scope="module")
def sweep(ray_cluster, tmp_path_factory, repo):
    from methodlab.runners.tune import run_tune

    tmp = tmp_path_factory.mktemp("tracking")
    space = {"base_job": str(repo / "jobs/grokking_flatness/cpu.yaml"), "num_samples": 3, "max_concurrent_trials": 2,
             "trial_resources": {"cpu": 1, "torch_threads": 1},
             "config": {**_smoke(), "max_steps": MAX_T, "log_every": 50, "checkpoint_every": 50},
             "search_alg": {"type": "optuna", "seed": 0},
             "scheduler": {"type": "asha", "time_attr": "step", "grace_period": 50, "max_t": MAX_T, "reduction_factor": 2},
             "tracking": {"mlflow": True, "tensorboard": True, "uri": str(tmp / "mlruns"), "experiment": "trk"},
             "params": {"lr": {"loguniform": [1e-3, 1e-2]}, "reg": {"choice": ["none", "collapse_encourage"]}}}
    (tmp / "space.yaml").write_text(yaml.safe_dump(space))
    out = run_tune(load_search_space(tmp / "space.yaml"), "sweep", str(tmp / "store"), quiet=True)
    assert out["errors"] == 0
    return tmp, tmp / "store" / "sweep"


def _children(client, sweep_dir):
    ids = json.loads((sweep_dir / "tracking.json").read_text())
    exp = client.get_experiment_by_name("trk").experiment_id
    parent = client.get_run(ids["run"])
    kids = client.search_runs([exp], filter_string=f"tags.mlflow.parentRunId = '{ids['run']}'")
    return parent, kids, client.search_runs([exp])


def test_nested_runs_match_trials_one_to_one(sweep):
    tmp, sweep_dir = sweep
    table = pd.read_parquet(sweep_dir / "summary.parquet")
    hist = pd.read_parquet(sweep_dir / "history.parquet")
    client = _client(tmp / "mlruns")
    parent, kids, everything = _children(client, sweep_dir)
    assert len(table) == 3 and len(kids) == 3 and len(everything) == 4, "one parent + one nested run per trial"
    assert sorted(k.info.run_name for k in kids) == sorted(table["trial_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["best_trial"] == table["trial_id"].iloc[0]
    assert "report.html" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    for kid in kids:
        tid = kid.info.run_name
        row = table[table["trial_id"] == tid].iloc[0]
        assert kid.info.status == "FINISHED"
        assert float(kid.data.params["lr"]) == pytest.approx(float(row["config/lr"]))
        assert kid.data.params["reg"] == row["config/reg"]
        logged = client.get_metric_history(kid.info.run_id, "val/accuracy")
        want = hist[hist["trial_id"] == tid][["step", "val/accuracy"]].dropna()
        assert [m.step for m in logged] == want["step"].astype(int).tolist(), "every report, with its step"
        assert [m.value for m in logged] == pytest.approx(want["val/accuracy"].tolist())
        assert kid.data.metrics["final/val/accuracy"] == pytest.approx(want["val/accuracy"].iloc[-1])
        assert kid.data.tags["checkpoint"] and kid.data.tags["checkpoint"] != "None"
        assert f"plots/{tid}.png" in {a.path for a in client.list_artifacts(kid.info.run_id, "plots")}
        # ASHA bookkeeping agrees with what the curves show: a stopped trial ends before max_t
        assert bool(row["stopped_early"]) == (int(want["step"].iloc[-1]) < MAX_T)
        assert kid.data.tags["methodlab.stopped_by_scheduler"] == str(bool(row["stopped_early"]))


def test_tensorboard_event_files_have_the_curves(sweep):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, sweep_dir = sweep
    hist = pd.read_parquet(sweep_dir / "history.parquet")
    for tid, part in hist.groupby("trial_id"):
        acc = EventAccumulator(str(sweep_dir / "tensorboard" / tid))
        acc.Reload()
        assert {"val/accuracy", "train/accuracy", "rf"} <= set(acc.Tags()["scalars"])
        events = acc.Scalars("val/accuracy")
        assert [e.step for e in events] == part["step"].astype(int).tolist()
        assert [e.value for e in events] == pytest.approx(part["val/accuracy"].tolist(), rel=1e-6)


def test_resume_reuses_runs(sweep):
    from methodlab.runners.tune import resume_tune

    tmp, sweep_dir = sweep
    client = _client(tmp / "mlruns")
    before = sorted(r.info.run_id for r in _children(client, sweep_dir)[2])
    resume_tune(sweep_dir, quiet=True)
    after = sorted(r.info.run_id for r in _children(client, sweep_dir)[2])
    assert after == before, "resuming a sweep must not create MLflow runs"


def test_results_report_renders_in_chromium(sweep, tmp_path):
    from typer.testing import CliRunner

    from methodlab.cli.main import app

    _, sweep_dir = sweep
    res = CliRunner().invoke(app, ["results", str(sweep_dir), "--metric", "rf"])
    assert res.exit_code == 0, res.output
    assert "best first" in res.output and "rf" in res.output
    page = (sweep_dir / "report.html").read_text()
    for fig in ("fig-curves", "fig-params", "fig-parallel", "fig-importances"):
        assert f'id="{fig}"' in page, fig
    assert page.count("data:image/png;base64,") >= 4
    assert "<script" not in page and "http://" not in page and "https://" not in page, "self-contained"
    if CHROMIUM is None:
        pytest.skip("chromium not installed (make test installs Debian's chromium when run as root)")
    shot = tmp_path / "shot.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,3000",
           (sweep_dir / "report.html").as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))[..., :3]
    non_white = (img[:1500].min(axis=2) < 0.9).mean()  # the page's content is ~1,800 px tall
    assert img.shape[0] >= 2000 and non_white > 0.03, f"blank page? {non_white:.3%} non-white pixels"
    colour = (img.max(axis=2) - img.min(axis=2) > 0.2).mean()
    assert colour > 0.002, "no coloured plot pixels in the screenshot"


def test_local_run_tracking_reuses_its_run(tmp_path):
    """The local runner logs every report once; re-running the same name reopens the same MLflow run."""
    from methodlab.runners.local import run_local
    from methodlab.runners.tracking import resolve_uri

    data = {"method": "grokking_flatness", "config": {"seed": 0},
            "tracking": {"mlflow": True, "tensorboard": True, "uri": str(tmp_path / "mlruns")}}
    run_local(load_job(None, data=data, overrides=["max_steps=100"], smoke=True), "r", str(tmp_path), quiet=True)
    more = load_job(None, data=data, overrides=["max_steps=200"], smoke=True)
    run_local(more, "r", str(tmp_path), quiet=True)
    client = _client(tmp_path / "mlruns")
    runs = client.search_runs([client.get_experiment_by_name("grokking_flatness").experiment_id])
    assert len(runs) == 1 and resolve_uri(str(tmp_path / "mlruns"))[0].startswith("sqlite:///")
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "val/accuracy")]
    assert steps == [50, 100, 150, 200]


@pytest.mark.slow
def test_train_two_workers_log_rank0_once(ray_cluster, tmp_path):
    """Ray Train V2 with 2 DDP workers: the controller callback logs each report once (rank 0's metrics)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from methodlab.runners.train import run_train

    over = ["scaling.num_workers=2", "scaling.cpus_per_worker=0.99", "max_steps=100", "checkpoint_every=50",
            "tracking.mlflow=true", "tracking.tensorboard=true", f"tracking.uri={tmp_path / 'mlruns'}"]
    run_train(load_job("jobs/grokking_flatness/cpu.yaml", overrides=over, smoke=True), "ddp", str(tmp_path))
    client = _client(tmp_path / "mlruns")
    runs = client.search_runs([client.get_experiment_by_name("grokking_flatness").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    rows = [json.loads(x) for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    logged = client.get_metric_history(runs[0].info.run_id, "val/accuracy")
    assert [(m.step, m.value) for m in logged] == [(r["step"], pytest.approx(r["val/accuracy"])) for r in rows] \
        and [m.step for m in logged] == [50, 100], "one point per report, not one per worker"
    assert runs[0].data.tags["checkpoint"].endswith(tuple("0123456789"))
    acc = EventAccumulator(str(tmp_path / "ddp" / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/accuracy")] == [50, 100]
