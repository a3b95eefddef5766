"""Starting or attaching to Ray: embedded local Ray unless --address / RAY_ADDRESS names a cluster."""

from __future__ import annotations

import os


_STARTED_LOCAL = False  # init_ray started an embedded Ray in this process (not a cluster named by an address)


def started_local_ray() -> bool:
    return _STARTED_LOCAL


def init_ray(address: str | None = None, *, num_cpus: int | None = None, quiet: bool = False) -> None:
    global _STARTED_LOCAL
    import ray

    if ray.is_initialized():
        return
    _import_torch_first()
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs: dict = {"address": target, "log_to_driver": not quiet, "configure_logging": True}
    if target == "local":
        _STARTED_LOCAL = True
        # The dashboard stays on: Train-in-Tune relies on it to clean up placement groups (RAY_NOTES 2).
        kwargs.update(num_cpus=num_cpus, include_dashboard=True, dashboard_host="127.0.0.1")
    if quiet:
        kwargs["logging_level"] = "WARNING"
    ray.init(**kwargs)


def _import_torch_first() -> None:
    """Inside a Ray job's driver (`methodlab submit`, `ray job submit -- methodlab run ...`), importing torch after
    `ray.init()` aborted the process: "Intel oneMKL FATAL ERROR: Cannot load .../torch/lib/libtorch_cpu.so"
    (Ray 2.60, torch 2.13 CPU; the same driver outside a job, or torch imported before ray.init(), was fine).
    Every runner uses torch anyway, so load it before Ray connects."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass


def shutdown_ray() -> None:
    global _STARTED_LOCAL
    import ray

    if ray.is_initialized():
        ray.shutdown()
    _STARTED_LOCAL = False


def terminate_processes(procs: list, timeout: float = 15.0) -> None:
    """SIGTERM every psutil.Process, wait up to `timeout`, SIGKILL the ones still alive. Processes that are
    already gone are skipped (Ray's own children often exit while their parent is being stopped)."""
    import psutil

    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
