"""The reproduction harness on a toy study (a trivial method registered only here): two arms (one needing the
other's checkpoint), dev and reported seeds, a task and three claims. Runs go through the platform's local
runner in fresh local processes (--no-ray); the Ray path is tested on the multi-node facility
(tests/reliability/test_reproduce_multinode.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce import store
from methodlab.reproduce.run import reproduce
from tests.reproduce import toy


@pytest.fixture
def toy_pkg(tmp_path, monkeypatch):
    from methodlab.methods import REGISTRY

    pkg = toy.install(tmp_path / "code")
    monkeypatch.setitem(REGISTRY, "toy", "toypkg:SPEC")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'code'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    store.code_hash.cache_clear()
    yield pkg
    store.code_hash.cache_clear()
    for m in [m for m in list(__import__("sys").modules) if m.startswith("toypkg")]:
        del __import__("sys").modules[m]


def study(sleep_s: float = 0.0) -> Study:
    return Study(
        slug="toy",
        title="Toy study",
        arms=(Arm("base", toy.job(steps=4, rate=0.5, sleep_s=sleep_s), quick=("steps=2",)),
              Arm("finetune", toy.job(steps=2, rate=0.1), needs=(("base", "init_from"),), seeds="reported")),
        tasks=(Task("oracle", lambda seed, inputs, mode: {"loss": inputs["base"]["loss"] / 4}, needs=("base",)),),
        claims=(
            Claim("A", "base ends below 1.0", lambda r, s: r.metric("base", s, "loss"), "<=", 1.0, uses=("base",),
                  paper=0.6),
            Claim("B", "finetune halves base on every seed",
                  lambda r, s: None if r.metric("finetune", s, "loss") is None else
                  r.metric("finetune", s, "loss") / r.metric("base", s, "loss"), "<", 0.5, combine="every",
                  uses=("finetune",)),
            Claim("C", "the oracle is below 0.05 pooled",
                  lambda r, s: None if any(r.task("oracle", x) is None for x in r.reported_seeds) else
                  max(r.task("oracle", x)["loss"] for x in r.reported_seeds), "<=", 0.05, combine="pooled",
                  uses=("oracle",)),
        ),
        spec_recipe={"steps": 8, "rate": 0.5},
    )


def _claims(out: Path) -> dict:
    return {c["id"]: c for c in json.loads((out / "toy.json").read_text())["claims"]}


def test_runs_judges_renders_and_reuses_every_finished_key(toy_pkg, tmp_path):
    out, st = tmp_path / "reports", tmp_path / "store"
    logs: list[str] = []
    reproduce(study(), out_dir=out, storage=st, use_ray=False, log=logs.append)
    claims = _claims(out)
    # base: (10 + seed) / 16 -> 0.625, 0.6875, 0.75 (reported 0, 1, 2): mean 0.6875 <= 1 PASS
    assert claims["A"]["verdict"] == "PASS" and claims["A"]["ours"] == pytest.approx(0.6875)
    # finetune: base / 2 * 0.81 -> ratio 0.405 < 0.5 on every seed: PASS
    assert claims["B"]["verdict"] == "PASS" and claims["B"]["per_seed"]["0"] == pytest.approx(0.405)
    # oracle: max base / 4 = 0.1875 > 0.05: FAIL
    assert claims["C"]["verdict"] == "FAIL"
    md = (out / "toy.md").read_text()
    assert "| **A** base ends below 1.0 |" in md and "| PASS |" in md and "| FAIL |" in md
    assert "| steps | 8 | 4 | base |" in md  # the recipe against the spec's: a reduced recipe cannot hide
    assert "## Development seeds" in md and "| base | 3 | 3 | yes |" in md  # dev seeds ran first
    # the claims again on seeds 10-12 (base: 20/16, 21/16, 22/16 -> mean 1.3125 > 1: not met there)
    assert "## Claims on the development seeds" in md and "| A | <= 1 (mean) | 1.25 | 1.312 | 1.375 | 1.312 | no |" in md
    runs = [p for p in (st / "runs").iterdir()]
    assert len(runs) == 6 + 3 and all((p / "job.yaml").exists() and (p / "metrics.jsonl").exists() and
                                      (p / "checkpoints").is_dir() and (p / "record.json").exists() for p in runs)
    # second invocation: nothing pending, nothing rerun, the same report
    before = {p.name: (p / "record.json").stat().st_mtime_ns for p in runs}
    logs.clear()
    reproduce(study(), out_dir=out, storage=st, use_ray=False, log=logs.append)
    assert logs[0] == "toy: 0 runs pending"
    assert {p.name: (p / "record.json").stat().st_mtime_ns for p in (st / "runs").iterdir()} == before
    assert (out / "toy.md").read_text() == md


def test_not_run_when_its_runs_are_missing(toy_pkg, tmp_path):
    out = tmp_path / "reports"
    reproduce(study(), out_dir=out, storage=tmp_path / "store", use_ray=False, claims="A", log=lambda m: None)
    claims = _claims(out)
    assert claims["A"]["verdict"] == "PASS"
    assert claims["B"]["verdict"] == "NOT RUN" and claims["B"]["ours"] is None
    assert claims["C"]["verdict"] == "FAIL"  # the task needs base only, which ran
    # --from-store: the whole study rendered from what finished, starting nothing
    before = sorted(p.name for p in (tmp_path / "store" / "runs").iterdir())
    logs: list[str] = []
    reproduce(study(), out_dir=out, storage=tmp_path / "store", use_ray=False, from_store=True, log=logs.append)
    assert sorted(p.name for p in (tmp_path / "store" / "runs").iterdir()) == before
    assert logs[0] == "toy: 3 runs not finished (NOT RUN in the report)"  # finetune on 0, 1, 2
    assert _claims(out)["A"]["verdict"] == "PASS" and _claims(out)["B"]["verdict"] == "NOT RUN"


def test_an_interim_report_reads_the_recipe_it_will_run_never_as_run(toy_pkg, tmp_path):
    """Before any run finished, a section's setting text reads the arm's planned config (not blanks), while the
    recipe-against-spec table lists only what ran."""
    from methodlab.reproduce.harness import collect
    from methodlab.reproduce.report import Results

    data = collect(study(), tmp_path / "runs", tmp_path / "tasks", mode="default")
    assert data["runs"] == {} and data["recipes"] == {}
    res = Results(data, study())
    assert res.config("base")["steps"] == 4 and res.config("base")["rate"] == 0.5
    assert data["planned"]["finetune"]["steps"] == 2  # a dependent arm: its recipe, before the checkpoint exists


def test_a_code_change_invalidates_the_keys(toy_pkg, tmp_path):
    out, st = tmp_path / "reports", tmp_path / "store"
    reproduce(study(), out_dir=out, storage=st, use_ray=False, seeds="0", log=lambda m: None)
    first = {p.name for p in (st / "runs").iterdir()}
    train = toy_pkg / "train.py"
    train.write_text(train.read_text().replace("GAIN = 1.0", "GAIN = 0.5"))
    store.code_hash.cache_clear()
    logs: list[str] = []
    reproduce(study(), out_dir=out, storage=st, use_ray=False, seeds="0", log=logs.append)
    assert logs[0] == "toy: 2 runs pending"
    assert not first & {p.name for p in (st / "runs").iterdir()} - first
    assert len({p.name for p in (st / "runs").iterdir()}) == 4


def test_a_killed_run_resumes_from_its_checkpoint(toy_pkg, tmp_path, monkeypatch):
    from methodlab.core import faults

    out, st = tmp_path / "reports", tmp_path / "store"
    monkeypatch.setenv(faults.KILL_AT_STEP, "3")
    monkeypatch.setenv(faults.ONCE_FILE, str(tmp_path / "once"))
    logs: list[str] = []
    reproduce(study(), out_dir=out, storage=st, use_ray=False, seeds="0", claims="A", workers=1, log=logs.append)
    assert any(m.startswith("FAILED base seed 0") for m in logs), logs
    assert _claims(out)["A"]["verdict"] == "NOT RUN"
    monkeypatch.delenv(faults.KILL_AT_STEP)
    logs.clear()
    reproduce(study(), out_dir=out, storage=st, use_ray=False, seeds="0", claims="A", workers=1, log=logs.append)
    run = next((st / "runs").iterdir())
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # steps 1-2 from the killed run, 3-4 after resuming from checkpoint 2
    assert _claims(out)["A"]["per_seed"]["0"] == pytest.approx(0.625)


def test_render_only_redraws_the_report_from_its_json_alone(toy_pkg, tmp_path):
    import shutil

    out, st = tmp_path / "reports", tmp_path / "store"
    reproduce(study(), out_dir=out, storage=st, use_ray=False, seeds="reported", log=lambda m: None)
    md = (out / "toy.md").read_text()
    shutil.rmtree(st)
    reproduce(study(), out_dir=out, render_only=True, log=lambda m: None)
    assert (out / "toy.md").read_text() == md


def test_a_fresh_store_reads_the_committed_reports_runs_and_reruns_only_what_changed(toy_pkg, tmp_path):
    """A fresh clone has reports/<slug>.json but no run store: a run the report holds under the key this code and
    config give is read from it, not rerun; a changed arm runs, and so does the dependency whose checkpoint it
    needs (the same key); --no-reuse reruns everything."""
    import dataclasses

    out = tmp_path / "reports"
    reproduce(study(), out_dir=out, storage=tmp_path / "s1", use_ray=False, log=lambda m: None)
    claims, first = _claims(out), (out / "toy.md").read_text()
    logs: list[str] = []
    reproduce(study(), out_dir=out, storage=tmp_path / "s2", use_ray=False, log=logs.append)
    assert logs[0] == "toy: 0 runs pending" and any("9 runs read from the committed report" in m for m in logs)
    assert not list((tmp_path / "s2").rglob("*.json"))  # no run and no task (its key is in the report) recomputed
    assert _claims(out) == claims
    md = (out / "toy.md").read_text()
    assert "9 of its 9 runs were read from the report committed before this render" in md and md.count("` * |") == 9
    same = "\n".join(x for x in md.replace("` *", "`").split("\n") if "were read from the report" not in x)
    assert same == first  # the same figures
    base, ft = study().arms
    changed = dataclasses.replace(study(), arms=(base, dataclasses.replace(ft, overrides=("rate=0.2",))))
    logs.clear()
    reproduce(changed, out_dir=out, storage=tmp_path / "s3", use_ray=False, seeds="0", log=logs.append)
    assert logs[0] == "toy: 2 runs pending"  # finetune seed 0, and base seed 0 for its checkpoint
    s1 = {p.name for p in (tmp_path / "s1" / "runs").iterdir()}
    assert {p.name for p in (tmp_path / "s3" / "runs").iterdir() if p.name.startswith("base")} <= s1
    assert _claims(out)["B"]["per_seed"]["0"] == pytest.approx(0.5 * 0.8 ** 2)  # the new finetune's figure
    logs.clear()
    reproduce(study(), out_dir=out, storage=tmp_path / "s4", use_ray=False, seeds="0", claims="A", reuse=False,
              log=logs.append)
    assert logs[0] == "toy: 1 runs pending" and not any("committed report" in m for m in logs)


def test_quick_is_marked_reduced_and_bad_selections_are_refused(toy_pkg, tmp_path):
    from methodlab.core.errors import ConfigError

    out = tmp_path / "reports"
    reproduce(study(), out_dir=out, storage=tmp_path / "store", use_ray=False, quick=True, log=lambda m: None)
    md = (out / "toy.md").read_text()
    assert "Reduced recipe (`--quick`)" in md and "`base` under --quick: steps=2" in md
    with pytest.raises(ConfigError, match="no claim Z"):
        reproduce(study(), out_dir=out, storage=tmp_path / "s2", use_ray=False, claims="Z")
    with pytest.raises(ConfigError, match="--seeds"):
        reproduce(study(), out_dir=out, storage=tmp_path / "s2", use_ray=False, seeds="zero")


def test_modes_pick_their_arms_and_a_quick_look_renders_beside_its_store(toy_pkg, tmp_path, monkeypatch):
    from methodlab.core.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    s = Study(slug="toy", arms=(
        Arm("base", toy.job(steps=4), quick=("steps=2",), full=("steps=8",), seeds="reported"),
        Arm("long", toy.job(steps=3), skip_quick=True, seeds=(0,)),
        Arm("paper", toy.job(steps=5), full_only=True, seeds=(0,))),
        claims=(Claim("A", "base below 1", lambda r, x: r.metric("base", x, "loss"), "<=", 1.0, uses=("base",)),))
    md = reproduce(s, use_ray=False, quick=True, log=lambda m: None)
    assert md == Path("results/reproduce/toy/quick-report/toy.md") and not Path("reports").exists()
    doc = json.loads(md.with_suffix(".json").read_text())
    assert set(doc["data"]["runs"]) == {"base"} and doc["mode"] == "quick" and doc["reduced"]
    md = reproduce(s, use_ray=False, full=True, seeds="0", log=lambda m: None)
    doc = json.loads(md.with_suffix(".json").read_text())
    assert md == Path("reports/toy.md") and set(doc["data"]["runs"]) == {"base", "long", "paper"}
    assert doc["data"]["recipes"]["base"]["steps"] == 8 and "**Unreduced recipe (`--full`)**" in md.read_text()
    assert Path("reports/index.md").exists()  # the scoreboard beside the reports it reads
    with pytest.raises(ConfigError, match="--quick and --full"):
        reproduce(s, use_ray=False, quick=True, full=True)


def test_the_runs_table_states_how_many_runs_overlapped():
    from methodlab.reproduce.report import max_concurrent

    def run(a, b):
        return {"started": f"2026-12-06T14:{a:02d}:00Z", "ended": f"2026-12-06T14:{b:02d}:00Z"}
    # 0-10 and 5-15 overlap; 15-20 starts as the second ends (not counted as overlapping)
    data = {"runs": {"x": {"0": run(0, 10), "1": run(5, 15)}, "y": {"0": run(15, 20)}}}
    assert max_concurrent(data) == 2
    data["runs"]["y"]["1"] = run(6, 8)
    assert max_concurrent(data) == 3
    assert max_concurrent({"runs": {}}) == 0


DIAG = '''
SCALE = 4  # a module constant the task reads


def oracle(seed, inputs, mode):
    return {"loss": _quarter(inputs["base"]["loss"])}


def _quarter(x):
    return x / SCALE


def section(res):
    return "report text, version 1"
'''


def _fresh_toy():
    """A new process's view of the toy package (each `methodlab reproduce` is one): drop the imported modules."""
    import importlib
    import sys

    for m in [m for m in sys.modules if m.startswith("toypkg")]:
        del sys.modules[m]
    importlib.invalidate_caches()
    store.code_hash.cache_clear()


