"""The device contract over every registered method (issue 40): the smoke fit runs under the device guards
(tensors built without a device land on `meta`; every module's parameters, buffers and inputs must be on
ctx.device), sees the job's torch threads, and its predictor loads and answers on the device it is given."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from methodlab.core import RunContext
from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY
from tests.device_guard import ALLOW, OffDeviceGuard, device_hooks, guarded
from tests.smoke import SMOKE_CPUS

METHODS = Path(__file__).resolve().parents[2] / "platform" / "methodlab" / "methods"


# ---- the guards themselves must catch a planted mismatch -----------------------------------------------------

class _Planted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2, device="meta"))  # the planted slip

    def forward(self, x):
        return self.lin(x) * self.scale


def test_forward_hook_catches_a_buffer_off_the_run_device():
    model = _Planted()
    with device_hooks(torch.device("cpu")), pytest.raises(AssertionError, match="scale: buffer on meta"):
        model(torch.zeros(1, 3))


def test_forward_hook_catches_an_input_off_the_run_device():
    lin = torch.nn.Linear(3, 2)
    with device_hooks("cpu"), pytest.raises(AssertionError, match="input 0 on meta"):
        lin(torch.zeros(1, 3, device="meta"))


def _sloppy_fit(ctx: RunContext) -> float:
    with ctx.init_module():
        model = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3)  # the slip: no device
    return model(x).sum().item()


def _tidy_fit(ctx: RunContext) -> float:
    with ctx.init_module():
        model = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3, device=ctx.device, generator=ctx.generator(0))
    return model(x).sum().item()


def test_guard_fails_a_tensor_built_without_a_device():
    ctx = RunContext()
    with guarded("cpu") as guard, pytest.raises((AssertionError, RuntimeError, NotImplementedError)):
        _sloppy_fit(ctx)
    assert any(k == __name__ for k in guard.redirected)


def test_guard_passes_a_tidy_fit_and_a_module_built_outside_init_module_lands_on_meta():
    with guarded("cpu") as guard:
        assert isinstance(_tidy_fit(RunContext()), float)
        stray = torch.nn.Linear(2, 2)
    assert not guard.redirected.get(__name__ + "_never")
    assert stray.weight.device.type == "meta"


def test_allow_list_names_a_reason_for_every_entry():
    assert all(isinstance(v, str) and len(v) > 10 for v in ALLOW.values())


# ---- every registered method --------------------------------------------------------------------------------

def test_smoke_fit_builds_every_tensor_on_the_run_device(method_smoke):
    slug, run = method_smoke  # the shared smoke run ran under guarded("cpu"): it finished, so nothing mixed devices
    assert not run["redirected"], (f"{slug}: tensors built without a device (landed on meta) from "
                                   f"{run['redirected']}; pass device=ctx.device (or an explicit 'cpu' for host data)")


def test_smoke_fit_sees_the_jobs_threads(method_smoke):
    slug, run = method_smoke
    assert run["threads"], f"{slug}: no report"
    assert set(run["threads"]) == {SMOKE_CPUS}, f"{slug}: torch threads inside fit {sorted(set(run['threads']))}, " \
                                                f"job cpus_per_worker {SMOKE_CPUS}"


def test_predictor_loads_and_answers_on_the_given_device(method_smoke):
    slug, run = method_smoke
    from methodlab.core.checkpoint import latest_checkpoint
    from tests.methods.test_conformance import _example_inputs

    cls = get_spec(slug).predictor_cls()
    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    with guarded("cpu") as guard:
        pred = cls.from_checkpoint(ckpt, device=torch.device("cpu"))
        outs = pred(_example_inputs(cls, run["config"]))
    assert outs and not guard.redirected, f"{slug}: predictor built tensors without a device: {guard.redirected}"


@pytest.mark.parametrize("slug", sorted(REGISTRY))
def test_no_method_sets_threads_or_devices_itself(slug):
    """Threads, TF32 and devices are the runner's: a method only narrows threads through ctx.limit_threads."""
    banned = {"set_num_threads", "set_default_device", "allow_tf32", "set_float32_matmul_precision"}
    found = []
    for path in (METHODS / slug).glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in banned:
                found.append(f"{path.name}:{node.lineno} {name}")
    assert not found, f"{slug}: {found}"


@pytest.mark.parametrize("slug", sorted(REGISTRY))
def test_spec_declares_its_device_policy(slug):
    spec = get_spec(slug)
    assert set(spec.precisions) <= {"fp32", "bf16", "fp16"} and "fp32" in spec.precisions
    if set(spec.precisions) != {"fp32", "bf16", "fp16"}:
        assert spec.precision_note, f"{slug}: precisions narrowed without a reason"
    if spec.cpu_only is None:
        assert (METHODS.parents[2] / "jobs" / slug / "gpu.yaml").exists(), f"{slug}: a torch method ships jobs/{slug}/gpu.yaml"


def test_a_config_that_asks_for_one_thread_gets_one(tmp_path):
    """grokking_flatness's torch_threads narrows a 4-CPU job to 1 inside fit."""
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    seen = []
    original = RunContext.report

    def report(self, metrics, checkpoint=None):
        seen.append(torch.get_num_threads())
        return original(self, metrics, checkpoint)

    loaded = load_job(None, data={"method": "grokking_flatness", "config": {"torch_threads": 1, "max_steps": 40},
                                  "scaling": {"cpus_per_worker": 4}}, smoke=True)
    RunContext.report = report
    try:
        run_local(loaded, "one-thread", str(tmp_path), quiet=True)
    finally:
        RunContext.report = original
    assert seen and set(seen) == {1}


def test_off_device_guard_is_inert_for_explicit_devices():
    with OffDeviceGuard() as guard:
        t = torch.zeros(2, device="cpu")
    assert t.device.type == "cpu" and not guard.redirected
