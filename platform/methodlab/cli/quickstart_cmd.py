"""`methodlab quickstart` (= `make demo`): sweep -> results -> serve the best -> a real HTTP request."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import typer

from methodlab.cli.common import console, friendly

SPACE = "search_spaces/grokking_flatness/regularizers.yaml"


def repo_root() -> Path:
    here = Path.cwd()
    if (here / SPACE).exists():
        return here
    return Path(__file__).resolve().parents[3]  # platform/methodlab/cli -> repo


def post(url: str, payload) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@friendly
def quickstart(
    storage: str = typer.Option("results", help="Where the sweep folder `quickstart` goes."),
    port: int = typer.Option(8000, help="Serve HTTP port on 127.0.0.1."),
    num_samples: int = typer.Option(4, help="Trials (the first 4 are one per regularizer)."),
    keep_serving: bool = typer.Option(False, help="Leave the endpoint up until Ctrl-C."),
) -> None:
    """The main job: a Tune sweep of the grokking regularizers (Optuna + ASHA) on the embedded local Ray,
    its results table and curves, the best checkpoint on Ray Serve, and one real HTTP request."""
    from methodlab.cli.results_cmd import plot_curves, show_table
    from methodlab.cli.serve_cmd import deploy, stop_serve
    from methodlab.cli.common import checked_storage
    from methodlab.runners.paths import is_uri
    from methodlab.runners.ray_session import shutdown_ray
    from methodlab.runners.tune import run_tune
    from methodlab.specs.files import load_search_space

    t0 = time.time()
    root = repo_root()
    store = checked_storage(None, str(root / storage) if not Path(storage).is_absolute() and not is_uri(storage) else storage)
    loaded = load_search_space(root / SPACE, [f"num_samples={num_samples}", "config.log_every=100"])
    sweep_dir = Path(store) / "quickstart"
    if sweep_dir.exists():
        shutil.rmtree(sweep_dir)
    console.rule("1/3  Ray Tune sweep of the grokking regularizers (Optuna + ASHA)")
    console.print(f"{loaded.space.num_samples} trials, {loaded.space.max_concurrent_trials} at a time, metric "
                  f"{loaded.metric} ({loaded.mode}); about 5 minutes on 2 cores")
    try:
        out = run_tune(loaded, "quickstart", store)
        console.rule("2/3  Results")
        show_table(out["sweep_dir"])
        png = plot_curves([out["sweep_dir"]], sweep_dir / "curves.png", ["val/accuracy", "train/accuracy", "rf", "cdnv"])
        console.print(f"learning curves: {png}")
        console.rule("3/3  Ray Serve: the best checkpoints behind one endpoint")
        [url] = deploy([{"name": "grokking_flatness", "route_prefix": "/grokking_flatness",
                         "args": {"method": "grokking_flatness", "checkpoints_root": str(sweep_dir), "top_k": 2}}],
                       port=port)
        status, body = post(url, {"a": 3, "b": 5, "op": "+"})
        console.print(f"POST {url} {{\"a\": 3, \"b\": 5, \"op\": \"+\"}} -> {status} {json.dumps(body)}")
        status_bad, body_bad = post(url, {"a": 300, "b": 5})
        console.print(f"POST {url} {{\"a\": 300, \"b\": 5}} -> {status_bad} {json.dumps(body_bad)}")
        if status != 200:
            raise typer.Exit(1)
        if keep_serving:
            console.print("serving until Ctrl-C")
            while True:
                time.sleep(3600)
    finally:
        try:
            stop_serve()
        except Exception:  # noqa: BLE001 - Serve may never have started
            pass
        shutdown_ray()
    console.rule("done")
    console.print(f"sweep folder: {sweep_dir}\n  summary: {sweep_dir / 'summary.parquet'}\n  curves:  {sweep_dir / 'curves.png'}")
    console.print(f"serve it again: serve run serve/grokking_flatness.yaml   (or methodlab serve --from-sweep {sweep_dir})")
    console.print(f"total time: {time.time() - t0:.0f}s")