def test_a_task_is_keyed_by_the_code_it_runs_not_the_report_text_beside_it(toy_pkg, tmp_path):
    diag = toy_pkg / "diagnostics.py"
    diag.write_text(DIAG)
    st = Study(slug="toy", arms=(Arm("base", toy.job(steps=2, rate=0.5)),),
               tasks=(Task("oracle", "toypkg.diagnostics:oracle", needs=("base",)),), claims=())
    out, root = tmp_path / "reports", tmp_path / "store"

    def run() -> list[str]:
        _fresh_toy()
        logs: list[str] = []
        reproduce(st, out_dir=out, storage=root, use_ray=False, seeds="0", log=logs.append)
        return [m for m in logs if m.startswith("task oracle")]

    assert len(run()) == 1
    assert run() == []  # nothing changed: reused
    diag.write_text(DIAG.replace("version 1", "version 2, a longer sentence"))  # report text only
    assert run() == []
    diag.write_text(diag.read_text().replace("return x / SCALE", "return x / SCALE / 2"))  # a function it calls
    assert len(run()) == 1
    diag.write_text(diag.read_text().replace("SCALE = 4", "SCALE = 8"))  # a constant it reads
    assert len(run()) == 1
    value = json.loads((out / "toy.json").read_text())["data"]["tasks"]["oracle"]["0"]["loss"]
    base = json.loads((out / "toy.json").read_text())["data"]["runs"]["base"]["0"]["final"]["loss"]
    assert value == pytest.approx(base / 16)


