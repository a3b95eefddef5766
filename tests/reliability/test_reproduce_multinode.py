"""The reproduction harness on a real multi-node Ray cluster (tests/multinode.py: a 0-CPU head and two 2-CPU
worker nodes): a quick study of real grokking_flatness runs (dev and reported seeds) goes to the cluster as Ray
tasks with its jobs' CPUs; runs land on both worker nodes and write their run folders into the shared store;
a second invocation reuses every finished run and renders the same report."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.ray]

SCRIPT = textwrap.dedent('''
    import sys
    from methodlab.reproduce import Arm, Claim, Study
    from methodlab.reproduce.run import reproduce

    study = Study(
        slug="grokking_flatness", title="harness on a cluster",
        arms=(Arm("base", "jobs/grokking_flatness/cpu.yaml", overrides=("max_steps=60", "log_every=20",
                                                                          "checkpoint_every=20"), smoke=True),),
        claims=(Claim("L", "the train loss falls below ln(97)", lambda r, s: r.metric("base", s, "train/loss"),
                      "<", 4.575, uses=("base",)),),
        reported_seeds=(0, 1), dev_seeds=(10, 11))
    reproduce(study, out_dir=sys.argv[1], storage=sys.argv[2], address=sys.argv[3], assume_shared_storage=True,
              log=lambda m: print(m, flush=True))
''')


@pytest.fixture(scope="module")
def cluster():
    from tests.multinode import MultiNode

    mn = MultiNode(workers=2, cpus=2)
    try:
        yield mn
    finally:
        mn.stop()


def test_a_study_runs_on_both_worker_nodes_and_is_reused(cluster, tmp_path):
    script = tmp_path / "study.py"
    script.write_text(SCRIPT)
    out, st = tmp_path / "reports", tmp_path / "store"

    def invoke():
        r = subprocess.run([sys.executable, str(script), str(out), str(st), cluster.address], cwd=REPO,
                           env=cluster.env(), capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r.stdout

    first = invoke()
    assert "4 runs pending" in first, first
    records = [json.loads((d / "record.json").read_text()) for d in (st / "runs").iterdir()]
    assert len(records) == 4 and all((st / "runs" / r["key"] / "job.yaml").exists() for r in records)
    workers = {w.node_id for w in cluster.workers}
    assert {r["node"] for r in records} == workers, ([r["node"] for r in records], workers)
    report = json.loads((out / "grokking_flatness.json").read_text())
    assert report["claims"][0]["verdict"] in ("PASS", "FAIL") and set(report["data"]["runs"]["base"]) == {"0", "1", "10", "11"}
    md = (out / "grokking_flatness.md").read_text()
    mtimes = {r["key"]: (st / "runs" / r["key"] / "record.json").stat().st_mtime_ns for r in records}
    second = invoke()
    assert "0 runs pending" in second, second
    assert {k: (st / "runs" / k / "record.json").stat().st_mtime_ns for k in mtimes} == mtimes
    assert (out / "grokking_flatness.md").read_text() == md
