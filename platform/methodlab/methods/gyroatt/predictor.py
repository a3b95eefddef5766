"""Serve a trained gyroatt checkpoint: EEG trials in, class probabilities (and attention maps) out.
The channel count, the trial length and (when given) sfreq / channel names must match the checkpoint;
a mismatch is a FieldError (HTTP 422) naming the field. Trial length: strict unless the checkpoint's
config sets serve_length_policy=crop_pad (crop or zero-pad at the end)."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import FieldError, load_checkpoint
from methodlab.methods.gyroatt.config import Config
from methodlab.methods.gyroatt.model import BEST, build_model

Sample = Annotated[float, Field(ge=-1e6, le=1e6)]
Channel = Annotated[list[Sample], Field(min_length=1, max_length=8192)]
Trial = Annotated[list[Channel], Field(min_length=1, max_length=256)]


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trials: list[Trial] = Field(min_length=1, max_length=64, description="[trials][channels][samples], |value| <= 1e6.")
    sfreq: float | None = Field(None, gt=0, le=4096, description="Sampling rate (Hz); must equal the checkpoint's.")
    channel_names: list[str] | None = Field(None, max_length=256, description="Optional; must equal the checkpoint's.")
    return_attention: bool = Field(False, description="Also return the m x m attention map of every trial.")


class Output(BaseModel):
    predictions: list[int]
    probabilities: list[list[float]]
    attention: list[list[list[float]]] | None = None
    geometry: str
    model_version: str


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, model, cfg: Config, state: dict, version: str):
        self.model, self.cfg, self.state, self.version = model.eval(), cfg, state, version
        self.device = next(model.parameters()).device

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The best-validation-loss network on `device` (a str or torch.device; None: the CPU)."""
        device = torch.device("cpu" if device is None else device)
        ck = load_checkpoint(directory, method="gyroatt")
        cfg = Config.model_validate(ck.config)
        with device:
            model = build_model(cfg, int(ck.state["n_channels"]), int(ck.state["n_classes"]))
        model = model.to(device)  # the host-drawn Stiefel initial maps (overwritten by the weights below)
        best = {k[len(BEST):]: v for k, v in ck.weights.items() if k.startswith(BEST)}
        model.load_state_dict(best or {k: v for k, v in ck.weights.items() if not k.startswith(BEST)})
        version = f"{cfg.arch}-{cfg.geometry}-epoch{ck.state.get('best', {}).get('epoch', ck.state.get('epoch'))}"
        return cls(model, cfg, ck.state, version)

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request: trials of exactly its channels x samples, its sampling rate and montage."""
        c, t = int(self.state["n_channels"]), int(self.state["n_samples"])
        fs, names = self.state.get("sfreq"), self.state.get("ch_names")
        channel = Annotated[list[Sample], Field(min_length=t, max_length=t)]
        trial = Annotated[list[channel], Field(min_length=c, max_length=c)]
        fields = {"trials": (list[trial], Field(..., min_length=1, max_length=64, description=f"[trials][{c}][{t}].")),
                  "return_attention": (bool, Field(False, description="Also return the attention map of every trial."))}
        if fs is not None:
            fields["sfreq"] = (Literal[float(fs)] | None, Field(None, description=f"Must be {fs} Hz (the training rate)."))
        if names:
            # the order matters, which JSON Schema states as a const (the Predictor checks it: 422 otherwise)
            fields["channel_names"] = (list[str] | None, Field(None, description=f"Must be {list(names)} in this order.",
                                       json_schema_extra={"anyOf": [{"const": list(names)}, {"type": "null"}]}))
        return create_model("Input", __config__=ConfigDict(extra="forbid"), __doc__=(
            f"EEG trials of {c} channels x {t} samples at {fs} Hz; channel_names, if given, must be the training "
            "montage in its order."), **fields)

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.methods.gyroatt.data import build_data

        x = build_data(cfg).x_test[:2]
        return [Input(trials=x.tolist(), sfreq=cfg.sfreq, return_attention=True)]

    def _check(self, i: int, x: Input) -> torch.Tensor:
        c, t = int(self.state["n_channels"]), int(self.state["n_samples"])
        fs, names = self.state.get("sfreq"), self.state.get("ch_names")
        if x.sfreq is not None and fs is not None and abs(x.sfreq - fs) > 1e-6:
            raise FieldError(f"[{i}].sfreq", f"model trained at {fs} Hz, got {x.sfreq}")
        if x.channel_names is not None and names is not None and list(x.channel_names) != list(names):
            raise FieldError(f"[{i}].channel_names", f"must be {names}")
        rows = []
        for j, trial in enumerate(x.trials):
            if len(trial) != c:
                raise FieldError(f"[{i}].trials[{j}]", f"{len(trial)} channels, the model expects {c}")
            for k, ch in enumerate(trial):
                if len(ch) != len(trial[0]):
                    raise FieldError(f"[{i}].trials[{j}][{k}]", "all channels of a trial need the same length")
                if not all(math.isfinite(v) for v in ch):
                    raise FieldError(f"[{i}].trials[{j}][{k}]", "values must be finite")
            arr = torch.tensor(trial, dtype=torch.float32, device="cpu")  # parsed on the host, moved per batch
            if arr.shape[1] != t:
                if self.cfg.serve_length_policy == "strict":
                    raise FieldError(f"[{i}].trials[{j}]", f"{arr.shape[1]} samples, the model expects {t} "
                                                           "(length_policy strict)")
                arr = torch.nn.functional.pad(arr, (0, max(0, t - arr.shape[1])))[:, :t]
            rows.append(arr)
        return torch.stack(rows)

    @torch.no_grad()
    def __call__(self, inputs: list[Input]) -> list[Output]:
        batches = [self._check(i, x) for i, x in enumerate(inputs)]
        outs = []
        for x, b in zip(inputs, batches):
            logits, attn = self.model(b.to(self.device), return_attention=True)
            logits, attn = logits.cpu(), (attn.cpu() if attn is not None else None)
            probs = torch.softmax(logits.double(), -1)
            outs.append(Output(predictions=probs.argmax(-1).tolist(), probabilities=probs.tolist(),
                               attention=attn.tolist() if (x.return_attention and attn is not None) else None,
                               geometry=self.cfg.geometry if self.cfg.arch == "gyroatt" else self.cfg.arch,
                               model_version=self.version))
        return outs
