"""Ray Serve over real HTTP: the generic app with a smoke checkpoint, good and bad input, the
replica survives; multiplexing by model id; `serve run serve/<app>.yaml` with Ray's own CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from methodlab.core.checkpoint import latest_checkpoint
from tests.reliability.helpers import free_port, post_until_ok
from tests.smoke import smoke_run

pytestmark = pytest.mark.ray
PORT = 8123


@pytest.fixture(scope="module")
def endpoint(ray_cluster, smoke_root, tmp_path_factory):
    from ray import serve

    from methodlab.serving.app import build

    run = smoke_run("grokking_flatness", smoke_root)
    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    serve.run(build({"method": "grokking_flatness", "checkpoint": str(ckpt), "max_body_bytes": 4096}),
              name="grok", route_prefix="/grok")
    yield f"http://127.0.0.1:{PORT}/grok"
    serve.delete("grok")


def test_predict_schema_health(endpoint):
    r = httpx.post(f"{endpoint}/predict", json={"a": 3, "b": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"c", "probs_top5", "correct", "model_step"} and body["correct"] == (body["c"] == 8)
    many = httpx.post(f"{endpoint}/predict", json=[{"a": i, "b": 1} for i in range(10)])
    assert many.status_code == 200 and len(many.json()) == 10
    schema = httpx.get(f"{endpoint}/schema").json()
    a = schema["input"]["properties"]["a"]
    assert 0 in [a.get("minimum")] + [x.get("minimum") for x in a.get("anyOf", [])] and "output" in schema
    assert httpx.get(f"{endpoint}/healthz").json()["status"] == "ok"
    traj = httpx.get(f"{endpoint}/metrics").json()
    assert len(traj["steps"]) == len(traj["val_acc"]) > 0


@pytest.mark.parametrize("payload,status,field", [
    ({"a": 30, "b": 1}, 422, "a"),                 # outside the trained modulus
    ({"a": -1, "b": 1}, 422, "a"),                 # schema bound
    ({"a": "x", "b": 1}, 422, "a"),                # wrong type
    ({"a": 1, "b": 1, "op": "-"}, 422, "op"),      # not the trained operation
    ({"a": 1, "b": 1, "zzz": 1}, 422, "zzz"),      # unknown field
    ([], 422, "<body>"),
    ([{"a": 1, "b": 1}, {"a": 99, "b": 1}], 422, "[1].a"),
])
def test_bad_input_is_4xx_naming_the_field(endpoint, payload, status, field):
    r = httpx.post(f"{endpoint}/predict", json=payload)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_malformed_nan_and_oversize(endpoint):
    assert httpx.post(f"{endpoint}/predict", content=b"{not json").status_code == 400
    assert httpx.post(f"{endpoint}/predict", content=b'{"a": NaN, "b": 1}').status_code == 400
    big = json.dumps([{"a": 1, "b": 1}] * 400).encode()
    assert httpx.post(f"{endpoint}/predict", content=big).status_code == 413
    assert httpx.get(f"{endpoint}/nope").status_code == 404
    # the replica kept serving
    assert httpx.post(f"{endpoint}/predict", json={"a": 1, "b": 2}).status_code == 200


def test_concurrent_requests_are_batched_and_correct(endpoint):
    import concurrent.futures as cf

    def one(i):
        return httpx.post(f"{endpoint}/predict", json={"a": i % 23, "b": 3}, timeout=30)

    with cf.ThreadPoolExecutor(16) as pool:
        rs = list(pool.map(one, range(64)))
    assert all(r.status_code == 200 for r in rs)


def test_multiplexed_top_k_from_sweep_folder(ray_cluster, smoke_root, tmp_path):
    import pandas as pd
    from ray import serve

    from methodlab.serving.app import build

    run = smoke_run("grokking_flatness", smoke_root)
    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    pd.DataFrame([{"trial_id": "t_good", "method": "grokking_flatness", "metric": "val/accuracy", "checkpoint": str(ckpt), "checkpoint_metric": 0.9},
                  {"trial_id": "t_bad", "method": "grokking_flatness", "metric": "val/accuracy", "checkpoint": str(ckpt), "checkpoint_metric": 0.1}]
                 ).to_parquet(tmp_path / "summary.parquet")
    serve.run(build({"method": "grokking_flatness", "checkpoints_root": str(tmp_path), "top_k": 2}),
              name="sweep", route_prefix="/sweep")
    url = f"http://127.0.0.1:{PORT}/sweep"
    assert httpx.get(f"{url}/schema").json()["models"] == ["t_good", "t_bad"]
    r = httpx.post(f"{url}/predict", json={"a": 1, "b": 2}, headers={"serve_multiplexed_model_id": "t_bad"})
    assert r.status_code == 200
    r = httpx.post(f"{url}/predict", json={"a": 1, "b": 2}, headers={"serve_multiplexed_model_id": "t_zzz"})
    assert r.status_code == 404 and "t_good" in r.json()["error"]
    serve.delete("sweep")


def test_serve_run_with_rays_own_cli(smoke_root, tmp_path, repo):
    """`serve run serve/grokking_flatness.yaml` (Ray's CLI) with the checkpoint arg overridden, as a user would."""
    run = smoke_run("grokking_flatness", smoke_root)
    cfg = yaml.safe_load((repo / "serve/grokking_flatness.yaml").read_text())
    port = free_port()
    cfg["http_options"]["port"] = port
    args = cfg["applications"][0]["args"]
    args.pop("checkpoints_root")
    args["checkpoint"] = str(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    serve_bin = Path(sys.executable).with_name("serve")
    env = {**os.environ, "RAY_ADDRESS": ""}
    env.pop("RAY_ADDRESS")
    # --address local: its own embedded Ray, never the test session's cluster
    proc = subprocess.Popen([str(serve_bin), "run", "--address", "local", str(path)], cwd=repo, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        r = post_until_ok(f"http://127.0.0.1:{port}/grokking_flatness/predict", {"a": 2, "b": 2}, 120)
        assert r is not None and r.status_code == 200, r and r.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # SIGTERM shuts Serve and its own Ray down cleanly
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_deploy_leaves_the_replica_access_log_off(ray_cluster, smoke_root):
    """`methodlab serve`'s deploy(): no access line per request in the replica's log (at 1,000s of requests a
    second, Serve's default per-request line, streamed to the driver, cost the replica its throughput)."""
    import ray
    from ray import serve

    from methodlab.cli.serve_cmd import deploy

    run = smoke_run("grokking_flatness", smoke_root)
    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    # PORT: the session's Serve may already listen there (a running Serve keeps its first http_options)
    url = deploy([{"name": "quietlog", "route_prefix": "/quietlog",
                   "args": {"method": "grokking_flatness", "checkpoint": str(ckpt)}}], "127.0.0.1", PORT)[0]
    try:
        for _ in range(20):
            assert httpx.post(url, json={"a": 3, "b": 4, "op": "+"}, timeout=30).status_code == 200
        logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs" / "serve"
        replica_logs = [f for f in logs.glob("replica_quietlog_*.log")]
        assert replica_logs, sorted(p.name for p in logs.iterdir())
        text = "".join(f.read_text() for f in replica_logs)
        assert "POST /quietlog" not in text and " 200 " not in text, text[-2000:]
    finally:
        serve.delete("quietlog")
