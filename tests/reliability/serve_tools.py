"""Serve helpers: deploy a method's smoke checkpoint on the session cluster, find its replica actor
and pid, a bounded load generator on 127.0.0.1, and a schema-driven fuzzer."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

PORT = 8123  # the session's Serve HTTP proxy (tests/ray/test_serve.py starts it on the same port)


def deploy(slug: str, smoke_root, app: str, **args) -> str:
    from ray import serve

    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.serving.app import build
    from tests.smoke import smoke_run

    run = smoke_run(slug, smoke_root)
    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    serve.run(build({"method": slug, "checkpoint": str(ckpt), **args}), name=app, route_prefix=f"/{app}")
    return f"http://127.0.0.1:{PORT}/{app}"


def replicas(app: str) -> list[dict]:
    """Alive replica actors of `app`: [{name, pid}] (State API: the session cluster has its dashboard)."""
    import ray
    from ray.util.state import list_actors

    # explicit address: other Ray instances may run on this machine
    rows = list_actors(address=ray.get_runtime_context().gcs_address, limit=1000,
                       filters=[("state", "=", "ALIVE"), ("ray_namespace", "=", "serve")])
    return [{"name": r.name, "pid": r.pid} for r in rows if (r.name or "").startswith(f"SERVE_REPLICA::{app}#")]


class Load:
    """`threads` client loops POSTing one valid request each, at most `rate` req/s per loop; every
    answer is logged as (sent, answered, status) with status -1 for a transport error."""

    def __init__(self, url: str, body: dict, threads: int = 4, rate: float = 20.0, timeout: float = 10.0):
        self.url, self.body, self.threads, self.gap, self.timeout = url, body, threads, 1.0 / rate, timeout
        self.log: list[tuple[float, float, int]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self):
        with httpx.Client(timeout=self.timeout) as c:
            while not self._stop.is_set():
                t = time.time()
                try:
                    status = c.post(self.url, json=self.body).status_code
                except httpx.HTTPError:
                    status = -1
                with self._lock:
                    self.log.append((t, time.time(), status))
                time.sleep(max(0.0, self.gap - (time.time() - t)))

    def __enter__(self):
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for w in self._workers:
            w.join(self.timeout + 5)

    def answered(self, t0: float, t1: float) -> Counter:
        """Statuses of requests answered in [t0, t1) (a request in flight at a kill counts where it ends)."""
        with self._lock:
            return Counter(s for _, end, s in self.log if t0 <= end < t1)

    def sent(self, t0: float, t1: float) -> Counter:
        with self._lock:
            return Counter(s for start, _, s in self.log if t0 <= start < t1)


def is_error(status: int) -> bool:
    return status < 0 or status >= 500


def post_raw(url: str, content: bytes) -> int:
    return httpx.post(url, content=content, headers={"content-type": "application/json"}, timeout=30).status_code


def dumps(payload) -> bytes:
    return json.dumps(payload, allow_nan=True).encode()


def from_schema(schema: dict, root: dict | None = None, depth: int = 0):
    """A hypothesis strategy for the JSON Schema subset pydantic emits for Input models (objects,
    anyOf, $ref/$defs, numbers with bounds, strings with lengths, arrays, tuples, enums, const).
    Written here because hypothesis-jsonschema 0.23 fails on this hypothesis release."""
    from hypothesis import strategies as st

    root = root or schema
    if "$ref" in schema:
        return from_schema(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root, depth)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s, root, depth) for s in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return from_schema(schema["allOf"][0], root, depth)
    t = schema.get("type")
    if isinstance(t, list):
        return st.one_of([from_schema({**schema, "type": x}, root, depth) for x in t])
    if t == "null":
        return st.none()
    if t == "boolean":
        return st.booleans()
    if t == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -2**31 - 1) + (1 if "exclusiveMinimum" in schema else 0))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 2**31 + 1) - (1 if "exclusiveMaximum" in schema else 0))
        return st.integers(int(lo), int(hi))
    if t == "number":
        return st.floats(schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum", schema.get("exclusiveMaximum")),
                         exclude_min="exclusiveMinimum" in schema, exclude_max="exclusiveMaximum" in schema,
                         allow_nan=False, allow_infinity=False)
    if t == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 30), 200))
    if t == "array":
        if "prefixItems" in schema:
            return st.tuples(*[from_schema(s, root, depth + 1) for s in schema["prefixItems"]]).map(list)
        lo = schema.get("minItems", 0)
        hi = min(schema.get("maxItems", lo + 4), lo + 8)
        return st.lists(from_schema(schema.get("items", {}), root, depth + 1), min_size=lo, max_size=hi)
    if t == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        return st.fixed_dictionaries({k: from_schema(v, root, depth + 1) for k, v in props.items() if k in required},
                                     optional={k: from_schema(v, root, depth + 1) for k, v in props.items() if k not in required})
    # no type: any JSON leaf
    return st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
