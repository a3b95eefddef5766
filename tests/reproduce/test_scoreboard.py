"""The scoreboard (issue 41 item 5): reports/index.md, reports/index.html and README's methods table are what
`methodlab reproduce --scoreboard` generates from the committed reports/<slug>.json (never kept by hand), their
numbers are each report's, and the page opens offline in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from methodlab.core.registry import get_spec, method_slugs
from methodlab.reproduce import scoreboard

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reports"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def test_committed_scoreboard_and_readme_table_are_generated(tmp_path):
    items = scoreboard.entries(REPORTS)
    assert (REPORTS / "index.md").read_text() == scoreboard.render_md(items), \
        "reports/index.md is stale: run `methodlab reproduce --scoreboard`"
    assert (REPORTS / "index.html").read_text() == scoreboard.render_html(items), \
        "reports/index.html is stale: run `methodlab reproduce --scoreboard`"
    readme = (REPO / "README.md").read_text()
    assert scoreboard.readme_table(items) in readme, "README's methods table is stale: `methodlab reproduce --scoreboard`"


def test_every_method_is_listed_with_its_reports_verdicts():
    items = {e["slug"]: e for e in scoreboard.entries(REPORTS)}
    assert set(items) == {s for s in method_slugs() if get_spec(s).reproduce}
    md = (REPORTS / "index.md").read_text()
    for slug, e in items.items():
        path = REPORTS / f"{slug}.json"
        if not e["harness"]:
            assert not e["claims"] and f"`{slug}` | — | — | not rerun through the harness yet" in md
            continue
        claims = json.loads(path.read_text())["claims"]
        for c in claims:  # the per-claim row carries the report's own figure and verdict
            row = f"| `{slug}` | **{c['id']}** "
            line = next(x for x in md.splitlines() if x.startswith(row))
            assert line.endswith(f"| {c['verdict']} |"), line
            assert f"| {scoreboard._fmt(c['ours'])} |" in line, line
        counts = {v: sum(c["verdict"] == v for c in claims) for v in scoreboard.VERDICTS}
        assert f"{counts['PASS']} pass, {counts['FAIL']} fail, {counts['NOT RUN']} not run" in md


def test_scoreboard_opens_offline_in_headless_chromium(tmp_path):
    page = (REPORTS / "index.html").read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page, "self-contained"
    if CHROMIUM is None:
        pytest.skip("chromium not installed (make test installs Debian's chromium when run as root)")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", (REPORTS / "index.html").as_uri()], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    slugs = re.findall(r'<tr id="m-([a-z_]+)">', dom)
    assert sorted(slugs) == sorted(s for s in method_slugs() if get_spec(s).reproduce), "rows in the rendered DOM"
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1280,1600", (REPORTS / "index.html").as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    import matplotlib.image as mpimg

    img = mpimg.imread(str(shot))[..., :3]
    assert (img.min(axis=2) < 0.9).mean() > 0.02, "blank page?"
