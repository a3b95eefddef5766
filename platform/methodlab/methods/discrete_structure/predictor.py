"""Serve a fitted structure (nothing is fitted per request). One request = one query, keyed by `query`:
- structure   -> variables, CPDAG (directed / undirected edge lists), weighted adjacency W;
- conditional -> P(node = 1 | evidence), by exact enumeration of the learned DAG's factorisation (d <= 16);
                 for d > 16 the evidence must hold all parents of the node and none of its descendants
                 (then P(node | evidence) = P(node | parents) exactly, by the local Markov property);
- loglik      -> per-row log-likelihood of 0/1 rows under the DAG factorisation (at most 10,000 rows).
Unknown names, values other than 0/1 and rows of the wrong length answer 422 naming the field."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import CheckpointError, FieldError, load_checkpoint
from methodlab.methods.discrete_structure.learner import loglik_rows

MAX_ROWS = 10_000
MAX_ENUM_D = 16


class Input(BaseModel):
    """Generic request (the superset of the three queries); the served schema is the checkpoint's `input_model()`."""
    model_config = ConfigDict(extra="forbid")
    query: Literal["structure", "conditional", "loglik"] = Field("structure", description="Which query.")
    node: str | None = Field(None, max_length=256, description="conditional: the variable whose P(= 1) is asked.")
    evidence: dict[str, int] | None = Field(None, description="conditional: observed variables -> 0/1.")
    rows: list[list[int]] | None = Field(None, max_length=MAX_ROWS, description="loglik: 0/1 rows, one value per variable.")


class Cpdag(BaseModel):
    directed: list[list[str]]
    undirected: list[list[str]]


