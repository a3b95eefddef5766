"""Bad inputs to every CLI verb (issue 42, items 1 and 7): one error line naming the file or field and what to do,
exit code 2, no traceback, and nothing started (Ray, a run, a sweep) before the refusal.

In-process through typer's CliRunner (fast); two cases through the installed `methodlab` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from methodlab.cli.main import app
from tests.conftest import REPO

JOB = str(REPO / "jobs/grokking_flatness/cpu.yaml")
SPACE = str(REPO / "search_spaces/grokking_flatness/regularizers.yaml")
SERVE = str(REPO / "serve/grokking_flatness.yaml")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    f = {}

    def put(name, data: bytes | str):
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        f[name] = str(p)

    put("afile", "not a folder")
    put("binary.json", b"\xff\xfe\x00\x81 binary")
    put("binary.yaml", b"\xff\xfe\x00\x81 binary")
    put("empty_list.json", "[]")
    put("nan.json", '{"a": NaN, "b": 5}')
    put("inf.json", '[{"a": 3, "b": 5}, {"a": 1, "b": -Infinity}]')
    put("huge.json", '{"a": 1e999, "b": 5}')
    put("malformed.json", '{"a": 3,')
    put("ok.json", '{"a": 3, "b": 5}')
    put("lr_fast.yaml", yaml.safe_dump({"method": "grokking_flatness", "config": {"lr": "fast"}}))
    put("no_method.yaml", yaml.safe_dump({"method": "nope", "config": {}}))
    put("not_yaml.yaml", "method: [unclosed\n")
    (d / "jobs" / "x").mkdir(parents=True)
    (d / "jobs" / "x" / "no_method.yaml").write_text(yaml.safe_dump({"method": "nope"}))
    f["jobs_no_method"] = str(d / "jobs" / "x" / "no_method.yaml")
    run_dir = d / "broken_run"
    run_dir.mkdir()
    (run_dir / "summary.parquet").write_bytes(b"PAR1 truncated")
    f["broken_run"] = str(run_dir)
    f["dir"] = str(d)
    f["missing"] = str(d / "missing.json")
    f["nock"] = str(d / "no_checkpoint")
    return f


def cases(f: dict[str, str]) -> list[tuple[list[str], tuple[str, ...]]]:
    """(argv, fragments the one error line must contain)."""
    ck = ["--checkpoint", f["nock"]]
    return [
        # run
        (["run", f["missing"]], ("missing.json", "file not found")),
        (["run", f["binary.yaml"]], ("binary.yaml", "UTF-8")),
        (["run", f["not_yaml.yaml"]], ("not_yaml.yaml", "not valid YAML at line")),
        (["run", JOB, "--local", "--smoke", "--storage", "/proc/nope"], ("--storage", "/proc/nope", "give a folder")),
        (["run", JOB, "--local", "--smoke", "--storage", f["afile"]], ("--storage", "is a file, not a folder")),
        (["run", JOB, "--smoke", "--storage", f["afile"] + "/sub"], ("--storage", "cannot create")),
        (["run", JOB, "--smoke", "--storage", "foo://bar"], ("--storage", "unknown URI scheme foo://", "s3://")),
        (["run", JOB, "--local", "lrr=1e-3"], ("command line: lrr", "did you mean lr?")),
        (["run", JOB, "--local", "scaling.num_wrkers=2"], ("command line: scaling.num_wrkers", "did you mean scaling.num_workers?")),
        (["run", JOB, "--local", "max_steps=many"], ("command line: max_steps", "integer")),
        (["run", JOB, "--local", "reg"], ("command line", "key=value")),
        (["run", f["lr_fast.yaml"], "--local", "--smoke"], ("lr_fast.yaml", "config.lr")),
        (["run", f["no_method.yaml"], "--local"], ("no_method.yaml", "unknown method 'nope'")),
        (["run", JOB, "--bogus"], ("methodlab run", "--bogus", "--help")),
        (["run"], ("methodlab run", "job_file")),
        # tune
        (["tune", "run", f["missing"]], ("missing.json", "file not found")),
        (["tune", "run", SPACE, "--storage", "foo://bar"], ("--storage", "unknown URI scheme")),
        (["tune", "run", SPACE, "--storage", f["afile"]], ("--storage", "is a file")),
        (["tune", "run", SPACE, "num_sample=3"], ("command line: num_sample", "did you mean num_samples?")),
        (["tune", "run", SPACE, "config.lrr=1"], ("command line: config.lrr", "did you mean config.lr?")),
        (["tune", "resume", f["missing"]], ("missing.json", "tune resume")),
        # predict
        (["predict", "grokking_flatness", f["missing"], *ck], ("missing.json", "not found")),
        (["predict", "grokking_flatness", f["dir"], *ck], ("is a folder",)),
        (["predict", "grokking_flatness", f["binary.json"], *ck], ("binary.json", "not UTF-8")),
        (["predict", "grokking_flatness", f["empty_list.json"], *ck], ("empty_list.json", "empty list")),
        (["predict", "grokking_flatness", f["nan.json"], *ck], ("nan.json", "a: NaN", "finite")),
        (["predict", "grokking_flatness", f["inf.json"], *ck], ("inf.json", "[1].b: -Infinity")),
        (["predict", "grokking_flatness", f["huge.json"], *ck], ("huge.json", "a: Infinity")),
        (["predict", "grokking_flatness", f["malformed.json"], *ck], ("malformed.json", "malformed JSON")),
        (["predict", "grokking_flatness", f["ok.json"], *ck], ("no_checkpoint",)),
        (["predict", "grokking_flatness", "--schema", *ck], ("no_checkpoint",)),
        (["predict", "grokking_flatness", *ck], ("INPUT", "--schema")),
        (["predict", "nope", f["ok.json"], *ck], ("unknown method 'nope'",)),
        # validate
        (["validate", f["missing"]], ("missing.json", "file not found")),
        (["validate", f["binary.yaml"]], ("binary.yaml", "UTF-8")),
        (["validate", f["jobs_no_method"]], ("no_method.yaml", "method", "unknown method 'nope'")),
        # results
        (["results", f["dir"] + "/nothing"], ("summary.parquet", "not found")),
        (["results", f["afile"]], ("afile", "not a run or sweep folder")),
        (["results", f["broken_run"]], ("summary.parquet", "cannot be read")),
        # serve
        (["serve", f["missing"]], ("missing.json", "file not found")),
        (["serve"], ("SERVE.yaml", "--from-sweep")),
        (["serve", "--from-sweep", f["broken_run"]], ("summary.parquet", "cannot be read")),
        (["serve", SERVE, "--port", "0"], ("--port",)),
        # submit
        (["submit", f["missing"]], ("missing.json", "file not found")),
        (["submit", JOB, "lrr=1"], ("command line: lrr", "did you mean lr?")),
        (["submit", JOB, "--storage", "foo://bar"], ("--storage", "unknown URI scheme")),
        # k8s
        (["k8s", "render", "--repo", f["dir"] + "/nothing"], ("--repo", "jobs/")),
        (["k8s", "render", "--repo", str(REPO), "--out", f["afile"]], ("--out", "is a file")),
        (["k8s", "validate", f["missing"]], ("missing.json", "file not found")),
        (["k8s", "validate", f["binary.yaml"]], ("binary.yaml", "UTF-8")),
        (["k8s", "validate", f["not_yaml.yaml"]], ("not_yaml.yaml", "not valid YAML")),
        (["k8s", "validate", "--crds", f["dir"] + "/nothing", f["not_yaml.yaml"]], ("--crds", "not a folder")),
        # methods
        (["methods", "show", "nope"], ("unknown method 'nope'",)),
        # reproduce
        (["reproduce", "nope"], ("unknown method 'nope'",)),
        (["reproduce", "grokking_flatness", "--out-dir", f["afile"]], ("--out-dir", "is a file")),
        (["reproduce", "grokking_flatness", "--workers", "0"], ("--workers",)),
        # quickstart
        (["quickstart", "--storage", "foo://bar"], ("--storage", "unknown URI scheme")),
    ]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Every case must be refused before Ray, a run, a sweep or a reproduction starts."""
    import ray

    def started(*a, **k):
        raise AssertionError("started work before refusing a bad input")

    monkeypatch.setattr(ray, "init", started)
    monkeypatch.setattr("methodlab.runners.local.run_local", started)
    monkeypatch.setattr("methodlab.runners.train.run_train", started)
    monkeypatch.setattr("methodlab.runners.tune.run_tune", started)
    monkeypatch.setattr("methodlab.cluster.jobs.client", started)
    monkeypatch.setattr("methodlab.reproduce.harness.execute", started)  # a reproduction's runs
    monkeypatch.setattr("methodlab.reproduce.harness.run_tasks", started)


