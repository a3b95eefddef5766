"""Report builder, compare groups, progress line and tracking settings on synthetic data (no Ray)."""

from __future__ import annotations

import base64
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from methodlab.runners.report_html import build_compare, build_report, compare_groups, importances


def _sweep(folder, n=6, seed=0, stopped=("t1",)):
    """A fake sweep folder: val/accuracy rises with lr (log), reg does nothing."""
    rng = np.random.default_rng(seed)
    rows, hist = [], []
    for i in range(n):
        tid = f"t{i}"
        lr = float(10 ** rng.uniform(-3, -1))
        reg = ["none", "anti_flat"][i % 2]
        last = 2 if tid in stopped else 4
        curve = [min(1.0, (k + 1) / 4 * (np.log10(lr) + 3.5) / 2.5) for k in range(last)]
        for k, v in enumerate(curve):
            hist.append({"trial_id": tid, "step": 50 * (k + 1), "training_iteration": k + 1, "val/accuracy": v, "rf": 1 + k})
        rows.append({"trial_id": tid, "method": "grokking_flatness", "status": "TERMINATED", "metric": "val/accuracy",
                     "mode": "max", "best": max(curve), "checkpoint": f"/x/{tid}", "checkpoint_metric": curve[-1],
                     "config/lr": lr, "config/reg": reg, "stopped_early": tid in stopped,
                     "stopped_at": 100.0 if tid in stopped else None, "final/rf": float(last)})
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).sort_values("checkpoint_metric", ascending=False).to_parquet(folder / "summary.parquet")
    pd.DataFrame(hist).to_parquet(folder / "history.parquet")
    record = {"name": folder.name, "metric": "val/accuracy", "mode": "max",
              "space": {"params": {"lr": {"loguniform": [1e-3, 1e-1]}, "reg": {"choice": ["none", "anti_flat"]}},
                        "scheduler": {"type": "asha", "time_attr": "step", "grace_period": 50, "max_t": 200}}}
    (folder / "sweep.yaml").write_text(yaml.safe_dump(record))
    return folder


def _pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]


def test_report_has_every_section_as_inline_png(tmp_path):
    out = build_report(_sweep(tmp_path / "sw"))
    page = out.read_text()
    assert out.name == "report.html" and out.parent == tmp_path / "sw"
    for fig in ("curves", "params", "parallel", "importances"):
        assert f'id="fig-{fig}"' in page and (tmp_path / "sw" / "report_files" / f"{fig}.png").exists()
    pngs = _pngs(page)
    assert len(pngs) == 4 and all(p.startswith(b"\x89PNG") for p in pngs)
    assert "<script" not in page and "http" not in page  # self-contained: nothing fetched
    assert "1 of 6 trials stopped early" in page
    # the ASHA table names exactly the stopped trial and its stop time
    asha = page[page.index("Early stopping"):]
    assert "<td>t1</td>" in asha and "<td>100</td>" in asha and "<td>t3</td>" not in asha


def test_importances_rank_the_parameter_that_matters(tmp_path):
    folder = _sweep(tmp_path / "sw", n=12)
    summary = pd.read_parquet(folder / "summary.parquet")
    imp, note = importances(summary, ["lr", "reg"], yaml.safe_load((folder / "sweep.yaml").read_text()), "max")
    assert imp is not None and "12 trials" in note
    assert imp["lr"] > imp["reg"], imp


def test_too_few_trials_says_so(tmp_path):
    page = build_report(_sweep(tmp_path / "sw", n=2, stopped=())).read_text()
    assert 'id="no-importances"' in page and "too few finished trials" in page
    assert 'id="fig-importances"' not in page and "0 of 2 trials stopped early" in page


