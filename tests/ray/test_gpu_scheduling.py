"""GPUs asked for are used or refused up front (issue 40): fake-GPU scheduling on real Ray, a sweep on a
cluster without GPUs refused before any trial, `use_gpu` on a --local run here refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
METHODLAB = str(Path(sys.executable).parent / "methodlab")


def test_fake_gpu_sweep_runs_two_trials_per_gpu_each_with_cuda(tmp_path):
    """Ray with 1 (fake) GPU and 4 CPUs, 4 trials at gpu 0.5 / cpu 0.5: at most and at least two run at once
    (the GPU, not the CPUs, is the limit), each sees its Ray GPU id and a cuda torch.device context."""
    out = tmp_path / "trials.jsonl"
    proc = subprocess.run([sys.executable, "-m", "tests.ray.fake_gpu", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"num_trials": 4, "errors": 0}
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 4
    assert {r["device"] for r in rows} == {"cuda:0"} and {r["device_type"] for r in rows} == {"device"}
    assert all(r["gpu_ids"] == ["0"] for r in rows)
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows])
    running, peak = 0, 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2, f"{peak} trials ran at once on one GPU at gpu 0.5"


@pytest.mark.ray
def test_gpu_sweep_on_a_cluster_without_gpus_is_refused_before_any_trial(ray_cluster, tmp_path):
    from methodlab.core.device import GpuUnavailableError
    from methodlab.runners.tune import run_tune
    from methodlab.specs.files import load_search_space

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "base_job": str(REPO / "jobs/grokking_flatness/cpu.yaml"), "num_samples": 2,
        "trial_resources": {"cpu": 0.5, "gpu": 0.5}, "params": {"lr": {"loguniform": [1e-4, 1e-2]}}}))
    with pytest.raises(GpuUnavailableError, match="trial_resources.gpu.*has none"):
        run_tune(load_search_space(space), "nogpu", str(tmp_path / "store"), quiet=True)
    assert not list((tmp_path / "store").rglob("result.json")), "a trial started"


@pytest.mark.ray
def test_train_run_with_use_gpu_on_a_cluster_without_gpus_is_refused(ray_cluster, tmp_path):
    from methodlab.core.device import GpuUnavailableError
    from methodlab.runners.train import run_train
    from methodlab.specs.files import load_job

    loaded = load_job(REPO / "jobs/grokking_flatness/cpu.yaml", overrides=["scaling.use_gpu=true"], smoke=True)
    with pytest.raises(GpuUnavailableError, match="has none"):
        run_train(loaded, "nogpu", str(tmp_path), quiet=True)


def test_local_use_gpu_without_a_gpu_fails_in_one_line(tmp_path):
    proc = subprocess.run([METHODLAB, "run", "jobs/grokking_flatness/cpu.yaml", "--local", "--smoke",
                           "scaling.use_gpu=true", "--storage", str(tmp_path / "store")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "scaling.use_gpu" in lines[0] and "GPU" in lines[0], lines[0]
    store = tmp_path / "store"
    assert not store.exists() or not any(store.iterdir()), "the refused run wrote its run folder"


def test_cpu_only_method_refuses_use_gpu_with_its_reason():
    from methodlab.core import ConfigError
    from methodlab.core.registry import get_spec
    from methodlab.specs.files import load_job

    cpu_only = [s for s in ("monotone_gbt", "strategic_causal") if get_spec(s).cpu_only]
    assert cpu_only, "the numpy methods declare SPEC.cpu_only"
    for slug in cpu_only:
        with pytest.raises(ConfigError, match=f"{slug} runs on the CPU only"):
            load_job(None, data={"method": slug, "scaling": {"use_gpu": True}})


def test_precision_and_compile_refusals_name_the_field():
    from methodlab.core import ConfigError
    from methodlab.core.registry import get_spec
    from methodlab.methods import REGISTRY
    from methodlab.specs.files import load_job

    narrowed = [s for s in sorted(REGISTRY) if "bf16" not in get_spec(s).precisions]
    assert narrowed, "gyroatt's float64 geometry narrows precisions"
    with pytest.raises(ConfigError, match="scaling.precision"):
        load_job(None, data={"method": narrowed[0], "scaling": {"precision": "bf16"}})
    with pytest.raises(ConfigError, match="scaling.precision"):
        load_job(None, data={"method": "grokking_flatness", "scaling": {"precision": "fp8"}})
