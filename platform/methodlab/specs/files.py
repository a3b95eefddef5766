"""Load and fully validate YAML files before any Ray resource is requested.

Every error is a ConfigError whose text names the file, the field and (where finite) the allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from methodlab.core.errors import ConfigError, MethodlabError
from methodlab.core.overrides import apply_overrides, deep_merge, parse_override
from methodlab.core.registry import get_spec
from methodlab.core.validation import check_dotted_path, validate_model
from methodlab.specs.job import JobFile
from methodlab.specs.search_space import SearchSpaceFile
from methodlab.specs.serve import APP_IMPORT_PATH, AppArgs


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", where=str(path))
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"not valid YAML{at}: {getattr(err, 'problem', err)}", where=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError("not a UTF-8 text file", where=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__}", where=str(path))
    return data


def method_config(slug: str, *layers: dict, where: str | None = None, smoke: bool = False):
    """Validate method defaults < smoke preset < each layer (job file, sweep sample, CLI)."""
    spec = get_spec(slug)
    cls = spec.config_cls()
    data: dict = dict(cls.smoke) if smoke else {}
    for layer in layers:
        data = deep_merge(data, layer)
    return validate_model(cls, data, where=where, prefix="config")


@dataclass
class LoadedJob:
    path: Path | None
    job: JobFile
    config: Any  # the validated method config


def load_job(path: str | Path | None = None, *, data: dict | None = None, overrides: list[str] | dict | None = None,
             smoke: bool = False, config_layers: tuple[dict, ...] = ()) -> LoadedJob:
    """Job file -> validated JobFile + method config. `overrides` ("k=v") address the job file
    (`config.lr=1e-3`, `scaling.num_workers=2`); a bare key without a known top-level prefix means config.<key>."""
    where = str(path) if path else "<job>"
    raw = read_yaml(path) if data is None else dict(data)
    cli_config: dict = {}
    if overrides:
        items = list(overrides.items()) if isinstance(overrides, dict) else [parse_override(o) for o in overrides]
        top = set(JobFile.model_fields) - {"config"}
        job_items = {k: v for k, v in items if k.split(".")[0] in top}
        cli_config = apply_overrides({}, {k.removeprefix("config."): v for k, v in items if k.split(".")[0] not in top})
        raw = apply_overrides(raw, job_items)
    job = validate_model(JobFile, raw, where=where)
    spec = get_spec(job.method)
    if job.setting not in spec.setting_names():
        raise ConfigError(f"unknown setting {job.setting!r}; allowed: {', '.join(spec.setting_names())}", where=where, field="setting")
    # precedence: method defaults < job file < smoke preset < sweep layers < command line
    smoke_layer = spec.config_cls().smoke if smoke else {}
    cfg = method_config(job.method, job.config, smoke_layer, *config_layers, cli_config, where=where)
    if cli_config:
        job = job.model_copy(update={"config": deep_merge(job.config, cli_config)})
    return LoadedJob(Path(path) if path else None, job, cfg)


def resolve_relative(ref: str, base_file: Path) -> Path:
    p = Path(ref)
    if p.is_absolute() or p.exists():
        return p.resolve()
    alt = base_file.parent / ref
    return alt.resolve() if alt.exists() else p


@dataclass
class LoadedSpace:
    path: Path
    space: SearchSpaceFile
    base: LoadedJob
    metric: str
    mode: str


def load_search_space(path: str | Path, overrides: list[str] | None = None, *, raw: dict | None = None,
                      base_raw: dict | None = None) -> LoadedSpace:
    """`raw`/`base_raw` replace reading the files (a sweep folder's own record, for `tune resume`)."""
    where = str(path)
    raw = read_yaml(path) if raw is None else raw
    if overrides:
        raw = apply_overrides(raw, overrides)
    space = validate_model(SearchSpaceFile, raw, where=where)
    if base_raw is not None:
        base = load_job(None, data=base_raw, config_layers=(space.config,))
    else:
        base_path = resolve_relative(space.base_job, Path(path))
        if not base_path.is_file():
            raise ConfigError(f"base job {space.base_job!r} not found", where=where, field="base_job")
        base = load_job(base_path, config_layers=(space.config,))
    cls = type(base.config)
    for dotted in space.params:
        check_dotted_path(cls, dotted, where=where)
    for i, point in enumerate(space.search_alg.points_to_evaluate):
        unknown = set(point) - set(space.params)
        if unknown:
            raise ConfigError(f"keys {sorted(unknown)} are not swept params; allowed: {sorted(space.params)}",
                              where=where, field=f"search_alg.points_to_evaluate[{i}]")
        # every fixed point must itself be a valid config
        method_config(base.job.method, base.job.config, space.config, apply_overrides({}, point),
                      where=f"{where} (search_alg.points_to_evaluate[{i}])")
    for dotted, param in space.params.items():  # each finite choice must validate too
        values = param.choice or param.grid or []
        for j, v in enumerate(values):  # the error names the list entry that fails, e.g. params.reg.choice[1]
            method_config(base.job.method, base.job.config, space.config, apply_overrides({}, {dotted: v}),
                          where=f"{where} (params.{dotted}.{param.kind}[{j}])")
    metric = space.metric or cls.primary_metric
    mode = space.mode or cls.mode
    return LoadedSpace(Path(path), space, base, metric, mode)


def load_serve_file(path: str | Path, check_checkpoints: bool = False) -> dict:
    """Ray's ServeDeploySchema plus methodlab's args and the loopback rule for local files."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    where = str(path)
    raw = read_yaml(path)
    try:
        ServeDeploySchema.model_validate(raw)
    except ValidationError as err:
        from methodlab.core.validation import describe

        raise ConfigError(describe(err), where=where) from None
    host = (raw.get("http_options") or {}).get("host")
    if host != "127.0.0.1":
        raise ConfigError(f"must be 127.0.0.1 in shipped files (Ray's default is 0.0.0.0), got {host!r}",
                          where=where, field="http_options.host")
    for i, app in enumerate(raw.get("applications") or []):
        if app.get("import_path") != APP_IMPORT_PATH:
            raise ConfigError(f"must be {APP_IMPORT_PATH}", where=where, field=f"applications[{i}].import_path")
        args = validate_model(AppArgs, app.get("args") or {}, where=where, prefix=f"applications[{i}].args")
        get_spec(args.method)
        if check_checkpoints:
            from methodlab.serving.checkpoints import resolve_checkpoints

            resolve_checkpoints(args)
    return raw


def load_any(path: str | Path) -> str:
    """Validate a file by where it lives; returns its kind."""
    p = Path(path)
    parts = p.resolve().parts
    if "search_spaces" in parts:
        load_search_space(p)
        return "search_space"
    if "serve" in parts:
        load_serve_file(p)
        return "serve"
    if "k8s" in parts:
        from methodlab.cluster.k8s import validate_manifest_file

        validate_manifest_file(p)
        return "k8s"
    load_job(p)
    return "job"


__all__ = ["LoadedJob", "LoadedSpace", "MethodlabError", "load_any", "load_job", "load_search_space", "load_serve_file",
           "read_yaml", "method_config"]
