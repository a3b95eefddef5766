"""`methodlab submit` against a real local head started here (token auth on), then stopped by the
processes it started (never `ray stop`, which would stop every Ray on the machine)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from methodlab.runners.ray_session import terminate_processes

pytestmark = pytest.mark.ray


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head():
    temp = tempfile.mkdtemp(prefix="mlj", dir="/tmp")  # short: Ray's unix sockets live under it
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}  # the entrypoint finds this venv's methodlab
    env.pop("RAY_ADDRESS", None)
    # Every port of its own: another Ray on this machine (the suite's embedded session head, a user's run)
    # already holds the fixed defaults, and a head whose dashboard agent cannot bind 52365 never accepts a job.
    gcs, dash, agent, agent_grpc, metrics, rt_env, client_port = (_port() for _ in range(7))
    subprocess.run([str(bin_dir / "ray"), "start", "--head", f"--port={gcs}", f"--dashboard-port={dash}",
                    f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
                    f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}",
                    f"--ray-client-server-port={client_port}",
                    "--dashboard-host=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp}", "--disable-usage-stats"],
                   env=env, check=True, capture_output=True, timeout=120)
    yield f"http://127.0.0.1:{dash}", env
    procs = [p for p in psutil.process_iter(["cmdline"]) if any(temp in a for a in (p.info["cmdline"] or []))]
    for p in procs:
        for child in p.children(recursive=True):
            procs.append(child)
    terminate_processes(procs, timeout=15)
    shutil.rmtree(temp, ignore_errors=True)


def test_submit_job_and_follow_up_commands(head, repo, tmp_path):
    address, env = head
    sid = f"methodlab-test-{os.getpid()}"
    r = subprocess.run([sys.executable, "-m", "methodlab", "submit", "jobs/grokking_flatness/cpu.yaml", "max_steps=60",
                        "--smoke", "--local", "--address", address, "--submission-id", sid, "--storage", str(tmp_path)],
                       cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{sid}: SUCCEEDED" in r.stdout
    assert (tmp_path / "grokking_flatness-cpu-smoke" / "summary.parquet").exists()
    # a printed follow-up command works exactly as printed (token auth on)
    status_cmd = next(line.strip() for line in r.stdout.splitlines() if " ray job status " in line)
    out = subprocess.run(status_cmd, shell=True, env={**env, "PATH": env["PATH"]}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "succeeded" in (out.stdout + out.stderr).lower(), out.stdout + out.stderr


def test_request_without_token_is_refused(head):
    import httpx

    address, _ = head
    assert httpx.get(f"{address}/api/jobs/").status_code in (401, 403)


def test_bad_job_fails_before_submission(head, repo, tmp_path):
    address, env = head
    r = subprocess.run([sys.executable, "-m", "methodlab", "submit", "jobs/grokking_flatness/cpu.yaml", "reg=zap",
                        "--address", address], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "command line: reg" in r.stderr  # the override is blamed, not the job file
