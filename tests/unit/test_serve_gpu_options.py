"""A serve file's `num_gpus` / `num_cpus` reach the replica's Ray actor options (issue 40)."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("ray.serve")


def _serve_file(tmp_path, ckpt, **extra) -> dict:
    return {"http_options": {"host": "127.0.0.1", "port": 8000},
            "applications": [{"name": "grok", "route_prefix": "/grok", "import_path": "methodlab.serving.app:build",
                              "args": {"method": "grokking_flatness", "checkpoint": str(ckpt), **extra}}]}


def _checkpoint(tmp_path):
    import torch

    from methodlab.core import save_checkpoint
    from methodlab.methods.grokking_flatness.config import Config

    return save_checkpoint(tmp_path / "ckpt", method="grokking_flatness", config=Config(),
                           weights={"w": torch.zeros(1, device="cpu")}, state={"step": 0})


def test_num_gpus_renders_into_the_deployments_actor_options_and_validates(tmp_path):
    from ray.serve.schema import ServeDeploySchema

    from methodlab.serving.app import build
    from methodlab.specs.files import load_serve_file

    ckpt = _checkpoint(tmp_path)
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(_serve_file(tmp_path, ckpt, num_gpus=0.5, num_cpus=2)))
    cfg = load_serve_file(path)  # methodlab's args + Ray's own ServeDeploySchema
    ServeDeploySchema.model_validate(cfg) if hasattr(ServeDeploySchema, "model_validate") else ServeDeploySchema.parse_obj(cfg)
    app = build(cfg["applications"][0]["args"])
    opts = app._bound_deployment.ray_actor_options
    assert opts["num_gpus"] == 0.5 and opts["num_cpus"] == 2


def test_a_cpu_serve_file_asks_for_no_gpu(tmp_path):
    from methodlab.serving.app import build

    app = build(_serve_file(tmp_path, _checkpoint(tmp_path))["applications"][0]["args"])
    opts = app._bound_deployment.ray_actor_options
    assert "num_gpus" not in opts or not opts["num_gpus"]
    assert opts["num_cpus"] == 1


def test_negative_num_gpus_is_refused(tmp_path):
    from methodlab.core import ConfigError
    from methodlab.specs.files import load_serve_file

    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(_serve_file(tmp_path, _checkpoint(tmp_path), num_gpus=-1)))
    with pytest.raises(ConfigError, match="num_gpus"):
        load_serve_file(path)
