"""Load and fully validate YAML files before any Ray resource is requested.

Every error is a ConfigError whose text names the file, the field and (where finite) the allowed values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from methodlab.core.device import check_method_accepts
from methodlab.core.errors import ConfigError, MethodlabError
from methodlab.core.overrides import apply_overrides, deep_merge, parse_override, split_override
from methodlab.core.registry import get_spec
from methodlab.core.validation import check_dotted_path, validate_model
from methodlab.specs.job import JobFile
from methodlab.specs.search_space import SearchSpaceFile
from methodlab.specs.serve import APP_IMPORT_PATH, AppArgs


def _parse_yaml(path: str | Path, load):
    """`load(text)` on a file's text: missing, not UTF-8 or not YAML is one ConfigError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("not a file" if path.exists() else "file not found", where=str(path))
    try:
        return load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"not valid YAML{at}: {getattr(err, 'problem', err)}", where=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError("not a UTF-8 text file", where=str(path)) from None


def read_yaml(path: str | Path) -> dict:
    data = _parse_yaml(path, yaml.safe_load)
    if not isinstance(data, dict):
        raise ConfigError(f"top level must be a mapping, got {type(data).__name__}", where=str(path))
    return data


def read_yaml_docs(path: str | Path) -> list:
    """Every YAML document of a file (a k8s manifest may hold several): missing, not UTF-8 or not YAML is one
    ConfigError naming the file."""
    docs = _parse_yaml(path, lambda text: list(yaml.safe_load_all(text)))
    for i, doc in enumerate(docs):
        if doc is not None and not isinstance(doc, dict):
            raise ConfigError(f"document {i + 1} must be a mapping, got {type(doc).__name__}", where=str(path))
    return docs


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


CLI = "command line"  # what an override error names instead of a file


def _under(loc: tuple, paths) -> tuple | None:
    """The command-line path an error location belongs to: one is a prefix of the other (longest first)."""
    hits = [p for p in paths if loc[:len(p)] == p or p[:len(loc)] == loc and loc]
    return max(hits, key=len) if hits else None


def _cli_message(e: dict, paths: dict, model, owner: str, extra_names: tuple = ()) -> str:
    """One error caused by a `key=value` override, in the words the user typed (`lrr`, not `config.lrr`)."""
    loc = tuple(e["loc"])
    path = _under(loc, paths)
    typed = paths[path].split(".")
    off = len(typed) - len(path)  # 1 when the user wrote the `config.` prefix
    shown = typed if len(loc) <= len(path) else typed + [str(p) for p in loc[len(path):]]
    if e["type"] != "extra_forbidden":
        return f"{'.'.join(shown)}: {e['msg']}"
    from methodlab.core.validation import fields_at, nearest

    candidates = fields_at(model, loc[:-1]) + (list(extra_names) if len(loc) == 1 else [])
    guess = nearest(str(loc[-1]), candidates)
    if guess and len(loc) <= len(path):  # keep what the user typed after the mistyped part
        i = off + len(loc) - 1
        hint = f"; did you mean {'.'.join(typed[:i] + [guess] + typed[i + 1:])}?"
    else:
        hint = f"; did you mean {'.'.join(shown[:-1] + [guess])}?" if guess else ""
    return f"{'.'.join(shown)}: unknown field of {owner}{hint}"


