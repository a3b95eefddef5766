"""The one device, precision and thread policy. The runners decide; a method only reads `ctx.device`.

- device: `cuda` when the job asks for a GPU (`scaling.use_gpu`, or a Tune trial's `gpu` share) and torch
  sees one, else `cpu`. A GPU asked for and not there is a one-line error before anything starts, never a
  silent CPU run.
- precision: fp32 | bf16 | fp16 (autocast; GradScaler for fp16), from `scaling.precision`.
- threads: torch threads = the job's `cpus_per_worker` (or `scaling.torch_threads`); a method config may
  only narrow that (`ctx.limit_threads`).

Nothing here imports torch at module import: listing methods must stay free of the torch stack."""

from __future__ import annotations

from typing import Any

from methodlab.core.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")


class GpuUnavailableError(ConfigError):
    """A GPU was asked for and none can be had (local machine, Ray cluster, or the trial's worker)."""


def cuda_visible() -> bool:
    """Whether torch can use a CUDA device in this process (CUDA build and a visible GPU)."""
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(use_gpu: bool, *, where: str = "scaling.use_gpu", gpu_ids: Any = None) -> Any:
    """The run's `torch.device`: cuda:<current> when a GPU is asked for and visible, else cpu.

    `gpu_ids` (Ray's assignment, for workers and trials) only enriches the error: Ray sets
    CUDA_VISIBLE_DEVICES, so torch's current device is the one Ray gave this process."""
    import torch

    if not use_gpu:
        return torch.device("cpu")
    if not cuda_visible():
        build = f"torch {torch.__version__} is a CPU build" if not torch.version.cuda else \
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
        given = f"; Ray assigned GPU ids {list(gpu_ids)}" if gpu_ids else ""
        raise GpuUnavailableError(f"a GPU was asked for but {build}{given}: set use_gpu: false (or a trial "
                                  "gpu share of 0) to run on the CPU, or install a CUDA build of torch "
                                  "(README: GPUs)", field=where)
    return torch.device("cuda", torch.cuda.current_device())


def check_method_accepts(spec, scaling, *, where: str | None = None, setting: str = "train") -> None:
    """Refuse, before anything starts, what a method declares it cannot take (SPEC.cpu_only,
    SPEC.precisions, SPEC.no_compile, SPEC.single_worker), each with the method's own reason."""
    if getattr(scaling, "use_gpu", False) and spec.cpu_only:
        raise ConfigError(f"{spec.slug} runs on the CPU only ({spec.cpu_only}); set use_gpu: false and use "
                          "cpus_per_worker for speed", where=where, field="scaling.use_gpu")
    precision = getattr(scaling, "precision", "fp32")
    if precision not in spec.precisions:
        reason = f" ({spec.precision_note})" if spec.precision_note else ""
        raise ConfigError(f"{spec.slug} takes precision {' | '.join(spec.precisions)}, not {precision!r}{reason}",
                          where=where, field="scaling.precision")
    single = spec.single_worker_reason(setting)
    if getattr(scaling, "num_workers", 1) > 1 and single:
        what = spec.slug if spec.single_worker or setting == "train" else f"{spec.slug} setting {setting!r}"
        raise ConfigError(f"{what} does not run data-parallel ({single}); set num_workers: 1 "
                          "and run seeds or settings side by side as parallel Tune trials (methodlab tune)",
                          where=where, field="scaling.num_workers")
    if getattr(scaling, "compile", False) and spec.no_compile:
        raise ConfigError(f"{spec.slug} cannot run under torch.compile ({spec.no_compile}); set compile: false",
                          where=where, field="scaling.compile")


def thread_count(cpus_per_worker: float, torch_threads: int | None = None) -> int:
    """torch threads for one worker: scaling.torch_threads if given, else its CPUs (at least 1)."""
    return int(torch_threads) if torch_threads else max(1, int(cpus_per_worker))


def set_threads(n: int | None) -> int | None:
    """torch.set_num_threads(n) when n is given; returns the previous count (None when nothing changed)."""
    if not n:
        return None
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:  # numpy / scipy BLAS and OpenMP pools follow the same count (numpy-only methods)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=int(n))
    except ImportError:
        pass
    return before


def set_tf32(enabled: bool) -> None:
    """TF32 matmuls on Ampere+ GPUs (scaling.tf32): a process-wide setting the runner owns, never a method."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    torch.backends.cudnn.allow_tf32 = bool(enabled)


def to_cpu(obj: Any) -> Any:
    """A CPU copy of every tensor in a nested dict / list / tuple (checkpoints load anywhere)."""
    if hasattr(obj, "detach") and hasattr(obj, "device"):
        return obj.detach().to("cpu")
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def iter_tensors(obj: Any):
    """Every tensor in a nested dict / list / tuple (an op's args and kwargs, a batch)."""
    if hasattr(obj, "device") and hasattr(obj, "dim"):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from iter_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from iter_tensors(o)


def to_device(obj: Any, device: Any, non_blocking: bool = False) -> Any:
    """Move every tensor in a nested dict / list / tuple to `device` (other values unchanged)."""
    if hasattr(obj, "to") and hasattr(obj, "device"):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device, non_blocking) for v in obj)
    return obj
