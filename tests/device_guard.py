"""Guards that make a device slip fail on a CPU-only machine (issue 40's conformance test).

On a machine without a GPU every tensor is on the CPU, so a method that forgets `device=ctx.device` still
runs. Two guards turn that slip into a failure during the smoke fit:

1. `OffDeviceGuard`: a TorchFunctionMode that acts like `torch.set_default_device("meta")` for tensors a
   method builds without naming a device (factory calls such as torch.zeros / randn / tensor / arange, and
   modules built outside `ctx.init_module()`): they land on `meta`, off the run's device, and the first op
   mixing them with real tensors fails (or the forward hook below names them). Library code that builds host
   tensors on purpose is named in ALLOW with the reason; anything else is redirected.
2. `device_hooks(device)`: a global forward pre-hook failing when a module's own parameters, buffers or
   tensor inputs are not on the run's device.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from methodlab.core.device import iter_tensors

# Callers (module-name prefixes) whose un-placed tensors are not the method's business, each with the reason.
ALLOW: dict[str, str] = {
    "torch.optim": "optimisers keep their step counters as host scalars by design (torch.tensor(0.0))",
    "torch.amp": "GradScaler builds its scale on the device it is told",
    "torch.utils.data": "DataLoader samplers draw index permutations on the host",
    "torch.distributed": "process-group bookkeeping tensors",
    "torch._": "torch internals (dynamo, inductor, prims, refs, decomposition tables)",
    "torch.autograd": "autograd engine bookkeeping",
    "torch.nn.utils": "clip_grad_norm_ and friends place their totals on the gradients' device",
    "torch.testing": "torch test utilities",
    "torch.fx": "graph tracing for torch.compile",
    "torch.overrides": "this guard's own plumbing",
    "torch.utils._device": "the device context itself",
    "safetensors": "loads checkpoints to the host, moved by the method's load_state_dict",
    "transformers": "HF model construction and from_pretrained manage their own init contexts (face, "
                    "rule_unlearning build the backbone under ctx.init_module())",
    "huggingface_hub": "HF hub file resolution (offline)",
    "sentence_transformers": "MiniLM loading through sentence-transformers",
    "torch_geometric": "PyG builds index helpers on the host before moving them",
    "ot": "POT's backends build host scalars",
    "sklearn": "scikit-learn is numpy",
    "scipy": "numpy / scipy",
    "numpy": "numpy arrays converted by the method, never placed here",
    "gymnasium": "environments are numpy",
    "pydantic": "input validation builds no run tensors",
}

_CONSTRUCTORS = _device_constructors()


def _caller_module(depth: int = 2) -> str:
    """Module name of the first caller frame outside torch's own module-construction code."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        # nn.Module constructors and Parameter creation: look through to whoever built the module
        if name.startswith(("torch.nn.modules", "torch.nn.parameter", "torch.nn.init", "torch.nn.functional",
                            "torch.functional", "torch._tensor", "torch.random", "contextlib", __name__)):
            frame = frame.f_back
            continue
        return name
    return ""


class OffDeviceGuard(TorchFunctionMode):
    """Factory calls without `device=` land on `meta` unless their caller is in ALLOW. `redirected`
    counts them by caller (module:line), so a failure can say where the tensor came from."""

    def __init__(self, allow: dict[str, str] | None = None):
        super().__init__()
        self.allow = tuple(ALLOW if allow is None else allow)
        self.redirected: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CONSTRUCTORS and kwargs.get("device") is None:
            caller = _caller_module()
            if not caller.startswith(self.allow):
                kwargs = {**kwargs, "device": "meta"}
                self.redirected[caller] = self.redirected.get(caller, 0) + 1
        return func(*args, **kwargs)


def _check_module(module, inputs, device: torch.device) -> None:
    for kind, items in (("parameter", module.named_parameters(recurse=False)),
                        ("buffer", module.named_buffers(recurse=False))):
        for name, t in items:
            if t is not None and t.device != device:
                raise AssertionError(f"{type(module).__name__}.{name}: {kind} on {t.device}, the run's device is {device}")
    for i, x in enumerate(iter_tensors(inputs)):
        if x.device != device:
            raise AssertionError(f"{type(module).__name__}: input {i} on {x.device}, the run's device is {device}")


@contextlib.contextmanager
def device_hooks(device):
    """Every module's forward checks its parameters, buffers and tensor inputs against `device`."""
    device = torch.device(device)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, inputs: _check_module(module, inputs, device))
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def guarded(device="cpu", allow: dict[str, str] | None = None):
    """Both guards together, for a smoke fit or a predictor call."""
    guard = OffDeviceGuard(allow)
    with device_hooks(device), guard:
        yield guard
