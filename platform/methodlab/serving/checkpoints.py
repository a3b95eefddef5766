"""Which checkpoints an app serves: one directory, or the best top_k of a run / sweep folder."""

from __future__ import annotations

from pathlib import Path

from methodlab.core.checkpoint import read_config
from methodlab.core.errors import ConfigError
from methodlab.core.registry import get_spec

HINTS = {"results/quickstart": "make demo (methodlab quickstart)"}


def _missing(what: str, root: str) -> ConfigError:
    hint = HINTS.get(root.rstrip("/"), "methodlab run JOB.yaml or methodlab tune SPACE.yaml")
    return ConfigError(f"{what}; create it with `{hint}` first")


def resolve_checkpoints(args) -> list[tuple[str, str]]:
    """[(model_id, absolute checkpoint dir)], best first. Model ids are trial ids (or 'default')."""
    spec = get_spec(args.method)
    if args.checkpoint:
        path = Path(args.checkpoint).expanduser().resolve()
        if not (path / "config.json").exists():
            raise _missing(f"checkpoint {args.checkpoint!r} not found", args.checkpoint)
        _check_method(path, spec.slug)
        return [("default", str(path))]
    import pandas as pd

    root = Path(args.checkpoints_root).expanduser().resolve()
    summary = root / "summary.parquet"
    if not summary.exists():
        raise _missing(f"no summary.parquet in {args.checkpoints_root!r}", args.checkpoints_root)
    table = pd.read_parquet(summary)
    cls = spec.config_cls()
    metric, mode = args.metric or cls.primary_metric, args.mode or cls.mode
    table = table[table["checkpoint"].notna()]
    if metric != table["metric"].iloc[0] if len(table) else False:
        col = f"final/{metric}"
        if col not in table:
            raise ConfigError(f"metric {metric!r} not in {summary}", field="args.metric")
        table = table.assign(checkpoint_metric=table[col])
    table = table.sort_values("checkpoint_metric", ascending=(mode == "min"), na_position="last")
    out = []
    for _, row in table.head(args.top_k).iterrows():
        path = Path(row["checkpoint"])
        if (path / "config.json").exists():
            _check_method(path, spec.slug)
            out.append((str(row["trial_id"]), str(path)))
    if not out:
        raise _missing(f"no readable checkpoint listed in {summary}", args.checkpoints_root)
    return out


def _check_method(path: Path, slug: str) -> None:
    got = read_config(path)["method"]
    if got != slug:
        raise ConfigError(f"{path} is a checkpoint of {got!r}, not {slug!r}", field="args.method")