def test_single_run_report(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    pd.DataFrame([{"trial_id": "run", "method": "m", "status": "TERMINATED", "metric": "val/accuracy", "mode": "max",
                   "best": 0.5, "checkpoint": None, "checkpoint_metric": 0.5, "config/lr": 0.1}]).to_parquet(folder / "summary.parquet")
    pd.DataFrame({"trial_id": ["run"] * 3, "step": [1, 2, 3], "val/accuracy": [0.1, 0.3, 0.5]}).to_parquet(folder / "history.parquet")
    (folder / "job.yaml").write_text("method: m\n")
    page = build_report(folder).read_text()
    assert 'id="fig-curves"' in page and "a single run: no sweep" in page and 'id="fig-params"' not in page


def test_compare_groups_mean_and_spread_over_seeds(tmp_path):
    def run(name, method, seed, best, hidden=64):
        d = tmp_path / name
        d.mkdir()
        pd.DataFrame([{"trial_id": name, "method": method, "status": "TERMINATED", "metric": "eval/return",
                       "mode": "max", "best": best, "checkpoint_metric": best, "config/seed": seed,
                       "config/hidden": hidden}]).to_parquet(d / "summary.parquet")
        pd.DataFrame({"trial_id": [name] * 2, "step": [1, 2], "eval/return": [best / 2, best]}).to_parquet(d / "history.parquet")
        return d

    dirs = [run("a0", "unirl", 0, 10.0), run("a1", "unirl", 1, 14.0), run("b0", "bc", 0, 5.0), run("b1", "bc", 1, 7.0),
            run("b2", "bc", 2, 6.0, hidden=128)]
    g = compare_groups(dirs).set_index("group")
    assert g.loc["unirl", "n"] == 2 and g.loc["unirl", "mean"] == pytest.approx(12.0)
    assert g.loc["unirl", "std"] == pytest.approx(2.0) and g.loc["unirl", "seeds"] == "0,1"
    # within bc, hidden differs: two groups, seeds pooled only where everything else is equal
    assert g.loc["bc hidden=64", "mean"] == pytest.approx(6.0) and g.loc["bc hidden=128", "n"] == 1
    out, _ = build_compare(dirs, tmp_path / "compare.html")
    page = out.read_text()
    assert len(_pngs(page)) == 2 and "unirl" in page


def test_progress_line_rate_and_eta():
    from methodlab.runners.progress import Progress

    p = Progress("m", "val/accuracy", quiet=True, total=1000, start=200)
    p.t0 -= 10.0  # 10 s elapsed
    text = p.line(400, {"val/accuracy": 0.5})
    assert "40.0% 400/1000" in text and "20 step/s" in text and "00:30 left" in text and "val/accuracy=0.5" in text


def test_tracking_settings_and_uri(tmp_path, monkeypatch):
    from methodlab.runners.tracking import resolve_uri, settings
    from methodlab.specs.job import JobFile, Tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert settings(Tracking(), "m") is None
    s = settings(Tracking(mlflow=True), "m", cwd=tmp_path)
    assert s["uri"] == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}" and s["experiment"] == "m"
    assert s["artifacts"] == (tmp_path / "mlruns" / "artifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_uri(None) == ("http://127.0.0.1:5000", None)
    assert resolve_uri("sqlite:///rel.db", cwd=tmp_path)[0] == f"sqlite:///{tmp_path / 'rel.db'}"
    job = JobFile.model_validate({"method": "grokking_flatness", "tracking": {"mlflow": True, "tensorboard": True}})
    assert job.tracking.mlflow and job.tracking.tensorboard
    with pytest.raises(Exception, match="mlfow"):
        JobFile.model_validate({"method": "grokking_flatness", "tracking": {"mlfow": True}})


def test_quiet_env_silences_progress(capsys, monkeypatch):
    from methodlab.runners.progress import Progress, track

    monkeypatch.setenv("METHODLAB_QUIET", "1")
    p = Progress("m", "loss", total=3, every_s=0)
    for i in range(1, 4):
        p.update({"step": i, "loss": 1.0 / i})
    p.done()
    assert list(track(range(5), "gen")) == list(range(5))
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("METHODLAB_QUIET")
    p = Progress("m", "loss", total=3, every_s=0)
    p.update({"step": 3, "loss": 0.5})
    assert "100.0% 3/3" in capsys.readouterr().err
