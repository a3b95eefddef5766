"""Issue 42 item 2, static half: the path fields of every shipped job file.

A field a run WRITES (a method config's `write_paths`) is relative in every shipped job and stays relative
after validation, so `ctx.write_path` puts it inside the run folder (`<storage>/<run name>/...`), whatever the
working directory or --storage. A field a run READS may point anywhere; when a shipped job reads another
shipped job's output under results/ (the default storage), the path names that job's run folder and, below
it, that job's write path or its checkpoints, so the chain in the comments works as written."""

from __future__ import annotations

import typing
from pathlib import PurePosixPath

import pytest
import yaml
from pydantic import BaseModel

from methodlab.core.registry import get_spec
from methodlab.methods import REGISTRY
from methodlab.runners.paths import default_run_name
from methodlab.specs.files import load_job
from tests.conftest import REPO

# What each method writes besides its checkpoints (the config's `write_paths` must name at least these).
WRITE_PATH_FIELDS = {
    "face": ("stage_dir",),
    "mtpp_threshold": ("simulate_out",),
    "ucan": ("output_path",),
    "unirl": ("generation.out_dir",),
    "discrete_structure": ("export_dir",),
}
DEFAULT_STORAGE = "results"  # ./results: what a read path of a shipped job starts with when it reads a run's output
JOBS = sorted(REPO.glob("jobs/*/*.yaml"))


def write_fields(slug: str) -> tuple[str, ...]:
    cls = get_spec(slug).config_cls()
    return tuple(dict.fromkeys(tuple(getattr(cls, "write_paths", ())) + WRITE_PATH_FIELDS.get(slug, ())))


def _get(obj, dotted: str):
    for part in dotted.split("."):
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
    return obj


def _field(cls, dotted: str):
    """The pydantic field a dotted name (generation.out_dir) names, or None."""
    *head, last = dotted.split(".")
    for part in head:
        f = cls.model_fields.get(part)
        if f is None:
            return None
        cls = next((a for a in (typing.get_args(f.annotation) or (f.annotation,))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if cls is None:
            return None
    return cls.model_fields.get(last)


def _str_fields(cls, prefix=""):
    for name, f in cls.model_fields.items():
        args = typing.get_args(f.annotation) or (f.annotation,)
        for a in args:
            if isinstance(a, type) and issubclass(a, BaseModel):
                yield from _str_fields(a, f"{prefix}{name}.")
        if str in args:
            yield f"{prefix}{name}", f


@pytest.mark.parametrize("slug", sorted(REGISTRY))
def test_write_path_fields_are_declared(slug):
    cls = get_spec(slug).config_cls()
    declared = tuple(getattr(cls, "write_paths", ()))
    assert set(WRITE_PATH_FIELDS.get(slug, ())) <= set(declared), \
        f"{slug}: declare the fields a run writes in Config.write_paths: ClassVar[tuple[str, ...]]"
    for dotted in declared:
        assert _field(cls, dotted) is not None, f"{slug}.write_paths names {dotted!r}: no such config field"
    # a path field whose description says the run writes there is a write path
    for dotted, f in _str_fields(cls):
        if "writ" in (f.description or "").lower() and ("path" in dotted or "dir" in dotted or "out" in dotted):
            assert dotted in declared, f"{slug}.{dotted} is written by a run: list it in Config.write_paths"


def _job_write_values(path):
    raw = yaml.safe_load(path.read_text()) or {}
    slug = raw.get("method")
    if slug not in REGISTRY:
        return slug, raw, []
    return slug, raw, [(f, _get(raw.get("config") or {}, f)) for f in write_fields(slug)
                       if _get(raw.get("config") or {}, f) is not None]


WRITING_JOBS = [p for p in JOBS if _job_write_values(p)[2]]


def test_some_shipped_jobs_write_side_files():
    assert len(WRITING_JOBS) >= 8, [str(p.relative_to(REPO)) for p in WRITING_JOBS]


@pytest.mark.parametrize("path", WRITING_JOBS, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_write_paths_land_in_the_run_folder(path, tmp_path, monkeypatch):
    slug, _, values = _job_write_values(path)
    monkeypatch.chdir(tmp_path)  # validated elsewhere than the repo: a path resolved against the cwd would show
    loaded = load_job(path)
    for field, value in values:
        p = PurePosixPath(str(value))
        assert "://" not in str(value) and not p.is_absolute() and not str(value).startswith("~"), \
            f"{path.name}: config.{field} = {value!r} must be relative (it is written inside the run folder)"
        assert ".." not in p.parts, f"{path.name}: config.{field} = {value!r} climbs out of the run folder"
        assert p.parts[0] != DEFAULT_STORAGE, \
            f"{path.name}: config.{field} = {value!r} names the storage folder again: it is relative to the run folder"
        assert str(_get(loaded.config, field)) == str(value), \
            f"{path.name}: config.{field} became {_get(loaded.config, field)!r} on validation: keep it relative"


def _run_folders() -> dict[str, tuple[str, tuple[str, ...]]]:
    """run folder name -> (job file, the relative write paths of that job), over every shipped job."""
    out = {}
    for path in JOBS:
        slug, raw, values = _job_write_values(path)
        name = (raw.get("run") or {}).get("name") or default_run_name(slug, path, raw.get("setting", "train"), False)
        out[name] = (str(path.relative_to(REPO)), tuple(str(v) for _, v in values))
    return out


def _results_reads(raw, slug):
    """(field, value) of every config string that points under results/ and is not a write path."""
    skip = set(write_fields(slug)) if slug in REGISTRY else set()

    def walk(obj, prefix=""):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from walk(v, f"{prefix}{k}.")
        elif isinstance(obj, str) and PurePosixPath(obj).parts[:1] == (DEFAULT_STORAGE,) and prefix[:-1] not in skip:
            yield prefix[:-1], obj

    return list(walk(raw.get("config") or {}))


def _reads_of(path):
    raw = yaml.safe_load(path.read_text()) or {}
    return _results_reads(raw, raw.get("method"))


READING_JOBS = [p for p in JOBS if _reads_of(p)]


@pytest.mark.parametrize("path", READING_JOBS, ids=lambda p: str(p.relative_to(REPO)))
def test_reads_of_another_runs_output_name_its_run_folder(path):
    runs = _run_folders()
    for field, value in _reads_of(path):
        parts = PurePosixPath(value).parts
        assert len(parts) >= 2 and parts[1] in runs, \
            f"{path.name}: config.{field} = {value!r}: no shipped job runs as {parts[1] if len(parts) > 1 else '?'!r}"
        below = PurePosixPath(*parts[2:]) if len(parts) > 2 else None
        if below is None:
            continue
        job, writes = runs[parts[1]]
        ok = below.parts[0] == "checkpoints" or any(
            below.parts[:len(PurePosixPath(w).parts)] == PurePosixPath(w).parts for w in writes)
        assert ok, (f"{path.name}: config.{field} = {value!r} reads {below} inside the run folder of {job}, "
                    f"which writes {list(writes) or 'no side files'} there (besides checkpoints/)")