def validate_layers(cls, file_data: dict, merged: dict, cli_paths: dict, *, where: str, prefix: str = "",
                    owner: str = "the job file", extra_names: tuple = (), layers_where: str | None = None):
    """Validate what the file says on its own first (its errors name the file, unless the command line replaces
    the value), then the merged layers: an error at a `key=value` override names the command line and the key
    as typed, with the nearest real field; any other names `layers_where` (a sweep's file) or the file."""
    from pydantic import ValidationError

    from methodlab.core.validation import describe_errors

    try:
        cls.model_validate(file_data)
    except ValidationError as err:
        own = [e for e in err.errors() if not (cli_paths and (not e["loc"] or _under(tuple(e["loc"]), cli_paths)))]
        if own:
            raise ConfigError(describe_errors(own, prefix, cls), where=where) from None
    try:
        return cls.model_validate(merged)
    except ValidationError as err:
        errs = err.errors()
        cli = [e for e in errs if cli_paths and e["loc"] and _under(tuple(e["loc"]), cli_paths)]
        if cli:
            raise ConfigError("; ".join(_cli_message(e, cli_paths, cls, owner, extra_names) for e in cli),
                              where=CLI) from None
        whole = [e for e in errs if not e["loc"]]  # a rule across fields (a model validator), after an override
        if cli_paths and not layers_where and whole:
            keys = ", ".join(cli_paths.values())
            raise ConfigError("; ".join(e["msg"].removeprefix("Value error, ") for e in whole), where=CLI,
                              field=keys) from None
        raise ConfigError(describe_errors(errs, prefix, cls), where=layers_where or where) from None


def _split_overrides(overrides, top: set[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]], bool]:
    """(job-level items, config items, typed): items are (key, raw text) from "k=v", or (key, value) from a dict."""
    if isinstance(overrides, dict):
        items, typed = list(overrides.items()), True
    else:
        items, typed = [split_override(o) for o in overrides or []], False
    job = [(k, v) for k, v in items if k.split(".")[0] in top]
    cfg = [(k, v) for k, v in items if k.split(".")[0] not in top]
    return job, cfg, typed


def _values(items, typed: bool, model) -> list[tuple[str, Any]]:
    """Raw override texts -> values, read by the type of the field each key names (text stays text)."""
    return list(items) if typed else [parse_override(f"{k}={v}", model) for k, v in items]


def load_job(path: str | Path | None = None, *, data: dict | None = None, overrides: list[str] | dict | None = None,
             smoke: bool = False, config_layers: tuple[dict, ...] = (), layers_where: str | None = None) -> LoadedJob:
    """Job file -> validated JobFile + method config. `overrides` ("k=v") address the job file
    (`config.lr=1e-3`, `scaling.num_workers=2`); a bare key without a known top-level prefix means config.<key>.
    The file is validated on its own first (so `--smoke` cannot hide a bad value in it); an error an override
    causes names the command line. `layers_where` names the file `config_layers` come from (a sweep's file)."""
    where = str(path) if path else "<job>"
    raw = read_yaml(path) if data is None else dict(data)
    top = set(JobFile.model_fields) - {"config"}
    job_items, cfg_items, typed = _split_overrides(overrides, top)
    job_values = _values(job_items, typed, JobFile)
    job_paths = {tuple(k.split(".")): k for k, _ in job_values}
    job = validate_layers(JobFile, raw, apply_overrides(raw, dict(job_values)), job_paths, where=where,
                          owner="the job file")
    try:
        spec = get_spec(job.method)
    except ConfigError as err:  # name the file (or the command line) that asked for it
        raise ConfigError(err.message, where=CLI if ("method",) in job_paths else where, field="method") from None
    if job.setting not in spec.setting_names():
        raise ConfigError(f"unknown setting {job.setting!r}; allowed: {', '.join(spec.setting_names())}",
                          where=CLI if ("setting",) in job_paths else where, field="setting")
    # GPU / precision / compile / data parallelism, before anything starts
    check_method_accepts(spec, job.scaling, where=where, setting=job.setting)
    # precedence: method defaults < job file < smoke preset < sweep layers < command line
    cls = spec.config_cls()
    cfg_values = _values([(k.removeprefix("config."), v) for k, v in cfg_items], typed, cls)
    cli_config = apply_overrides({}, dict(cfg_values))
    cfg_paths = {tuple(k.split(".")): typed_key for (k, _), (typed_key, _) in zip(cfg_values, cfg_items)}
    data_: dict = {}
    for layer in (job.config, cls.smoke if smoke else {}, *config_layers, cli_config):
        data_ = deep_merge(data_, layer)
    cfg = validate_layers(cls, job.config, data_, cfg_paths, where=where, prefix="config",
                          owner=f"{spec.slug}'s config", extra_names=tuple(sorted(top)),
                          layers_where=layers_where if config_layers else None)
    single = cfg.single_worker_reason(job.setting) if job.scaling.num_workers > 1 else None
    if single:
        raise ConfigError(f"this {spec.slug} config does not run data-parallel ({single}); set num_workers: 1 and "
                          "run seeds or settings side by side as parallel Tune trials (methodlab tune)",
                          where=where, field="scaling.num_workers")
    if cli_config:
        job = job.model_copy(update={"config": deep_merge(job.config, cli_config)})
    return LoadedJob(Path(path) if path else None, job, cfg)


