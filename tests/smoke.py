"""One smoke run per method per test session, shared by every test that needs a trained checkpoint."""

from __future__ import annotations

_RUNS: dict = {}


def smoke_run(slug: str, tmp_root):
    """Run `slug`'s smoke preset through the local runner once per session; returns the run dict."""
    if slug not in _RUNS:
        from methodlab.runners.local import run_local
        from methodlab.specs.files import load_job

        loaded = load_job(None, data={"method": slug, "config": {}}, smoke=True)
        _RUNS[slug] = run_local(loaded, f"{slug}-smoke", str(tmp_root), quiet=True)
        _RUNS[slug]["config"] = loaded.config
    return _RUNS[slug]
