"""`methodlab serve SERVE.yaml | --from-sweep DIR`: deploy with Ray Serve on 127.0.0.1 and keep serving.

Speed defaults (measured in BENCHMARKS.md, "serve_load"): when methodlab starts the local Ray itself it
turns on Ray's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY=1; Serve's Python proxy tops out near 180
req/s on 2 cores, HAProxy several times that) and Serve's per-request access log is off (`--access-log`
turns it back on). Set RAY_SERVE_ENABLE_HA_PROXY=0 to opt out. A Ray cluster named by --address /
RAY_ADDRESS keeps its own settings: these variables only act when Ray's processes start."""

from __future__ import annotations

import atexit
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


_HAPROXY_FOLDER: str | None = None  # the HAProxy folder local_serve_env made for this process's Ray


def local_serve_env() -> None:
    """Environment for a Ray that methodlab is about to start for serving; a value the user set wins."""
    global _HAPROXY_FOLDER
    os.environ.setdefault(HAPROXY_FLAG, "1")
    if os.environ[HAPROXY_FLAG] == "1":
        # AF_UNIX socket paths are limited to ~107 bytes: keep the folder short.
        folder = tempfile.mkdtemp(prefix="mlab-haproxy-")
        for var, name in HAPROXY_PATHS.items():
            os.environ.setdefault(var, os.path.join(folder, name) if name else folder)
        if os.environ["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"].startswith(folder + os.sep):
            _HAPROXY_FOLDER = folder  # our own config folder: an HAProxy reading a config in it is this Ray's
            atexit.register(stop_session_haproxy)  # after ray.shutdown's own atexit hook (LIFO): the orphans


def _is_haproxy(p) -> bool:
    import psutil

    try:
        return p.name().startswith("haproxy")
    except psutil.Error:
        return False


def haproxy_pids() -> list[int]:
    """HAProxy processes started under this process (by Ray's HAProxy manager actor)."""
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True) if _is_haproxy(p)]


