"""Starting or attaching to Ray: embedded local Ray unless --address / RAY_ADDRESS names a cluster."""

from __future__ import annotations

import contextlib
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


def cluster_address() -> str | None:
    """host:port of the GCS this process is connected to (None when unknown, e.g. over Ray Client)."""
    import ray

    try:
        addr = ray.get_runtime_context().gcs_address
    except Exception:
        return None
    return addr if isinstance(addr, str) and ":" in addr and "://" not in addr else None


@contextlib.contextmanager
def controller_knows_its_cluster():
    """While a TorchTrainer starts: the Train controller, and the detached PlacementGroupCleaner it launches, get
    RAY_ADDRESS = this process's cluster. The cleaner queries the State API with no address; without RAY_ADDRESS
    Ray looks for "the" Ray of the machine and, with a user's own Ray running beside methodlab's embedded one,
    fails every few seconds with a 24-line "Found multiple active Ray instances" traceback (or, after a
    `ray start`, asks the user's cluster about our controller). Train V2 passes the variables named in
    ENV_VARS_TO_PROPAGATE from the driver's environment to the controller (and on to its workers)."""
    addr = cluster_address()
    try:
        from ray.train.v2._internal import constants as train_constants

        names = train_constants.ENV_VARS_TO_PROPAGATE
    except (ImportError, AttributeError):
        names = None
    if not isinstance(names, set):
        yield
        return
    # the test probes and faults of core/faults.py set in this process reach the workers too
    from methodlab.core import faults

    wanted = {n for n in faults.ALL if os.environ.get(n)} | ({"RAY_ADDRESS"} if addr else set())
    added = wanted - names
    before = os.environ.get("RAY_ADDRESS")
    names.update(added)
    if addr:
        os.environ["RAY_ADDRESS"] = addr
    try:
        yield
    finally:
        names.difference_update(added)
        if before is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = before


def exit_now(code: int) -> None:
    """End the CLI process after an interrupted Ray run: stop (or leave) Ray as ray.shutdown does, flush, and
    exit without the interpreter's teardown. After ray.shutdown() a Train driver spent a further 6-8 s in
    native finalization ("no Python frame") on a loaded 2-core machine, which broke the promise that Ctrl-C
    ends a run within 10 s."""
    import logging
    import sys

    try:
        shutdown_ray()
    except BaseException:  # a second Ctrl-C, or a Ray already half gone: the processes die with this one
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    logging.shutdown()
    os._exit(code)


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


def check_cluster_gpus(per_unit: float, *, what: str, field: str, autoscaling: bool = False) -> None:
    """Refuse, before any trainer or trial starts, a GPU request the Ray cluster cannot meet: judged by
    `ray.cluster_resources()` (never by the driver's own hardware, which may be a laptop attached to a
    cluster). `autoscaling`: the cluster adds GPU nodes on demand, so an empty pool is not an error."""
    import ray

    from methodlab.core.device import GpuUnavailableError

    if per_unit <= 0 or autoscaling:
        return
    have = float(ray.cluster_resources().get("GPU", 0.0))
    if have <= 0:
        raise GpuUnavailableError(
            f"{what} asks for {per_unit:g} GPU each but the Ray cluster has none (ray.cluster_resources() "
            "shows no GPU): set it to 0 to run on CPUs, point --address at a GPU cluster, or pass "
            "--autoscaling if the cluster adds GPU nodes on demand", field=field)
    if per_unit > have:
        raise GpuUnavailableError(f"{what} asks for {per_unit:g} GPUs each; the whole Ray cluster has {have:g} "
                                  "(pass --autoscaling if it adds GPU nodes on demand)", field=field)
