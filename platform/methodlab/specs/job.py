"""jobs/<slug>/<preset>.yaml: one method in one setting, with scaling, run policy and tracking."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Scaling(Strict):
    num_workers: int = Field(1, ge=1, le=1024, description="Ray Train workers (DDP ranks).")
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0, le=256)
    gpus_per_worker: float | None = Field(None, ge=0, le=16)
    resources_per_worker: dict[str, float] = Field(default_factory=dict)
    torch_threads: int | None = Field(None, ge=1, le=256, description="torch threads per worker (default: its CPUs).")


class CheckpointPolicy(Strict):
    num_to_keep: int | None = Field(2, ge=1, description="Most recent checkpoints kept (None: all).")
    score_attribute: str | None = Field(None, description="Keep the best by this metric instead of the newest.")
    score_order: Literal["max", "min"] = "max"


class RunPolicy(Strict):
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
                             description="Run folder name; re-running the same name resumes.")
    storage_path: str | None = Field(None, description="Local dir or pyarrow URI; default METHODLAB_STORAGE or ./results.")
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    max_failures: int = Field(0, ge=-1, le=1000, description="Worker-group restarts from the last checkpoint (-1: unlimited).")


class Tracking(Strict):
    """Experiment trackers. Not wired yet: turning one on is refused rather than silently ignored.
    (Tune already writes TensorBoard event files per trial: `tensorboard --logdir <sweep folder>`.)"""

    mlflow: bool = False
    tensorboard: bool = False
    uri: str | None = Field(None, description="MLflow tracking URI (default sqlite under the storage path).")
    experiment: str | None = None

    @model_validator(mode="after")
    def _not_yet(self):
        if self.mlflow or self.tensorboard:
            raise ValueError("MLflow / TensorBoard tracking is not available in this version; set mlflow: false and "
                             "tensorboard: false (Tune sweeps still write TensorBoard event files per trial)")
        return self


class JobFile(Strict):
    method: str = Field(description="Registered method slug (`methodlab methods list`).")
    setting: str = Field("train", description="Method entry point: 'train' or a setting the method declares.")
    description: str = ""
    config: dict[str, Any] = Field(default_factory=dict, description="Partial override of the method config.")
    scaling: Scaling = Field(default_factory=Scaling)
    run: RunPolicy = Field(default_factory=RunPolicy)
    tracking: Tracking = Field(default_factory=Tracking)
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env for cluster runs.")
