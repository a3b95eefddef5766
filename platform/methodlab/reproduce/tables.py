"""Small formatting helpers every study's sections share (one markdown table writer, one number format)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence


def fmt(v: Any, nd: int | None = None) -> str:
    """A cell: '—' for a missing or NaN value, `nd` decimals when given, else 4 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)  # a seed, a count: never "0.000"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if nd is not None else f"{v:.4g}"
    return str(v)


def mean(values: Iterable[Any]) -> float | None:
    """Mean of the values present (None when none is)."""
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(v) / len(v) if v else None


def md_table(head: Sequence[str], rows: Iterable[Sequence[Any]], nd: int | None = None) -> list[str]:
    """Markdown table lines (then a blank line); cells go through `fmt` unless already strings."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c if isinstance(c, str) else fmt(c, nd) for c in row) + " |" for row in rows]
    return out + [""]
