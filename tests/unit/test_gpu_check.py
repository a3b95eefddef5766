"""`make gpu-check` cannot rot on machines without a GPU: the same script runs end to end on the CPU
(`--device cpu --quick`: every torch method's smoke preset cut to a few steps, the device-mixing recorder,
the optimiser watch, checkpoint reload on the CPU, the predictor, and min_swgg against ot.emd)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))


def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick",
                           "--swgg-sizes", "256", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    from methodlab.core.registry import get_spec, method_slugs

    torch_methods = {s for s in method_slugs() if get_spec(s).cpu_only is None}
    assert {r["method"] for r in result["rows"]} == torch_methods
    assert all(r["ok"] and r["checkpoint_on_cpu"] and r["predictor_ok"] for r in result["rows"])
    assert sum(r["optimizer_steps"] > 0 for r in result["rows"]) >= len(torch_methods) - 2  # L-BFGS-only paths aside
    assert result["swgg"][0]["n"] == 256 and result["swgg"][0]["emd_cpu_s"] > 0


def test_device_recorder_catches_an_op_mixing_devices():
    import gpu_check

    rec = gpu_check.DeviceRecorder(torch.device("cpu"))
    with rec:
        a = torch.ones(3)
        b = torch.ones(3, device="meta")
        try:
            a + b
        except Exception:
            pass
    assert rec.mismatches, "an op on cpu and meta tensors was not recorded"


def test_optimizer_watch_names_state_off_the_device():
    import gpu_check

    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([p], lr=0.1)
    watch = gpu_check.OptimizerWatch(torch.device("meta"))
    try:
        p.grad = torch.ones(2)
        opt.step()
    finally:
        watch.close()
    assert watch.steps == 1 and any("parameter on cpu" in x for x in watch.off)


def test_every_torch_method_has_a_cap_and_a_gpu_preset():
    import gpu_check

    assert set(gpu_check.torch_methods()) == set(gpu_check.CAPS)
    for slug in gpu_check.CAPS:
        assert (REPO / "jobs" / slug / "gpu.yaml").exists(), slug
