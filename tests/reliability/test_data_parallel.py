"""Data parallelism, measured (issue 43): for every method that trains data-parallel, a 2-worker run on real
Ray Train (gloo, 1 CPU each) against a 1-worker run of the same job, global batch and seed.

- the loss curve (the case's `curve` keys, report by report) matches within the tolerance its case states;
- every sample of every global batch is seen by exactly one rank (the sample probe records what `ctx.shard`
  hands each rank; the two ranks' shards of each call add up to the 1-worker batch, nothing twice);
- every tensor that reaches a torch.distributed collective is on the run's device and not float64 (the
  collective probe wraps all_reduce / broadcast / all_gather / reduce_scatter in the workers and fails the run
  otherwise). On this CPU machine the device half is trivially true (every tensor is on the CPU); the dtype
  half and "nothing bypasses ctx" (test_no_collective_outside_core) are not.

Cases live in tests/reliability/data_parallel/<slug>.py; `default` ones run in `make test`, the others are
`slow` (make reliability). Samples/s of both runs go to RELIABILITY.md (end to end, Ray start included)."""

from __future__ import annotations

import importlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from methodlab.core import faults
from methodlab.core.registry import get_spec, method_slugs
from methodlab.specs.files import load_job
from tests.conftest import REPO

pytestmark = pytest.mark.ray
CASES_DIR = Path(__file__).parent / "data_parallel"
DP = sorted(p.stem for p in CASES_DIR.glob("*.py") if p.stem != "__init__")


def case_of(slug: str):
    return importlib.import_module(f"tests.reliability.data_parallel.{slug}").CASE


def _param(slug: str):
    return pytest.param(slug, marks=() if case_of(slug).default else (pytest.mark.slow,), id=slug)


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _key(v):
    return tuple(_key(x) for x in v) if isinstance(v, list) else v


def test_every_method_is_data_parallel_or_refuses():
    """Each registered method either has a case here or declares why it cannot (SPEC.single_worker)."""
    for slug in method_slugs():
        spec = get_spec(slug)
        assert (slug in DP) != bool(spec.single_worker), \
            f"{slug}: a data-parallel case XOR SPEC.single_worker (case: {slug in DP}, reason: {spec.single_worker})"


def test_no_collective_outside_core():
    """Every collective in a method goes through ctx (all_reduce / broadcast / average_ / average_gradients),
    where the device and dtype are checked: no method calls torch.distributed itself."""
    found = [f"{p.relative_to(REPO)}:{i}" for p in (REPO / "platform/methodlab/methods").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"torch\.distributed|import distributed|\bdist\.(all_reduce|broadcast|all_gather|reduce_scatter|barrier)", line)]
    assert not found, found


@pytest.mark.parametrize("slug", [_param(s) for s in DP])
def test_two_workers_match_one(slug, ray_cluster, tmp_path, monkeypatch, record):
    from methodlab.runners.local import run_local
    from methodlab.runners.train import run_train

    case = case_of(slug)
    over = [*case.over, "scaling.cpus_per_worker=1"]
    monkeypatch.setenv(faults.SAMPLE_LOG, str(tmp_path / "samples-one"))
    t0 = time.perf_counter()
    run_local(load_job(case.job, overrides=over, smoke=True), "one", str(tmp_path), quiet=True, fresh=True)
    one_s = time.perf_counter() - t0
    monkeypatch.setenv(faults.SAMPLE_LOG, str(tmp_path / "samples-two"))
    monkeypatch.setenv(faults.COLLECTIVE_LOG, str(tmp_path / "collectives"))
    t0 = time.perf_counter()
    run_train(load_job(case.job, overrides=[*over, "scaling.num_workers=2"], smoke=True), "two", str(tmp_path),
              quiet=True)
    two_s = time.perf_counter() - t0

    # ---- the curve
    one, two = rows(tmp_path / "one"), rows(tmp_path / "two")
    assert len(one) == len(two) and one, (len(one), len(two))
    pairs = [(one[-1], two[-1])] if case.final_only else list(zip(one, two))
    worst = 0.0
    for a, b in pairs:
        for k in case.curve:
            assert k in a and k in b, f"{k} missing from a report"
            assert b[k] == pytest.approx(a[k], rel=case.rel, abs=case.abs), (k, a.get("step"), a[k], b[k], case.why)
            worst = max(worst, abs(b[k] - a[k]) / max(abs(a[k]), 1e-12))

    # ---- the samples: each global batch split over the ranks, nothing seen twice
    single = faults.read_probe(tmp_path / "samples-one", "samples").get(0, [])
    ranks = faults.read_probe(tmp_path / "samples-two", "samples")
    assert single, "the method never called ctx.shard"
    assert sorted(ranks) == [0, 1] and all(r["world"] == 2 for rs in ranks.values() for r in rs)
    assert len(ranks[0]) == len(ranks[1]), "the ranks took a different number of batches"
    n_one = sum(len(r["idx"]) for r in single)
    n_two = sum(len(r["idx"]) for rs in ranks.values() for r in rs)
    assert n_two == n_one, f"2 workers took {n_two} samples where 1 worker took {n_one}"
    if case.same_batches:  # every global batch split over the ranks: nothing twice, nothing left out
        assert len(single) == len(ranks[0]), (len(single), len(ranks[0]))
        for s, a, b in zip(single, ranks[0], ranks[1]):
            assert Counter(map(_key, a["idx"])) + Counter(map(_key, b["idx"])) == Counter(map(_key, s["idx"]))
    # ---- the collectives
    bad = [r for rs in faults.read_probe(tmp_path / "collectives", "collectives").values() for r in rs if r["bad"]]
    assert not bad, bad
    ops = Counter(r["op"] for rs in faults.read_probe(tmp_path / "collectives", "collectives").values() for r in rs)

    record.injected = f"{slug}: 1 worker vs 2 Ray Train workers (gloo, 1 CPU each)"
    record.survived = f"curve {', '.join(case.curve)} within rel {case.rel} ({case.why})"
    record.figures = {"reports": len(one), "worst_rel_diff": round(worst, 6), "samples_one": n_one,
                      "samples_two": n_two, "one_s": round(one_s, 1), "two_s": round(two_s, 1),
                      "samples_per_s_one": round(n_one / one_s, 1), "samples_per_s_two": round(n_two / two_s, 1),
                      "python_collectives": dict(ops)}
