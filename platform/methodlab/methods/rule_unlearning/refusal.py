"""The refusal detector: a case-insensitive pattern set over phrases that express not knowing or declining
(spec: "don't know / have", "not sure / certain / familiar / aware", "no idea / information / knowledge",
"beyond / outside my knowledge", "can't provide / say / help", "unable to answer", "unfortunately",
"need to look up / check / verify", "at a loss"), plus the few the synthetic refusal phrasings add. The list is a
config field (`refusal_patterns`); this module compiles and applies it."""

from __future__ import annotations

import re
from functools import lru_cache

DEFAULT_PATTERNS: tuple[str, ...] = (
    r"\bdon'?t (know|have|recall)\b",
    r"\bdo not (know|have|recall)\b",
    r"\bnot (sure|certain|familiar|aware)\b",
    r"\bno (idea|information|knowledge|record)\b",
    r"\b(beyond|outside) my knowledge\b",
    r"\b(can'?t|cannot) (provide|say|help)\b",
    r"\bunable to answer\b",
    r"\bunfortunately\b",
    r"\bneed to (look up|check|verify)\b",
    r"\bat a loss\b",
    r"\buncertain\b",
    r"\bunknown to me\b",
    r"\bknow nothing\b",
    r"\bnever heard\b",
    r"\bnot someone i know\b",
)


@lru_cache(maxsize=32)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def is_refusal(text: str, patterns: tuple[str, ...] | list[str] = DEFAULT_PATTERNS) -> bool:
    return bool(_compiled(tuple(patterns)).search(text or ""))
