"""The method contract: a plain SPEC record per method and the base of its typed config."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


def import_object(path: str) -> Any:
    """Resolve "package.module:attr" (the form used by the registry and SPEC fields)."""
    module, _, attr = path.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


class MethodConfig(BaseModel):
    """Base of every method config: unknown keys are errors, assignments are validated.

    Subclasses set the class variables: `primary_metric`/`mode` (what sweeps and the
    conformance test optimise and check), `key_metrics` (what report.html shows first) and `smoke`
    (overrides that make a run take seconds).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    seed: int = Field(0, description="Seed for every random generator of the run.")

    # Fields a resumed run may change (e.g. train longer); any other difference refuses the resume.
    resume_may_change: ClassVar[frozenset[str]] = frozenset({"max_steps", "epochs", "log_every", "checkpoint_every",
                                                             "torch_threads", "stop_at_val_acc", "stop_after_steps"})

    def single_worker_reason(self, setting: str = "train") -> str | None:
        """Why this config, run as `setting`, cannot run data-parallel though its method can (a task or dtype a
        setting name does not show); load_job refuses scaling.num_workers > 1 with it before any Ray resource
        is asked for."""
        return None

    primary_metric: ClassVar[str] = "eval/accuracy"
    mode: ClassVar[Literal["max", "min"]] = "max"
    smoke: ClassVar[dict[str, Any]] = {}
    # The metrics a run's report.html leads with (table and curves), primary_metric first; () -> primary_metric.
    key_metrics: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class MethodSpec:
    """What the registry knows of a method. Only strings: importing a SPEC imports no torch stack."""

    slug: str
    title: str
    paper: str
    config: str  # "module:ConfigClass"
    fit: str  # "module:fit" for the default setting "train"
    predictor: str  # "module:Predictor"
    reproduce: str | None = None  # "module:main"
    settings: dict[str, str] = field(default_factory=dict)  # extra settings -> "module:fit"
    family: str = "core"  # pip extra that provides the method's libraries
    version: str = "1"
    # Device policy (core/device.py). cpu_only: why the method is numpy/scipy by nature (the runner then
    # refuses use_gpu with this reason). precisions: what scaling.precision may be, with the reason for any
    # left out in precision_note. no_compile: why torch.compile cannot take the method (None: it can).
    cpu_only: str | None = None
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    precision_note: str = ""
    no_compile: str | None = None
    # Data parallelism (scaling.num_workers > 1): None = the method shards its global batch over the ranks
    # (ctx.shard) and averages gradients (DDP or ctx.average_gradients); a string = why it cannot, and
    # config validation refuses num_workers > 1 with it. single_worker_settings: the same, per extra setting
    # (a data-parallel method whose `simulate` or `explain` setting is one whole computation).
    single_worker: str | None = None
    single_worker_settings: dict[str, str] = field(default_factory=dict)

    def single_worker_reason(self, setting: str = "train") -> str | None:
        return self.single_worker or self.single_worker_settings.get(setting)

    def config_cls(self) -> type[MethodConfig]:
        return import_object(self.config)

    def fit_fn(self, setting: str = "train") -> Callable:
        if setting == "train":
            return import_object(self.fit)
        if setting not in self.settings:
            from methodlab.core.errors import ConfigError

            allowed = ", ".join(["train", *self.settings])
            raise ConfigError(f"unknown setting {setting!r} for {self.slug}; allowed: {allowed}", field="setting")
        return import_object(self.settings[setting])

    def setting_names(self) -> list[str]:
        return ["train", *self.settings]

    def predictor_cls(self) -> Any:
        return import_object(self.predictor)
