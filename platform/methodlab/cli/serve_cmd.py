"""`methodlab serve SERVE.yaml | --from-sweep DIR`: deploy with Ray Serve on 127.0.0.1 and keep serving.

Speed defaults (measured in BENCHMARKS.md, "serve_load"): when methodlab starts the local Ray itself it
turns on Ray's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY=1; Serve's Python proxy tops out near 180
req/s on 2 cores, HAProxy several times that) and Serve's per-request access log is off (`--access-log`
turns it back on). Set RAY_SERVE_ENABLE_HA_PROXY=0 to opt out. A Ray cluster named by --address /
RAY_ADDRESS keeps its own settings: these variables only act when Ray's processes start."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from typing import Optional

import typer

from methodlab.cli.common import console, friendly

HAPROXY_FLAG = "RAY_SERVE_ENABLE_HA_PROXY"
# Ray defaults these to the shared /tmp/haproxy-serve: two local Serve instances on one machine would
# overwrite each other's HAProxy config and admin socket, so each methodlab-started Ray gets its own.
HAPROXY_PATHS = {"RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": "haproxy.cfg", "RAY_SERVE_HAPROXY_SOCKET_PATH": "admin.sock",
                 "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": "", "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": "server-state",
                 "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": "metrics.sock"}


def local_serve_env() -> None:
    """Environment for a Ray that methodlab is about to start for serving; a value the user set wins."""
    os.environ.setdefault(HAPROXY_FLAG, "1")
    if os.environ[HAPROXY_FLAG] == "1":
        # AF_UNIX socket paths are limited to ~107 bytes: keep the folder short.
        folder = tempfile.mkdtemp(prefix="mlab-haproxy-")
        for var, name in HAPROXY_PATHS.items():
            os.environ.setdefault(var, os.path.join(folder, name) if name else folder)


def haproxy_pids() -> list[int]:
    """HAProxy processes started under this process (by Ray's HAProxy manager actor)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name().startswith("haproxy"):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def stop_pids(pids: list[int], timeout: float = 5.0) -> None:
    """HAProxy is a child of a Ray worker: when Ray shuts down it can be orphaned and keep port 8000.
    Stop the ones recorded at start-up (by pid, never by name) that are still alive."""
    import psutil

    from methodlab.runners.ray_session import terminate_processes

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.name().startswith("haproxy"):
                procs.append(p)
        except psutil.Error:
            pass
    terminate_processes(procs, timeout=timeout)


def deploy(apps: list[dict], host: str = "127.0.0.1", port: int = 8000, address: str | None = None,
           access_log: bool = False) -> list[str]:
    """Start Serve and deploy [{name, route_prefix, args}]; returns the predict URLs."""
    import ray

    from methodlab.serving.app import build
    from methodlab.specs.serve import AppArgs
    from methodlab.serving.checkpoints import resolve_checkpoints

    for app in apps:  # fail on a missing checkpoint before Ray starts
        resolve_checkpoints(AppArgs.model_validate(app["args"]))
    if address is None and not os.environ.get("RAY_ADDRESS") and not ray.is_initialized():
        local_serve_env()  # before Ray starts: its processes read these variables at start-up
    from ray import serve

    from methodlab.runners.ray_session import init_ray

    init_ray(address)
    serve.start(http_options={"host": host, "port": port}, logging_config={"enable_access_log": access_log})
    urls = []
    for app in apps:
        route = app.get("route_prefix") or f"/{app['name']}"
        # per application too: serve.start's logging_config reaches only Serve's own actors, and a replica left at
        # the default logs (and streams to this driver) one access line per request: 1,000s of lines a second
        serve.run(build(app["args"]), name=app["name"], route_prefix=route,
                  logging_config={"enable_access_log": access_log})
        urls.append(f"http://{host}:{port}{route.rstrip('/')}/predict")
    return urls


STOP_BUDGET_S = 9.0  # Kubernetes and systemd send SIGKILL after their grace period (often 10 s): be done before


def stop_serve() -> None:
    """Stop Serve in the order Ray expects. On the embedded Ray this process started: drain and delete the
    applications, then (the caller) stop Ray, which takes Serve's controller with it; serve.shutdown() there
    would leave its graceful_shutdown call pending on a controller that ends by being killed, which the
    raylet prints as a failed task. On a cluster: serve.shutdown(), and the cluster keeps running."""
    import ray
    from ray import serve

    from methodlab.runners.ray_session import started_local_ray

    if not ray.is_initialized():
        return
    if started_local_ray():
        for name in list(serve.status().applications):
            serve.delete(name)
    else:
        serve.shutdown()


def serve_until_stopped() -> None:
    """Block until Ctrl-C or SIGTERM, then stop within STOP_BUDGET_S: Serve first (its controller drains the
    replicas), then Ray, then any process this one started that is still alive (Ray workers, an orphaned
    HAProxy). A watchdog stops whatever is left if the graceful path overruns the budget."""
    import threading

    import psutil
    from ray import serve

    from methodlab.runners.ray_session import shutdown_ray, terminate_processes

    pids = haproxy_pids()

    def on_term(signum, frame):  # SIGTERM (kill, systemd, kubelet, a test) takes the same clean path as Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        family = psutil.Process().children(recursive=True)  # Ray's daemons, workers, HAProxy: all ours
        pids = sorted(set(pids + haproxy_pids()))
        t0 = time.monotonic()

        def watchdog():
            console.print(f"[yellow]stop took over {STOP_BUDGET_S:.0f} s: stopping the remaining processes[/]")
            terminate_processes([p for p in family if p.is_running()], timeout=0.5)
            os._exit(1)

        timer = threading.Timer(STOP_BUDGET_S, watchdog)
        timer.daemon = True
        timer.start()
        try:
            stop_serve()
        finally:
            shutdown_ray()
            stop_pids(pids, timeout=2.0)
            left = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            terminate_processes(left, timeout=max(0.5, STOP_BUDGET_S - 1 - (time.monotonic() - t0)))
            timer.cancel()


@friendly
def serve_cmd(
    serve_file: Optional[str] = typer.Argument(None, help="serve/<app>.yaml (Ray Serve config schema)."),
    from_sweep: Optional[str] = typer.Option(None, "--from-sweep", help="Serve a sweep's best trials (multiplexed)."),
    top_k: int = typer.Option(3, help="With --from-sweep: how many of the best trials to serve."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: Optional[int] = typer.Option(None, help="HTTP port (default: the serve file's http_options.port, else 8000)."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS"),
    access_log: bool = typer.Option(False, "--access-log/--no-access-log",
                                    help="Serve's per-request access log (off: it costs throughput)."),
    block: bool = typer.Option(True, "--block/--no-block", help="Keep serving until Ctrl-C."),
) -> None:
    """Deploy the generic methodlab app for a method's checkpoints.

    Example: methodlab serve --from-sweep results/quickstart   (then POST /grokking_flatness/predict)
    """
    from methodlab.core.errors import ConfigError
    from methodlab.runners.results import read_summary

    if (serve_file is None) == (from_sweep is None):
        raise ConfigError("give either SERVE.yaml or --from-sweep DIR")
    if serve_file:
        from methodlab.specs.files import load_serve_file

        raw = load_serve_file(serve_file)
        apps = [{"name": a.get("name", "default"), "route_prefix": a.get("route_prefix"), "args": a["args"]}
                for a in raw["applications"]]
        if port is None:  # an explicit --port wins over the file
            port = (raw.get("http_options") or {}).get("port", 8000)
    else:
        slug = read_summary(from_sweep)["method"].iloc[0]
        apps = [{"name": slug, "route_prefix": f"/{slug}", "args": {"method": slug, "checkpoints_root": from_sweep, "top_k": top_k}}]
    urls = deploy(apps, host, port or 8000, address, access_log=access_log)
    for u in urls:
        console.print(f"[bold green]serving[/] POST {u}   (GET {u.rsplit('/', 1)[0]}/schema)")
    if block:
        console.print("Ctrl-C to stop")
        serve_until_stopped()
