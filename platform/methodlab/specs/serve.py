"""serve/<app>.yaml is Ray Serve's own config schema; this is the `args:` of methodlab.serving.app:build."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from methodlab.specs.job import Strict

APP_IMPORT_PATH = "methodlab.serving.app:build"


class AppArgs(Strict):
    method: str = Field(description="Registered method slug.")
    checkpoint: str | None = Field(None, description="One checkpoint directory.")
    checkpoints_root: str | None = Field(None, description="A run or sweep folder: its best `top_k` checkpoints are served.")
    top_k: int = Field(3, ge=1, le=64, description="Checkpoints multiplexed from checkpoints_root (model id = rank or trial id).")
    metric: str | None = Field(None, description="Ranking metric for checkpoints_root (default: the method's primary).")
    mode: Literal["max", "min"] | None = None
    max_batch_size: int = Field(32, ge=1, le=4096)
    batch_wait_timeout_s: float = Field(0.002, ge=0, le=10)
    max_body_bytes: int = Field(1 << 20, ge=1024, le=1 << 30, description="Larger request bodies answer 413.")
    max_items: int = Field(1024, ge=1, le=1_000_000, description="Largest list accepted by /predict.")
    num_cpus: float = Field(1.0, gt=0, le=256, description="CPUs per replica (Ray actor option); also its torch threads.")
    num_gpus: float = Field(0.0, ge=0, le=16, description="GPUs per replica (Ray actor option; 0.5 packs two replicas "
                                                          "on a GPU); the predictor then loads onto that GPU.")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.checkpoint is None) == (self.checkpoints_root is None):
            raise ValueError("give exactly one of args.checkpoint or args.checkpoints_root")
        return self
