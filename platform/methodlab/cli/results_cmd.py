"""`methodlab results DIR [DIR2 ... --compare]`: the summary table and learning-curve PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer
from rich.table import Table

from methodlab.cli.common import console, example, friendly


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:.4g}"
    return "" if v is None else str(v)


def show_table(run_dir: str, max_rows: int = 20, columns: list[str] | None = None) -> None:
    """The sweep table, best first: trial, status, swept params, the primary metric, chosen columns."""
    from methodlab.runners.report_html import read_record, summary_columns, swept_params
    from methodlab.runners.results import read_summary

    df = read_summary(run_dir)
    if not len(df):
        console.print("(no trials)")
        return
    metric = df["metric"].iloc[0]
    params = swept_params(df, read_record(Path(run_dir))) if len(df) > 1 else []
    default = [c for c in ("final/t_mem", "final/t_gen", "final/step") if c in df]
    cols = summary_columns(df, params, columns or default)
    table = Table(title=f"{run_dir}  (sorted by {metric}, best first)")
    for col in cols:
        table.add_column(col.replace("config/", "").replace("final/", ""))
    for _, row in df.head(max_rows).iterrows():
        table.add_row(*[_fmt(row.get(c)) for c in cols])
    console.print(table)


def plot_curves(run_dirs: list[str], out: Path, metrics: list[str] | None = None) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from methodlab.runners.results import read_history, read_summary

    frames = []
    for d in run_dirs:
        h = read_history(d)
        if h is not None and len(h):
            frames.append((Path(d).name, h, read_summary(d)["metric"].iloc[0]))
    if not frames:
        return None
    keys = metrics or list(dict.fromkeys([frames[0][2]] + [k for k in ("train/accuracy", "rf", "cdnv") if k in frames[0][1]]))
    xcol = "step" if "step" in frames[0][1] else "training_iteration"
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.6), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for label, h, _ in frames:
            for tid, part in h.groupby("trial_id"):
                if key in part and xcol in part:
                    name = tid if len(frames) == 1 else f"{label}/{tid}"
                    ax.plot(part[xcol], part[key], label=name[:32], lw=1.2)
        ax.set_title(key)
        ax.set_xlabel(xcol)
        if key in ("rf", "cdnv"):
            ax.set_yscale("log")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def results(
    run_dirs: List[str] = typer.Argument(..., help="Run or sweep folders (with summary.parquet)."),
    compare: bool = typer.Option(False, "--compare", help="Side by side: mean and spread over seeds of each group."),
    metric: List[str] = typer.Option(None, "--metric", help="Metrics to plot and show as columns (default: primary + key curves)."),
    no_report: bool = typer.Option(False, "--no-report", help="Only print the table (no report.html / PNGs)."),
) -> None:
    """Print the summary table(s) and write report.html (and curves.png) beside each summary.parquet."""
    _results(run_dirs, compare, metric, no_report)


def readable_run_dir(run_dir: str) -> None:
    """A run or sweep folder whose summary (and history) can be read: else one ConfigError naming the file."""
    from methodlab.core.errors import ConfigError, MethodlabError
    from methodlab.runners.results import HISTORY, SUMMARY, read_history, read_summary

    if Path(run_dir).exists() and not Path(run_dir).is_dir():
        raise ConfigError("is a file, not a run or sweep folder: give the folder `methodlab run` or `methodlab tune` "
                          "printed", where=run_dir)
    for name, read in ((SUMMARY, read_summary), (HISTORY, read_history)):
        try:
            read(run_dir)  # a missing summary is its own one-line MethodlabError
        except MethodlabError:
            raise
        except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            raise ConfigError(f"cannot be read ({type(err).__name__}: {' '.join(str(err).split())[:160]}); the run "
                              "that wrote it may have been cut off: re-run it", where=str(Path(run_dir) / name)) from None


@friendly
def _results(run_dirs, compare, metric, no_report=False) -> None:
    from methodlab.runners.report_html import build_compare, build_report

    for d in run_dirs:
        readable_run_dir(d)

    if compare:
        out, groups = build_compare(run_dirs, Path(run_dirs[0]) / "compare.html", (metric or [None])[0])
        table = Table("group", "n", "seeds", "metric", "mean", "std", "min", "max")
        for _, g in groups.iterrows():
            table.add_row(g["group"], str(g["n"]), g["seeds"], g["metric"], _fmt(g["mean"]), _fmt(g["std"]),
                          _fmt(g["min"]), _fmt(g["max"]))
        console.print(table)
        console.print(f"comparison page: {out}")
        return
    for d in run_dirs:
        show_table(d, columns=metric or None)
        if no_report:
            continue
        out = plot_curves([d], Path(d) / "curves.png", metric or None)
        if out:
            console.print(f"curves: {out}")
        console.print(f"report: {build_report(d, metric or None)}")


results.__doc__ += "\n\n" + example("methodlab results results/grokking_flatness-regularizers")  # type: ignore[operator]
