"""RWKU-style evaluation on the tiny LM: greedy completions on forget-test (unseen prompts of the targets),
neighbour-test and retain-test; ROUGE-L recall against the facts, refusal rates, target naming, naturalness."""

from __future__ import annotations

import torch

from methodlab.methods.rule_unlearning.model import generate
from methodlab.methods.rule_unlearning.rewards import names_target, natural_refusal, rouge_l_recall
from methodlab.methods.rule_unlearning.refusal import is_refusal


def complete(model, tok, prompts: list[str], max_new: int, temperature: float = 0.0,
             generator: torch.Generator | None = None) -> list[str]:
    ids, mask, P = generate(model, [tok.prompt_ids(p) for p in prompts], max_new, tok.eos, tok.pad, temperature, generator)
    return [tok.decode(row) for row in ids[:, P:].tolist()]  # one read back of the completions


def score_set(texts: list[str], qas, patterns, answer_rouge: float) -> dict[str, float]:
    n = max(1, len(texts))
    rec = [rouge_l_recall(q.answer, t) for q, t in zip(qas, texts)]
    ref = [is_refusal(t, patterns) for t in texts]
    named = [r and names_target(t, q.name) for q, t, r in zip(qas, texts, ref)]
    nat = [natural_refusal(t, q.answer, q.name, patterns, answer_rouge) for q, t in zip(qas, texts)]
    return {"acc": sum(r > answer_rouge for r in rec) / n, "rouge": 100.0 * sum(rec) / n, "refusal": sum(ref) / n,
            "named": sum(named) / max(1, sum(ref)), "natural": sum(nat) / n}


@torch.no_grad()
def evaluate(model, splits, cfg) -> dict[str, float]:
    """eval/forget_* on forget-test, eval/neighbour_*, eval/retain_*; forget_quality = mean ROUGE-L recall (%)
    on forget-test (lower is better); boundary_score = forget refusal + neighbour accuracy (the sweep objective)."""
    out: dict[str, float] = {}
    tok, pats = splits.tok, tuple(cfg.refusal_patterns)
    for name, qas in (("forget", splits.forget_test), ("neighbour", splits.neighbour_test), ("retain", splits.retain_test)):
        texts = complete(model, tok, [q.prompt for q in qas], cfg.max_new_tokens)
        s = score_set(texts, qas, pats, cfg.answer_rouge)
        out[f"eval/{name}_acc"], out[f"eval/{name}_refusal"] = s["acc"], s["refusal"]
        if name == "forget":
            seen = {a for a, _ in splits.train_templates}
            for part, keep in (("seen", True), ("unseen", False)):  # attribute asked in forget-train, or never
                idx = [i for i, q in enumerate(qas) if (q.attribute in seen) == keep]
                sub = score_set([texts[i] for i in idx], [qas[i] for i in idx], pats, cfg.answer_rouge) if idx else None
                out[f"eval/forget_refusal_{part}_attr"] = sub["refusal"] if sub else float("nan")
                out[f"eval/forget_acc_{part}_attr"] = sub["acc"] if sub else float("nan")
            out["eval/forget_quality"] = s["rouge"]
            out["eval/forget_named"] = s["named"]
            out["eval/naturalness"] = s["natural"]
        else:
            out[f"eval/{name}_rouge"] = s["rouge"]
    out["eval/boundary_score"] = out["eval/forget_refusal"] + out["eval/neighbour_acc"]
    return out


@torch.no_grad()
def qa_exact_match(model, tok, qas, max_new: int = 6, batch: int = 512) -> float:
    hits = 0
    for s in range(0, len(qas), batch):
        chunk = qas[s:s + batch]
        texts = complete(model, tok, [q.prompt for q in chunk], max_new)
        hits += sum(t.strip() == " ".join(q.answer.split()) for q, t in zip(chunk, texts))
    return hits / max(1, len(qas))
