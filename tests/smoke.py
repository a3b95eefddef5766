"""One smoke run per method per test session, shared by every test that needs a trained checkpoint.

The run is the device conformance run too (issue 40): it goes through the local runner with a 4-CPU job
under the device guards of tests/device_guard.py, recording what `fit` saw (torch threads at each report,
tensors built off the run's device).

It runs from a fresh, empty working directory (issue 42): `cwd_writes` lists what the run left there (a run
writes inside its run folder only; what it reads resolves against the repo or the user's paths, not the cwd)."""

from __future__ import annotations

SMOKE_CPUS = 4  # a 4-CPU job: every method must see 4 torch threads inside fit
_RUNS: dict = {}


def smoke_run(slug: str, tmp_root):
    """Run `slug`'s smoke preset through the local runner once per session; returns the run dict with
    `threads` (torch threads read at each report), `redirected` (factory calls that named no device) and
    `cwd_writes` (files and folders the run created in its working directory: none expected)."""
    if slug not in _RUNS:
        import os
        import shutil
        import tempfile
        from pathlib import Path

        import torch

        from methodlab.core.context import RunContext
        from methodlab.runners.local import run_local
        from methodlab.specs.files import load_job
        from tests.device_guard import guarded

        threads: list[int] = []
        original = RunContext.report

        def report(self, metrics, checkpoint=None):  # read inside fit, at each report
            threads.append(torch.get_num_threads())
            return original(self, metrics, checkpoint)

        RunContext.report = report
        cwd = Path(tempfile.mkdtemp(prefix=f"methodlab-cwd-{slug}-"))  # empty: whatever appears, the run wrote
        before = os.getcwd()
        os.chdir(cwd)
        try:  # validated there too: a config that resolves a path at validation resolves it against this folder
            loaded = load_job(None, data={"method": slug, "config": {}, "scaling": {"cpus_per_worker": SMOKE_CPUS}},
                              smoke=True)
            with guarded("cpu") as guard:
                out = run_local(loaded, f"{slug}-smoke", str(Path(tmp_root).resolve()), quiet=True)
        finally:
            os.chdir(before)
            RunContext.report = original
            cwd_writes = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
            shutil.rmtree(cwd, ignore_errors=True)
        _RUNS[slug] = {**out, "config": loaded.config, "threads": threads, "redirected": dict(guard.redirected),
                       "cwd_writes": cwd_writes}
    return _RUNS[slug]
