"""KubeRay manifests rendered from jobs/ and serve/ files, and their offline validation against the
KubeRay CRDs (jsonschema on the v1 openAPIV3Schema) plus the rules the CRDs cannot express."""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path

import yaml

import methodlab
from methodlab.core.errors import ConfigError

RAY_VERSION = "2.60.0"
IMAGE = f"methodlab/methodlab:{methodlab.__version__}-ray{RAY_VERSION}"
TOKEN_SECRET = "methodlab-ray-token"
NAMESPACE_NOTE = "# Rendered by `methodlab k8s render`; do not edit by hand (a test re-renders and diffs).\n"
KIND_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml", "RayService": "ray.io_rayservices.yaml"}
UPGRADE_TYPES = ("NewCluster", "NewClusterWithIncrementalUpgrade", "None")

# The storage rule (README, "Submit to a Ray cluster"): a run on more than one node writes to a storage every
# node reaches. Here: one ReadWriteMany PersistentVolumeClaim (NFS, EFS, Filestore, CephFS...) mounted at the
# same path in the head and every worker; the RayJob entrypoint says so with --assume-shared-storage. An object
# store instead: `--storage s3://bucket/prefix` in the entrypoint (no flag needed for a URI).
RESULTS_CLAIM = "methodlab-results"
RESULTS_PATH = "/home/ray/results"

SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _container(name: str, cpu: str, memory: str, ports: list[dict] | None = None) -> dict:
    c = {"name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
         "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
         "securityContext": copy.deepcopy(SECURITY)}
    if ports:
        c["ports"] = ports
    c["volumeMounts"] = [{"name": "results", "mountPath": RESULTS_PATH}]
    return c


def _pod(container: dict) -> dict:
    return {"spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 100},
                     "containers": [container],
                     "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": RESULTS_CLAIM}}]}}


def cluster_spec(workers: int = 1, worker_cpu: str = "2", worker_memory: str = "8Gi", gpus: int = 0) -> dict:
    head_ports = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                  {"containerPort": 10001, "name": "client"}, {"containerPort": 8000, "name": "serve"}]
    worker = _container("ray-worker", worker_cpu, worker_memory)
    if gpus:
        worker["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        worker["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    return {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": False,
        # Token auth as on local clusters; the token lives in a Secret, never in a manifest.
        "authOptions": {"mode": "token", "secretName": TOKEN_SECRET},
        "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                          "template": _pod(_container("ray-head", "1", "4Gi", head_ports))},
        "workerGroupSpecs": [{"groupName": "gpu-workers" if gpus else "cpu-workers", "replicas": workers,
                              "minReplicas": workers, "maxReplicas": max(workers, 4), "rayStartParams": {},
                              "template": _pod(worker)}],
    }


def _meta(name: str) -> dict:
    return {"name": name, "labels": {"app.kubernetes.io/part-of": "methodlab"}}


def render_cluster() -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": _meta("methodlab"), "spec": cluster_spec(1)}


def k8s_name(text: str) -> str:
    return text.lower().replace("_", "-").replace(".", "-")[:63].strip("-")


def render_job(job_path: Path, repo: Path) -> dict:
    from methodlab.specs.files import load_job

    loaded = load_job(job_path)
    sc = loaded.job.scaling
    rel = job_path.resolve().relative_to(repo.resolve()).as_posix()
    name = k8s_name(f"{loaded.job.method}-{job_path.stem}")
    gpus = int(sc.gpus_per_worker or 1) if sc.use_gpu else 0
    cpu = str(max(1, int(sc.cpus_per_worker)) + 1)
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": _meta(name),
        "spec": {
            "entrypoint": f"methodlab run {rel} --storage {RESULTS_PATH} --assume-shared-storage",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "activeDeadlineSeconds": 86400,
            "submitterConfig": {"backoffLimit": 2},
            "rayClusterSpec": cluster_spec(sc.num_workers, cpu, "8Gi", gpus),
        },
    }


def render_service(serve_path: Path) -> dict:
    from methodlab.specs.files import load_serve_file

    cfg = copy.deepcopy(load_serve_file(serve_path))
    cfg["http_options"] = {**cfg.get("http_options", {}), "host": "0.0.0.0"}  # reachable through the Service
    for app in cfg.get("applications", []):
        args = app.get("args", {})
        for key in ("checkpoint", "checkpoints_root"):
            if args.get(key) and not args[key].startswith("/"):
                args[key] = f"/home/ray/{args[key]}"  # results/ = the shared volume RESULTS_PATH
    return {
        "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": _meta(k8s_name(serve_path.stem)),
        "spec": {
            "serveConfigV2": yaml.safe_dump(cfg, sort_keys=False),
            "upgradeStrategy": {"type": "NewCluster"},
            "rayClusterConfig": cluster_spec(1),
        },
    }


