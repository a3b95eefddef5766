"""`methodlab methods show` (issue 42, item 6): job presets, smoke preset, choices and real defaults; command-line
overrides read a text field's value as text (item 10: `two_stage=on` is 'on', not YAML's True)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from methodlab.cli.main import app
from tests.conftest import REPO


@pytest.fixture
def wide(monkeypatch):
    from methodlab.cli.common import console

    monkeypatch.setattr(console, "width", 1000)  # table cells on one line whatever the terminal


def show(slug: str) -> str:
    res = CliRunner().invoke(app, ["methods", "show", slug])
    assert res.exit_code == 0, res.output
    return res.output


def test_methods_show_presets_choices_and_defaults(wide):
    out = show("face")
    assert "PydanticUndefined" not in out and "typing." not in out
    assert "list['pretrain' | 'map' | 'align']" in out and '["pretrain", "map", "align"]' in out  # default_factory
    assert "[5, 10, 20]" in out  # topk
    assert "devices:" in out and "smoke preset (--smoke): data=synthetic" in out
    for job in sorted((REPO / "jobs/face").glob("*.yaml")):
        assert f"jobs/face/{job.name}" in out
    out = show("grokking_flatness")
    assert "'none' | 'collapse_prevent' | 'collapse_encourage' | 'anti_flat'" in out
    assert "Mod-97 addition, 1-layer transformer, calibrated to grok on a 2-core CPU." in out  # cpu.yaml's description
    out = show("unirl")
    assert "PydanticUndefined" not in out and '"kinds": [' in out  # a nested config's values


def test_methods_show_without_a_jobs_folder(wide, monkeypatch, tmp_path):
    """An installed wheel has no jobs/: nothing about presets, the rest as before."""
    from methodlab.cli import methods_cmd

    monkeypatch.setattr(methods_cmd, "jobs_dir", lambda: tmp_path / "jobs")
    out = show("grokking_flatness")
    assert "job preset" not in out and "jobs/" not in out and "smoke preset" in out


def test_type_text_renders_choices():
    import enum
    from typing import Literal, Optional, Union

    from methodlab.cli.methods_cmd import type_text

    class Mode(enum.Enum):
        A = "a"
        B = "b"

    assert type_text(Literal["none", "anti_flat"]) == "'none' | 'anti_flat'"
    assert type_text(Union[int, Literal["all"]]) == "int | 'all'"
    assert type_text(Optional[Literal["x"]]) == "'x' | None"
    assert type_text(Mode) == "'a' | 'b'"
    assert type_text(dict[str, float]) == "dict[str, float]"
    assert type_text(tuple[float, ...]) == "tuple[float, ...]"


def test_overrides_keep_text_for_text_fields():
    from methodlab.core.overrides import parse_override
    from methodlab.core.registry import get_spec
    from methodlab.specs.files import load_job, load_search_space
    from methodlab.specs.job import JobFile

    cls = get_spec("discrete_structure").config_cls()
    assert parse_override("two_stage=on", cls) == ("two_stage", "on")
    assert parse_override("two_stage=off", cls) == ("two_stage", "off")
    assert parse_override("two_stage=on") == ("two_stage", True)  # no model: plain YAML, as before
    job = REPO / "jobs/discrete_structure/fit.yaml"
    assert load_job(job, overrides=["two_stage=on"]).config.two_stage == "on"
    assert load_job(job, overrides=["config.two_stage=off"]).config.two_stage == "off"
    loaded = load_job(job, overrides=["run.name=on", "tracking.uri=null"])
    assert loaded.job.run.name == "on" and loaded.job.tracking.uri is None  # str | None: null still clears it
    assert parse_override("run.name=yes", JobFile) == ("run.name", "yes")
    # other types keep YAML's reading
    grok = get_spec("grokking_flatness").config_cls()
    assert parse_override("cancel_cosine=off", grok) == ("cancel_cosine", False)
    assert parse_override("lr=1e-3", grok) == ("lr", 1e-3)
    assert parse_override("betas=[0.9, 0.99]", grok) == ("betas", [0.9, 0.99])
    # a sweep's config.x=... too
    space = load_search_space(REPO / "search_spaces/discrete_structure/lambda_k.yaml", ["config.two_stage=on"])
    assert space.space.config["two_stage"] == "on"
