"""Every registered method honours the contract: lazy SPEC, strict config, smoke run through the
local runner, checkpoint round trip (no unpickling), a Predictor that answers its own schema."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from methodlab.core import ConfigError, FieldError, load_checkpoint
from methodlab.core.method import MethodConfig, MethodSpec
from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY

SLUGS = sorted(REGISTRY)


def test_listing_methods_imports_no_method_stack():
    code = ("import sys; from methodlab.methods import REGISTRY; import methodlab.core.registry as r; r.method_slugs();"
            "bad=[m for m in ('torch','torch_geometric','ot','mujoco','transformers','ray') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"listing methods imported {out}"


@pytest.mark.parametrize("slug", SLUGS)
def test_spec_and_config(slug):
    spec = get_spec(slug)
    assert isinstance(spec, MethodSpec) and spec.slug == slug
    cls = spec.config_cls()
    assert issubclass(cls, MethodConfig)
    assert cls.model_config.get("extra") == "forbid"
    cls()  # paper defaults validate
    cls.model_validate(cls.smoke)
    with pytest.raises(ValidationError):
        cls.model_validate({"definitely_not_a_field": 1})
    for name, field in cls.model_fields.items():
        assert field.description or name == "seed" or field.annotation is not None
    assert cls.mode in ("max", "min") and "/" in cls.primary_metric or cls.primary_metric


def test_smoke_run_reports_primary_metric(method_smoke):
    slug, run = method_smoke
    metric = type(run["config"]).primary_metric
    value = run["metrics"].get(metric)
    assert isinstance(value, (int, float)) and math.isfinite(value), f"{slug}: {metric} = {value}"
    run_dir = Path(run["run_dir"])
    assert (run_dir / "summary.parquet").exists() and (run_dir / "metrics.jsonl").exists()


def test_checkpoint_round_trip(method_smoke):
    slug, run = method_smoke
    from methodlab.core.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    assert ckpt is not None, f"{slug} wrote no checkpoint"
    loaded = load_checkpoint(ckpt, method=slug, load_torch_state=True)
    cfg = get_spec(slug).config_cls().model_validate(loaded.config)
    assert cfg == run["config"]
    assert loaded.weights, "empty weights"
    assert not list(ckpt.glob("*.pkl")), "pickles in a checkpoint"


def _example_inputs(cls, cfg) -> list[BaseModel]:
    """The method's own example (Predictor.example_inputs) or its schema's defaults."""
    if hasattr(cls, "example_inputs"):
        return cls.example_inputs(cfg)
    return [cls.Input()]


def test_predictor(method_smoke):
    slug, run = method_smoke
    from methodlab.core.checkpoint import latest_checkpoint

    cls = get_spec(slug).predictor_cls()
    assert issubclass(cls.Input, BaseModel) and issubclass(cls.Output, BaseModel)
    json.dumps(cls.Input.model_json_schema())
    pred = cls.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    inputs = _example_inputs(cls, run["config"])
    outs = pred(inputs)
    assert len(outs) == len(inputs)
    for o in outs:
        assert isinstance(o, cls.Output)
        json.loads(json.dumps(o.model_dump(mode="json"), allow_nan=False))


def test_checkpoint_of_another_method_is_refused(method_smoke, tmp_path):
    slug, _ = method_smoke
    from methodlab.core import save_checkpoint
    import torch

    d = save_checkpoint(tmp_path / "other", method="not-" + slug, config={"x": 1}, weights={"w": torch.zeros(1)}, state={})
    with pytest.raises(Exception) as info:
        get_spec(slug).predictor_cls().from_checkpoint(d)
    assert "not-" + slug in str(info.value) or isinstance(info.value, (ConfigError, FieldError))
