"""Shared plumbing of the reliability tests: the CLI in a subprocess with its own embedded Ray
(so METHODLAB_FAULT_* reach the Ray workers through the raylet's inherited environment), and the
cleanup of exactly the Ray processes such a run started (never `ray stop`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def cli_env(ray_tmp: str | None = None, **extra: str) -> dict:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0",
           "PYTHONUNBUFFERED": "1"}
    for k in list(env):
        if k.startswith("METHODLAB_FAULT_") or k == "RAY_ADDRESS":
            env.pop(k)
    if ray_tmp:
        env["RAY_TMPDIR"] = ray_tmp  # the subprocess's Ray lives under here: cleanup finds it by path
    env.update({k: str(v) for k, v in extra.items()})
    return env


def ray_tmpdir() -> str:
    return tempfile.mkdtemp(prefix="mlr", dir="/tmp")  # short: Ray's unix sockets live under it


def methodlab(*args: str, env: dict, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "methodlab"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def spawn(*args: str, env: dict, log: Path) -> subprocess.Popen:
    fh = open(log, "w")
    return subprocess.Popen([str(BIN / "methodlab"), *args], cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)


def ray_procs(ray_tmp: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if ray_tmp in cmd or (p.info["environ"] or {}).get("RAY_TMPDIR") == ray_tmp:
                out.append(p)
        except psutil.Error:
            pass
    return [p for p in out if p.pid != os.getpid()]


def stop_ray(ray_tmp: str, timeout: float = 15) -> int:
    """Stop the processes of one subprocess's Ray (found by its temp dir); returns how many were left."""
    from methodlab.runners.ray_session import terminate_processes

    procs = ray_procs(ray_tmp)
    terminate_processes(procs, timeout=timeout)
    return len(procs)


def wait_for(pred, timeout: float, every: float = 0.5, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def fault_records(path: Path) -> list[dict]:
    return jsonl(path)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grokking_sweep_space(tmp_path: Path, num_samples: int, max_steps: int = 200, *, concurrent: int = 1,
                         failures: int = 1, cpus: int = 1) -> Path:
    """A search-space file of grokking_flatness smoke-sized trials (checkpoint every 50 steps), `cpus` per trial."""
    import yaml

    from methodlab.methods.grokking_flatness.config import Config

    space = {"base_job": str(REPO / "jobs/grokking_flatness/cpu.yaml"), "num_samples": num_samples,
             "max_concurrent_trials": concurrent, "max_failures": failures,
             "trial_resources": {"cpu": cpus, "torch_threads": 1},
             "config": {**Config.smoke, "max_steps": max_steps, "log_every": 50, "checkpoint_every": 50},
             "search_alg": {"type": "optuna", "seed": 0}, "scheduler": {"type": "fifo"},
             "params": {"reg": {"choice": ["none", "collapse_encourage"]}, "lr": {"loguniform": [2e-3, 4e-3]}}}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def trial_results(sweep: Path) -> dict[str, list[dict]]:
    """trial folder name -> its result.json rows (Tune appends after a restore)."""
    return {p.parent.name: jsonl(p) for p in sweep.glob("*/result.json")}


def post_until_ok(url: str, body: dict, timeout: float, proc=None):
    """POST `body` once a second until it answers 200 or `timeout` passes (or `proc`, the server, exits);
    returns the last response, or None if nothing answered."""
    import httpx

    deadline, r = time.time() + timeout, None
    while time.time() < deadline and (proc is None or proc.poll() is None):
        try:
            r = httpx.post(url, json=body, timeout=5)
            if r.status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    return r
