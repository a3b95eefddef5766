"""Issue 42 item 10: every method that reads a user's file ships a job file that shows it (format in its
description and comments, pointing at a small example that ships in the repository), the README lists them,
the cheapest run under --smoke on their example, and hier_retrieval's edge-list budget scales with the taxonomy."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY
from methodlab.specs.files import load_job
from tests.conftest import REPO

EXAMPLES = REPO / "platform/methodlab/data/examples"
# method -> its bring-your-own-data job
BYO_JOBS = {slug: REPO / f"jobs/{slug}/own_data.yaml" for slug in (
    "cmcl", "discrete_structure", "face", "gyroatt", "min_swgg", "monotone_gbt", "more_longtail", "mtpp_threshold",
    "strategic_causal", "ugodit", "unirl")}
BYO_JOBS["hier_retrieval"] = REPO / "jobs/hier_retrieval/edgelist.yaml"
# methods whose file fields read only a public benchmark's own layout, or a trained model: README says which job
NO_EXAMPLE = {"ctsketch": "MNIST IDX files (max4_mnist.yaml)", "graphrta": "citation / WebKB / ogbn-arxiv raw files",
              "weakshot_keypoint": "the MP-100 layout (mp100_*.yaml)",
              "ucan": "denoise.yaml / upsample.yaml: a point-cloud file through a trained model",
              "rule_unlearning": "cache_dir only (nothing read from a user)"}
READ_FIELD = re.compile(r"(_path|_root|_dir|_file|_list)$")
NOT_USER_DATA = {"stage_dir", "init_from", "checkpoint_path", "output_path", "export_dir", "cache_dir", "out_dir",
                 "pretrain_from", "eval_from", "embedding_path", "wordnet_path", "image_path", "sens_maps_path",
                 "mask_path", "input_path"}
# the data-source fields a method's smoke preset replaces: put back so the smoke run reads the example file
RESTORE = {"cmcl": ("data", "steps"), "mtpp_threshold": ("dataset",), "min_swgg": ("plan_data",),
           "more_longtail": ("dataset",), "face": ("data",), "unirl": ("dataset",)}
CHEAP = ["monotone_gbt", "strategic_causal", "discrete_structure", "min_swgg", "mtpp_threshold", "cmcl", "hier_retrieval",
         "more_longtail", "gyroatt", "unirl"]  # face (~20 s) and ugodit (~8 s) are validated only


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)  # the job files name their examples relative to the repository root


def _user_file_fields(slug: str) -> list[str]:
    cls = get_spec(slug).config_cls()
    return [n for n in cls.model_fields if READ_FIELD.search(n) and n not in NOT_USER_DATA]


def test_every_method_reading_user_files_has_a_byo_job():
    for slug in sorted(REGISTRY):
        fields = _user_file_fields(slug)
        if not fields:
            continue
        assert slug in BYO_JOBS or slug in NO_EXAMPLE, f"{slug} reads {fields}: ship jobs/{slug}/own_data.yaml"
    assert not set(BYO_JOBS) & set(NO_EXAMPLE)


@pytest.mark.parametrize("slug", sorted(BYO_JOBS))
def test_byo_job_validates_and_points_at_shipped_files(slug):
    path = BYO_JOBS[slug]
    loaded = load_job(path)
    assert loaded.job.method == slug
    raw = yaml.safe_load(path.read_text())
    desc = raw.get("description") or ""
    assert desc.startswith("Your data:") and len(desc) < 200, desc  # the format, in what `methods show` lists
    comments = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    assert len(comments) >= 3, "the format in a few comment lines"
    cfg = raw["config"]
    files = [v for k, v in cfg.items() if isinstance(v, str) and (READ_FIELD.search(k) or k == "dataset") and "/" in v]
    assert files, f"{path.name} names no file"
    for value in files:
        target = REPO / value
        assert target.exists(), f"{path.name}: {value} does not exist"
        size = sum(p.stat().st_size for p in target.rglob("*")) if target.is_dir() else target.stat().st_size
        if "data/assets/" not in value:  # unirl's stored dataset ships with the package already
            assert size < 200_000, f"{value}: {size} bytes is no small example"


def test_examples_are_what_the_script_writes():
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    makers = list(mod.MAKERS)
    try:
        import mne  # noqa: F401 - the EEG example uses the method's montage
    except ImportError:
        makers = [m for m in makers if m.__name__ != "gyroatt"]
    for make in makers:
        for rel, data in make().items():
            assert (EXAMPLES / rel).read_bytes() == data, f"{rel}: run make_examples.py"
    shipped = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix != ".py"
               and "__pycache__" not in p.parts}
    assert shipped == set(mod.build()), "examples/ holds files make_examples.py does not write"


def test_readme_lists_each_byo_job():
    text = (REPO / "README.md").read_text()
    assert "### Bring your own data" in text
    section = text[text.index("### Bring your own data"):]
    section = section[:section.index("\n## ")]
    for slug, path in BYO_JOBS.items():
        assert str(path.relative_to(REPO)) in section, f"README: {path.relative_to(REPO)}"
    for slug in NO_EXAMPLE:
        assert f"`{slug}`" in section


def _smoke_layers(slug: str, raw: dict) -> dict:
    return {k: raw["config"][k] for k in RESTORE.get(slug, ())}


@pytest.mark.parametrize("slug", CHEAP)
def test_cheap_byo_jobs_run_under_smoke(slug, tmp_path):
    from methodlab.runners.local import run_local

    path = BYO_JOBS[slug]
    raw = yaml.safe_load(path.read_text())
    loaded = load_job(path, smoke=True, config_layers=(_smoke_layers(slug, raw),))
    for k, v in raw["config"].items():  # the example files are what the smoke run reads
        if isinstance(v, str) and (READ_FIELD.search(k) or k == "dataset"):
            assert getattr(loaded.config, k) == v, k
    out = run_local(loaded, f"{slug}-byo", str(tmp_path), quiet=True)
    metric = type(loaded.config).primary_metric
    assert isinstance(out["metrics"].get(metric), (int, float)), f"{slug}: {metric} missing from {sorted(out['metrics'])}"


def test_monotone_gbt_byo_job_from_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "methodlab.cli.main", "run", "jobs/monotone_gbt/own_data.yaml", "--local",
                           "--smoke", "--storage", str(tmp_path), "--quiet"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "eval/sq_err" in proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ hier_retrieval steps: auto
def _tree(path: Path, levels=((5, 5), (3, 5), (2, 4), (1, 3))) -> int:
    import numpy as np

    rng = np.random.default_rng(0)
    rows, level, n = ["child\tparent"], ["root"], 1
    for lo, hi in levels:
        nxt = []
        for p in level:
            for k in range(int(rng.integers(lo, hi + 1))):
                c = f"{p}.{k}"
                rows.append(f"{c}\t{p}")
                nxt.append(c)
        level, n = nxt, n + len(nxt)
    path.write_text("\n".join(rows) + "\n")
    return n


def test_edgelist_steps_scale_with_the_taxonomy(tmp_path):
    from methodlab.methods.hier_retrieval.config import Config

    job = yaml.safe_load(BYO_JOBS["hier_retrieval"].read_text())
    assert job["config"]["steps"] == "auto"
    example = load_job(BYO_JOBS["hier_retrieval"]).config
    assert example.steps == 1500  # the 30-node example keeps its budget
    edges = tmp_path / "edges.tsv"
    m = _tree(edges)
    assert 195 <= m <= 220
    big = load_job(BYO_JOBS["hier_retrieval"], config_layers=({"edges_path": str(edges), "texts_path": None},)).config
    assert big.steps == 4100 and big.stage_steps() == (3570, 530)  # 5,000 pairs per node at batch 256
    assert Config(steps="auto").steps == 5400  # synthetic b=3, D=6: 1,093 nodes at batch 1,024
    with pytest.raises(Exception, match="steps: auto"):
        Config(data="wordnet", steps="auto")
    # a file not readable where the config is read (a cluster path) stays auto; the run then names it
    far = Config(data="edgelist", edges_path=str(tmp_path / "elsewhere.tsv"), steps="auto")
    from methodlab.core.errors import MissingSourceError

    with pytest.raises(MissingSourceError, match="elsewhere.tsv"):
        far.stage_steps()
