"""Per-test reliability records -> JSON (-> RELIABILITY.md via render.py), and the `slow` gate.

Each test fills `record` (what was injected, how many times, what survived, what was lost, figures);
the outcome is added from pytest's report. The JSON is written when METHODLAB_RELIABILITY_JSON names
a file (`make reliability` does). Tests marked `slow` here run only with METHODLAB_RELIABILITY_SLOW=1
(`make reliability`) or when selected with `-m slow`, so `make test` stays within its time budget."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_RECORDS: dict[str, dict] = {}


class Record(dict):
    def __getattr__(self, key):
        return self[key]

    def __setattr__(self, key, value):
        self[key] = value


def _entry(nodeid: str) -> dict:
    return _RECORDS.setdefault(nodeid, Record(test=nodeid, injected="", times=0, survived="", lost="",
                                              figures={}, outcome="not run", duration_s=0.0))


def _ours(nodeid: str) -> bool:
    return nodeid.replace("\\", "/").startswith("tests/reliability/")


@pytest.fixture
def record(request) -> Record:
    return _entry(request.node.nodeid)


def pytest_collection_modifyitems(config, items):
    run_slow = os.environ.get("METHODLAB_RELIABILITY_SLOW") == "1" or "slow" in (config.getoption("-m") or "")
    skip = pytest.mark.skip(reason="slow reliability test: runs in `make reliability` (or -m slow)")
    for item in items:
        if _ours(item.nodeid) and "slow" in item.keywords and not run_slow:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    if not _ours(report.nodeid):
        return
    rec = _entry(report.nodeid)
    rec["duration_s"] = round(rec["duration_s"] + report.duration, 1)
    if report.when == "call" or report.outcome != "passed":
        if rec["outcome"] in ("not run", "passed"):
            rec["outcome"] = report.outcome
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            rec["reason"] = report.longrepr[2]
        elif report.outcome == "failed":
            rec["reason"] = str(report.longrepr).strip().splitlines()[-1][:300]
    if report.when == "teardown":
        _write()  # after every test: an interrupted run still leaves what it measured


def pytest_sessionfinish(session):
    _write()


def _write():
    out = os.environ.get("METHODLAB_RELIABILITY_JSON")
    if not out or not _RECORDS:
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                     "records": list(_RECORDS.values())}, indent=1, default=str))