class Output(BaseModel):
    query: str
    variables: list[str] | None = None
    cpdag: Cpdag | None = None
    weights: list[list[float]] | None = Field(None, description="W[k][j]: group norm of node j's coefficients involving k.")
    p_one: float | None = Field(None, description="conditional: P(node = 1 | evidence).")
    loglik: list[float] | None = Field(None, description="loglik: per-row log-likelihood (nats).")


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, names, dag, C, W, subs, B, b, device=None):
        self.device = torch.device(device if device is not None else "cpu")
        self.names, self.dag, self.C, self.W = list(names), np.asarray(dag), np.asarray(C), np.asarray(W, dtype=float)
        self.subs = [tuple(s) for s in subs]
        self.B, self.b = B.to(self.device, torch.float64), b.to(self.device, torch.float64)
        self.d = len(self.names)
        self.index = {v: i for i, v in enumerate(self.names)}
        self.parents = [set(int(k) for k in np.flatnonzero(self.dag[:, j])) for j in range(self.d)]
        self._table = None

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The refitted coefficients on `device` (None: the CPU); each request's rows are moved there once."""
        ck = load_checkpoint(directory, method="discrete_structure")
        model = ck.extras.get("model")
        if model is None:
            raise CheckpointError(f"{directory} is a mid-path checkpoint: serve the final one of a finished fit")
        return cls(model["names"], model["dag"], model["cpdag"], model["W"], model["refit_subs"],
                   ck.weights["refit_B"], ck.weights["refit_b"], device=device)

    # ------------------------------------------------------------------------------------------------
    def input_model(self):
        strict = ConfigDict(extra="forbid")
        names = tuple(self.names)
        Name = Literal[names]  # type: ignore[valid-type]
        Bit = Literal[0, 1]
        d = self.d
        structure = create_model("Structure", __config__=strict, __doc__="The learned CPDAG and weighted adjacency.",
                                 query=(Literal["structure"], ...))
        if d <= MAX_ENUM_D:
            cond_doc = (f"P(node = 1 | evidence) by exact enumeration over the learned DAG ({d} variables); "
                        "evidence may name any variables (none: the marginal).")
        else:
            cond_doc = ("P(node = 1 | evidence); with more than 16 variables the evidence must contain every parent "
                        "of the node and none of its descendants in the learned DAG (else 422).")
        conditional = create_model(
            "Conditional", __config__=strict, __doc__=cond_doc,
            query=(Literal["conditional"], ...),
            node=(Name, Field(..., description="Variable name.")),
            evidence=(dict[Name, Bit], Field(default_factory=dict, max_length=d, description="Variable -> 0/1.")))
        loglik = create_model(
            "Loglik", __config__=strict, __doc__=f"Per-row log-likelihood of 0/1 rows of length {d} ({', '.join(names)}).",
            query=(Literal["loglik"], ...),
            rows=(list[Annotated[list[Bit], Field(min_length=d, max_length=d)]],
                  Field(..., min_length=1, max_length=MAX_ROWS)))
        return Annotated[Union[structure, conditional, loglik], Field(discriminator="query")]

    @staticmethod
    def example_inputs(cfg) -> list[Input]:
        names = ["a", "b", "c"] if cfg.data == "xor_triple" else [f"x{j}" for j in range(cfg.d)]
        if cfg.data in ("bif", "file"):
            return [Input(query="structure")]
        return [Input(query="structure"),
                Input(query="conditional", node=names[-1], evidence={names[0]: 1}),
                Input(query="loglik", rows=[[0] * len(names), [1] * len(names)])]

    # ------------------------------------------------------------------------------------------------
    def _bit(self, where: str, v) -> int:
        if isinstance(v, bool) or v not in (0, 1):
            raise FieldError(where, "values must be 0 or 1")
        return int(v)

    def _structure(self) -> Output:
        from methodlab.methods.discrete_structure.graphs import edge_lists

        directed, undirected = edge_lists(self.C, self.names)
        return Output(query="structure", variables=self.names, cpdag=Cpdag(directed=directed, undirected=undirected),
                      weights=[[float(v) for v in row] for row in self.W])

    def table(self) -> np.ndarray:
        """log P(x) for all 2^d states (state s: x_k = bit k of s)."""
        if self._table is None:
            s = np.arange(2 ** self.d)
            states = ((s[:, None] >> np.arange(self.d)[None, :]) & 1).astype(np.int8)
            self._table = loglik_rows(states, self.subs, self.B, self.b)
        return self._table

    def _descendants(self, j: int) -> set[int]:
        out, todo = set(), [j]
        while todo:
            u = todo.pop()
            for v in np.flatnonzero(self.dag[u]):
                if int(v) not in out:
                    out.add(int(v))
                    todo.append(int(v))
        return out

    def _conditional(self, i: int, x) -> Output:
        where = f"[{i}]"
        node = getattr(x, "node", None)
        if node is None or node not in self.index:
            raise FieldError(f"{where}.node", f"unknown variable {node!r}; variables: {self.names}")
        j = self.index[node]
        ev = {}
        for k, v in (getattr(x, "evidence", None) or {}).items():
            if k not in self.index:
                raise FieldError(f"{where}.evidence.{k}", f"unknown variable {k!r}")
            ev[self.index[k]] = self._bit(f"{where}.evidence.{k}", v)
        if self.d <= MAX_ENUM_D:
            logp = self.table()
            s = np.arange(2 ** self.d)
            keep = np.ones(len(s), dtype=bool)
            for k, v in ev.items():
                keep &= ((s >> k) & 1) == v
            lp = logp[keep]
            on = ((s[keep] >> j) & 1) == 1
            m = lp.max()
            w = np.exp(lp - m)
            p = float(w[on].sum() / w.sum())
        else:
            missing = sorted(self.parents[j] - set(ev))
            if missing:
                raise FieldError(f"{where}.evidence", f"must contain the parents of {node!r}: missing {[self.names[k] for k in missing]}")
            desc = sorted(self._descendants(j) & set(ev))
            if desc:
                raise FieldError(f"{where}.evidence", f"must not contain descendants of {node!r}: {[self.names[k] for k in desc]}")
            row = np.zeros((1, self.d), dtype=np.int8)
            for k, v in ev.items():
                row[0, k] = v
            row[0, j] = 1
            from methodlab.methods.discrete_structure import model as M

            z = float((M.design(row, self.subs, device=self.device) @ self.B[:, j] + self.b[j]).clamp(-M.LOGIT_CLIP, M.LOGIT_CLIP))
            p = float(1.0 / (1.0 + np.exp(-z)))
        return Output(query="conditional", variables=[node], p_one=min(1.0, max(0.0, p)))

    def _loglik(self, i: int, x) -> Output:
        rows = getattr(x, "rows", None)
        where = f"[{i}].rows"
        if not rows:
            raise FieldError(where, "required: a non-empty list of 0/1 rows")
        if len(rows) > MAX_ROWS:
            raise FieldError(where, f"at most {MAX_ROWS} rows")
        for r, row in enumerate(rows):
            if len(row) != self.d:
                raise FieldError(f"{where}[{r}]", f"length {len(row)}, expected {self.d} (variables {self.names})")
            for c, v in enumerate(row):
                self._bit(f"{where}[{r}][{c}]", v)
        arr = np.asarray(rows, dtype=np.int8)
        return Output(query="loglik", loglik=[float(v) for v in loglik_rows(arr, self.subs, self.B, self.b)])

    @torch.no_grad()
    def __call__(self, inputs) -> list[Output]:
        out = []
        for i, x in enumerate(inputs):
            q = getattr(x, "query", "structure")
            if q == "structure":
                out.append(self._structure())
            elif q == "conditional":
                out.append(self._conditional(i, x))
            elif q == "loglik":
                out.append(self._loglik(i, x))
            else:
                raise FieldError(f"[{i}].query", "one of structure, conditional, loglik")
        return out