def test_a_result_under_the_first_harness_key_for_the_same_code_is_adopted(toy_pkg, tmp_path):
    from methodlab.reproduce import harness

    (toy_pkg / "diagnostics.py").write_text(DIAG)
    _fresh_toy()
    t = Task("oracle", "toypkg.diagnostics:oracle")
    st = Study(slug="toy", arms=(), tasks=(t,), claims=())
    tasks = tmp_path / "tasks"
    old = tasks / f"{store.legacy_task_key('toy', 'oracle', 0, '1', {})}.json"
    store.write_json_atomic(old, {"task": "oracle", "seed": 0, "value": {"loss": 123.0}, "wall_s": 1.0})
    path = harness.task_path(st, t, 0, {}, "default", tasks)
    assert path != old and json.loads(path.read_text())["value"] == {"loss": 123.0}
    assert old.exists()  # copied: a driver of the older code may still read it
    (toy_pkg / "diagnostics.py").write_text(DIAG.replace("SCALE = 4", "SCALE = 5"))
    _fresh_toy()
    # other code: the first-harness key differs too, so nothing is adopted and the task is pending
    assert not harness.task_path(st, t, 0, {}, "default", tasks).exists()


def test_a_task_key_does_not_depend_on_what_the_process_imported_before(toy_pkg):
    import importlib

    (toy_pkg / "helpers.py").write_text("def quarter(x):\n    return x / 4\n")
    (toy_pkg / "lazy.py").write_text("def oracle(seed, inputs, mode):\n    from toypkg import helpers\n"
                                     "    return {'loss': helpers.quarter(inputs['base']['loss'])}\n")
    _fresh_toy()
    fn = "toypkg.lazy:oracle"
    cold = store.function_hash(fn, "toypkg")  # toypkg.helpers not imported yet (as before the task first runs)
    importlib.import_module("toypkg.helpers")
    assert store.function_hash(fn, "toypkg") == cold
    (toy_pkg / "helpers.py").write_text("def quarter(x):\n    return x / 5\n")
    _fresh_toy()
    assert store.function_hash(fn, "toypkg") != cold  # the helper it reaches is part of its key


