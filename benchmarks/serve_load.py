"""Serving throughput and latency of the grokking_flatness Predictor, side by side in one invocation.

Targets, each loaded by the same bounded client (aiohttp, its own process, N concurrent loops on
127.0.0.1 for a fixed duration, one `{"a", "b", "op"}` item per request, every non-200 counted as an error):
  - fastapi: the same Predictor behind a minimal single-process FastAPI/uvicorn server written below
    (what a user would otherwise write; access log off);
  - methodlab serve, unbatched (max_batch_size 1) and batched (`@serve.batch`, max_batch_size 32), both
    deployed by `methodlab.cli.serve_cmd.deploy` (the code behind `methodlab serve`) in a child process that
    starts its own local Ray, once with the old defaults ("before": Serve's Python proxy, access log on)
    and once with the current ones ("after": HAProxy ingress, access log off);
  - direct: Predictor([item]) called in this process (the ceiling; no HTTP).
Each phase keeps FastAPI and Serve up together and alternates target x concurrency for `--rounds` rounds,
so every ratio comes from neighbouring measurements. Peak RSS of the Serve replica, HAProxy and the
FastAPI process is sampled with psutil. The model is the CPU preset's architecture (p 97, 1 layer,
d_model 128) at its seeded initialisation: inference cost does not depend on the trained values.
Goals (after phase): batched >= 0.8x FastAPI req/s at concurrency 32; batched p99 < 50 ms at 8; zero errors.
    .venv/bin/python benchmarks/serve_load.py [--quick] [--duration 5] [--rounds 3] [--phases before,after]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONCURRENCY = (1, 8, 32)
PAYLOAD_OP = "+"


# ---------------------------------------------------------------------------------------------- model
def make_checkpoint(directory: Path) -> Path:
    import torch
    import yaml

    from methodlab.core import save_checkpoint
    from methodlab.data.modular import Vocab
    from methodlab.methods.grokking_flatness.config import Config
    from methodlab.methods.grokking_flatness.model import build_model

    job = yaml.safe_load((HERE.parent / "jobs/grokking_flatness/cpu.yaml").read_text())
    cfg = Config.model_validate(job["config"])
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, Vocab(cfg.p).size)
    save_checkpoint(directory, method="grokking_flatness", config=cfg, weights=model.state_dict(), state={"step": 0})
    return directory


# --------------------------------------------------------------------------------------------- children
def child_fastapi(ckpt: str, port: int) -> None:
    """The baseline a user would write: one process, one route, the Predictor's own Input model."""
    import torch
    import uvicorn
    from fastapi import FastAPI

    from methodlab.methods.grokking_flatness.predictor import Input, Output, Predictor

    torch.set_num_threads(1)
    pred = Predictor.from_checkpoint(ckpt)
    app = FastAPI()

    async def predict(x: Input) -> Output:
        return pred([x])[0]

    # Real classes, not the strings `from __future__ import annotations` leaves: FastAPI reads the body model
    # from them (a string it cannot resolve here would turn `x` into a query parameter).
    predict.__annotations__ = {"x": Input, "return": Output}
    app.post("/predict")(predict)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def child_serve(ckpt: str, port: int, phase: str) -> None:
    """`methodlab serve` in this process: old defaults ("before") or the current ones ("after")."""
    if phase == "before":
        os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
    else:
        os.environ.pop("RAY_SERVE_ENABLE_HA_PROXY", None)
    from methodlab.cli.serve_cmd import deploy, serve_until_stopped

    apps = [{"name": f"grok_{kind}", "route_prefix": f"/{kind}",
             "args": {"method": "grokking_flatness", "checkpoint": ckpt, "max_batch_size": bs}}
            for kind, bs in (("unbatched", 1), ("batched", 32))]
    deploy(apps, "127.0.0.1", port, access_log=(phase == "before"))
    print("READY", flush=True)
    serve_until_stopped()


def child_load(url: str, conc: int, duration: float, seed: int) -> None:
    """N closed loops for `duration` seconds; prints {ok, errors, rps, p50_ms, p99_ms} as JSON."""
    import aiohttp

    rng = random.Random(seed)
    lat: list[float] = []
    errors = 0

    async def loop(session, stop_at):
        nonlocal errors
        while time.perf_counter() < stop_at:
            body = {"a": rng.randrange(97), "b": rng.randrange(97), "op": PAYLOAD_OP}
            t = time.perf_counter()
            try:
                async with session.post(url, json=body) as r:
                    await r.read()
                    if r.status == 200:
                        lat.append(time.perf_counter() - t)
                    else:
                        errors += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                errors += 1

    async def main():
        conn = aiohttp.TCPConnector(limit=conc)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
            t0 = time.perf_counter()
            await asyncio.gather(*(loop(s, t0 + duration) for _ in range(conc)))
            return time.perf_counter() - t0

    wall = asyncio.run(main())
    lat.sort()
    q = lambda f: 1e3 * lat[min(len(lat) - 1, int(f * len(lat)))] if lat else None  # noqa: E731
    print(json.dumps({"ok": len(lat), "errors": errors, "rps": len(lat) / wall, "p50_ms": q(0.5), "p99_ms": q(0.99)}))


