"""The platform on a real multi-node Ray cluster (tests/multinode.py: `ray.cluster_utils.Cluster`, a head
with no CPUs and two 1-CPU worker nodes on this host), driven through the CLI exactly as on any cluster
(RAY_ADDRESS). The storage here is a temp folder on this host's one disk, which every node does see: runs
pass --assume-shared-storage, and one test checks the refusal without it. Node-loss tests:
tests/reliability/test_node_loss.py."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from tests.reliability.helpers import grokking_sweep_space, methodlab, trial_results

pytestmark = pytest.mark.ray





@pytest.fixture(scope="module")
def cluster():
    from tests.multinode import MultiNode

    mn = MultiNode(workers=2, cpus=1)
    try:
        yield mn
    finally:
        mn.stop()


def test_local_storage_on_a_multi_node_cluster_is_refused_before_any_trial(cluster, tmp_path):
    store = tmp_path / "store"
    r = methodlab("tune", str(grokking_sweep_space(tmp_path, 2, concurrent=2, failures=0)), "--name", "refused", "--storage", str(store), "-q",
                  env=cluster.env(), timeout=300)
    err = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(err) == 1 and "--assume-shared-storage" in err[0] and "3 nodes" in err[0], err
    assert not (store / "refused").exists()  # nothing written, no trial started
    assert not [a for a in cluster.actors() if "trial" in a["class"].lower()]


def test_sweep_runs_on_both_worker_nodes(cluster, tmp_path):
    store = tmp_path / "store"
    t0 = time.time()
    r = methodlab("tune", str(grokking_sweep_space(tmp_path, 4, concurrent=2, failures=0)), "--name", "mn", "--storage", str(store), "-q",
                  "--assume-shared-storage", env=cluster.env(), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = store / "mn"
    table = pd.read_parquet(sweep / "summary.parquet")
    assert len(table) == 4 and (table["status"] == "TERMINATED").all() and (table["final/step"] == 200).all()
    hist = pd.read_parquet(sweep / "history.parquet")
    assert sorted(hist.groupby("trial_id")["step"].apply(list).map(tuple).unique()) == [(50, 100, 150, 200)]
    rep = methodlab("results", str(sweep), env=cluster.env(), timeout=300)  # the report needs no Ray
    assert rep.returncode == 0 and (sweep / "report.html").stat().st_size > 1000, rep.stdout[-2000:] + rep.stderr[-2000:]
    # where each trial ran: the pid in its results -> the actor with that pid -> its node
    where = cluster.node_of_pid()
    nodes = {name: {where.get(row["pid"]) for row in rows} for name, rows in trial_results(sweep).items()}
    workers = {w.node_id for w in cluster.workers}
    used = set().union(*nodes.values())
    assert used == workers, (nodes, workers, cluster.head_id)
    print(json.dumps({"seconds": round(time.time() - t0, 1), "nodes": {k: sorted(v) for k, v in nodes.items()}}))


def test_the_multi_node_cluster_keeps_token_auth(cluster):
    import httpx

    from methodlab.cluster.jobs import read_token

    assert httpx.get(f"{cluster.dashboard}/api/jobs/", timeout=30).status_code == 401
    ok = httpx.get(f"{cluster.dashboard}/api/jobs/", headers={"Authorization": f"Bearer {read_token()}"}, timeout=30)
    assert ok.status_code == 200
