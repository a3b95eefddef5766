"""Is a figure a property of the method, or of the floating-point kernels it ran on? `final_metric_under_kernels`
reruns a job through the platform's local runner in fresh interpreters that differ only in the CPU kernels torch
dispatches to (instruction set, thread count) and returns one final metric per variant. The dispatch switches are
read when torch loads, hence a child process per variant. Used by report tasks (ctsketch's `switch_rounding`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# forced instruction sets: ATen's CPU kernels, MKL and oneDNN (each library's documented environment switch)
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
KERNEL_VARIANTS = (("this CPU's kernels, 1 thread", {}, 1), ("AVX2 kernels forced, 1 thread", AVX2, 1),
                   ("this CPU's kernels, 2 threads", {}, 2))


def final_metric_under_kernels(job: str, overrides: list[str], metric: str,
                               variants=KERNEL_VARIANTS) -> list[dict]:
    """[{"variant", "threads", "value"}]: `metric` of the run's final metrics under each (name, env, threads)."""
    rows = []
    for name, env, threads in variants:
        cmd = [sys.executable, "-m", "methodlab.reproduce.rounding", job, metric,
               f"scaling.cpus_per_worker={threads}", *overrides]
        out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True)
        rows.append({"variant": name, "threads": threads, "value": json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def cpu_description() -> dict:
    """{"cpu": model name, "isa": the kernels torch dispatches to natively, "torch": version}."""
    import platform
    from pathlib import Path

    import torch

    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())
    return {"cpu": cpu, "isa": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def _main(job: str, metric: str, *overrides: str) -> None:
    import tempfile

    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    loaded = load_job(job, overrides=list(overrides))
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(run_local(loaded, "probe", d, quiet=True)["metrics"].get(metric)))


if __name__ == "__main__":
    _main(*sys.argv[1:])
