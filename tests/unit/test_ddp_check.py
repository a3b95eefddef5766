"""benchmarks/ddp_check.py (the no-Ray, N-process gloo check that the lent GPU machine runs with CUDA tensors)
cannot rot on a CPU-only machine: it runs here on the CPU for one method, and its probes fail when they must."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def test_ddp_check_runs_on_cpu(tmp_path):
    out = tmp_path / "ddp.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ddp_check.py"), "--device", "cpu",
                           "--methods", "grokking_flatness", "--out", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    row = json.loads(out.read_text())["rows"][0]
    assert row["ok"] and row["world"] == 2 and row["problems"] == []


def test_ddp_check_refuses_unknown_methods_and_absent_gpus(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ddp_check.py"), "--device", "cpu",
                           "--methods", "ugodit"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "ugodit" in proc.stderr
    if not torch.cuda.is_available():
        proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ddp_check.py"), "--device", "cuda"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "no GPU" in proc.stderr


def test_compare_names_a_curve_that_drifts_and_a_sample_seen_twice():
    import ddp_check

    case = ddp_check.cases()["grokking_flatness"]
    one = {"rows": [{"step": 25, "train/loss": 1.0, "val/loss": 1.0}], "samples": {0: [{"idx": [1, 2, 3, 4]}]},
           "collectives": {}}
    good = {"rows": [{"step": 25, "train/loss": 1.0, "val/loss": 1.0}],
            "samples": {0: [{"idx": [1, 3]}], 1: [{"idx": [2, 4]}]}, "collectives": {}}
    assert ddp_check.compare(case, one, good, 2) == []
    drift = {**good, "rows": [{"step": 25, "train/loss": 1.1, "val/loss": 1.0}]}
    assert "train/loss" in ddp_check.compare(case, one, drift, 2)[0]
    twice = {**good, "samples": {0: [{"idx": [1, 2]}], 1: [{"idx": [2, 4]}]}}
    assert "shards" in ddp_check.compare(case, one, twice, 2)[0]


def test_collective_probe_refuses_float64_and_records(tmp_path, monkeypatch):
    import torch.distributed as dist

    from methodlab.core import faults
    from tests.reliability.helpers import free_port

    monkeypatch.setenv(faults.COLLECTIVE_LOG, str(tmp_path))
    saved = {n: getattr(dist, n) for n in faults.COLLECTIVES if hasattr(dist, n)}
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        faults.install_collective_guard(torch.device("cpu"), 0)
        dist.all_reduce(torch.ones(3))
        with pytest.raises(RuntimeError, match="float64"):
            dist.all_reduce(torch.ones(3, dtype=torch.float64))
        with pytest.raises(RuntimeError, match="meta"):
            dist.broadcast(torch.ones(3, device="meta"), 0)
    finally:
        for n, fn in saved.items():
            setattr(dist, n, fn)
        dist.destroy_process_group()
    records = [json.loads(x) for f in tmp_path.glob("collectives-*.jsonl") for x in f.read_text().splitlines()]
    assert [r["op"] for r in records] == ["all_reduce", "all_reduce", "broadcast"]
    assert [bool(r["bad"]) for r in records] == [False, True, True]


def test_ctx_helpers_average_and_shard(monkeypatch, tmp_path):
    """ctx.shard at world size 1 is the batch itself (so 1-worker runs are unchanged) and the sample probe
    records it; average_ / average_gradients / broadcast_ are no-ops at world size 1."""
    from methodlab.core import RunContext, faults

    monkeypatch.setenv(faults.SAMPLE_LOG, str(tmp_path))
    ctx = RunContext()
    x, y = torch.arange(6), torch.arange(6) * 2
    assert ctx.shard(x) is x
    a, b = ctx.shard(x, y)
    assert a is x and b is y
    two = RunContext(rank=1, world_size=2)
    assert two.shard(list(range(5))) == [1, 3]
    records = [json.loads(x) for f in tmp_path.glob("samples-*.jsonl") for x in f.read_text().splitlines()]
    assert [r["idx"] for r in records] == [list(range(6)), list(range(6)), [1, 3]]
    g = torch.ones(3)
    ctx.average_([g, None])
    ctx.broadcast_([g])
    assert torch.equal(g, torch.ones(3))