def dump(doc: dict) -> str:
    return NAMESPACE_NOTE + yaml.safe_dump(doc, sort_keys=False, width=120)


def render_all(repo: Path, out: Path | None = None) -> dict[str, str]:
    """{file name: text} for every job and serve file; written to `out` when given."""
    repo = Path(repo)
    files = {"raycluster.yaml": dump(render_cluster())}
    for job in sorted((repo / "jobs").glob("*/*.yaml")):
        files[f"rayjob-{k8s_name(job.parent.name + '-' + job.stem)}.yaml"] = dump(render_job(job, repo))
    for app in sorted((repo / "serve").glob("*.yaml")):
        files[f"rayservice-{k8s_name(app.stem)}.yaml"] = dump(render_service(app))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
    return files


# KubeRay v1.7.0's CRDs ship inside the package (kuberay_crds/, Apache-2.0, NOTICE and SOURCE.txt beside
# them), so validation works from any clone or install with nothing outside it.
BUNDLED_CRDS = Path(__file__).resolve().parent / "kuberay_crds"


def default_crds_dir() -> Path:
    """METHODLAB_K8S_CRDS if set (a user's own KubeRay release), else the bundled v1.7.0 CRDs."""
    env = os.environ.get("METHODLAB_K8S_CRDS")
    return Path(env) if env else BUNDLED_CRDS


@lru_cache(maxsize=8)
def crd_schema(crds_dir: str, kind: str) -> dict:
    safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C safe loader: ~5x faster on 1 MB CRDs
    path = Path(crds_dir) / KIND_FILES[kind]
    loader = safe_loader(path.read_text())
    try:
        doc = loader.get_single_data()
    finally:
        loader.dispose()
    return next(v for v in doc["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


def _containers(spec: dict) -> list[dict]:
    groups = [spec.get("headGroupSpec", {})] + list(spec.get("workerGroupSpecs", []))
    return [c for g in groups for c in g.get("template", {}).get("spec", {}).get("containers", [])]


def manifest_errors(doc: dict, crds_dir: Path | None = None) -> list[str]:
    import jsonschema

    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in KIND_FILES:
        return [f"kind: must be one of {sorted(KIND_FILES)}, got {kind!r}"]
    schema = crd_schema(str(crds_dir or default_crds_dir()), kind)
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(doc)]
    spec = doc.get("spec") or {}
    cluster = spec.get("rayClusterConfig") if kind == "RayService" else spec.get("rayClusterSpec") if kind == "RayJob" else spec
    cluster = cluster or {}
    if cluster.get("rayVersion") != RAY_VERSION:
        errors.append(f"rayVersion: must be pinned to {RAY_VERSION}")
    auth = cluster.get("authOptions") or {}
    if auth.get("mode") != "token" or not auth.get("secretName"):
        errors.append("authOptions: token mode with a secretName is required")
    for c in _containers(cluster):
        name = c.get("name", "?")
        if not c.get("image", "").endswith(f"ray{RAY_VERSION}"):
            errors.append(f"container {name}: image must be the pinned {IMAGE}")
        limits = (c.get("resources") or {}).get("limits") or {}
        if not {"cpu", "memory"} <= set(limits):
            errors.append(f"container {name}: resources.limits.cpu and .memory are required")
        sc = c.get("securityContext") or {}
        if not sc.get("runAsNonRoot") or sc.get("allowPrivilegeEscalation", True) or sc.get("privileged"):
            errors.append(f"container {name}: securityContext must be non-root without privilege escalation")
    if kind == "RayJob":
        for key in ("shutdownAfterJobFinishes", "ttlSecondsAfterFinished"):
            if key not in spec:
                errors.append(f"spec.{key}: required by methodlab")
        if "backoffLimit" not in (spec.get("submitterConfig") or {}):
            errors.append("spec.submitterConfig.backoffLimit: required by methodlab")
    if kind == "RayService":
        utype = (spec.get("upgradeStrategy") or {}).get("type")
        if utype != "NewCluster":
            errors.append(f"spec.upgradeStrategy.type: must be NewCluster (allowed by KubeRay: {UPGRADE_TYPES}), got {utype!r}")
        try:
            from ray.serve.schema import ServeDeploySchema

            ServeDeploySchema.model_validate(yaml.safe_load(spec.get("serveConfigV2", "")))
        except Exception as err:  # noqa: BLE001 - any parse or schema error is a manifest error
            errors.append(f"spec.serveConfigV2: {str(err).splitlines()[0]}")
    return errors


def validate_manifest_file(path: Path, crds_dir: Path | None = None) -> None:
    docs = list(yaml.safe_load_all(Path(path).read_text()))
    problems = [e for d in docs if d is not None for e in manifest_errors(d, crds_dir)]
    if problems:
        raise ConfigError("; ".join(problems[:8]) + (f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""), where=str(path))
