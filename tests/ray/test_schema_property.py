"""A client that trusts GET /<route>/schema can call the endpoint: requests generated from the live schema
of each method's served checkpoint (hypothesis-jsonschema) are answered 200 in >= 90 % of cases and never
5xx. The schema is the checkpoint's own (`Predictor.input_model()`): its sizes, ranges and required fields.

A condition between fields that JSON Schema cannot state (graphrta: edge node ids < the number of nodes) is
named in the schema's description, and the Predictor names it for a raw body (`violated_conditions`). A
generated request that breaks such a named condition must be answered 422 (the description told the truth);
the 90 % bar is over the others, of which there must be at least MIN_CHECKED."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis_jsonschema import from_schema

from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY
from tests.reliability.serve_tools import deploy

EXAMPLES = 30
MIN_CHECKED = 10


@pytest.mark.parametrize("slug", sorted(REGISTRY))
def test_requests_generated_from_the_live_schema_are_answered(ray_cluster, smoke_root, slug):
    from ray import serve

    predictor_cls = get_spec(slug).predictor_cls()
    if not callable(getattr(predictor_cls, "input_model", None)):
        pytest.skip(f"{slug}: its Predictor has no checkpoint-specific input_model() yet (issue #20)")
    named = getattr(predictor_cls, "violated_conditions", lambda body: [])
    app = f"schema-{slug}"
    url = deploy(slug, smoke_root, app)
    try:
        deadline = time.time() + 60  # the proxy learns a new route a moment after serve.run returns
        while httpx.get(f"{url}/healthz", timeout=30).status_code == 404 and time.time() < deadline:
            time.sleep(0.5)
        schema = httpx.get(f"{url}/schema", timeout=30).json()["input"]
        statuses: Counter = Counter()
        named_statuses: Counter = Counter()  # requests that break a condition the description names
        failures = []

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(from_schema(schema))
        def send(body):
            r = httpx.post(f"{url}/predict", json=body, timeout=60)
            if named(body):
                named_statuses[r.status_code] += 1
                return
            statuses[r.status_code] += 1
            if r.status_code != 200 and len(failures) < 3:
                failures.append((body, r.status_code, r.text[:300]))

        try:
            send()
        except Unsatisfiable:  # e.g. EEG trials of 22 x 256 floats: beyond hypothesis's buffer, so sample plainly
            rng = np.random.default_rng(0)
            for _ in range(EXAMPLES):
                send.hypothesis.inner_test(sample(schema, rng))
        total = sum(statuses.values())
        assert set(named_statuses) <= {422}, f"{slug}: a request breaking a named condition got {dict(named_statuses)}"
        assert total >= MIN_CHECKED, f"{slug}: only {total} generated requests met the description's conditions"
        ok = statuses[200] / total
        assert not any(s >= 500 for s in statuses), (statuses, failures)
        assert ok >= 0.9, f"{slug}: {statuses[200]}/{total} answered 200 ({dict(statuses)}); e.g. {failures}"
    finally:
        serve.delete(app)


def sample(schema: dict, rng, root: dict | None = None):
    """One random instance of the JSON-schema subset pydantic emits, for requests too large for hypothesis."""
    root = root or schema
    if "$ref" in schema:
        return sample(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], rng, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][rng.integers(len(schema["enum"]))]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return sample(schema[key][rng.integers(len(schema[key]))], rng, root)
    t = schema.get("type")
    if t == "null":
        return None
    if t == "boolean":
        return bool(rng.integers(2))
    if t == "integer":
        return int(rng.integers(schema.get("minimum", -1000), schema.get("maximum", 1000) + 1))
    if t == "number":
        return float(rng.uniform(schema.get("minimum", -1e3), schema.get("maximum", 1e3)))
    if t == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if t == "array":
        lo = schema.get("minItems", 0)
        n = int(rng.integers(lo, min(schema.get("maxItems", lo + 4), lo + 4) + 1))
        return [sample(schema.get("items", {}), rng, root) for _ in range(n)]
    props, required = schema.get("properties") or {}, set(schema.get("required") or [])
    return {k: sample(v, rng, root) for k, v in props.items() if k in required or rng.integers(2)}