def test_a_task_reads_an_arms_recipe_as_an_input_and_is_keyed_by_it(toy_pkg, tmp_path):
    """Task.configs: the arm's resolved config reaches the task as JSON (not through the study, whose report text
    would then be part of the task's code); a recipe change re-keys the task, and an unknown arm is refused."""
    (toy_pkg / "recipe.py").write_text("def steps(seed, inputs, mode):\n"
                                       "    return {'steps': inputs['config']['base']['steps']}\n")
    out, root = tmp_path / "reports", tmp_path / "store"

    def run(steps: int) -> tuple[list[str], dict]:
        _fresh_toy()
        st = Study(slug="toy", arms=(Arm("base", toy.job(steps=steps, rate=0.5)),),
                   tasks=(Task("recipe", "toypkg.recipe:steps", configs=("base",)),), claims=())
        logs: list[str] = []
        reproduce(st, out_dir=out, storage=root, use_ray=False, seeds="0", log=logs.append)
        tasks = json.loads((out / "toy.json").read_text())["data"]["tasks"]
        return [m for m in logs if m.startswith("task recipe")], tasks["recipe"]["0"]

    ran, value = run(2)
    assert len(ran) == 1 and value == {"steps": 2}
    assert run(2)[0] == []  # the same recipe: reused
    ran, value = run(3)
    assert len(ran) == 1 and value == {"steps": 3}
    with pytest.raises(ValueError, match="unknown arm 'nope'"):
        Study(slug="toy", arms=(Arm("base", toy.job(steps=2, rate=0.5)),),
              tasks=(Task("recipe", "toypkg.recipe:steps", configs=("nope",)),), claims=()).check()
