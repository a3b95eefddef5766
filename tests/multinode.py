"""A real multi-node Ray cluster on this host with Ray's own facility (`ray.cluster_utils.Cluster`: one GCS
head plus a raylet per `add_node`; `remove_node` kills that node's raylet and every process it started), for
the multi-node tests. The platform talks to it as to any cluster: the CLI in a subprocess with RAY_ADDRESS.

The head has no CPUs (as on KubeRay: `num-cpus: 0`), so trials, Train workers and replicas land on the
worker nodes only. Everything lives under its own RAY_TMPDIR, so other Ray instances on the machine (other
test sessions) are never touched, and `stop()` ends exactly the processes these nodes started. Token
authentication is on, as for `ray.init()` and `ray start`."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability.helpers import free_port  # noqa: F401  (re-exported: the multi-node tests import it from here)

BIN = Path(sys.executable).parent


@contextlib.contextmanager
def _node_env(tmp: str):
    """Environment the node processes inherit (they are started from this process): the venv on PATH (a Ray
    job's entrypoint `methodlab` is looked up there), single-threaded BLAS, this cluster's RAY_TMPDIR (Ray
    writes `ray_current_cluster` there instead of the machine-wide /tmp/ray)."""
    saved = dict(os.environ)
    os.environ.update({"PATH": f"{BIN}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1", "RAY_TMPDIR": tmp,
                       "RAY_DEDUP_LOGS": "0", "PYTHONUNBUFFERED": "1"})
    for k in [k for k in os.environ if k.startswith("METHODLAB_FAULT_") or k == "RAY_ADDRESS"]:
        os.environ.pop(k)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


class MultiNode:
    """Head (0 CPUs, dashboard on 127.0.0.1) + `workers` worker nodes of `cpus` CPUs each."""

    def __init__(self, workers: int = 2, cpus: int = 1):
        from ray._private.authentication.authentication_token_setup import (
            enable_token_auth_by_default, ensure_token_if_auth_enabled)
        from ray.cluster_utils import Cluster

        # Token auth as on any local Ray (what `ray.init()` does for a new local cluster: RAY_AUTH_MODE=token in
        # this process, inherited by the nodes and the CLI subprocesses, and ~/.ray/auth_token created if
        # missing); an explicit RAY_AUTH_MODE is respected.
        enable_token_auth_by_default()
        ensure_token_if_auth_enabled(None, create_token_if_missing=True)
        self.tmp = tempfile.mkdtemp(prefix="mlmn", dir="/tmp")  # short: Ray's unix sockets live under it
        self.cpus = cpus
        os.makedirs(os.path.join(self.tmp, "ray"))
        self.dashboard_port = free_port()
        with _node_env(self.tmp):
            self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={
                "num_cpus": 0, "temp_dir": os.path.join(self.tmp, "ray"), "include_dashboard": True,
                "dashboard_host": "127.0.0.1", "dashboard_port": self.dashboard_port,
                "dashboard_agent_listen_port": free_port()})
        self.workers = [self.add_node() for _ in range(workers)]

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def head_id(self) -> str:
        return self.cluster.head_node.node_id

    def add_node(self, cpus: int | None = None):
        with _node_env(self.tmp):
            node = self.cluster.add_node(num_cpus=self.cpus if cpus is None else cpus)
        self.cluster.wait_for_nodes()
        return node

    def remove_node(self, node) -> float:
        """Kill the node's raylet and all its processes (no graceful drain: a lost machine). Returns the time."""
        t = time.time()
        self.cluster.remove_node(node, allow_graceful=False)
        self.workers = [w for w in self.workers if w is not node]
        return t

    def env(self, **extra) -> dict:
        """Environment of a CLI subprocess that must use this cluster."""
        env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0",
               "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": self.address}
        for k in [k for k in env if k.startswith("METHODLAB_FAULT_")]:
            env.pop(k)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def actors(self) -> list[dict]:
        """Every actor the cluster has known (dead ones included): class, node id, pid, state."""
        out = []
        for a in self.cluster.global_state.actor_table(None).values():
            out.append({"class": a.get("ActorClassName") or a.get("Name") or "", "node": a["Address"]["NodeID"],
                        "pid": a.get("Pid"), "state": a.get("State"), "name": a.get("Name")})
        return out

    def node_of_pid(self) -> dict:
        return {a["pid"]: a["node"] for a in self.actors() if a["pid"]}

    def stop(self) -> None:
        self.cluster.shutdown()
        from methodlab.runners.ray_session import terminate_processes
        import psutil

        left = []
        for p in psutil.process_iter(["cmdline", "environ"]):
            try:
                if self.tmp in " ".join(p.info["cmdline"] or []) or (p.info["environ"] or {}).get("RAY_TMPDIR") == self.tmp:
                    left.append(p)
            except psutil.Error:
                pass
        terminate_processes([p for p in left if p.pid != os.getpid()], timeout=10)