def session_haproxy() -> list:
    """HAProxy processes of this process's Ray, wherever they now hang in the process tree: Ray's HAProxy
    manager starts a new HAProxy on every config change (`-sf`, a graceful reload, also while the applications
    are being deleted), and when Ray stops, the one it started last is orphaned with the port still bound.
    Found by their config file, which lives in the folder local_serve_env made for this process only."""
    import psutil

    if _HAPROXY_FOLDER is None:
        return []
    prefix = _HAPROXY_FOLDER + os.sep
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if (p.info["name"] or "").startswith("haproxy") and any(a.startswith(prefix) for a in p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


def stop_session_haproxy(timeout: float = 1.0) -> None:
    from methodlab.runners.ray_session import terminate_processes

    terminate_processes(session_haproxy(), timeout=timeout)


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


def _on_term(signum, frame):  # SIGTERM (kill, systemd, kubelet, a test) takes the same clean path as Ctrl-C
    raise KeyboardInterrupt


def catch_sigterm() -> None:
    """SIGTERM -> KeyboardInterrupt in the main thread. Set again after ray.init, whose failure-signal handler
    (C++) replaces Python's and aborts the process (exit -6) on SIGTERM."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)


def deploy(apps: list[dict], host: str = "127.0.0.1", port: int = 8000, address: str | None = None,
           access_log: bool = False, sigterm: bool = False) -> list[str]:
    """Start Serve and deploy [{name, route_prefix, args}]; returns the predict URLs. `sigterm`: SIGTERM raises
    KeyboardInterrupt from the moment Ray runs (a stop during the deployment takes the clean path too)."""
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

    from methodlab.runners.ray_session import check_cluster_gpus

    init_ray(address)
    if sigterm:
        catch_sigterm()
    for app in apps:  # a replica asking for a GPU the cluster lacks would stay pending forever: refuse it now
        check_cluster_gpus(AppArgs.model_validate(app["args"]).num_gpus, what=f"application {app['name']}: "
                           "args.num_gpus: every replica", field="args.num_gpus")
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
# How long deleted applications get to finish their requests in flight before Ray stops. With the HAProxy ingress
# Serve raises the ingress replica's graceful_shutdown_timeout_s to 35 s (its 30 s direct-ingress drain + 5):
# waiting for that would overrun any grace period, so the wait is bounded here and Ray's stop ends the rest.
APP_STOP_S = 2.0


def _haproxy_clients() -> int:
    """Client connections open on this Ray's HAProxy (its listening ports): requests that may be in flight."""
    import psutil

    n = 0
    for p in session_haproxy():
        try:
            conns = (getattr(p, "net_connections", None) or p.connections)(kind="tcp")  # psutil < 6: connections
        except psutil.Error:
            continue
        ports = {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
        n += sum(1 for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in ports)
    return n


def stop_serve(timeout: float = APP_STOP_S) -> None:
    """Stop Serve in the order Ray expects. On the embedded Ray this process started: delete the applications
    (new requests find no route) and wait up to `timeout` s for the requests in flight: until the applications
    are gone, or with the HAProxy ingress until no client connection is open on it (its replicas would drain
    for 30 s more). Then (the caller) stop Ray, which takes Serve's controller and replicas with it;
    serve.shutdown() there would leave its graceful_shutdown call pending on a controller that ends by being
    killed, which the raylet prints as a failed task. On a cluster: serve.shutdown(), and the cluster keeps
    running."""
    import ray
    from ray import serve

    from methodlab.runners.ray_session import started_local_ray

    if not ray.is_initialized():
        return
    if started_local_ray():
        names = list(serve.status().applications)
        for name in names:
            serve.delete(name, _blocking=False)
        deadline = time.monotonic() + timeout
        while names and time.monotonic() < deadline:
            if session_haproxy() and _haproxy_clients() == 0:
                break
            time.sleep(0.1)
            names = list(serve.status().applications)
    else:
        serve.shutdown()


def _is_ray_or_haproxy(p) -> bool:
    """Ray's daemons and workers (raylet, gcs_server, ray::..., python running ray/...) or HAProxy."""
    name = p.name()
    if name.startswith(("haproxy", "ray", "gcs_server")):
        return True
    args = p.cmdline()[:3]
    return any("/ray/" in a or a.startswith(("ray::", "ray.")) for a in args)


def _own_group() -> list:
    """Ray's and HAProxy processes in this process's group when it leads one (a shell job, a container's PID 1, a
    test's start_new_session): they inherit it, also the HAProxy that Ray's stop orphans. Others in the group
    (`| tee log` in a pipeline this process leads) are left alone."""
    import psutil

    me = os.getpid()
    if os.getpgrp() != me:
        return []  # another process leads the group (a script that ran us, a pipeline): not ours to stop
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != me and os.getpgid(p.pid) == me and _is_ray_or_haproxy(p):
                out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


def _alive(procs: list) -> list:
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def stop_everything(family: list, haproxy: list[int], t0: float) -> None:
    """After the applications: Ray, then what Ray leaves running: the HAProxy processes of this Ray (found by
    their config folder and by pid), then every process started under this one and the Ray and HAProxy processes
    of its process group."""
    import psutil

    from methodlab.runners.ray_session import shutdown_ray, terminate_processes

    family = family + psutil.Process().children(recursive=True)  # with the HAProxy started while deleting the apps
    try:
        shutdown_ray()
    finally:
        stop_session_haproxy(timeout=1.0)
        stop_pids(haproxy, timeout=1.0)
        mine = {p.pid: p for p in family}
        for p in psutil.Process().children(recursive=True) + _own_group():
            mine.setdefault(p.pid, p)
        left = _alive(list(mine.values()))
        terminate_processes(left, timeout=max(0.5, min(1.0, STOP_BUDGET_S - 1 - (time.monotonic() - t0))))


def serve_until_stopped(wait: bool = True) -> None:
    """Block until Ctrl-C or SIGTERM (`wait`; else stop now), then stop within STOP_BUDGET_S: the applications
    first (bounded, APP_STOP_S), then Ray, then any process of this one's that is still alive (Ray workers, an
    HAProxy orphaned by Ray's stop). A watchdog stops whatever is left if the path overruns the budget."""
    import threading

    import psutil

    pids = haproxy_pids()
    catch_sigterm()
    try:
        while wait:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nor a second Ctrl-C
        family = psutil.Process().children(recursive=True)  # Ray's daemons, workers, HAProxy: all ours
        pids = sorted(set(pids + haproxy_pids()))
        t0 = time.monotonic()

        def watchdog():
            console.print(f"[yellow]stop took over {STOP_BUDGET_S:.0f} s: stopping the remaining processes[/]")
            procs = family + session_haproxy() + psutil.Process().children(recursive=True) + _own_group()
            from methodlab.runners.ray_session import terminate_processes

            terminate_processes(_alive(procs), timeout=0.5)
            os._exit(1)

        timer = threading.Timer(STOP_BUDGET_S, watchdog)
        timer.daemon = True
        timer.start()
        try:
            stop_serve()
        except Exception as err:  # noqa: BLE001 - Ray's processes may be gone already (Ctrl-C reaches the whole group)
            console.print(f"[yellow]Serve did not stop cleanly ({type(err).__name__}): stopping Ray[/]")
        finally:
            stop_everything(family, pids, t0)
            timer.cancel()
        console.print(f"stopped in {time.monotonic() - t0:.1f} s")


def exit_now(code: int = 0) -> None:
    """Exit once everything is stopped, skipping the interpreter's teardown: with Ray's native libraries loaded it
    spent 4-8 s after the last line here (no Python frame running), past a 10 s grace period. Ray is already
    shut down and this process's HAProxy and Ray processes are gone: nothing is left for atexit hooks to do."""
    import logging
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
            pass
    logging.shutdown()
    os._exit(code)


@friendly
def serve_cmd(
    serve_file: Optional[str] = typer.Argument(None, help="serve/<app>.yaml (Ray Serve config schema)."),
    from_sweep: Optional[str] = typer.Option(None, "--from-sweep", help="Serve a sweep's best trials (multiplexed)."),
    top_k: int = typer.Option(3, min=1, max=64, help="With --from-sweep: how many of the best trials to serve."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: Optional[int] = typer.Option(None, min=1, max=65535, help="HTTP port (default: the serve file's http_options.port, else 8000)."),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS",
                                          help="Ray cluster address (default: an embedded local Ray, stopped on exit)."),
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
        from methodlab.cli.results_cmd import readable_run_dir

        readable_run_dir(from_sweep)
        slug = read_summary(from_sweep)["method"].iloc[0]
        apps = [{"name": slug, "route_prefix": f"/{slug}", "args": {"method": slug, "checkpoints_root": from_sweep, "top_k": top_k}}]
    catch_sigterm()  # until Ray starts; deploy() sets it again once ray.init has replaced it
    try:
        urls = deploy(apps, host, port or 8000, address, access_log=access_log, sigterm=True)
    except KeyboardInterrupt:  # stopped while deploying: the same clean stop, exit 0
        console.print("[yellow]stopped while deploying[/]")
        serve_until_stopped(wait=False)
        exit_now(0)
    for u in urls:
        console.print(f"[bold green]serving[/] POST {u}   (GET {u.rsplit('/', 1)[0]}/schema)")
    if block:
        console.print("Ctrl-C to stop")
        serve_until_stopped()
        exit_now(0)
