"""The multi-node storage rule (runners/paths.py: check_shared_storage) without a cluster, and the KubeRay
manifests that follow it: every pod mounts the one shared results volume, every RayJob says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from methodlab.core.errors import StorageError
from methodlab.runners import paths
from tests.conftest import REPO


@pytest.fixture
def nodes(monkeypatch):
    count = {"n": 3}
    monkeypatch.setattr(paths, "alive_nodes", lambda: count["n"])
    monkeypatch.delenv(paths.ASSUME_SHARED_ENV, raising=False)
    return count


def test_local_path_on_many_nodes_is_refused_with_one_line(nodes, tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "mount_fstype", lambda p: "ext4")
    with pytest.raises(StorageError) as err:
        paths.check_shared_storage(str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "3 nodes" in msg and "--storage" in msg and "--assume-shared-storage" in msg
    with pytest.raises(StorageError):
        paths.check_shared_storage(f"file://{tmp_path}")


@pytest.mark.parametrize("case", ["one_node", "uri", "flag", "env", "nfs"])
def test_what_passes(nodes, tmp_path, monkeypatch, case):
    monkeypatch.setattr(paths, "mount_fstype", lambda p: "nfs4" if case == "nfs" else "overlay")
    if case == "one_node":
        nodes["n"] = 1
    if case == "env":
        monkeypatch.setenv(paths.ASSUME_SHARED_ENV, "1")
    storage = "s3://bucket/runs" if case == "uri" else str(tmp_path)
    paths.check_shared_storage(storage, assume_shared=case == "flag")


def test_mount_fstype_reads_proc_mounts():
    if not Path("/proc/mounts").exists():
        pytest.skip("no /proc/mounts")
    assert paths.mount_fstype("/") is not None


def test_kuberay_manifests_mount_one_shared_results_volume():
    from methodlab.cluster.k8s import RESULTS_CLAIM, RESULTS_PATH

    pods = 0
    for f in sorted((REPO / "k8s").glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        spec = doc["spec"]
        cluster = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
        groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
        for g in groups:
            pod = g["template"]["spec"]
            assert {"name": "results", "persistentVolumeClaim": {"claimName": RESULTS_CLAIM}} in pod["volumes"], f.name
            for c in pod["containers"]:
                assert {"name": "results", "mountPath": RESULTS_PATH} in c["volumeMounts"], f.name
            pods += 1
        if doc["kind"] == "RayJob":
            ep = spec["entrypoint"]
            assert f"--storage {RESULTS_PATH}" in ep and "--assume-shared-storage" in ep, f.name
    assert pods > 10


def test_sweep_history_fills_a_step_lost_with_its_node(tmp_path):
    """A result lost with its node (the retry resumed past it) comes back from the trial's own record; a step
    reported twice (a retry from an older checkpoint) is kept once."""
    import json

    import pandas as pd

    from methodlab.runners.results import _fill_lost_reports

    tune_rows = pd.DataFrame({"step": [50, 100, 150, 250, 250], "loss": [5.0, 4.0, 3.0, 1.0, 1.0]})
    own = tmp_path / "t1.jsonl"
    own.write_text("".join(json.dumps({"step": s, "loss": 6.0 - s / 50}) + "\n" for s in (50, 100, 150, 200, 150, 200, 250, 300)))
    out = _fill_lost_reports(tune_rows, own)
    assert list(out["step"]) == [50, 100, 150, 200, 250]  # 300: reported after Tune's last result, not a gap
    assert out.loc[out["step"] == 200, "loss"].item() == 2.0
    assert _fill_lost_reports(tune_rows, tmp_path / "absent.jsonl") is tune_rows
