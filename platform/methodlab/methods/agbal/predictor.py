"""Stateless AGBAL endpoint: POST /agbal/predict with
  {"task": "predict", "x": [[...d floats...], ...]} -> y_hat and the uncertainty surrogate u(x), or
  {"task": "acquire", "pool": [[...]], "labeled_ids": [...], "batch_size": b} -> the next batch of pool row ids
  (none of them labelled, all distinct) with u of each, chosen by the checkpoint's strategy.
No labels are posted and nothing is kept between requests: labelled pool rows join the checkpoint's labelled inputs
in the kernel terms of this one request only. Retraining is a job (jobs/agbal/round.yaml)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.agbal.acquire import acquire, surrogate
from methodlab.methods.agbal.config import Config
from methodlab.methods.agbal.train import SLUG, load_state

MAX_ROWS = 10_000
BOUND = 1e6  # |feature| limit: keeps every distance and kernel finite in float64
# the acquire conditions between fields that JSON Schema cannot state (named in the schema's description)
IDS_CONDITION = "every labeled_ids entry is < len(pool)"
BATCH_CONDITION = "a given batch_size is <= len(pool) - len(labeled_ids)"


class Input(BaseModel):
    """Generic request (superset of both tasks); the served schema is the checkpoint's `input_model()`."""

    model_config = ConfigDict(extra="forbid")
    task: Literal["predict", "acquire"] = Field("predict", description="predict | acquire.")
    x: list[list[Annotated[float, Field(ge=-BOUND, le=BOUND)]]] | None = Field(
        None, min_length=1, max_length=MAX_ROWS, description="predict: input rows (the checkpoint's feature count).")
    pool: list[list[Annotated[float, Field(ge=-BOUND, le=BOUND)]]] | None = Field(
        None, min_length=1, max_length=MAX_ROWS, description="acquire: candidate pool rows; ids are row indices.")
    labeled_ids: list[Annotated[int, Field(ge=0, le=MAX_ROWS - 1)]] = Field(
        [], max_length=MAX_ROWS, description="acquire: pool rows that already have labels (distinct, < len(pool)).")
    batch_size: int | None = Field(None, ge=1, le=MAX_ROWS, description="acquire: b <= unlabelled pool rows; None: "
                                   "min(the checkpoint's batch size, unlabelled rows).")


