"""The verifiable rewards of ReBO (spec: "two-stage, abs, target" and the sweepable variants), ROUGE-L recall
(whitespace-tokenised, lower-case; pinned here, no package), and the naturalness proxy."""

from __future__ import annotations

from methodlab.methods.rule_unlearning.refusal import DEFAULT_PATTERNS, is_refusal

VARIANTS = ("two_stage_abs_target", "abs", "rouge", "half_reject", "mix")


def lcs(a: list[str], b: list[str]) -> int:
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l_recall(reference: str, candidate: str) -> float:
    """LCS(reference, candidate) / len(reference) over lower-case whitespace tokens (0 for an empty reference)."""
    ref, cand = reference.lower().split(), candidate.lower().split()
    return lcs(ref, cand) / len(ref) if ref else 0.0


def names_target(text: str, target: str) -> bool:
    return bool(target) and f" {target.lower()} " in f" {text.lower()} "


def reward(kind: str, completion: str, *, answer: str = "", target: str = "", variant: str = "two_stage_abs_target",
           rouge_threshold: float = 0.3, require_no_answer: bool = True, leak_threshold: float = 0.5,
           patterns=DEFAULT_PATTERNS) -> float:
    """kind "reject" (forget prompt: answer = the fact that must not come out, target = the name) or "normal"
    (boundary prompt: answer = the reference answer). Maximum 1 (0.5 for half_reject on forget prompts).
    require_no_answer: a forget completion that leaks the answer (ROUGE-L recall > leak_threshold) gets 0,
    refusal phrase or not (the spec's reward-hacking pitfall)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown reward variant {variant!r}; one of {VARIANTS}")
    refused = is_refusal(completion, patterns)
    if kind == "reject":
        if require_no_answer and answer and rouge_l_recall(answer, completion) > leak_threshold:
            return 0.0
        named = refused and names_target(completion, target)
        if variant == "abs" or variant == "rouge":
            return float(refused)
        if variant == "mix":
            return 0.7 * refused + 0.3 * named
        r = 0.5 * refused + 0.5 * named
        return 0.5 * r if variant == "half_reject" else r
    if kind != "normal":
        raise ValueError(f"kind must be 'reject' or 'normal', got {kind!r}")
    recall = rouge_l_recall(answer, completion)
    if variant == "abs":
        return float(not refused)
    if variant == "rouge":
        return float(recall > 0.5)
    if variant == "mix":
        return 0.7 * (not refused) + 0.3 * (recall > rouge_threshold)
    return 0.5 * (not refused) + 0.5 * ((not refused) and recall > rouge_threshold)


def has_repeat(text: str) -> bool:
    w = text.split()
    return any(a == b for a, b in zip(w, w[1:]))


def natural_refusal(completion: str, answer: str, target: str, patterns=DEFAULT_PATTERNS,
                    leak_threshold: float = 0.5) -> bool:
    """Naturalness proxy: a refusal that names the target, leaks no answer and has no stutter (a word repeated
    back to back) and no unknown token: a fluent, on-topic refusal rather than gibberish or a hallucination."""
    return (is_refusal(completion, patterns) and names_target(completion, target)
            and rouge_l_recall(answer, completion) <= leak_threshold and not has_repeat(completion)
            and "<unk>" not in completion)
