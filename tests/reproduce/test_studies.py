"""Conformance of every method's reproduction (issue 41): its study declaration loads and checks, its --quick
plan is non-empty, its committed report re-renders from its committed JSON alone (byte for byte, no run store),
and no method reads the environment for its choices (nor any module at import time)."""

from __future__ import annotations

import ast
import importlib
import json
import shutil
from pathlib import Path

import pytest

from methodlab.core.registry import get_spec, method_slugs

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "platform" / "methodlab"
REPORTS = REPO / "reports"
SLUGS = [s for s in method_slugs() if get_spec(s).reproduce]


def _study(slug: str):
    module = importlib.import_module(get_spec(slug).reproduce.split(":")[0])
    assert hasattr(module, "study"), f"{slug}: reproduce.py declares no study() (not on the harness)"
    return module.study()


@pytest.mark.parametrize("slug", SLUGS)
def test_the_study_loads_and_its_quick_plan_is_not_empty(slug, tmp_path):
    from methodlab.reproduce.harness import plan

    study = _study(slug)
    assert study.slug == slug
    study.check()
    assert study.claims, f"{slug}: a study with no claims"
    pending = plan(study, tmp_path / "runs", mode="quick")  # validates every arm's job, runs nothing
    assert pending, f"{slug}: --quick plans no run"
    for mode in ("default", "full"):  # every arm's job loads in every mode (a skip_quick arm's overrides too)
        assert plan(study, tmp_path / "runs", mode=mode), f"{slug}: plans no run in {mode} mode"
    lines = len((PKG / "methods" / slug / "reproduce.py").read_text().splitlines())
    assert lines <= 300, f"{slug}/reproduce.py has {lines} lines (at most 300: science beyond it goes elsewhere)"


def _harness_reports() -> list[str]:
    out = []
    for slug in SLUGS:
        path = REPORTS / f"{slug}.json"
        if path.exists() and "data" in json.loads(path.read_text()):
            out.append(slug)
    return out


@pytest.mark.parametrize("slug", _harness_reports())
def test_the_committed_report_renders_from_its_json_alone(slug, tmp_path):
    from methodlab.reproduce.report import render_from_json

    shutil.copy(REPORTS / f"{slug}.json", tmp_path / f"{slug}.json")
    legacy = REPORTS / "legacy" / f"{slug}.md"
    if legacy.exists():
        (tmp_path / "legacy").mkdir()
        shutil.copy(legacy, tmp_path / "legacy" / legacy.name)
    render_from_json(_study(slug), tmp_path)
    assert (tmp_path / f"{slug}.md").read_text() == (REPORTS / f"{slug}.md").read_text()
    assert json.loads((tmp_path / f"{slug}.json").read_text()) == json.loads((REPORTS / f"{slug}.json").read_text())


def _env_reads(tree: ast.AST) -> list[ast.AST]:
    """Calls and subscripts that read os.environ / os.getenv (writes such as environ.setdefault of a library's
    offline switch are not reads of a choice)."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = ast.unparse(f)
            if name in ("os.getenv", "getenv", "os.environ.get", "environ.get"):
                hits.append(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                ast.unparse(node.value) in ("os.environ", "environ"):
            hits.append(node)
        elif isinstance(node, ast.Compare) and any(ast.unparse(c) in ("os.environ", "environ")
                                                   for c in node.comparators):
            hits.append(node)
    return hits


def test_no_method_reads_the_environment():
    bad = []
    for f in sorted((PKG / "methods").rglob("*.py")):
        tree = ast.parse(f.read_text())
        bad += [f"{f.relative_to(REPO)}:{n.lineno}: {ast.unparse(n)[:80]}" for n in _env_reads(tree)]
        bad += [f"{f.relative_to(REPO)}:{n.lineno}: names {n.value}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("METHODLAB_")]
    assert not bad, "methods read the environment (make it a config field or a CLI flag):\n" + "\n".join(bad)


def _module_level(tree: ast.Module):
    """Statements that run at import time (not inside a function or a class body's methods)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield node
        if isinstance(node, ast.ClassDef):
            todo += node.body
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For)):
            todo += [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]


def test_no_module_reads_the_environment_at_import_time():
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        tree = ast.parse(f.read_text())
        for stmt in _module_level(tree):
            if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.ClassDef)):
                continue  # their bodies are visited as statements; their own heads are checked below
            bad += [f"{f.relative_to(REPO)}:{n.lineno}: {ast.unparse(n)[:80]}" for n in _env_reads(stmt)
                    if not any(isinstance(p, ast.Lambda) for p in ast.walk(stmt) if n in ast.walk(p))]
        for stmt in (s for s in _module_level(tree) if isinstance(s, (ast.If, ast.For, ast.With))):
            head = getattr(stmt, "test", None) or getattr(stmt, "iter", None) or stmt
            if not isinstance(head, ast.With):
                bad += [f"{f.relative_to(REPO)}:{n.lineno}: {ast.unparse(n)[:80]}" for n in _env_reads(head)]
    assert not bad, "modules read the environment at import time (read it when called):\n" + "\n".join(bad)
