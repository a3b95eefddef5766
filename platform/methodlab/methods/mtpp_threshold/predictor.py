"""Serve a trained model: an event history in, the next mark (mark first: prior-normalised scores minus the
learned thresholds) with its scores, then the time of the next event from p*(tau | mark) by inverse-CDF
sampling (expected gap and quantiles)."""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.mtpp_threshold import tpp
from methodlab.methods.mtpp_threshold.config import Config
from methodlab.methods.mtpp_threshold.model import LogNormMix
from methodlab.methods.mtpp_threshold.threshold import predict_marks
from methodlab.methods.mtpp_threshold.train import build_model

QUANTILES = (0.1, 0.5, 0.9)
_BIG = 1e30  # outputs are clipped here so huge-but-valid inputs never encode as inf


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    time: float = Field(ge=-1e12, le=1e12, allow_inf_nan=False, description="Event time (same unit as training).")
    mark: int = Field(ge=0, le=100_000, description="Mark id, 0 <= mark < number of marks of the model.")


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    history: list[Event] = Field(min_length=1, max_length=5000,
                                 description="Past events; taken in time order (a stable sort by time), so the list order "
                                             "does not matter and events with equal times keep their order.")
    n_time_samples: int = Field(32, ge=1, le=1000, description="Inverse-CDF samples for the expected gap.")
    return_distribution: bool = Field(False, description="Also return the time samples of the chosen mark.")


class MarkScores(BaseModel):
    p: list[float] = Field(description="p*(m): time-marginalised next-mark probabilities.")
    ratio: list[float] = Field(description="p*(m) / training prior of m.")
    thresholds: list[float] = Field(description="Learned per-mark thresholds eps_m.")


class Output(BaseModel):
    mark: int = Field(description="argmax_m (ratio_m - eps_m).")
    mark_name: str
    mark_argmax: int = Field(description="Plain argmax p*(m), for comparison.")
    mark_scores: MarkScores
    expected_time_delta: float = Field(description="E[tau | mark] from the inverse-CDF samples.")
    expected_time: float = Field(description="Last event time + expected_time_delta.")
    time_quantiles: dict[str, float] = Field(description="Quantiles of p*(tau | mark) of the gap.")
    time_samples: list[float] | None = None


def _finite(x: float) -> float:
    x = float(x)
    if math.isnan(x):
        return 0.0
    return max(-_BIG, min(_BIG, x))


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, model, cfg: Config, meta: dict, device=None):
        self.device = torch.device(device if device is not None else "cpu")
        self.model, self.cfg, self.meta = model.to(self.device).eval(), cfg, meta
        s = meta["stats"]
        self.stats = tpp.TimeStats(s["mean"], s["std"], s["log_mean"], s["log_std"])
        self.prior = np.asarray(meta["prior"])
        self.thresholds = np.asarray(meta["thresholds"] if meta.get("thresholds") is not None else np.zeros(len(self.prior)))

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The network on `device` (None: the CPU); each request's history is built there once."""
        device = torch.device(device if device is not None else "cpu")
        ck = load_checkpoint(directory, method="mtpp_threshold")
        cfg = Config.model_validate(ck.config)
        meta = ck.extra("meta")
        with device:
            model = build_model(cfg, int(meta["n_marks"]))
        model.load_state_dict(ck.weights)
        return cls(model, cfg, meta, device)

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: marks are its own 0..M-1; times any finite value (the history is sorted)."""
        M = int(self.meta["n_marks"])
        names = ", ".join(f"{j}={n}" for j, n in enumerate(self.meta["mark_names"]))
        event = create_model("Event", __base__=Event,
                             mark=(int, Field(ge=0, le=M - 1, description=f"Mark id of this model: {names}.")))
        return create_model("Input", __base__=Input,
                            __doc__=f"An event history of this model's {M} marks. Events are taken in time order "
                                    "(stable sort by time); the answer is the next mark and the time to it.",
                            history=(list[event], Input.model_fields["history"]))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        h = [Event(time=t, mark=m) for t, m in ((0.5, 0), (1.2, 1), (1.9, 0), (2.4, 2))]
        return [Input(history=h), Input(history=h[:1], n_time_samples=8, return_distribution=True)]

    def _check(self, i: int, x: Input) -> None:
        M = int(self.meta["n_marks"])
        for j, e in enumerate(x.history):
            if e.mark >= M:
                raise FieldError(f"[{i}].history[{j}].mark", f"unknown mark {e.mark}: this model has marks 0..{M - 1}")

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        for i, x in enumerate(inputs):
            self._check(i, x)
        return [self._one(x) for x in inputs]

    def _one(self, x: Input) -> Output:
        events = sorted(x.history, key=lambda e: e.time)  # a history is a set of events: time order, stable on ties
        t = np.array([e.time for e in events], dtype=np.float64)
        dev = self.device
        marks = torch.tensor([[e.mark for e in events]], dtype=torch.long, device=dev)
        g = np.zeros((1, len(t)), dtype=np.float32)
        g[0, 1:] = np.diff(t).astype(np.float32)
        gaps = torch.as_tensor(g, device=dev)
        h = tpp.history_states(self.model, marks, gaps, self.stats)[:, -1]  # state after the last event
        names = self.meta["mark_names"]
        if isinstance(self.model, LogNormMix):
            p = torch.softmax(self.model.mark_head(h), -1)[0]
        else:
            h = self.model.hist_proj(h)
            p = self.model.mark_probs(h, self.stats.tau0_like(h))[0]
        r = p.cpu().numpy() / self.prior
        m = int(predict_marks(r[None], self.thresholds)[0])
        gen = torch.Generator(device=dev).manual_seed(self.cfg.seed)
        if isinstance(self.model, LogNormMix):
            mean = float(self.model.expected_time(h, self.stats.log_mean, self.stats.log_std)[0])
            q = self.model.quantiles(h, QUANTILES, self.stats.log_mean, self.stats.log_std)[0].tolist()
            samples = None
        else:
            u = torch.rand(1, x.n_time_samples, generator=gen, device=dev)
            mk = torch.full_like(u, m, dtype=torch.long)
            samples = tpp.invert_cdf(self.model, h, mk, u, self.stats, self.cfg.bisect_tol, self.cfg.bisect_max_steps)[0]
            mean = float(samples.clamp_min(0).mean())
            uq = torch.tensor([QUANTILES], device=dev)
            q = tpp.invert_cdf(self.model, h, torch.full_like(uq, m, dtype=torch.long), uq, self.stats,
                               self.cfg.bisect_tol, self.cfg.bisect_max_steps)[0].clamp_min(0).tolist()
        mean = max(0.0, mean)
        return Output(
            mark=m, mark_name=str(names[m]), mark_argmax=int(p.argmax()),
            mark_scores=MarkScores(p=[_finite(v) for v in p.tolist()], ratio=[_finite(v) for v in r.tolist()],
                                   thresholds=[_finite(v) for v in self.thresholds.tolist()]),
            expected_time_delta=_finite(mean), expected_time=_finite(t[-1] + mean),
            time_quantiles={str(k): _finite(v) for k, v in zip(QUANTILES, q)},
            time_samples=[_finite(v) for v in samples.clamp_min(0).tolist()] if (x.return_distribution and samples is not None) else None)