class Output(BaseModel):
    task: str
    y_hat: list[float] | None = Field(None, description="predict: predictions in target units.")
    uncertainty_surrogate: list[float] | None = Field(None, description="predict: u(x), the density-ratio-weighted "
                                                      "auxiliary loss propagated to x (standardised target units^2).")
    selected_ids: list[int] | None = Field(None, description="acquire: batch_size distinct unlabelled pool rows.")
    scores: list[float] | None = Field(None, description="acquire: u(x) of each selected row.")
    model_version: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, st, lab_x: np.ndarray, version: str):
        self.cfg, self.st, self.lab_x, self.version = cfg, st, lab_x, version
        self.device = next(st.net.parameters()).device
        self.d = int(len(st.x_mean))
        self.b = int(cfg.batch_size)

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The round's regressor on `device` (a str or torch.device; None: the CPU): each request's rows are
        moved there once (predictions, features); the surrogate and the selection run in numpy."""
        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method=SLUG)
        cfg = Config.model_validate(ck.config)
        st = load_state(cfg, ck, device)
        rnd = int(ck.state.get("round", 0))
        version = f"agbal-{cfg.data}-{cfg.strategy}-seed{cfg.seed}-round{rnd}-n{int(ck.state.get('n_labeled', 0))}"
        return cls(cfg, st, ck.weights["lab_x"].numpy(), version)

    def input_model(self):
        """The schema of this checkpoint: rows of exactly its feature count, a union keyed by `task`."""
        d = self.d
        strict = ConfigDict(extra="forbid")
        num = Annotated[float, Field(ge=-BOUND, le=BOUND)]
        row = Annotated[list[num], Field(min_length=d, max_length=d)]
        predict_m = create_model(
            "PredictInput", __config__=strict,
            __doc__=f"Predictions and the uncertainty surrogate u(x) for rows of {d} features.",
            task=(Literal["predict"], Field(...)),
            x=(list[row], Field(..., min_length=1, max_length=MAX_ROWS, description=f"Rows of {d} features.")))
        acquire_m = create_model(
            "AcquireInput", __config__=strict,
            __doc__=(f"The next batch from `pool` (rows of {d} features). Conditions a JSON schema cannot state "
                     f"(answered 422 naming the field): {IDS_CONDITION}; {BATCH_CONDITION}. Without batch_size the "
                     f"batch is min(b, unlabelled rows), b = {self.b} (the checkpoint's batch size)."),
            task=(Literal["acquire"], Field(...)),
            pool=(list[row], Field(..., min_length=1, max_length=MAX_ROWS, description=f"Candidate rows of {d} features.")),
            labeled_ids=(list[Annotated[int, Field(ge=0, le=MAX_ROWS - 1)]],
                         Field([], max_length=MAX_ROWS, json_schema_extra={"uniqueItems": True},
                               description="Pool rows that already have labels: distinct, each < len(pool).")),
            batch_size=(int | None, Field(None, ge=1, le=MAX_ROWS, description="b <= len(pool) - len(labeled_ids); "
                                          f"None: min({self.b}, unlabelled rows).")))
        return Annotated[Union[predict_m, acquire_m], Field(discriminator="task")]

    @staticmethod
    def violated_conditions(body: dict) -> list[str]:
        """The schema description's conditions a raw request body breaks (what JSON Schema cannot check)."""
        if not isinstance(body, dict) or body.get("task") != "acquire":
            return []
        n = len(body.get("pool") or [])
        ids = [v for v in body.get("labeled_ids") or [] if isinstance(v, int)]
        out = []
        if any(v >= n for v in ids):
            out.append(IDS_CONDITION)
        b = body.get("batch_size")
        if isinstance(b, int) and b > n - len(set(ids)):
            out.append(BATCH_CONDITION)
        return out

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        d = {"friedman_shift": cfg.n_features, "hetero_1d": 1, "hetero_2d": 2, "diabetes_shift": 10,
             "boston_shift": 13, "concrete_shift": 8}.get(cfg.data, len(cfg.feature_columns or []) or 1)
        rng = np.random.default_rng(0)
        if cfg.data == "diabetes_shift":  # load_diabetes features are scaled to about +-0.1
            rows = (0.05 * rng.normal(size=(12, d))).tolist()
        else:
            rows = rng.normal(size=(12, d)).tolist()
        return [Input(task="predict", x=rows[:3]),
                Input(task="acquire", pool=rows, labeled_ids=[0, 5], batch_size=3)]

    # ---------------------------------------------------------------------------------------------------------
    def _rows(self, where: str, rows) -> np.ndarray:
        if rows is None:
            raise FieldError(where, "required for this task")
        if not rows or len(rows) > MAX_ROWS:
            raise FieldError(where, f"1 to {MAX_ROWS} rows")
        if any(len(r) != self.d for r in rows):
            raise FieldError(where, f"every row needs exactly {self.d} features (the checkpoint's)")
        a = np.asarray(rows, dtype=float)
        if not np.isfinite(a).all() or np.abs(a).max() > BOUND:
            raise FieldError(where, f"values must be finite with |value| <= {BOUND:g}")
        return a

    def _one(self, i: int, item) -> Output:
        task = getattr(item, "task", "predict")
        if task == "predict":
            x = self._rows(f"[{i}].x", getattr(item, "x", None))
            u = surrogate(self.cfg, self.st, x, weighted=self.cfg.strategy != "agbal_unweighted")
            return Output(task="predict", y_hat=self.st.predict(x).tolist(), uncertainty_surrogate=u.tolist(),
                          model_version=self.version)
        pool = self._rows(f"[{i}].pool", getattr(item, "pool", None))
        ids = list(getattr(item, "labeled_ids", None) or [])
        if len(set(ids)) != len(ids):
            raise FieldError(f"[{i}].labeled_ids", "ids must be distinct")
        if any(j < 0 or j >= len(pool) for j in ids):
            raise FieldError(f"[{i}].labeled_ids", f"ids must be row indices of pool (0..{len(pool) - 1})")
        b = getattr(item, "batch_size", None)
        free = len(pool) - len(ids)
        if b is None and free >= 1:  # the checkpoint's batch size, capped by the unlabelled rows
            b = min(self.b, free)
        if b is None or b < 1 or b > free:
            raise FieldError(f"[{i}].batch_size", f"must be between 1 and the {free} unlabelled pool rows")
        cand = np.setdiff1d(np.arange(len(pool)), np.asarray(ids, dtype=int))
        x_lab = np.concatenate([self.lab_x, pool[ids]]) if ids else self.lab_x
        rng = np.random.default_rng([self.cfg.seed, len(pool), b])  # stateless: the same request, the same answer
        acq = acquire(self.cfg, self.st, pool, x_lab, cand, int(b), self.cfg.strategy, rng)
        u = acq.u if acq.u is not None else surrogate(self.cfg, self.st, pool,
                                                      weighted=self.cfg.strategy != "agbal_unweighted")
        return Output(task="acquire", selected_ids=[int(s) for s in acq.selected],
                      scores=[float(u[s]) for s in acq.selected], model_version=self.version)

    def __call__(self, inputs) -> list[Output]:
        return [self._one(i, item) for i, item in enumerate(inputs)]
