"""Issue 42 item 8 (report): a single run's report.html leads with the method's own key metrics (its config's
`key_metrics`): grokking's RF and CDNV, not a constant lr and a zero reg/term."""

from __future__ import annotations

import json
import re

from methodlab.methods.grokking_flatness.config import Config
from methodlab.runners.report_html import build_report
from methodlab.runners.results import write_run_summary


def _grokking_run(folder):
    """A hand-written grokking run: lr constant, reg/term zero, the key metrics moving (column order as fit writes
    them: lr and reg/term come first in every report)."""
    folder.mkdir(parents=True)
    rows = []
    for i, step in enumerate(range(50, 350, 50)):
        rows.append({"step": step, "lr": 0.003, "train/batch_loss": 1.0 / (i + 1), "reg/term": 0.0, "reg/active": 0,
                     "train/loss": 1.0 / (i + 1), "train/accuracy": min(1.0, 0.2 * (i + 1)), "val/loss": 2.0 - 0.1 * i,
                     "val/accuracy": 0.1 * i, "rf": 1000.0 - 100 * i, "cdnv": 3.0 - 0.4 * i, "w_norm": 7.0 + i,
                     "_time": 0.5 * i})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "job.yaml").write_text("method: grokking_flatness\nrun:\n  name: g\n")
    write_run_summary(folder, "grokking_flatness", Config(), rows[-1], None)
    return folder


def test_config_declares_key_metrics_primary_first():
    assert Config.key_metrics[0] == Config.primary_metric
    assert {"rf", "cdnv"} <= set(Config.key_metrics) and "lr" not in Config.key_metrics


def test_single_run_report_leads_with_key_metrics(tmp_path):
    page = build_report(_grokking_run(tmp_path / "g")).read_text()
    assert 'id="key-metrics"' in page
    head = page[page.index("Key metrics"):page.index("<h2>Trials")]
    names = re.findall(r"<tr><td>([^<]+)</td>", head)
    assert names == list(Config.key_metrics), names  # declared order, primary first; no lr, no reg/term
    assert "<td>1000</td>" in head and "<td>500</td>" in head  # rf's max and its last value
    caption = re.search(r"<figcaption[^>]*>learning curves: ([^<]+)</figcaption>", page)
    assert caption, "no curves caption"
    drawn = caption.group(1).split(", ")
    assert drawn[:len(Config.key_metrics)] == list(Config.key_metrics), drawn
    assert "lr" not in drawn and "reg/term" not in drawn and "reg/active" not in drawn  # constants are no curves


def test_metric_asked_for_comes_after_primary_and_unknown_method_falls_back(tmp_path):
    folder = _grokking_run(tmp_path / "g")
    page = build_report(folder, ["w_norm"]).read_text()
    head = page[page.index("Key metrics"):page.index("<h2>Trials")]
    assert re.findall(r"<tr><td>([^<]+)</td>", head)[:2] == ["val/accuracy", "w_norm"]
    # a folder of a method this version does not know: the run's metric only, no error
    import pandas as pd

    s = pd.read_parquet(folder / "summary.parquet")
    s["method"] = "no_such_method"
    s.to_parquet(folder / "summary.parquet")
    (folder / "job.yaml").write_text("method: no_such_method\n")
    page = build_report(folder).read_text()
    head = page[page.index("Key metrics"):page.index("<h2>Trials")]
    assert re.findall(r"<tr><td>([^<]+)</td>", head) == ["val/accuracy"]


def test_key_metric_not_reported_is_named(tmp_path):
    folder = _grokking_run(tmp_path / "g")
    hist = folder / "history.parquet"
    import pandas as pd

    pd.read_parquet(hist).drop(columns=["cdnv"]).to_parquet(hist)
    s = pd.read_parquet(folder / "summary.parquet").drop(columns=["final/cdnv"])
    s.to_parquet(folder / "summary.parquet")
    page = build_report(folder).read_text()
    assert "not reported by this run: cdnv" in page
