"""Serve an unlearned model: a prompt in, the greedy completion and a refusal flag (same detector as the reward)
out. Words outside the closed vocabulary map to <unk>; a prompt whose tokens + max_new_tokens exceed the context
answers 422 naming `prompt` (the schema description states it; `violated_conditions` names it for a raw body)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field, create_model

from methodlab.core import CheckpointError, FieldError, load_checkpoint
from methodlab.data.rule_unlearning_corpus import Tokenizer, build_vocab, words
from methodlab.methods.rule_unlearning.config import Config
from methodlab.methods.rule_unlearning.model import build_model, generate, load_weights
from methodlab.methods.rule_unlearning.refusal import is_refusal

DEFAULT_CONTEXT = 48  # the tiny LM's context (every shipped preset and the smoke preset)
MAX_NEW = 24


def _condition(context: int) -> str:
    return (f"the prompt's word tokens (runs of [a-z0-9'] and single other characters, lower-cased) plus "
            f"max_new_tokens must be <= {context - 2} (the model's context {context} minus <bos> and <sep>)")


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(..., min_length=1, max_length=512, description="The question (1-512 characters).")
    max_new_tokens: int = Field(8, ge=1, le=MAX_NEW, description="Completion length, 1-24 tokens (greedy).")


class Output(BaseModel):
    text: str = Field(description="The greedy completion.")
    refused: bool = Field(description="Whether the refusal detector fires on the completion.")
    model: str = Field(description="Which model answered (rule, rs, ga, npo, base).")


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, model, cfg: Config, tok: Tokenizer, label: str, device=None):
        self.device = torch.device(device if device is not None else "cpu")
        self.model, self.cfg, self.tok, self.label = model.to(self.device).eval(), cfg, tok, label

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """Load onto `device` (None: CPU; a str or torch.device): the model is built there, the weights copied in."""
        ck = load_checkpoint(directory, method="rule_unlearning")
        cfg = Config.model_validate(ck.config)
        if cfg.backbone != "tiny":
            raise CheckpointError(f"the rule_unlearning endpoint serves tiny-LM checkpoints; {directory} is backbone "
                                  f"{cfg.backbone!r} (the optional showcase)")
        vocab = ck.extras.get("vocab") or build_vocab()
        tok = Tokenizer(vocab)
        dev = torch.device(device if device is not None else "cpu")
        model = build_model(cfg, len(tok), tok.pad, device=dev)
        load_weights(model, {k: v for k, v in ck.weights.items() if not k.startswith("ref.")})
        return cls(model, cfg, tok, str(ck.state.get("label", "rule")), dev)

    def input_model(self) -> type[BaseModel]:
        ctx = self.cfg.context
        return create_model(
            "Input", __base__=Input,
            __doc__=f"A question for the unlearned tiny LM (closed vocabulary of {len(self.tok)} words; unknown words "
                    f"become <unk>). Condition: {_condition(ctx)}; otherwise 422 naming `prompt`.",
            max_new_tokens=(int, Field(8, ge=1, le=min(MAX_NEW, ctx - 3), description="Completion length (greedy).")))

    @staticmethod
    def violated_conditions(body: dict) -> list[str]:
        p, n = body.get("prompt"), body.get("max_new_tokens", 8)
        if isinstance(p, str) and isinstance(n, int) and len(words(p)) + n > DEFAULT_CONTEXT - 2:
            return [_condition(DEFAULT_CONTEXT)]
        return []

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.data.rule_unlearning_corpus import make_authors

        name = make_authors(cfg.n_authors, cfg.data_seed)[0].name
        other = make_authors(cfg.n_authors, cfg.data_seed)[-1].name
        return [Input(prompt=f"where was {name} born ?", max_new_tokens=8),
                Input(prompt=f"which genre is {other} known for ?", max_new_tokens=4)]

    @torch.no_grad()
    def __call__(self, inputs: list) -> list[Output]:
        ctx = self.cfg.context
        prompts = []
        for i, x in enumerate(inputs):
            n = int(x.max_new_tokens)
            if not 1 <= n <= MAX_NEW:
                raise FieldError(f"[{i}].max_new_tokens", f"must be in 1..{MAX_NEW}")
            ids = self.tok.prompt_ids(x.prompt)
            if len(ids) + n > ctx:
                raise FieldError(f"[{i}].prompt", f"{len(ids) - 2} tokens + max_new_tokens {n} exceed the context "
                                                  f"{ctx} (minus <bos>, <sep>)")
            prompts.append(ids)
        out = []
        for x, ids in zip(inputs, prompts):  # one by one: each request has its own max_new_tokens
            # generate packs the prompt on the host and moves it to the model's device once
            seq, _, P = generate(self.model, [ids], int(x.max_new_tokens), self.tok.eos, self.tok.pad)
            text = self.tok.decode(seq[0, P:].tolist())
            out.append(Output(text=text, refused=is_refusal(text, tuple(self.cfg.refusal_patterns)), model=self.label))
        return out
