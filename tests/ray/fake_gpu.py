"""A fake-GPU Ray for scheduling tests on a machine without one: Ray is started with `num_gpus`, and every
worker process runs `setup` (Ray's worker_process_setup_hook) before any task, which

- registers `gpu_probe`, a method that only records what its trial was given (Ray's GPU ids, the
  RunContext's device, start and end times) and sleeps, so overlapping trials can be seen; and
- lets torch report one visible CUDA device (torch here is a CPU build); the probe never allocates on it.

Nothing of this is imported by the package: only this test's Ray uses it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import Field

from methodlab.core import MethodConfig, MethodSpec

SPEC = MethodSpec(slug="gpu_probe", title="GPU scheduling probe (tests only)", paper="-",
                  config="tests.ray.fake_gpu:ProbeConfig", fit="tests.ray.fake_gpu:fit",
                  predictor="tests.ray.fake_gpu:ProbeConfig")


class ProbeConfig(MethodConfig):
    primary_metric = "eval/score"
    log_path: str = Field("", description="JSON lines written by every trial.")
    seconds: float = Field(3.0, ge=0, description="How long a trial holds its GPU share.")
    x: float = Field(0.0, description="The swept value.")


def fit(cfg: ProbeConfig, ctx) -> dict:
    import ray

    t0 = time.time()
    time.sleep(cfg.seconds)
    row = {"pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "device": str(ctx.device),
           "device_type": type(ctx.device).__name__, "start": t0, "end": time.time(), "x": cfg.x}
    with open(cfg.log_path, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    metrics = {"step": 1, "eval/score": cfg.x}
    ctx.report(metrics)
    return metrics


def register() -> None:
    from methodlab.methods import REGISTRY

    REGISTRY["gpu_probe"] = "tests.ray.fake_gpu:SPEC"


def setup() -> None:
    """Ray worker_process_setup_hook: the probe method and one 'visible' CUDA device in every worker."""
    import torch

    from methodlab.core import device

    register()
    device.cuda_visible = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda d: None


def main(out: str) -> None:
    """Run a 4-trial sweep at gpu 0.5 on a Ray with 1 fake GPU and 4 CPUs; the trials' rows go to `out`."""
    import ray
    import yaml

    from methodlab.runners.tune import run_tune
    from methodlab.specs.files import load_search_space

    repo = str(Path(__file__).resolve().parents[2])
    register()
    ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=True, dashboard_host="127.0.0.1",
             logging_level="WARNING", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "tests.ray.fake_gpu.setup",
                          "env_vars": {"PYTHONPATH": repo}})
    work = Path(out).parent
    job = work / "probe_job.yaml"
    job.write_text(yaml.safe_dump({"method": "gpu_probe", "config": {"log_path": out, "seconds": 3.0}}))
    space = work / "probe_space.yaml"
    space.write_text(yaml.safe_dump({
        "base_job": str(job), "num_samples": 4, "max_concurrent_trials": 4,
        "trial_resources": {"cpu": 0.5, "gpu": 0.5}, "search_alg": {"type": "random"},
        "scheduler": {"type": "fifo"}, "params": {"x": {"grid": [1.0, 2.0, 3.0, 4.0]}}}))
    try:
        result = run_tune(load_search_space(space), "probe", str(work / "store"), quiet=True)
        print(json.dumps({"num_trials": result["num_trials"], "errors": result["errors"]}))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
