"""jobs/<slug>/<preset>.yaml: one method in one setting, with scaling, run policy and tracking."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Scaling(Strict):
    num_workers: int = Field(1, ge=1, le=1024, description="Ray Train workers (DDP ranks).")
    use_gpu: bool = Field(False, description="Train on a GPU per worker; refused up front when none is there.")
    cpus_per_worker: float = Field(1.0, gt=0, le=256)
    gpus_per_worker: float | None = Field(None, ge=0, le=16)
    resources_per_worker: dict[str, float] = Field(default_factory=dict)
    torch_threads: int | None = Field(None, ge=1, le=256, description="torch threads per worker (default: its CPUs).")
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="Ray placement of the worker group: SPREAD puts one worker per node where it can.")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Mixed precision of the forward pass: bf16 / fp16 autocast (fp16 with a GradScaler); "
                            "checkpoints stay fp32.")
    compile: bool = Field(False, description="torch.compile the method's network (first steps are slower).")
    tf32: bool = Field(False, description="Allow TF32 matmuls and convolutions on Ampere+ GPUs (process-wide, "
                                          "set by the runner).")


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
    """Experiment trackers, logged from one process per run (rank 0's reports once; see runners/tracking.py)."""

    mlflow: bool = Field(False, description="Log params, every report (with its step), final metrics, the checkpoint "
                                             "path and plots to MLflow; a sweep is a parent run with one nested run per trial.")
    tensorboard: bool = Field(False, description="Write TensorBoard event files to <run>/tensorboard or "
                                                  "<sweep>/tensorboard/<trial_id>.")
    uri: str | None = Field(None, min_length=1, description="MLflow tracking URI or a folder (default: MLFLOW_TRACKING_URI, "
                                                            "else ./mlruns, an SQLite store with artifacts beside it).")
    experiment: str | None = Field(None, min_length=1, max_length=200, description="MLflow experiment (default: the method slug).")


class Kubernetes(Strict):
    """How `methodlab k8s render` lays the job out on Kubernetes pods (KubeRay RayJob); ignored by `run`/`submit`."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the worker pods must match (the pod's nodeSelector), e.g. "
                                          "{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}; the head pod goes anywhere.")
    gpus_per_pod: int | None = Field(
        None, ge=1, le=64, description="GPUs per worker pod (scaling.use_gpu jobs), e.g. 8 for a whole 8-GPU node: "
                                       "the pod holds gpus_per_pod / gpus_per_worker Ray Train workers (a whole "
                                       "number), and ceil(num_workers / that) pods run. Default: "
                                       "ceil(gpus_per_worker or 1), one worker per pod (two for 0.5).")


class JobFile(Strict):
    method: str = Field(description="Registered method slug (`methodlab methods list`).")
    setting: str = Field("train", description="Method entry point: 'train' or a setting the method declares.")
    description: str = ""
    config: dict[str, Any] = Field(default_factory=dict, description="Partial override of the method config.")
    scaling: Scaling = Field(default_factory=Scaling)
    run: RunPolicy = Field(default_factory=RunPolicy)
    tracking: Tracking = Field(default_factory=Tracking)
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env for cluster runs.")
    kubernetes: Kubernetes = Field(default_factory=Kubernetes,
                                   description="Pod layout for `methodlab k8s render` (GPUs per pod, nodeSelector).")
