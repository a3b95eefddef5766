"""search_spaces/<slug>/<name>.yaml: a Tune sweep over dotted config paths of a base job."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from methodlab.specs.job import Strict, Tracking


class Param(Strict):
    """Exactly one distribution per parameter."""

    loguniform: tuple[float, float] | None = None
    uniform: tuple[float, float] | None = None
    randint: tuple[int, int] | None = None
    choice: list[Any] | None = None
    grid: list[Any] | None = None

    @model_validator(mode="after")
    def _one(self):
        set_ = [k for k in ("loguniform", "uniform", "randint", "choice", "grid") if getattr(self, k) is not None]
        if len(set_) != 1:
            raise ValueError(f"give exactly one of loguniform, uniform, randint, choice, grid (got {set_ or 'none'})")
        kind = set_[0]
        if kind in ("loguniform", "uniform", "randint"):
            lo, hi = getattr(self, kind)
            if not lo < hi:
                raise ValueError(f"{kind}: lower bound {lo} must be < upper bound {hi}")
            if kind == "loguniform" and lo <= 0:
                raise ValueError(f"loguniform: bounds must be > 0 (got {lo})")
        elif not getattr(self, kind):
            raise ValueError(f"{kind}: needs at least one value")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("loguniform", "uniform", "randint", "choice", "grid") if getattr(self, k) is not None)


class SearchAlg(Strict):
    type: Literal["optuna", "random"] = "optuna"
    seed: int = 0
    points_to_evaluate: list[dict[str, Any]] = Field(default_factory=list)


class Scheduler(Strict):
    type: Literal["asha", "fifo"] = "asha"
    time_attr: str = "training_iteration"
    grace_period: int = Field(1, ge=1)
    max_t: int = Field(100, ge=1)
    reduction_factor: float = Field(2, gt=1)


class TrialResources(Strict):
    cpu: float = Field(1.0, gt=0, le=256)
    gpu: float = Field(0.0, ge=0, le=16)
    torch_threads: int | None = Field(None, ge=1, le=256)


class SearchSpaceFile(Strict):
    base_job: str = Field(description="Path of the job file swept, relative to the repo root or this file.")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    storage_path: str | None = None
    metric: str | None = Field(None, description="Default: the method's primary metric.")
    mode: Literal["max", "min"] | None = None
    num_samples: int = Field(8, ge=1, le=100_000)
    max_concurrent_trials: int = Field(2, ge=1, le=10_000)
    trial_resources: TrialResources = Field(default_factory=TrialResources)
    max_failures: int = Field(1, ge=0, le=100, description="Retries of an errored trial from its checkpoint.")
    search_alg: SearchAlg = Field(default_factory=SearchAlg)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    tracking: Tracking | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="Fixed overrides for every trial.")
    params: dict[str, Param] = Field(description="Dotted config path -> distribution.")
