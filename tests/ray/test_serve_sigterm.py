"""`methodlab serve` honours SIGTERM, the stop signal of Kubernetes and systemd: it exits within 10 s and
leaves no Ray or HAProxy process behind. The signal goes to the main process only, as kubelet sends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

from methodlab.core.checkpoint import latest_checkpoint
from tests.reliability.helpers import free_port, post_until_ok
from tests.smoke import smoke_run


def test_serve_stops_within_10_s_of_sigterm_leaving_no_process(smoke_root, tmp_path, repo):
    run = smoke_run("grokking_flatness", smoke_root)
    cfg = yaml.safe_load((repo / "serve/grokking_flatness.yaml").read_text())
    port = free_port()
    args = cfg["applications"][0]["args"]
    args.pop("checkpoints_root")
    args["checkpoint"] = str(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own embedded Ray
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "methodlab", "serve", str(path), "--port", str(port)], cwd=repo,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        r = post_until_ok(f"http://127.0.0.1:{port}/grokking_flatness/predict", {"a": 2, "b": 2}, 180, proc)
        assert r is not None and r.status_code == 200, (tmp_path / "serve.log").read_text()[-3000:]
        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("raylet" in p.name() or "gcs_server" in p.name() for p in family), [p.name() for p in family]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        stop_s = time.monotonic() - t0
        alive = lambda: [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # noqa: E731
        while alive() and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        left = [(p.pid, " ".join(p.cmdline())[:200]) for p in alive()]
        print(f"methodlab serve exited {stop_s:.1f} s after SIGTERM")
        assert stop_s <= 10, f"exited {stop_s:.1f} s after SIGTERM"
        assert left == [], f"left 10 s after SIGTERM: {left}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the test found left is not left for the next test
        except ProcessLookupError:
            pass
