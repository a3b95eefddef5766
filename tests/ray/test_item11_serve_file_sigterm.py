"""Issue 42 item 11: SIGTERM to `methodlab serve serve/<slug>.yaml --port P` with Ray's HAProxy ingress on (what
`methodlab serve` turns on when it starts the local Ray) ends within 10 s with exit code 0, and nothing of the
app's process session is left: no Ray process, no HAProxy (Ray's HAProxy manager starts a new one on every
config change, also while the applications are deleted, and Ray's stop orphaned the last one with port P
bound), port P free. The signal goes to the main process only, as kubelet sends it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

from methodlab.core.checkpoint import latest_checkpoint
from tests.reliability.helpers import free_port, post_until_ok
from tests.smoke import smoke_run


def _session(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


def _haproxy_folders(procs: list[psutil.Process]) -> set[str]:
    """The config folders of the HAProxy processes among `procs` (`-f /tmp/mlab-haproxy-XXXX/<node>/haproxy.cfg`:
    the mlab-haproxy-XXXX folder `methodlab serve` made for its Ray)."""
    out = set()
    for p in procs:
        try:
            if p.name().startswith("haproxy"):
                args = p.cmdline()
                cfg = Path(args[args.index("-f") + 1])
                top = [q for q in [cfg, *cfg.parents] if q.name.startswith("mlab-haproxy-")]
                out.add(str(top[0] if top else cfg.parent))
        except (psutil.Error, ValueError, IndexError):
            pass
    return out


def _haproxy_using(folders: set[str]) -> list[str]:
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if (p.info["name"] or "").startswith("haproxy") and p.status() != psutil.STATUS_ZOMBIE and \
                    any(a.startswith(f + os.sep) for a in p.info["cmdline"] or [] for f in folders):
                out.append(f"{p.pid} {' '.join(p.info['cmdline'])[:160]}")
        except psutil.Error:
            pass
    return out


def _port_free(port: int) -> bool:
    """A new server can listen on `port` (as servers do, with SO_REUSEADDR: the test's own closed client
    connections may leave TIME_WAIT entries on the port, which do not stop a listener)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            return True
        except OSError:
            return False


def serve_then_sigterm(cli_args: list[str], route: str, repo: Path, log_path: Path, *, wait_ready: bool = True) -> dict:
    """Start `methodlab serve <cli_args> --port P` in its own session with the HAProxy ingress on, wait for an
    answer (and, with `wait_ready`, for "Ctrl-C to stop"), send SIGTERM to the main process and check what is left."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("RAY_SERVE_HAPROXY")}
    env["RAY_SERVE_ENABLE_HA_PROXY"] = "1"  # what `methodlab serve` sets for the local Ray it starts
    log = log_path.open("w")
    folders: set[str] = set()
    proc = subprocess.Popen([sys.executable, "-m", "methodlab", "serve", *cli_args, "--port", str(port)], cwd=repo,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        r = post_until_ok(f"http://127.0.0.1:{port}{route}/predict", {"a": 2, "b": 2}, 240, proc)
        assert r is not None and r.status_code == 200, log_path.read_text()[-3000:]
        deadline = time.monotonic() + 60
        while wait_ready and "Ctrl-C to stop" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        before = _session(proc.pid)
        folders = _haproxy_folders(before)
        assert folders, f"no HAProxy ingress in the app's session: {[p.name() for p in before]}"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            rc = None
        stop_s = time.monotonic() - t0
        time.sleep(1.0)  # anything still running 1 s after the exit was left behind
        left = [f"{p.pid} {p.name()}" for p in _session(proc.pid)]
        return {"rc": rc, "stop_s": stop_s, "left": left, "haproxy": _haproxy_using(folders),
                "port_free": _port_free(port), "log": log_path.read_text()[-3000:]}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the test found left is not left for the next test
        except ProcessLookupError:
            pass
        for line in _haproxy_using(folders):
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        log.close()


def check_clean_stop(out: dict) -> None:
    print(f"methodlab serve exited {out['stop_s']:.1f} s after SIGTERM with code {out['rc']}")
    assert out["rc"] == 0, f"exit code {out['rc']} after {out['stop_s']:.1f} s:\n{out['log']}"
    assert out["stop_s"] <= 10, f"exited {out['stop_s']:.1f} s after SIGTERM:\n{out['log']}"
    assert out["haproxy"] == [], f"HAProxy left after the exit: {out['haproxy']}"
    assert out["left"] == [], f"left in the app's session after the exit: {out['left']}"
    assert out["port_free"], "the serve port is still bound after the exit"


def test_serve_file_stops_on_sigterm_with_exit_0_and_no_haproxy_left(smoke_root, tmp_path, repo):
    run = smoke_run("grokking_flatness", smoke_root)
    cfg = yaml.safe_load((repo / "serve/grokking_flatness.yaml").read_text())
    args = cfg["applications"][0]["args"]
    args.pop("checkpoints_root")
    args["checkpoint"] = str(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    path = tmp_path / "grokking_flatness.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = serve_then_sigterm([str(path)], "/grokking_flatness", repo, tmp_path / "serve.log")
    check_clean_stop(out)
