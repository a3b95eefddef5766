"""Issue 42 item 8 (report): every method declares 2-5 key metrics, its primary metric first, and its smoke run
reports every one of them; the report built from that run leads with them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY


@pytest.mark.parametrize("slug", sorted(REGISTRY))
def test_key_metrics_declared(slug):
    cls = get_spec(slug).config_cls()
    keys = cls.key_metrics
    assert isinstance(keys, tuple) and 2 <= len(keys) <= 5, f"{slug}: key_metrics = {keys!r}"
    assert keys[0] == cls.primary_metric, f"{slug}: key_metrics must start with {cls.primary_metric}"
    assert len(set(keys)) == len(keys)


def test_smoke_run_reports_its_key_metrics(method_smoke, tmp_path):
    slug, run = method_smoke
    cls = type(run["config"])
    run_dir = Path(run["run_dir"])
    reported = set(run["metrics"])
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            reported |= {k for k, v in json.loads(line).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    missing = [k for k in cls.key_metrics if k not in reported]
    assert not missing, f"{slug}: key_metrics {missing} never reported by the smoke run"

    # the report, built on a copy (the shared smoke folder stays as the runner left it), leads with them
    from methodlab.runners.report_html import build_report

    copy = tmp_path / run_dir.name
    copy.mkdir()
    for name in ("summary.parquet", "history.parquet", "job.yaml"):
        if (run_dir / name).exists():
            shutil.copy(run_dir / name, copy / name)
    page = build_report(copy).read_text()
    head = page[page.index("<h2>Key metrics"):page.index("<h2>Trials")]
    assert re.findall(r"<tr><td>([^<]+)</td>", head) == list(cls.key_metrics), slug
