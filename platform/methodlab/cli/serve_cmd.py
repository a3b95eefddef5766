"""`methodlab serve SERVE.yaml | --from-sweep DIR`: deploy with Ray Serve on 127.0.0.1 and keep serving."""

from __future__ import annotations

import time
from typing import Optional

import typer

from methodlab.cli.common import console, friendly


def deploy(apps: list[dict], host: str = "127.0.0.1", port: int = 8000, address: str | None = None) -> list[str]:
    """Start Serve and deploy [{name, route_prefix, args}]; returns the predict URLs."""
    from ray import serve

    from methodlab.runners.ray_session import init_ray
    from methodlab.serving.app import build
    from methodlab.specs.serve import AppArgs
    from methodlab.serving.checkpoints import resolve_checkpoints

    for app in apps:  # fail on a missing checkpoint before Ray starts
        resolve_checkpoints(AppArgs.model_validate(app["args"]))
    init_ray(address)
    serve.start(http_options={"host": host, "port": port})
    urls = []
    for app in apps:
        route = app.get("route_prefix") or f"/{app['name']}"
        serve.run(build(app["args"]), name=app["name"], route_prefix=route)
        urls.append(f"http://{host}:{port}{route.rstrip('/')}/predict")
    return urls


@friendly
def serve_cmd(
    serve_file: Optional[str] = typer.Argument(None, help="serve/<app>.yaml (Ray Serve config schema)."),
    from_sweep: Optional[str] = typer.Option(None, "--from-sweep", help="Serve a sweep's best trials (multiplexed)."),
    top_k: int = typer.Option(3, help="With --from-sweep: how many of the best trials to serve."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8000),
    address: Optional[str] = typer.Option(None, envvar="RAY_ADDRESS"),
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
        port = (raw.get("http_options") or {}).get("port", port)
    else:
        slug = read_summary(from_sweep)["method"].iloc[0]
        apps = [{"name": slug, "route_prefix": f"/{slug}", "args": {"method": slug, "checkpoints_root": from_sweep, "top_k": top_k}}]
    urls = deploy(apps, host, port, address)
    for u in urls:
        console.print(f"[bold green]serving[/] POST {u}   (GET {u.rsplit('/', 1)[0]}/schema)")
    if block:
        console.print("Ctrl-C to stop")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            from ray import serve

            serve.shutdown()
