"""One smoke run per registered method, shared by the conformance test and the method's own tests."""

from __future__ import annotations

import pytest

from methodlab.methods import REGISTRY

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


@pytest.fixture(scope="session")
def smoke_root(tmp_path_factory):
    return tmp_path_factory.mktemp("smoke")


@pytest.fixture(scope="session", params=sorted(REGISTRY))
def method_smoke(request, smoke_root):
    return request.param, smoke_run(request.param, smoke_root)
