"""Serve DGSWP. One Input model with a `task` field, because the generic app has one POST /predict:
- task "plan": two clouds -> DGSWP linear-slice plan, its cost h and the fitted direction, with the solver
  settings (eps, N, lr, roll-back) of the checkpoint; optionally ot.emd's cost. Clouds of n and m points
  (uniform masses) are matched on copies replicated to lcm(n, m) points each: a sorting plan between equal
  uniform clouds, which is the monotone (north-west corner) 1-D plan of the originals. For n == m it is a
  permutation (`assignment`); always as (i, j, mass) triples (`plan`).
- task "sample": Euler samples of a trained CFM vector field (cfm checkpoints only).
The served schema (`input_model`) is the checkpoint's: points of its dimension d, the sample task only on
cfm checkpoints. Out-of-domain input (d mismatch, lcm(n, m) over the cap, non-finite clouds) -> FieldError."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.min_swgg.config import Config

Coord = Annotated[float, Field(ge=-1e6, le=1e6)]
Point = Annotated[list[Coord], Field(min_length=1, max_length=64)]
MAX_REPLICATED = 2048  # lcm(n, m) cap: the replicated clouds' Gram matrix stays <= 32 MiB


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: Literal["plan", "sample"] = Field("plan", description="plan: match two clouds; sample: draw from a CFM model.")
    source: list[Point] | None = Field(None, min_length=2, max_length=1024, description="plan: n points of dimension d (2 <= n <= 1024, 1 <= d <= 64).")
    target: list[Point] | None = Field(None, min_length=2, max_length=1024,
                                       description=f"plan: m points of the same dimension d; m may differ from n when lcm(n, m) <= {MAX_REPLICATED}.")
    n_iter: int = Field(300, ge=1, le=1000, description="plan: DGSWP iterations.")
    with_exact: bool = Field(False, description="plan: also solve exact OT (ot.emd) and return its cost.")
    n: int = Field(16, ge=1, le=1024, description="sample: number of samples.")
    steps: int = Field(10, ge=1, le=200, description="sample: Euler steps of the learned ODE.")
    seed: int = Field(0, ge=0, lt=2**31, description="Seed of the initial slice / source draws.")


class Output(BaseModel):
    task: Literal["plan", "sample"]
    assignment: list[int] | None = Field(None, description="plan, n == m: source i is matched to target assignment[i], mass 1/n.")
    plan: list[tuple[int, int, float]] | None = Field(None, description="plan: (source i, target j, mass) triples, masses sum to 1.")
    cost: float | None = Field(None, description="plan: h(theta), squared Euclidean cost of the plan (mass-weighted).")
    direction: list[float] | None = Field(None, description="plan: fitted linear slice theta / |theta|.")
    n_iter: int | None = None
    exact_cost: float | None = Field(None, description="plan: exact OT cost (with_exact).")
    samples: list[list[float]] | None = Field(None, description="sample: [n, dim] generated points.")
    model_step: int = 0


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, step: int, vf=None, dim: int | None = None, plan_dim: int | None = None,
                 device="cpu"):
        self.cfg, self.step, self.vf, self.dim = cfg, step, vf, dim
        self.plan_dim = plan_dim or dim  # the dimension the checkpoint's solver settings were fitted for
        self.device = torch.device(device)  # the DGSWP solver and the vector field run here

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The checkpoint's settings (and, for cfm, its EMA vector field) on `device` (None: the CPU)."""
        device = torch.device(device if device is not None else "cpu")
        ck = load_checkpoint(directory, method="min_swgg")
        cfg = Config.model_validate(ck.config)
        vf, dim, plan_dim = None, None, None
        slice_w = [v for k, v in ck.weights.items() if k.startswith("slice.") and v.ndim == 2]
        if slice_w:  # plan / flow checkpoints: the first layer of the fitted slice g_theta is [out, d]
            plan_dim = int(slice_w[0].shape[1])
        if cfg.task == "cfm":
            from methodlab.methods.min_swgg.cfm import VectorField

            dim, hidden = int(ck.state["dim"]), int(ck.state["hidden"])
            with device:
                vf = VectorField(dim, hidden)
            vf.load_state_dict({k[4:]: v for k, v in ck.weights.items() if k.startswith("ema.")})
            vf.eval()
        return cls(cfg, int(ck.state.get("step", 0)), vf, dim, plan_dim, device)

    def input_model(self):
        """This checkpoint's request: plan clouds of its dimension d; 'sample' only for a cfm checkpoint."""
        d = self.plan_dim
        point = Annotated[list[Coord], Field(min_length=d, max_length=d)] if d else Point
        dims = f"{d}-dimensional points" if d else "points of one dimension d <= 64"
        fields = Input.model_fields
        plan = create_model(
            "PlanInput", __config__=ConfigDict(extra="forbid"),
            __doc__=f"Match two clouds of {dims} with uniform masses: source has n, target m points "
                    f"(2..1024 each); n and m may differ when lcm(n, m) <= {MAX_REPLICATED}.",
            task=(Literal["plan"], Field("plan" if self.vf is None else ..., description="Match two clouds.")),
            source=(list[point], Field(..., min_length=2, max_length=1024, description="n source points.")),
            target=(list[point], Field(..., min_length=2, max_length=1024, description="m target points.")),
            n_iter=(int, fields["n_iter"]), with_exact=(bool, fields["with_exact"]), seed=(int, fields["seed"]))
        if self.vf is None:
            return plan
        sample = create_model(
            "SampleInput", __config__=ConfigDict(extra="forbid"),
            __doc__=f"Draw {self.dim}-dimensional samples from this checkpoint's flow-matching model.",
            task=(Literal["sample"], Field(..., description="Sample the learned ODE.")),
            n=(int, fields["n"]), steps=(int, fields["steps"]), seed=(int, fields["seed"]))
        return Union[plan, sample]

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        rng = np.random.default_rng(0)
        d = _served_dim(cfg)
        src, tgt = rng.normal(size=(12, d)), rng.normal(size=(12, d)) + 1.0
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
        n, m = len(x.source), len(x.target)
        if math.lcm(n, m) > MAX_REPLICATED:
            raise FieldError(f"{where}.target", f"{m} points against source's {n}: lcm(n, m) = {math.lcm(n, m)} exceeds "
                                                f"{MAX_REPLICATED} (use equal sizes, or sizes with a small lcm)")
        if len(x.source[0]) != len(x.target[0]):
            raise FieldError(f"{where}.target", f"dimension {len(x.target[0])} differs from source's {len(x.source[0])}")
        if self.plan_dim and len(x.source[0]) != self.plan_dim:
            raise FieldError(f"{where}.source", f"dimension {len(x.source[0])}: this checkpoint's solver is fitted for "
                                                f"d = {self.plan_dim}")

    def _plan(self, x: Input) -> Output:
        from methodlab.methods.min_swgg.evaluate import exact_plan_cost
        from methodlab.methods.min_swgg.swgg import assignment, build_slice, dgswp

        cfg, dev = self.cfg, self.device
        src = torch.tensor(x.source, dtype=torch.float64, device=dev)  # the request's clouds, moved once
        tgt = torch.tensor(x.target, dtype=torch.float64, device=dev)
        # centre and rescale jointly: sorting plans are invariant to it, and eps keeps its meaning for any units
        mu = torch.cat([src, tgt]).mean(0)
        scale = float(torch.cat([src, tgt]).sub(mu).pow(2).sum(1).mean().sqrt()) or 1.0
        xs, ys = ((src - mu) / scale).float(), ((tgt - mu) / scale).float()
        n, m = len(src), len(tgt)
        g_nm = math.gcd(n, m)
        rep_x, rep_y = m // g_nm, n // g_nm  # both clouds become lcm(n, m) points of mass 1/lcm
        xs, ys = xs.repeat_interleave(rep_x, 0), ys.repeat_interleave(rep_y, 0)
        gen = torch.Generator(device=dev).manual_seed(x.seed)
        with dev:
            g = build_slice("linear", xs.shape[1], generator=gen)
        opt = torch.optim.Adam(g.parameters(), lr=cfg.lr_inner)
        res = dgswp(xs, ys, g, opt, n_iter=x.n_iter, eps=cfg.eps, n_samples=cfg.n_samples,
                    variance_reduction=cfg.variance_reduction, rollback=cfg.rollback, generator=gen,
                    rollback_on=cfg.rollback_on)
        a = assignment(res.sigma, res.tau)  # replicated source k -> replicated target a[k]
        i, j = torch.arange(len(a), device=dev) // rep_x, a // rep_y
        pairs = torch.unique(i * m + j, return_counts=True)
        ii, jj, mass = pairs[0] // m, pairs[0] % m, pairs[1].double() / len(a)
        cost = float(((src[ii] - tgt[jj]).pow(2).sum(1) * mass).sum())  # in the caller's units, float64
        w = g.weight.detach().double().reshape(-1)
        direction = (w / w.norm()).tolist() if float(w.norm()) > 0 else [0.0] * len(w)
        exact = exact_plan_cost(src.cpu().numpy(), tgt.cpu().numpy()) if x.with_exact else None
        plan = list(zip(ii.tolist(), jj.tolist(), mass.tolist()))  # one copy back per field
        return Output(task="plan", assignment=a.tolist() if n == m else None, plan=plan, cost=_finite(cost),
                      direction=direction, n_iter=x.n_iter, exact_cost=None if exact is None else _finite(exact),
                      model_step=self.step)

    @torch.no_grad()
    def _sample(self, x: Input) -> Output:
        from methodlab.methods.min_swgg.cfm import euler_sample
        from methodlab.methods.min_swgg.data import CFMData

        data = CFMData.__new__(CFMData)
        data.name, data.dim = self.cfg.cfm_data, self.dim
        x0 = data.x0(x.n, torch.Generator(device=self.device).manual_seed(x.seed))
        out = euler_sample(self.vf, x0, x.steps).clamp(-1e6, 1e6)
        out = torch.nan_to_num(out, nan=0.0)
        return Output(task="sample", samples=out.tolist(), model_step=self.step)

    def __call__(self, inputs: list[Input]) -> list[Output]:
        for i, x in enumerate(inputs):
            self._check(i, x)
        return [self._plan(x) if x.task == "plan" else self._sample(x) for x in inputs]


def _finite(v: float) -> float:
    return v if math.isfinite(v) else 1.7976931348623157e308


def _served_dim(cfg: Config) -> int:
    """The point dimension a checkpoint of `cfg` serves (a file's plan_d is known only from its weights)."""
    if cfg.task == "cfm":
        return 2 if cfg.cfm_data == "gaussians_moons" else 64
    if cfg.task == "flow":
        return cfg.flow_d if cfg.flow_data == "gaussian" else 2
    return cfg.plan_d