# ------------------------------------------------------------------------------------------- harness
class RssSampler(threading.Thread):
    """Peak RSS per role among the descendants of the given processes, sampled every 0.2 s."""

    ROLES = (("ServeReplica", "serve replica"), ("haproxy", "haproxy"), ("ProxyActor", "serve proxy"))

    def __init__(self):
        super().__init__(daemon=True)
        self.roots: dict[str, int] = {}  # role for the root process itself -> pid
        self.peak: dict[str, float] = {}
        self.seen_haproxy: set[int] = set()
        self.stop = threading.Event()

    def run(self):
        import psutil

        while not self.stop.wait(0.2):
            for root_role, pid in list(self.roots.items()):
                try:
                    root = psutil.Process(pid)
                    procs = [(root_role, root)] + [(None, c) for c in root.children(recursive=True)]
                except psutil.Error:
                    continue
                for role, p in procs:
                    try:
                        if role is None:
                            text = p.name() + " " + " ".join(p.cmdline()[:2])
                            role = next((r for key, r in self.ROLES if key in text), None)
                            if role == "haproxy":
                                self.seen_haproxy.add(p.pid)
                        if role:
                            mib = p.memory_info().rss / 2**20
                            self.peak[role] = max(self.peak.get(role, 0.0), mib)
                    except psutil.Error:
                        pass


def wait_ready(url: str, timeout: float = 180.0, proc=None) -> None:
    import httpx

    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            r = httpx.post(url, json={"a": 1, "b": 2, "op": PAYLOAD_OP}, timeout=5)
            if r.status_code == 200:
                return
            if r.status_code in (400, 405, 413, 422):  # the server refuses the request itself: waiting will not help
                raise RuntimeError(f"{url}: {r.status_code} {r.text[:300]}")
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout:.0f} s")


def load(url: str, conc: int, duration: float, seed: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "load", "--url", url, "--conc", str(conc),
                          "--duration", str(duration), "--seed", str(seed)],
                         capture_output=True, text=True, timeout=duration + 60)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def direct_calls(ckpt: Path, seconds: float = 2.0) -> dict:
    import torch

    from methodlab.methods.grokking_flatness.predictor import Input, Predictor

    torch.set_num_threads(1)
    pred = Predictor.from_checkpoint(ckpt)
    rng = random.Random(0)
    out = {}
    for batch in (1, 32):
        xs = [Input(a=rng.randrange(97), b=rng.randrange(97), op=PAYLOAD_OP) for _ in range(batch)]
        pred(xs)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            pred(xs)
            n += 1
        out[batch] = n * batch / (time.perf_counter() - t0)
    return out


def spawn(args: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})}, start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's session only
            proc.wait()


def drain(proc: subprocess.Popen, sink: list[str]) -> threading.Thread:
    t = threading.Thread(target=lambda: sink.extend(proc.stdout), daemon=True)
    t.start()
    return t


def run_phase(phase: str, ckpt: Path, fastapi_url: str, args, sampler: RssSampler) -> tuple[list[dict], dict]:
    import psutil

    port = args.port + (1 if phase == "after" else 2)
    t0 = time.time()
    proc = spawn(["--child", "serve", "--ckpt", str(ckpt), "--port", str(port), "--phase", phase],
                 env={"OMP_NUM_THREADS": "1"})
    log: list[str] = []
    drain(proc, log)
    sampler.roots[f"methodlab serve driver ({phase})"] = proc.pid
    base = f"http://127.0.0.1:{port}"
    try:
        for kind in ("unbatched", "batched"):
            wait_ready(f"{base}/{kind}/predict", proc=proc)
        startup = time.time() - t0
        listeners = serve_listeners(proc.pid)
        exposed = predict_off_loopback(listeners, ["/unbatched/predict", "/batched/predict"])
        targets = {"fastapi": fastapi_url, "methodlab unbatched": f"{base}/unbatched/predict",
                   "methodlab batched": f"{base}/batched/predict"}
        runs = []
        rounds = args.rounds if phase == "after" or not args.quick else 1  # "before" is context: one round in --quick
        for r in range(rounds):
            order = list(targets.items()) if r % 2 == 0 else list(reversed(targets.items()))
            for conc in CONCURRENCY:
                for name, url in order:
                    m = load(url, conc, args.duration, seed=r * 100 + conc)
                    runs.append({"phase": phase, "round": r, "target": name, "conc": conc, **m})
                    print(f"  {phase:6s} r{r} {name:20s} c={conc:2d} {m['rps']:8.1f} req/s p50 {m['p50_ms'] or 0:6.1f} "
                          f"p99 {m['p99_ms'] or 0:6.1f} ms errors {m['errors']}", flush=True)
    except BaseException:
        print("".join(log[-40:]), file=sys.stderr)
        raise
    finally:
        seen = set(sampler.seen_haproxy)
        sampler.roots.pop(f"methodlab serve driver ({phase})", None)
        stop(proc)
    time.sleep(1.0)
    leftover = [p for p in seen if psutil.pid_exists(p) and _is_haproxy(p)]
    return runs, {"startup_s": startup, "haproxy_seen": len(seen), "haproxy_left_after_stop": len(leftover),
                  "serve_listeners": listeners, "predict_answering_off_loopback": exposed}


