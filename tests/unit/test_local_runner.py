"""`methodlab run --local` applies the job's scaling.torch_threads to the fit (as the Train runner does per
worker) and gives the caller its own thread count back afterwards."""

from __future__ import annotations

import torch

from methodlab.runners import local
from methodlab.specs.files import load_job


def test_local_run_uses_the_jobs_torch_threads(tmp_path, monkeypatch):
    real = local.get_spec
    seen = []

    class Spec:  # the real method, its fit observed
        def __init__(self, spec):
            self._spec = spec

        def __getattr__(self, name):
            return getattr(self._spec, name)

        def fit_fn(self, setting):
            fit = self._spec.fit_fn(setting)
            return lambda cfg, ctx: (seen.append(torch.get_num_threads()), fit(cfg, ctx))[1]

    monkeypatch.setattr(local, "get_spec", lambda slug: Spec(real(slug)))
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    loaded = load_job(None, data={"method": "monotone_gbt", "config": {}, "scaling": {"torch_threads": target}},
                      smoke=True)
    local.run_local(loaded, "threads", str(tmp_path), quiet=True)
    assert seen == [target] and torch.get_num_threads() == before
