"""Every shipped jobs/, search_spaces/, serve/ and k8s/ file validates; k8s/ is exactly what
`methodlab k8s render` writes; a broken manifest is rejected; the Dockerfile matches the manifests."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from methodlab.cluster import k8s
from methodlab.core import ConfigError
from methodlab.specs.files import load_job, load_search_space, load_serve_file

from tests.conftest import REPO

JOBS = sorted(REPO.glob("jobs/*/*.yaml"))
SPACES = sorted(REPO.glob("search_spaces/*/*.yaml"))
SERVES = sorted(REPO.glob("serve/*.yaml"))
MANIFESTS = sorted(REPO.glob("k8s/*.yaml"))


@pytest.mark.parametrize("path", JOBS, ids=lambda p: str(p.relative_to(REPO)))
def test_job_files(path):
    loaded = load_job(path)
    assert loaded.job.method == path.parent.name, "jobs/<slug>/ holds jobs of <slug>"


@pytest.mark.parametrize("path", SPACES, ids=lambda p: str(p.relative_to(REPO)))
def test_search_spaces(path):
    loaded = load_search_space(path)
    assert loaded.base.job.method == path.parent.name


@pytest.mark.parametrize("path", SERVES, ids=lambda p: str(p.relative_to(REPO)))
def test_serve_files(path):
    raw = load_serve_file(path)
    assert raw["http_options"]["host"] == "127.0.0.1"
    for app in raw["applications"]:
        assert app["args"]["method"] == path.stem or path.stem in app["name"]


def test_every_method_ships_its_files():
    from methodlab.methods import REGISTRY

    for slug in REGISTRY:
        assert list(REPO.glob(f"jobs/{slug}/*.yaml")), f"jobs/{slug}/"
        assert list(REPO.glob(f"search_spaces/{slug}/*.yaml")), f"search_spaces/{slug}/"
        assert (REPO / f"serve/{slug}.yaml").exists(), f"serve/{slug}.yaml"


def test_missing_checkpoint_names_the_command(tmp_path):
    raw = yaml.safe_load((REPO / "serve/grokking_flatness.yaml").read_text())
    raw["applications"][0]["args"]["checkpoints_root"] = "results/quickstart"
    from methodlab.serving.checkpoints import resolve_checkpoints
    from methodlab.specs.serve import AppArgs

    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ConfigError, match="make demo"):
            resolve_checkpoints(AppArgs.model_validate(raw["applications"][0]["args"]))
    finally:
        os.chdir(cwd)


def test_k8s_manifests_are_current_and_valid():
    rendered = k8s.render_all(REPO)
    on_disk = {p.name: p.read_text() for p in MANIFESTS}
    assert set(rendered) == set(on_disk), "run `methodlab k8s render`"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"k8s/{name} is stale: run `methodlab k8s render`"
        for doc in yaml.safe_load_all(text):
            assert k8s.manifest_errors(doc) == [], name


def _job_doc():
    return next(yaml.safe_load_all((REPO / "k8s/rayjob-grokking-flatness-cpu.yaml").read_text()))


@pytest.mark.parametrize("mutate,fragment", [
    (lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].__setitem__("replicas", "two"), "replicas"),
    (lambda d: d["spec"].__setitem__("shutdownAfterJobFinishes", "yes"), "shutdownAfterJobFinishes"),
    (lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"].pop("template"), "template"),
    (lambda d: d["spec"]["rayClusterSpec"].__setitem__("rayVersion", "2.52.0"), "rayVersion"),
    (lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["securityContext"].__setitem__("runAsNonRoot", False), "non-root"),
    (lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"].pop("limits"), "limits"),
    (lambda d: d["spec"].pop("ttlSecondsAfterFinished"), "ttlSecondsAfterFinished"),
    (lambda d: d["spec"]["rayClusterSpec"]["authOptions"].__setitem__("mode", "disabled"), "authOptions"),
])
def test_broken_manifest_rejected(mutate, fragment):
    doc = copy.deepcopy(_job_doc())
    mutate(doc)
    errors = k8s.manifest_errors(doc)
    assert any(fragment in e for e in errors), errors


def test_rayservice_rules():
    doc = next(yaml.safe_load_all((REPO / "k8s/rayservice-grokking-flatness.yaml").read_text()))
    assert yaml.safe_load(doc["spec"]["serveConfigV2"])["http_options"]["host"] == "0.0.0.0"
    bad = copy.deepcopy(doc)
    bad["spec"]["upgradeStrategy"]["type"] = "Bogus"
    assert any("NewCluster" in e for e in k8s.manifest_errors(bad))
    bad = copy.deepcopy(doc)
    bad["spec"]["serveConfigV2"] = "applications: 3"
    assert any("serveConfigV2" in e for e in k8s.manifest_errors(bad))
    assert set(doc["spec"]["rayClusterConfig"]["authOptions"]) == {"mode", "secretName"}, "the token stays in a Secret"


def test_validate_file_names_the_file(tmp_path):
    doc = _job_doc()
    doc["spec"]["submitterConfig"] = {}
    p = tmp_path / "rayjob-broken.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="rayjob-broken.yaml.*backoffLimit"):
        k8s.validate_manifest_file(p)


def test_dockerfile_matches_manifests():
    text = (REPO / "k8s/Dockerfile").read_text()
    assert re.search(rf"ARG RAY_VERSION={re.escape(k8s.RAY_VERSION)}\b", text)
    assert "FROM rayproject/ray:${RAY_VERSION}" in text
    assert re.search(r"^USER (1000|ray)\s*$", text, re.M), "non-root user"
    assert "torch==2.13.0" in text and k8s.IMAGE.endswith(f"ray{k8s.RAY_VERSION}")
    for src in ("platform", "jobs", "serve"):
        assert f"COPY --chown=1000:100 {src} " in text