def predict_off_loopback(listeners: list[str], routes: list[str]) -> list[str]:
    """POST a valid item to every non-loopback Serve listener through this host's routable address: a 200
    means the model is served off loopback. (Replicas also hold Ray-internal gRPC ports on all interfaces,
    in both phases; those do not answer HTTP and are not counted.)"""
    import socket

    import httpx
    import psutil

    ips = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
           if a.family == socket.AF_INET and not a.address.startswith("127.")]
    hits = []
    for entry in listeners:
        host, port = entry.split()[-1].rsplit(":", 1)
        if host.startswith("127.") or host == "::1":
            continue
        for ip in ips[:1]:
            for route in routes:
                try:
                    r = httpx.post(f"http://{ip}:{port}{route}", json={"a": 1, "b": 2, "op": PAYLOAD_OP}, timeout=3)
                    if r.status_code == 200:
                        hits.append(f"{entry} {route}")
                except httpx.HTTPError:
                    pass
    return hits


def serve_listeners(pid: int) -> list[str]:
    """TCP listeners of the Serve processes (replicas, proxy, HAProxy) under `pid`: the HTTP path must stay on
    loopback (Ray's core ports listen on all interfaces whatever the flags, RAY_NOTES 4, and are not listed)."""
    import psutil

    out = set()
    for p in psutil.Process(pid).children(recursive=True):
        try:
            title = p.name() + " " + " ".join(p.cmdline()[:2])
            role = next((r for key, r in RssSampler.ROLES if key in title), None)
            if role:
                for c in p.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN:
                        out.add(f"{role} {c.laddr.ip}:{c.laddr.port}")
        except psutil.Error:
            pass
    return sorted(out)


