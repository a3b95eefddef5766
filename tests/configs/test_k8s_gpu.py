"""Issue 43 item 4, Kubernetes GPUs: `methodlab k8s render` gives a job with scaling.use_gpu (and a serve file with
args.num_gpus) a GPU worker group: whole nvidia.com/gpu cards (requests = limits, never 0), Ray told the same
(num-gpus), a toleration for the nvidia.com/gpu taint, the job file's kubernetes.node_selector, and the CUDA image
on every pod; kubernetes.gpus_per_pod packs several workers per pod; raycluster-gpu.yaml is a CPU head with a GPU
group. Every manifest still validates against the bundled KubeRay CRDs."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from methodlab.cli.main import app
from methodlab.cluster import k8s
from methodlab.core.errors import ConfigError
from tests.conftest import REPO

runner = CliRunner()
PUSHED = "registry.example.com/team/methodlab:0.1.0-ray2.60.0"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _job(tmp_path, name: str, scaling: dict, kubernetes: dict | None = None):
    """A job file under a tmp repository's jobs/ folder (render_job runs files from jobs/ only)."""
    path = tmp_path / "jobs" / "grokking_flatness" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"method": "grokking_flatness", "scaling": scaling}
    if kubernetes is not None:
        doc["kubernetes"] = kubernetes
    path.write_text(yaml.safe_dump(doc))
    return path


def _cluster(doc: dict) -> dict:
    spec = doc["spec"]
    return spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec


def _worker(doc: dict) -> dict:
    groups = _cluster(doc)["workerGroupSpecs"]
    assert len(groups) == 1, groups
    return groups[0]


def _gpus(group: dict) -> tuple[str, str]:
    res = group["template"]["spec"]["containers"][0]["resources"]
    return res["requests"].get("nvidia.com/gpu"), res["limits"].get("nvidia.com/gpu")


def _images(doc: dict) -> set[str]:
    return {c["image"] for c in k8s._containers(_cluster(doc))}


