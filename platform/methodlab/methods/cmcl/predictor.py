"""Serve trained cmcl heads: features of one modality -> embeddings, top-k retrieval against candidates of
another modality (score descending, ties by smaller index), or zero-shot classification against the stored
class-text bank. Unknown modality or wrong feature width -> FieldError (422)."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.cmcl.config import Config
from methodlab.methods.cmcl.model import Heads

Val = Annotated[float, Field(ge=-1e6, le=1e6, allow_inf_nan=False)]
Row = Annotated[list[Val], Field(min_length=1, max_length=8192)]


class Candidates(BaseModel):
    model_config = ConfigDict(extra="forbid")
    modality: str = Field(min_length=1, max_length=64, description="Modality of the candidate features.")
    features: list[Row] = Field(min_length=1, max_length=4096, description="Candidate feature rows, width D.")


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    modality: str = Field(min_length=1, max_length=64, description="A modality the model has a head for.")
    features: list[Row] = Field(min_length=1, max_length=1024, description="Query feature rows, width D (L2-normalised on input).")
    candidates: Candidates | None = Field(None, description="Retrieval candidates (another or the same modality).")
    top_k: int = Field(5, ge=1, le=100, description="Hits per query (at most the number of candidates).")
    classify: bool = Field(False, description="Zero-shot classification against the stored class-text bank.")


class Hit(BaseModel):
    index: int
    score: float


class Output(BaseModel):
    embeddings: list[list[float]]
    topk: list[list[Hit]] | None = None
    labels: list[str] | None = None
    label: str | None = Field(None, description="labels[0] (the one-row case).")
    scores: list[dict[str, float]] | None = None


def _clip(x: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=1e30, neginf=-1e30), -1e30, 1e30)  # JSON-safe floats


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, heads: Heads, cfg: Config, names: list[str], bank: torch.Tensor | None, text_mod: str = "text",
                 device=None):
        self.device = torch.device("cpu" if device is None else device)
        self.heads, self.cfg, self.names, self.text_mod = heads.to(self.device).eval(), cfg, names, text_mod
        self.bank = None if bank is None else bank.to(self.device)

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """Heads (float64) and the class-text bank on `device` (None: CPU; a str or torch.device)."""
        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="cmcl")
        cfg = Config.model_validate(ck.config, context={"check_files": False})  # serving needs no data files
        mods = list(ck.extras["modalities"])
        heads = Heads(mods, cfg.dim, torch.float64, device=device)
        heads.load_state_dict({k[len("head."):]: v.to(torch.float64) for k, v in ck.weights.items() if k.startswith("head.")})
        cb = ck.extras.get("class_bank", {"names": [], "features": []})
        bank = torch.tensor(cb["features"], dtype=torch.float64, device=device) if cb["names"] else None
        return cls(heads, cfg, list(cb["names"]), bank, device=device)

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: its modalities, rows of its width D, classification only with a class bank."""
        d, mods, strict = self.cfg.dim, Literal[tuple(sorted(self.heads.W))], ConfigDict(extra="forbid")
        row = Annotated[list[Val], Field(min_length=d, max_length=d)]
        cands = create_model("Candidates", __config__=strict, modality=(mods, Field(...)),
                             features=(list[row], Field(..., min_length=1, max_length=4096)))
        can_classify = self.bank is not None and self.text_mod in self.heads.W
        return create_model(
            "Input", __config__=strict,
            __doc__=f"Feature rows of width {d} for one of this model's modalities {sorted(self.heads.W)}; "
                    f"top_k is capped at the number of candidates." + ("" if can_classify else " No class bank: classify must be false."),
            modality=(mods, Field(...)), features=(list[row], Field(..., min_length=1, max_length=1024)),
            candidates=(cands | None, Field(None)), top_k=(int, Field(5, ge=1, le=100)),
            classify=(bool if can_classify else Literal[False], Field(False)))

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.methods.cmcl.data import step_pairs

        _, a, b = step_pairs(cfg)[0]
        row = [1.0] + [0.0] * (cfg.dim - 1)
        return [Input(modality=a, features=[row], candidates={"modality": b, "features": [row, row[::-1]]}, top_k=2),
                Input(modality=a, features=[row], classify=True)]

    def _feats(self, where: str, modality: str, rows: list[list[float]]) -> torch.Tensor:
        if modality not in self.heads.W:
            raise FieldError(f"{where}.modality", f"unknown modality {modality!r}; this model has {sorted(self.heads.W)}")
        if any(len(r) != self.cfg.dim for r in rows):
            raise FieldError(f"{where}.features", f"every row must have width D = {self.cfg.dim}")
        x = torch.tensor(rows, dtype=torch.float64, device="cpu").to(self.device)  # one copy of the request's rows
        return x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)  # the encoders' features are unit-norm

    def _embed(self, m: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeddings of the distinct rows, index of each input row). Identical inputs must score identically
        so the smaller-index tie rule applies; BLAS blocking can differ in the last bit by row position."""
        uniq, inv = torch.unique(x, dim=0, return_inverse=True)
        return self.heads(m, uniq), inv

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        outs = []
        for i, x in enumerate(inputs):
            qu, qi = self._embed(x.modality, self._feats(f"[{i}]", x.modality, x.features))
            q = qu[qi]
            out = Output(embeddings=_clip(q.cpu().numpy()).tolist())
            if x.candidates is not None:
                cu, ci = self._embed(x.candidates.modality, self._feats(f"[{i}].candidates", x.candidates.modality,
                                                                        x.candidates.features))
                s = _clip((qu @ cu.T)[qi][:, ci].cpu().numpy())  # distinct rows only, then gathered
                order = np.argsort(-s, axis=1, kind="stable")[:, : min(x.top_k, len(ci))]  # ties: smaller index first
                out.topk = [[Hit(index=int(j), score=float(s[r, j])) for j in order[r]] for r in range(len(s))]
            if x.classify:
                if self.bank is None or self.text_mod not in self.heads.W:
                    raise FieldError(f"[{i}].classify", "this model has no class-text bank")
                s = _clip((q @ self.heads(self.text_mod, self.bank).T).cpu().numpy())
                pred = s.argmax(1)  # first maximal index on ties
                out.labels = [self.names[int(p)] for p in pred]
                out.label = out.labels[0]
                out.scores = [{n: float(v) for n, v in zip(self.names, r)} for r in s]
            outs.append(out)
        return outs