def _is_haproxy(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).name().startswith("haproxy")
    except psutil.Error:
        return False


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    keys = dict.fromkeys((r["phase"], r["target"], r["conc"]) for r in runs)
    for phase, target, conc in keys:
        mine = [r for r in runs if (r["phase"], r["target"], r["conc"]) == (phase, target, conc)]
        rps = [r["rps"] for r in mine]
        ratios = []
        for r in mine:
            ref = next(x for x in runs if (x["phase"], x["round"], x["target"], x["conc"]) == (phase, r["round"], "fastapi", conc))
            ratios.append(r["rps"] / ref["rps"] if ref["rps"] else float("nan"))
        rows.append({"phase": phase, "target": target, "concurrency": conc, "req/s min": min(rps),
                     "req/s median": statistics.median(rps), "req/s max": max(rps),
                     "p50 ms (median)": statistics.median(r["p50_ms"] or float("nan") for r in mine),
                     "p99 ms (median)": statistics.median(r["p99_ms"] or float("nan") for r in mine),
                     "p99 ms (max)": max(r["p99_ms"] or float("nan") for r in mine),
                     "errors": sum(r["errors"] for r in mine), "x fastapi (median)": statistics.median(ratios)})
    return rows


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["fastapi", "serve", "load"])
    ap.add_argument("--ckpt")
    ap.add_argument("--port", type=int, default=8310)
    ap.add_argument("--phase", default="after")
    ap.add_argument("--url")
    ap.add_argument("--conc", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=None, help="Seconds per load run (default 6, --quick 3).")
    ap.add_argument("--rounds", type=int, default=None, help="Alternating rounds (default 3, --quick 2 after / 1 before).")
    ap.add_argument("--phases", default="before,after")
    ap.add_argument("--quick", action="store_true", help="The `make bench` budget: fewer, shorter load runs.")
    args = ap.parse_args()
    if args.child == "fastapi":
        return child_fastapi(args.ckpt, args.port)
    if args.child == "serve":
        return child_serve(args.ckpt, args.port, args.phase)
    if args.child == "load":
        return child_load(args.url, args.conc, args.duration, args.seed)
    args.duration = args.duration or (3.0 if args.quick else 6.0)
    args.rounds = args.rounds or (2 if args.quick else 3)
    phases = [p for p in args.phases.split(",") if p]

    from run_all import load_average, result, write_result

    t_start, load0 = time.time(), load_average()
    ckpt = make_checkpoint(Path(tempfile.mkdtemp(prefix="serve-bench-")) / "ckpt")
    direct = direct_calls(ckpt)
    sampler = RssSampler()
    fastapi = spawn(["--child", "fastapi", "--ckpt", str(ckpt), "--port", str(args.port)], env={"OMP_NUM_THREADS": "1"})
    fastapi_log: list[str] = []
    drain(fastapi, fastapi_log)
    sampler.roots["fastapi server"] = fastapi.pid
    sampler.start()
    fastapi_url = f"http://127.0.0.1:{args.port}/predict"
    runs, info = [], {}
    try:
        wait_ready(fastapi_url, proc=fastapi)
        for phase in phases:
            r, info[phase] = run_phase(phase, ckpt, fastapi_url, args, sampler)
            runs += r
    finally:
        sampler.stop.set()
        stop(fastapi)
    rows = summarise(runs)
    rows.append({"phase": "-", "target": "direct in-process, 1 item/call", "concurrency": 1,
                 "req/s median": direct[1]})
    rows.append({"phase": "-", "target": "direct in-process, 32 items/call (items/s)", "concurrency": 1,
                 "req/s median": direct[32]})
    for phase, i in info.items():
        rows.append({"phase": phase, "target": "serve start-up (s, child start to both routes answering)",
                     "req/s median": i["startup_s"]})

    def pick(phase, target, conc, key):
        return next((r[key] for r in rows if (r["phase"], r["target"], r["concurrency"]) == (phase, target, conc)), None)

    goal_phase = "after" if "after" in phases else phases[-1]
    ratio32 = pick(goal_phase, "methodlab batched", 32, "x fastapi (median)")
    p99_8 = pick(goal_phase, "methodlab batched", 8, "p99 ms (median)")
    errors = sum(r["errors"] for r in runs)
    left = sum(i["haproxy_left_after_stop"] for i in info.values())
    off_lo = [x for i in info.values() for x in i["predict_answering_off_loopback"]]
    goals = [
        {"name": f"batched methodlab / FastAPI req/s at concurrency 32 ({goal_phase})", "value": ratio32,
         "goal": ">= 0.8", "met": ratio32 is not None and ratio32 >= 0.8},
        {"name": f"batched methodlab p99 at concurrency 8, ms ({goal_phase}, median of rounds)", "value": p99_8,
         "goal": "< 50", "met": p99_8 is not None and p99_8 < 50},
        {"name": "errors over all load runs", "value": errors, "goal": "0", "met": errors == 0},
        {"name": "HAProxy processes left after methodlab serve stopped", "value": left, "goal": "0", "met": left == 0},
        {"name": "Serve listeners answering /predict off loopback", "value": len(off_lo), "goal": "0", "met": not off_lo},
    ]
    rss = {k: round(v, 1) for k, v in sampler.peak.items()}
    notes = (f"Load: aiohttp client process, {args.duration:g} s per run, {args.rounds} alternating rounds per phase{' (1 for before)' if args.quick else ''}, "
             f"1 item per request; model = CPU preset architecture (p 97, 1 layer, d_model 128), 1 torch thread "
             f"everywhere. Peak RSS (MiB): {json.dumps(rss)}. "
             f"Before = Ray Serve's Python proxy with the access log on (the old `methodlab serve`); after = the new "
             f"defaults of `methodlab serve` when it starts the local Ray: HAProxy ingress "
             f"(RAY_SERVE_ENABLE_HA_PROXY=1, private HAProxy socket folder), access log off, max_ongoing_requests "
             f"max(64, 2 x max_batch_size). Unbatched = max_batch_size 1. Serve listeners: {json.dumps({k: i['serve_listeners'] for k, i in info.items()})}. Total wall {time.time() - t_start:.0f} s.")
    out = result("serve_load", "Platform: Ray Serve load vs FastAPI/uvicorn and a direct call (issue 11.4)", rows,
                 goals, notes, threads=1, load_at_start=load0)
    out["peak_rss_mib"] = rss
    out["startup"] = info
    write_result(out)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
