"""Serve DGSWP. One Input model with a `task` field, because the generic app has one POST /predict:
- task "plan": two clouds -> DGSWP linear-slice plan (permutation), its cost h and the fitted direction,
  with the solver settings (eps, N, lr, roll-back) of the checkpoint; optionally ot.emd's cost.
- task "sample": Euler samples of a trained CFM vector field (cfm checkpoints only).
Out-of-domain input (unequal n or d, empty or non-finite clouds, sample on a plan checkpoint) -> FieldError."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.min_swgg.config import Config

Coord = Annotated[float, Field(ge=-1e6, le=1e6)]
Point = Annotated[list[Coord], Field(min_length=1, max_length=64)]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Literal["plan", "sample"] = Field("plan", description="plan: match two clouds; sample: draw from a CFM model.")
    source: list[Point] | None = Field(None, min_length=2, max_length=1024, description="plan: n points of dimension d (2 <= n <= 1024, 1 <= d <= 64).")
    target: list[Point] | None = Field(None, min_length=2, max_length=1024, description="plan: n points of the same dimension d.")
    n_iter: int = Field(300, ge=1, le=1000, description="plan: DGSWP iterations.")
    with_exact: bool = Field(False, description="plan: also solve exact OT (ot.emd) and return its cost.")
    n: int = Field(16, ge=1, le=1024, description="sample: number of samples.")
    steps: int = Field(10, ge=1, le=200, description="sample: Euler steps of the learned ODE.")
    seed: int = Field(0, ge=0, lt=2**31, description="Seed of the initial slice / source draws.")


class Output(BaseModel):
    task: Literal["plan", "sample"]
    assignment: list[int] | None = Field(None, description="plan: source i is matched to target assignment[i], mass 1/n.")
    cost: float | None = Field(None, description="plan: h(theta), mean squared Euclidean cost of the matched pairs.")
    direction: list[float] | None = Field(None, description="plan: fitted linear slice theta / |theta|.")
    n_iter: int | None = None
    exact_cost: float | None = Field(None, description="plan: exact OT cost (with_exact).")
    samples: list[list[float]] | None = Field(None, description="sample: [n, dim] generated points.")
    model_step: int = 0


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, step: int, vf=None, dim: int | None = None):
        self.cfg, self.step, self.vf, self.dim = cfg, step, vf, dim

    @classmethod
    def from_checkpoint(cls, directory) -> "Predictor":
        ck = load_checkpoint(directory, method="min_swgg")
        cfg = Config.model_validate(ck.config)
        vf, dim = None, None
        if cfg.task == "cfm":
            from methodlab.methods.min_swgg.cfm import VectorField

            dim, hidden = int(ck.state["dim"]), int(ck.state["hidden"])
            vf = VectorField(dim, hidden)
            vf.load_state_dict({k[4:]: v for k, v in ck.weights.items() if k.startswith("ema.")})
            vf.eval()
        return cls(cfg, int(ck.state.get("step", 0)), vf, dim)

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        rng = np.random.default_rng(0)
        src, tgt = rng.normal(size=(12, 3)), rng.normal(size=(12, 3)) + 1.0
        items = [Input(task="plan", source=src.tolist(), target=tgt.tolist(), n_iter=50, with_exact=True)]
        if cfg.task == "cfm":
            items.append(Input(task="sample", n=8, steps=5))
        return items

    def _check(self, i: int, x: Input) -> None:
        where = f"[{i}]"
        if x.task == "sample":
            if self.vf is None:
                raise FieldError(f"{where}.task", f"this checkpoint is a {self.cfg.task!r} model; 'sample' needs a cfm checkpoint")
            return
        for name in ("source", "target"):
            pts = getattr(x, name)
            if not pts:
                raise FieldError(f"{where}.{name}", "required and non-empty for task 'plan'")
            d = len(pts[0])
            if any(len(p) != d for p in pts):
                raise FieldError(f"{where}.{name}", "all points must have the same dimension")
            if not all(math.isfinite(v) for p in pts for v in p):
                raise FieldError(f"{where}.{name}", "coordinates must be finite")
        if len(x.source) != len(x.target):
            raise FieldError(f"{where}.target", f"needs as many points as source ({len(x.source)}), got {len(x.target)}: "
                                                "sorting plans match equal-size uniform clouds")
        if len(x.source[0]) != len(x.target[0]):
            raise FieldError(f"{where}.target", f"dimension {len(x.target[0])} differs from source's {len(x.source[0])}")

    def _plan(self, x: Input) -> Output:
        from methodlab.methods.min_swgg.evaluate import exact_plan_cost
        from methodlab.methods.min_swgg.swgg import assignment, build_slice, dgswp

        cfg = self.cfg
        src = torch.tensor(x.source, dtype=torch.float64)
        tgt = torch.tensor(x.target, dtype=torch.float64)
        # centre and rescale jointly: sorting plans are invariant to it, and eps keeps its meaning for any units
        mu = torch.cat([src, tgt]).mean(0)
        scale = float(torch.cat([src, tgt]).sub(mu).pow(2).sum(1).mean().sqrt()) or 1.0
        xs, ys = ((src - mu) / scale).float(), ((tgt - mu) / scale).float()
        gen = torch.Generator().manual_seed(x.seed)
        g = build_slice("linear", xs.shape[1], generator=gen)
        opt = torch.optim.Adam(g.parameters(), lr=cfg.lr_inner)
        res = dgswp(xs, ys, g, opt, n_iter=x.n_iter, eps=cfg.eps, n_samples=cfg.n_samples,
                    variance_reduction=cfg.variance_reduction, rollback=cfg.rollback, generator=gen,
                    rollback_on=cfg.rollback_on)
        a = assignment(res.sigma, res.tau)
        cost = float((src - tgt[a]).pow(2).sum(1).mean())  # in the caller's units, float64
        w = g.weight.detach().double().reshape(-1)
        direction = (w / w.norm()).tolist() if float(w.norm()) > 0 else [0.0] * len(w)
        exact = exact_plan_cost(src.numpy(), tgt.numpy()) if x.with_exact else None
        return Output(task="plan", assignment=a.tolist(), cost=_finite(cost), direction=direction, n_iter=x.n_iter,
                      exact_cost=None if exact is None else _finite(exact), model_step=self.step)

    @torch.no_grad()
    def _sample(self, x: Input) -> Output:
        from methodlab.methods.min_swgg.cfm import euler_sample
        from methodlab.methods.min_swgg.data import CFMData

        data = CFMData.__new__(CFMData)
        data.name, data.dim = self.cfg.cfm_data, self.dim
        x0 = data.x0(x.n, torch.Generator().manual_seed(x.seed))
        out = euler_sample(self.vf, x0, x.steps).clamp(-1e6, 1e6)
        out = torch.nan_to_num(out, nan=0.0)
        return Output(task="sample", samples=out.tolist(), model_step=self.step)

    def __call__(self, inputs: list[Input]) -> list[Output]:
        for i, x in enumerate(inputs):
            self._check(i, x)
        return [self._plan(x) if x.task == "plan" else self._sample(x) for x in inputs]


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 1.7976931348623157e308
