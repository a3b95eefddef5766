"""Figure plumbing every study's plots share: a headless backend, and one way to write a PNG that is
byte-stable across renders (no software/date metadata), so `--render-only` redraws the same file."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the Agg backend (reports render on machines without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, folder, name: str, dpi: int = 100) -> list[str]:
    """Lay out, write folder/name without metadata, close; returns [name] for the study's plot list."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(Path(folder) / name, dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return [name]