def resolve_relative(ref: str, base_file: Path) -> Path:
    p = Path(ref)
    if p.is_absolute() or p.exists():
        return p.resolve()
    alt = base_file.parent / ref
    return alt.resolve() if alt.exists() else p


def _space_config_cls(space: SearchSpaceFile, path, base_raw: dict | None):
    """The method config class a search space's trials use (to read `config.x=...` by field type); None if unknown."""
    try:
        if base_raw is None:
            base_raw = read_yaml(resolve_relative(space.base_job, Path(path)))
        return get_spec(base_raw["method"]).config_cls()
    except (MethodlabError, KeyError, TypeError):
        return None


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
    # `key=value` on the space file; `config.x=...` reaches the trials' method config. The file is checked on its
    # own first; an error an override causes names the command line.
    space_items, cfg_items, _ = _split_overrides(overrides or [], set(SearchSpaceFile.model_fields) - {"config"})
    space_values = _values(space_items, False, SearchSpaceFile)
    space_paths = {tuple(k.split(".")): k for k, _ in space_values}
    merged = apply_overrides(raw, dict(space_values))
    space_file = validate_layers(SearchSpaceFile, raw, merged, space_paths, where=where, owner="the search-space file")
    cfg_values: list[tuple[str, Any]] = []
    if cfg_items:
        bad = [k for k, _ in cfg_items if not k.startswith("config.")]
        if bad:
            from methodlab.core.validation import nearest

            guess = nearest(bad[0], SearchSpaceFile.model_fields)
            raise ConfigError(f"unknown field of the search-space file; write config.{bad[0]}=... for the trials' "
                              f"config" + (f", or did you mean {guess}?" if guess else ""), where=CLI, field=bad[0])
        cfg_values = _values([(k.removeprefix("config."), v) for k, v in cfg_items], False,
                             _space_config_cls(space_file, path, base_raw))
        merged = apply_overrides(merged, {f"config.{k}": v for k, v in cfg_values})
    space = validate_model(SearchSpaceFile, merged, where=where)
    cli_cfg = {f"config.{k}": v for k, v in cfg_values}
    if base_raw is not None:
        base = load_job(None, data=base_raw, config_layers=(space_file.config,), layers_where=where, overrides=cli_cfg)
    else:
        base_path = resolve_relative(space.base_job, Path(path))
        if not base_path.is_file():
            raise ConfigError(f"base job {space.base_job!r} not found", where=CLI if ("base_job",) in space_paths else where,
                              field="base_job")
        base = load_job(base_path, config_layers=(space_file.config,), layers_where=where, overrides=cli_cfg)
    cls = type(base.config)
    spec = get_spec(base.job.method)
    if space.trial_resources.gpu > 0 and spec.cpu_only:
        raise ConfigError(f"{spec.slug} runs on the CPU only ({spec.cpu_only}); set trial_resources.gpu: 0",
                          where=where, field="trial_resources.gpu")
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
        try:
            get_spec(args.method)
        except ConfigError as err:
            raise ConfigError(err.message, where=where, field=f"applications[{i}].args.method") from None
        if check_checkpoints:
            from methodlab.serving.checkpoints import resolve_checkpoints

            resolve_checkpoints(args)
    return raw


__all__ = ["LoadedJob", "LoadedSpace", "MethodlabError", "load_job", "load_search_space", "load_serve_file",
           "read_yaml", "method_config"]
