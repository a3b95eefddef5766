"""Serve a policy: observation(s) in; action in the env's native bounds, the normalised action, V(s),
min Q at the returned action and the policy std out. Bounds ship with the checkpoint (extra_env.json)."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import torch
from typing import Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.unirl.config import Config
from methodlab.methods.unirl.learner import Learner

OBS_LIMIT = 1e6  # observations of the supported envs are O(10); larger values are out of the domain
ObsValue = Annotated[float, Field(ge=-OBS_LIMIT, le=OBS_LIMIT)]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    observation: list[ObsValue] | None = Field(None, min_length=1, max_length=1024,
                                               description="One observation; its length must equal the env's observation dim.")
    observations: list[list[ObsValue]] | None = Field(None, min_length=1, max_length=1024,
                                                      description="A batch of observations (instead of `observation`).")
    deterministic: bool = Field(True, description="True: the mean action; False: a sample of the policy.")


class Output(BaseModel):
    action: list[list[float]] = Field(description="Actions in the env's native range [low, high], one per observation.")
    action_normalized: list[list[float]] = Field(description="The same actions in [-1, 1].")
    value: list[float] = Field(description="V(s) (SAC checkpoints: min Q at the mean action).")
    q: list[float] = Field(description="min(Q1, Q2) at the returned action.")
    policy_std: list[list[float]] = Field(description="Policy std per action dim, normalised units (SAC: pre-tanh).")
    model_version: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, learner: Learner, cfg: Config, env: dict, version: str):
        self.learner, self.cfg, self.version = learner, cfg, version
        self.device = learner.device
        self.obs_dim = int(env["obs_dim"])
        self.low = np.asarray(env["action_low"], np.float64)
        self.high = np.asarray(env["action_high"], np.float64)
        for m in (learner.actor, learner.q, learner.v):
            m.eval()

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The checkpoint's networks on `device` (None: the CPU; a str or torch.device)."""
        ck = load_checkpoint(directory, method="unirl")
        cfg = Config.model_validate(ck.config)
        env = ck.extra("env")
        learner = Learner(cfg, int(env["obs_dim"]), len(env["action_low"]), device=device)
        learner.load_weights(ck.weights)
        return cls(learner, cfg, env, f"unirl:{cfg.learner}:{cfg.env}:step{int(ck.state.get('step', 0))}")

    def input_model(self):
        """This checkpoint's request: one observation or a batch, each of exactly the env's observation dim."""
        d, strict = self.obs_dim, ConfigDict(extra="forbid")
        row = Annotated[list[ObsValue], Field(min_length=d, max_length=d)]
        note = f"{self.cfg.env}: observations of dimension {d}; give `observation` or `observations`, not both."
        det = (bool, Field(True, description="True: the mean action; False: a sample of the policy."))
        one = create_model("OneObservation", __config__=strict, __doc__=note, observation=(row, Field(...)),
                           observations=(None, None), deterministic=det)
        many = create_model("ObservationBatch", __config__=strict, __doc__=note, observation=(None, None),
                            observations=(list[row], Field(..., min_length=1, max_length=1024)), deterministic=det)
        return Union[one, many]

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.data.offline_rl import env_spaces

        d = env_spaces(cfg.env)[0]
        return [Input(observation=[1.0] + [0.0] * (d - 1)), Input(observations=[[0.0] * d, [-1.0] + [0.5] * (d - 1)])]

    def _rows(self, i: int, x: Input) -> list[list[float]]:
        if (x.observation is None) == (x.observations is None):
            raise FieldError(f"[{i}].observation", "give exactly one of observation, observations")
        name, rows = ("observation", [x.observation]) if x.observation is not None else ("observations", x.observations)
        for j, row in enumerate(rows):
            where = f"[{i}].{name}" + (f"[{j}]" if name == "observations" else "")
            if len(row) != self.obs_dim:
                raise FieldError(where, f"length {len(row)} != observation dim {self.obs_dim} of {self.cfg.env}")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and abs(v) <= OBS_LIMIT for v in row):
                raise FieldError(where, f"values must be finite and within +-{OBS_LIMIT:g}")
        return rows

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        batches = [self._rows(i, x) for i, x in enumerate(inputs)]
        out = []
        for i, (x, rows) in enumerate(zip(inputs, batches)):
            s = torch.tensor(rows, dtype=torch.float32, device=self.device)  # the request's rows, moved once
            actor = self.learner.actor
            mean, log_std = actor(s)
            a_n = actor.act(s, deterministic=x.deterministic).clamp(-1.0, 1.0)
            q = self.learner.q(s, a_n).min(0).values
            v = self.learner.v(s) if self.cfg.learner != "sac" else self.learner.q(s, actor.act(s, True)).min(0).values
            vals = torch.stack([q, v]).cpu().numpy().astype(np.float64)
            if not np.isfinite(vals).all():
                raise FieldError(f"[{i}].observation", "the model's values are not finite for this input")
            a_n64 = a_n.double().cpu().numpy()
            action = self.low + (a_n64 + 1.0) * (self.high - self.low) / 2.0
            out.append(Output(action=action.tolist(), action_normalized=a_n64.tolist(), value=vals[1].tolist(),
                              q=vals[0].tolist(), policy_std=log_std.exp().double().cpu().numpy().tolist(),
                              model_version=self.version))
        return out