def test_every_verb_refuses_bad_input_in_one_line(files, nothing_starts):
    runner = CliRunner()
    verbs, failures = set(), []
    for argv, fragments in cases(files):
        res = runner.invoke(app, argv)
        err = [x for x in res.stderr.splitlines() if x.strip()]
        problem = None
        if res.exit_code != 2:
            problem = f"exit {res.exit_code}"
        elif res.exception is not None and not isinstance(res.exception, SystemExit):
            problem = f"raised {res.exception!r}"
        elif "Traceback" in res.output:
            problem = "traceback"
        elif len(err) != 1:
            problem = f"{len(err)} stderr lines"
        elif not all(fr in err[0] for fr in fragments):
            problem = f"missing one of {fragments}"
        if problem:
            failures.append(f"{' '.join(argv)}: {problem}: {res.output[-600:]!r}")
        verbs.add(" ".join(argv[:2]) if argv[0] in ("k8s", "methods", "tune") else argv[0])
    assert not failures, "\n".join(failures)
    assert {"run", "tune run", "tune resume", "predict", "validate", "results", "serve", "submit", "k8s render",
            "k8s validate", "methods show", "reproduce", "quickstart"} <= verbs


def test_storage_uri_schemes_pyarrow_knows_are_accepted(tmp_path):
    from methodlab.cli.common import checked_storage

    for uri in ("s3://bucket/runs", "gs://bucket/runs", "hdfs://namenode/runs", "abfs://container/runs"):
        assert checked_storage(None, uri) == uri
    assert checked_storage(None, f"file://{tmp_path}/runs") == f"file://{tmp_path}/runs"
    assert (tmp_path / "runs").is_dir()