def test_gpu_job_renders_a_gpu_worker_group(tmp_path):
    path = _job(tmp_path, "gpu", {"use_gpu": True, "cpus_per_worker": 8}, {"node_selector": H100})
    doc = k8s.render_job(path, tmp_path)
    group = _worker(doc)
    pod = group["template"]["spec"]
    assert group["groupName"] == "gpu-workers" and group["replicas"] == 1
    assert _gpus(group) == ("1", "1") and group["rayStartParams"] == {"num-gpus": "1"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == H100
    assert pod["containers"][0]["resources"]["limits"]["cpu"] == "9"
    assert _images(doc) == {k8s.GPU_IMAGE}, "one CUDA image for the whole cluster, head included"
    head = _cluster(doc)["headGroupSpec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in head["containers"][0]["resources"]["limits"] and "nodeSelector" not in head
    assert k8s.manifest_errors(doc) == []


def test_gpu_job_without_node_selector_has_none(tmp_path):
    doc = k8s.render_job(_job(tmp_path, "gpu", {"use_gpu": True}), tmp_path)
    assert "nodeSelector" not in _worker(doc)["template"]["spec"]
    assert k8s.manifest_errors(doc) == []


def test_cpu_job_stays_cpu(tmp_path):
    doc = k8s.render_job(_job(tmp_path, "cpu", {"num_workers": 2}), tmp_path)
    group = _worker(doc)
    assert group["groupName"] == "cpu-workers" and group["replicas"] == 2 and group["rayStartParams"] == {}
    assert _gpus(group) == (None, None) and "tolerations" not in group["template"]["spec"]
    assert _images(doc) == {k8s.IMAGE} and k8s.manifest_errors(doc) == []


def test_half_a_gpu_per_worker_never_renders_zero_gpus(tmp_path):
    doc = k8s.render_job(_job(tmp_path, "half", {"use_gpu": True, "gpus_per_worker": 0.5, "num_workers": 2,
                                                 "cpus_per_worker": 2}), tmp_path)
    group = _worker(doc)
    assert _gpus(group) == ("1", "1") and group["rayStartParams"]["num-gpus"] == "1"
    assert group["replicas"] == 1, "two workers share one pod's card"
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == "5" and limits["memory"] == "16Gi"  # 2 workers x 2 CPUs + 1, 2 x 8Gi
    assert k8s.manifest_errors(doc) == []
    # the job itself is unchanged: Ray Train still asks 0.5 per worker
    assert "run jobs/grokking_flatness/half.yaml " in doc["spec"]["entrypoint"]


def test_eight_gpus_per_pod_and_sixteen_workers_give_two_pods(tmp_path):
    path = _job(tmp_path, "multinode", {"use_gpu": True, "num_workers": 16, "cpus_per_worker": 4},
                {"gpus_per_pod": 8, "node_selector": H100})
    doc = k8s.render_job(path, tmp_path)
    group = _worker(doc)
    assert group["replicas"] == 2 and group["minReplicas"] == 2
    assert _gpus(group) == ("8", "8") and group["rayStartParams"] == {"num-gpus": "8"}
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == "33" and limits["memory"] == "64Gi"
    assert group["template"]["spec"]["nodeSelector"] == H100
    assert k8s.manifest_errors(doc) == []


@pytest.mark.parametrize("scaling,kube", [
    ({"use_gpu": True, "gpus_per_worker": 3}, {"gpus_per_pod": 8}),      # 8 / 3 workers
    ({"use_gpu": True, "gpus_per_worker": 2}, {"gpus_per_pod": 1}),      # half a worker
    ({"use_gpu": True, "gpus_per_worker": 0.3}, {}),                     # default 1 card: 3.33 workers
    ({"use_gpu": False}, {"gpus_per_pod": 8}),                           # GPUs per pod for a CPU job
])
def test_gpus_per_pod_that_does_not_fit_is_refused_naming_the_field(tmp_path, scaling, kube):
    path = _job(tmp_path, "bad", scaling, kube)
    with pytest.raises(ConfigError) as err:
        k8s.render_job(path, tmp_path)
    assert err.value.field == "kubernetes.gpus_per_pod" and "bad.yaml" in str(err.value)
    res = runner.invoke(app, ["k8s", "render", str(path), "--repo", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "kubernetes.gpus_per_pod" in res.output and "Traceback" not in res.output


def test_kubernetes_section_is_strict(tmp_path):
    from methodlab.specs.job import JobFile

    with pytest.raises(Exception, match="gpus_per_node"):
        JobFile.model_validate({"method": "grokking_flatness", "kubernetes": {"gpus_per_node": 8}})
    with pytest.raises(Exception, match="gpus_per_pod"):
        JobFile.model_validate({"method": "grokking_flatness", "kubernetes": {"gpus_per_pod": 0}})
    assert JobFile.model_fields["kubernetes"].description


def _serve(tmp_path, num_gpus: float, replicas: int | None = None):
    raw = yaml.safe_load((REPO / "serve/grokking_flatness.yaml").read_text())
    for a in raw["applications"]:
        a["args"]["num_gpus"] = num_gpus
        if replicas:
            a["deployments"] = [{"name": "grokking_flatness", "num_replicas": replicas}]
    path = tmp_path / "gpu_serve.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_serve_file_with_num_gpus_renders_a_gpu_group(tmp_path):
    doc = k8s.render_service(_serve(tmp_path, 1))
    group = _worker(doc)
    assert _gpus(group) == ("1", "1") and group["rayStartParams"] == {"num-gpus": "1"} and group["replicas"] == 1
    assert group["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert _images(doc) == {k8s.GPU_IMAGE} and k8s.manifest_errors(doc) == []
    # three replicas of half a GPU: two share a card, the third takes a second pod
    doc = k8s.render_service(_serve(tmp_path, 0.5, replicas=3))
    group = _worker(doc)
    assert _gpus(group) == ("1", "1") and group["replicas"] == 2 and k8s.manifest_errors(doc) == []
    # no num_gpus: the CPU cluster as before
    doc = k8s.render_service(REPO / "serve/grokking_flatness.yaml")
    assert _gpus(_worker(doc)) == (None, None) and _images(doc) == {k8s.IMAGE}


def test_raycluster_gpu_validates():
    text = (REPO / "k8s/raycluster-gpu.yaml").read_text()
    doc = yaml.safe_load(text)
    assert text == k8s.dump(k8s.render_gpu_cluster())
    assert doc["kind"] == "RayCluster" and k8s.manifest_errors(doc) == []
    head = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head["resources"]["limits"], "a CPU head"
    group = _worker(doc)
    assert _gpus(group) == ("1", "1") and group["template"]["spec"]["tolerations"]
    assert _images(doc) == {k8s.GPU_IMAGE}
    k8s.validate_manifest_file(REPO / "k8s/raycluster-gpu.yaml")


def test_every_manifest_validates_and_gpu_jobs_run_the_cuda_image():
    gpu_jobs = 0
    for f in sorted((REPO / "k8s").glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        assert k8s.manifest_errors(doc) == [], f.name
        group = _worker(doc)
        if _gpus(group)[0]:
            gpu_jobs += doc["kind"] == "RayJob"
            assert _images(doc) == {k8s.GPU_IMAGE}, f.name
            assert _gpus(group)[0] == _gpus(group)[1] == group["rayStartParams"]["num-gpus"] != "0", f.name
        else:
            assert _images(doc) == {k8s.IMAGE}, f.name
    assert gpu_jobs >= 10  # every method's gpu.yaml


def test_shipped_grokking_gpu_manifest():
    doc = yaml.safe_load((REPO / "k8s/rayjob-grokking-flatness-gpu.yaml").read_text())
    group = _worker(doc)
    assert _gpus(group) == ("1", "1") and group["replicas"] == 1 and _images(doc) == {k8s.GPU_IMAGE}


def test_gpu_image_option_and_its_default(tmp_path):
    path = _job(tmp_path, "gpu", {"use_gpu": True})
    out = tmp_path / "out"
    res = runner.invoke(app, ["k8s", "render", str(path), "--repo", str(tmp_path), "--out", str(out),
                              "--image", PUSHED])
    assert res.exit_code == 0, res.output
    assert _images(yaml.safe_load((out / "rayjob-grokking-flatness-gpu.yaml").read_text())) == {PUSHED + "-cu128"}
    mine = "registry.example.com/team/methodlab-cuda:0.1.0-ray2.60.0-cu128"
    res = runner.invoke(app, ["k8s", "render", str(path), "--repo", str(tmp_path), "--out", str(out),
                              "--image", PUSHED, "--gpu-image", mine])
    assert res.exit_code == 0, res.output
    assert _images(yaml.safe_load((out / "rayjob-grokking-flatness-gpu.yaml").read_text())) == {mine}


@pytest.mark.parametrize("image,fragment", [
    ("registry.example.com/methodlab:latest", "latest"),
    ("registry.example.com/methodlab:0.1.0-ray2.52.0-cu128", "rayVersion 2.60.0"),
    ("registry.example.com/methodlab", "no tag"),
])
def test_bad_gpu_image_is_one_line_exit_2(tmp_path, image, fragment):
    res = runner.invoke(app, ["k8s", "render", "--gpu-image", image, "--out", str(tmp_path / "out"),
                              "--repo", str(REPO)])
    assert res.exit_code == 2, res.output
    assert "--gpu-image" in res.output and fragment in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_dockerfile_builds_the_cuda_image_the_manifests_name():
    text = (REPO / "k8s/Dockerfile").read_text()
    assert re.search(r"^ARG FLAVOUR=cpu\s*$", text, re.M)
    assert "FROM rayproject/ray:${RAY_VERSION}-py311-${FLAVOUR}" in text
    assert re.search(r"^ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu\s*$", text, re.M)
    assert "--index-url ${TORCH_INDEX}" in text
    assert k8s.GPU_IMAGE.endswith(f"-{k8s.CUDA_FLAVOUR}")
    build = f"--build-arg FLAVOUR={k8s.CUDA_FLAVOUR} --build-arg TORCH_INDEX=https://download.pytorch.org/whl/{k8s.CUDA_FLAVOUR}"
    assert build in text, "the header shows the CUDA build"
    tag = k8s.GPU_IMAGE.split(":", 1)[1]
    assert f"methodlab/methodlab:{tag} ." in text


def test_readme_shows_the_gpu_image_and_a_multi_node_gpu_job():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Kubernetes"):]
    section = section[:section.find("\n## ", 1)]
    for step in (f"--build-arg FLAVOUR={k8s.CUDA_FLAVOUR}", "gpus_per_pod: 8", "node_selector", "num_workers: 16",
                 "use_gpu: true", "kubectl apply -f", "--assume-shared-storage", "/home/ray/results",
                 "not measured"):
        assert step in section, f"README's Kubernetes section lacks {step!r}"