def test_smoke_does_not_hide_a_bad_job_file(files):
    """`lr: fast` in the job file is refused under --smoke too (the preset sets lr), naming the file and field."""
    from methodlab.core.errors import ConfigError
    from methodlab.specs.files import load_job

    with pytest.raises(ConfigError) as e:
        load_job(files["lr_fast.yaml"], smoke=True)
    assert e.value.where == files["lr_fast.yaml"] and "config.lr" in str(e.value)
    # a value the command line replaces is not held against the file
    assert load_job(files["lr_fast.yaml"], overrides=["lr=1e-3"]).config.lr == 1e-3


@pytest.mark.parametrize("override,message", [
    ("lrr=1e-3", "command line: lrr: unknown field of grokking_flatness's config; did you mean lr?"),
    ("config.lrr=1e-3", "command line: config.lrr: unknown field of grokking_flatness's config; did you mean config.lr?"),
    ("scalng.num_workers=2", "command line: scalng.num_workers: unknown field of grokking_flatness's config; "
                             "did you mean scaling.num_workers?"),
    ("p=96", "command line: p: p=96 must be prime"),
    ("method=nope", "command line: method: unknown method 'nope'"),
])
def test_override_errors_name_the_command_line(override, message):
    from methodlab.core.errors import ConfigError
    from methodlab.specs.files import load_job

    with pytest.raises(ConfigError) as e:
        load_job(JOB, overrides=[override])
    assert str(e.value).startswith(message) and "cpu.yaml" not in str(e.value), str(e.value)


@pytest.fixture(scope="module")
def grok_ckpt(tmp_path_factory) -> str:
    """A tiny untrained grokking_flatness checkpoint (p = 23): enough for schemas and domain checks."""
    from methodlab.core.checkpoint import save_checkpoint
    from methodlab.data.modular import Vocab
    from methodlab.methods.grokking_flatness.config import Config
    from methodlab.methods.grokking_flatness.model import build_model

    cfg = Config(p=23, n_layers=1, d_model=32, n_heads=4)
    d = tmp_path_factory.mktemp("ck") / "checkpoint"
    save_checkpoint(d, method="grokking_flatness", config=cfg.model_dump(mode="json"),
                    weights=build_model(cfg, Vocab(cfg.p).size).state_dict(), state={"step": 3})
    return str(d)


def test_predict_domain_errors_keep_the_file_and_drop_the_index(grok_ckpt, tmp_path, monkeypatch):
    runner = CliRunner()
    one, many = tmp_path / "one.json", tmp_path / "many.json"
    one.write_text('{"a": 30, "b": 5}')
    many.write_text('[{"a": 3, "b": 5}, {"a": 30, "b": 5}]')
    res = runner.invoke(app, ["predict", "grokking_flatness", str(one), "--checkpoint", grok_ckpt])
    assert res.exit_code == 2 and res.stderr.strip().startswith(f"error: {one}: a: "), res.output
    res = runner.invoke(app, ["predict", "grokking_flatness", str(many), "--checkpoint", grok_ckpt])
    assert res.exit_code == 2 and f"{many}: [1].a: " in res.stderr, res.output
    # the predictor's own domain check (FieldError), reached when the request schema lets the value through
    from methodlab.methods.grokking_flatness.predictor import Predictor

    monkeypatch.setattr(Predictor, "input_model", lambda self: Predictor.Input)
    res = runner.invoke(app, ["predict", "grokking_flatness", str(one), "--checkpoint", grok_ckpt])
    assert res.exit_code == 2 and res.stderr.strip() == f"error: {one}: a: must be < p = 23", res.output
    res = runner.invoke(app, ["predict", "grokking_flatness", str(many), "--checkpoint", grok_ckpt])
    assert res.exit_code == 2 and res.stderr.strip() == f"error: {many}: [1].a: must be < p = 23", res.output


def test_predict_schema_without_a_server(grok_ckpt):
    res = CliRunner().invoke(app, ["predict", "grokking_flatness", "--schema", "--checkpoint", grok_ckpt])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["method"] == "grokking_flatness"
    assert out["input"]["properties"]["a"]["maximum"] == 22 and set(out["input"]["required"]) == {"a", "b"}
    assert {"c", "probs_top5", "model_step"} <= set(out["output"]["properties"])


@pytest.mark.parametrize("argv,fragment", [
    (["run", JOB, "--local", "--smoke", "--storage", "/proc/nope"], "--storage"),
    (["predict", "grokking_flatness", "/nonexistent/in.json", "--checkpoint", "/nonexistent"], "in.json"),
])
def test_entry_point_one_line(argv, fragment, tmp_path):
    exe = Path(sys.executable).with_name("methodlab")
    cmd = [str(exe), *argv] if exe.exists() else [sys.executable, "-m", "methodlab", *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "80"})
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and fragment in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not any(tmp_path.iterdir()), "wrote into the working directory"
