"""Run a study: plan the pending arm x seed runs and tasks, run them (embedded Ray, a cluster, or local
processes), collect every figure into the report's data, judge the claims, render the report.

    plan(study, seeds=..., mode=...)       -> [Pending]        (validates every job before anything runs)
    execute(study, pending, ...)           -> runs them wave by wave (dependencies first), records each
    collect(study, store, ...)             -> the report data: per run final metrics, history, wall, memory
    report.render(study, data, out_dir)    -> reports/<slug>.md + .json (+ the study's plots)
"""

from __future__ import annotations

import copy
import json
import os
import resource
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from methodlab.core.errors import ConfigError
from methodlab.reproduce import store
from methodlab.reproduce.study import Arm, Study, order_arms, seeds_of

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Pending:
    arm: str
    seed: int
    key: str
    job: str | dict
    overrides: tuple[str, ...]
    smoke: bool
    num_cpus: float
    num_gpus: float
    wave: int


def _job_source(arm: Arm) -> dict:
    if isinstance(arm.job, dict):
        return {"data": copy.deepcopy(arm.job)}  # the loader may fill nested dicts in place
    path = Path(arm.job)
    return {"path": str(path if path.is_absolute() else REPO / path)}


def load_arm(arm: Arm, seed: int, mode: str, extra: tuple[str, ...] = ()):
    from methodlab.specs.files import load_job

    over = [*arm.overrides, *(arm.quick if mode == "quick" else arm.full if mode == "full" else ()), f"seed={seed}",
            *extra]
    src = _job_source(arm)
    return load_job(src.get("path"), data=src.get("data"), overrides=over, smoke=arm.smoke), tuple(over)


def selected_seeds(study: Study, own, which: str) -> tuple[int, ...]:
    """The arm's seeds (its own set) cut to the CLI's --seeds: reported | dev | all | a list like 0,1."""
    mine = seeds_of(own, study)
    if which == "all":
        return mine
    if which in ("reported", "dev"):
        want = study.reported_seeds if which == "reported" else study.dev_seeds
        return tuple(s for s in mine if s in want)
    try:
        want = tuple(int(x) for x in which.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--seeds {which!r}: give reported, dev, all or a list such as 0,1", field="--seeds") from None
    return tuple(s for s in mine if s in want)


def arm_seeds(study: Study, own, which: str, mode: str) -> tuple[int, ...]:
    """Seeds an arm (or task) runs: under --quick the study's quick seeds it has (its first seed if none)."""
    if mode == "quick":
        mine = seeds_of(own, study)
        return tuple(s for s in study.quick_seeds if s in mine) or mine[:1]
    return selected_seeds(study, own, which)


MODES = ("quick", "default", "full")


def active(item, mode: str) -> bool:
    """Whether an arm or task runs in this mode (skip_quick: not under --quick; full_only: only under --full)."""
    return not (getattr(item, "skip_quick", False) and mode == "quick") and \
        not (getattr(item, "full_only", False) and mode != "full")


@dataclass(frozen=True)
class Committed:
    """The finished runs and task results of the committed report (<out>/<slug>.json), by key. A key hashes the
    resolved job and the code it runs, so a committed run under the key the plan computes is that run: it is read
    from the report instead of rerun (a fresh clone has no run store, and adding one arm must not cost hours of
    reruns). Empty with --no-reuse, or when there is no report."""

    source: str = ""
    runs: dict = field(default_factory=dict)  # run key -> the report's entry (record, final metrics, history)
    tasks: dict = field(default_factory=dict)  # task key -> value

    @classmethod
    def read(cls, path: Path) -> "Committed":
        path = Path(path)
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())["data"]
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{path}: not a report the harness wrote ({err}); move it away or pass --no-reuse",
                              field="--out-dir") from None
        runs = {r["key"]: r for a in data.get("runs", {}).values() for r in a.values() if r.get("key")}
        keys = data.get("task_keys", {})  # older reports did not record them: their tasks run again
        tasks = {k: data["tasks"][t][s] for t, by_seed in keys.items() for s, k in by_seed.items()
                 if s in data.get("tasks", {}).get(t, {})}
        return cls(str(path), runs, tasks)


NONE = Committed()


def plan(study: Study, runs_root: Path, *, seeds: str = "all", mode: str = "default",
         arms: set[str] | None = None, committed: Committed = NONE) -> list[Pending]:
    """Every arm x seed the selection asks for whose key has no finished record (in the store, or in the
    committed report), in dependency waves. A dependent arm's key includes its dependency's checkpoint path, so
    it is known only once that ran: such arms are planned with key "" and keyed when their wave starts. A
    dependent that must run needs its dependency's checkpoint on disk: a dependency read from the committed report
    then runs again (the same key, so the same run)."""
    study.check()
    out: list[Pending] = []
    from_report: dict[tuple[str, int], Pending] = {}  # runs skipped because the committed report holds them
    for w, wave in enumerate(order_arms(study.arms)):
        for arm in wave:
            if (arms is not None and arm.id not in arms) or not active(arm, mode):
                continue
            for seed in arm_seeds(study, arm.seeds, seeds, mode):
                loaded, over = load_arm(arm, seed, mode)  # validated here, before any run starts
                key = store.run_key(loaded, arm.id)
                if arm.needs:  # keyed by its dependencies' checkpoints: known once they ran
                    try:
                        loaded, over = load_arm(arm, seed, mode,
                                                dependency_overrides(study, arm, seed, mode, runs_root, committed))
                        key = store.run_key(loaded, arm.id)
                    except ConfigError:
                        key = ""
                if key and store.read_record(runs_root / key):
                    continue
                sc = loaded.job.scaling
                p = Pending(arm.id, seed, key, arm.job, over, arm.smoke, float(sc.cpus_per_worker),
                            float(sc.gpus_per_worker or (1 if sc.use_gpu else 0)), w)
                if key in committed.runs:
                    from_report[(arm.id, seed)] = p
                    continue
                for dep_id, _ in arm.needs:
                    dep = from_report.pop((dep_id, seed), None)
                    if dep is not None:
                        out.append(dep)
                out.append(p)
    return sorted(out, key=lambda p: p.wave)


def dependency_overrides(study: Study, arm: Arm, seed: int, mode: str, runs_root: Path,
                         committed: Committed = NONE) -> tuple[str, ...]:
    """field=<newest checkpoint of the needed arm's run for this seed>; for a dependency the committed report
    holds but the store does not, the path its last checkpoint had (which is what the dependent's key holds)."""
    from methodlab.runners.lifecycle import CHECKPOINTS_DIR, checkpoint_dir_name

    extra = []
    for dep_id, field_name in arm.needs:
        dep = study.arm(dep_id)
        loaded, _ = load_arm(dep, seed, mode, dependency_overrides(study, dep, seed, mode, runs_root, committed))
        dep_key = store.run_key(loaded, dep.id)
        ck = _last_checkpoint(runs_root / dep_key)
        held = committed.runs.get(dep_key) or {}
        if ck is None and held:  # the path its last checkpoint had, in the store it ran in (older reports: by step)
            step = held.get("final", {}).get("step")
            ck = held.get("checkpoint") or (None if step is None else
                                            runs_root / dep_key / CHECKPOINTS_DIR / checkpoint_dir_name(step))
        if ck is None:
            raise ConfigError(f"arm {arm.id} needs arm {dep_id}'s checkpoint for seed {seed}, which has not run",
                              field="arms")
        extra.append(f"{field_name}={ck}")
    return tuple(extra)


def run_one(payload: dict) -> dict:
    """Body of one run, in a Ray task or a local process: the platform's local runner in a fresh process (its run
    folder is the store's <key>/), then record.json. Re-running a killed key resumes from its checkpoint."""
    from methodlab.core.registry import _table
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    slug, entry = payload["registry"]
    _table().setdefault(slug, entry)  # a method registered by its study only (tests) is known here too
    src = payload["source"]
    loaded = load_job(src.get("path"), data=src.get("data"), overrides=list(payload["overrides"]),
                      smoke=payload["smoke"])
    t0, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = run_local(loaded, payload["key"], payload["runs_root"], quiet=True)  # a RunResult (runners/lifecycle.py)
    record = {"finished": True, "arm": payload["arm"], "seed": payload["seed"], "key": payload["key"],
              "started": started, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "wall_s": round(time.time() - t0, 2), "host": socket.gethostname(), "pid": os.getpid(),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "final": out["metrics"]}
    node = os.environ.get("RAY_NODE_ID")
    if node is None:
        try:
            import ray

            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        except Exception:  # noqa: BLE001 - no Ray in this process
            node = None
    record["node"] = node
    store.write_json_atomic(Path(payload["runs_root"]) / payload["key"] / store.RECORD, record)
    return record


def execute(study: Study, pending: list[Pending], runs_root: Path, *, mode: str, use_ray: bool = True,
            address: str | None = None, workers: int = 2, budget_s: float | None = None,
            log: Callable[[str], None] = print) -> list[dict]:
    """Run `pending` wave by wave. On Ray: one task per run with its job's CPUs / GPUs (max_calls=1: a fresh
    process per run, so peak memory is the run's own). Without Ray: `workers` local processes, one per run."""
    from methodlab.core.registry import _table

    registry = (study.slug, _table()[study.slug])
    t_end = time.time() + budget_s if budget_s else None
    done: list[dict] = []
    # dependency waves; inside each, development seeds finish before any reported seed starts (the calibration
    # rule: a recipe is chosen on seeds 10-12, then the reported seeds run once)
    phases = sorted({(p.wave, p.seed not in study.dev_seeds) for p in pending})
    for w, reported in phases:
        wave = []
        for p in (x for x in pending if x.wave == w and (x.seed not in study.dev_seeds) == reported):
            arm = study.arm(p.arm)
            over = p.overrides
            key = p.key
            if arm.needs:
                extra = dependency_overrides(study, arm, p.seed, mode, runs_root)
                loaded, over = load_arm(arm, p.seed, mode, extra)
                key = store.run_key(loaded, arm.id)
                if store.read_record(runs_root / key):
                    continue
            wave.append((p, {"registry": registry, "source": _job_source(arm), "overrides": list(over),
                             "smoke": p.smoke, "key": key, "arm": p.arm, "seed": p.seed,
                             "runs_root": str(runs_root)}))
        if t_end is not None and time.time() >= t_end:
            log(f"budget spent: {len(wave)} runs of this wave and those after it left pending (NOT RUN)")
            break
        done += (_on_ray(wave, address, log, t_end) if use_ray else _local(wave, workers, log, t_end))
    return done


def _on_ray(wave, address, log, t_end) -> list[dict]:
    import ray

    from methodlab.runners.ray_session import init_ray

    init_ray(address, quiet=True)
    remote = ray.remote(max_calls=1)(run_one)  # a fresh worker process per run: its peak memory is its own
    refs = {}
    for p, payload in wave:
        task = remote.options(num_cpus=p.num_cpus, num_gpus=p.num_gpus, name=f"reproduce:{p.arm}:s{p.seed}")
        refs[task.remote(payload)] = p
    out = []
    while refs:
        timeout = None if t_end is None else max(1.0, t_end - time.time())
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if not ready:
            for r in refs:
                ray.cancel(r, force=True)
            log(f"budget spent: {len(refs)} running runs stopped (they resume from their checkpoints next time)")
            break
        p = refs.pop(ready[0])
        try:
            rec = ray.get(ready[0])
        except Exception as err:  # noqa: BLE001 - one failed run is reported; the others go on
            log(f"FAILED {p.arm} seed {p.seed}: {str(err).strip().splitlines()[-1][:300]}")
            continue
        log(f"done {p.arm} seed {p.seed} in {rec['wall_s']:.0f} s")
        out.append(rec)
    return out


def _local(wave, workers, log, t_end) -> list[dict]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    out = []
    # one fresh process per run (its peak memory is its own); spawn: no Ray or torch state inherited
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=mp.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        futs = {pool.submit(run_one, payload): p for p, payload in wave}
        for f in as_completed(futs):
            p = futs[f]
            try:
                rec = f.result()
            except Exception as err:  # noqa: BLE001
                log(f"FAILED {p.arm} seed {p.seed}: {str(err).strip().splitlines()[-1][:300]}")
                continue
            log(f"done {p.arm} seed {p.seed} in {rec['wall_s']:.0f} s")
            out.append(rec)
    return out


def task_path(study: Study, t, seed: int, inputs: dict, mode: str, tasks_root: Path) -> Path:
    """A task's result file under its key (store.task_key: the task function's code closure, not the report text
    around it). A result stored under the first harness's key for the same code was computed by exactly this
    code: it is copied to the new key (copied, not moved: a driver of the older code may still read it)."""
    path = tasks_root / f"{store.task_key(study.slug, t.id, seed, t.version, inputs, mode, t.fn)}.json"
    if not path.exists():
        old = tasks_root / f"{store.legacy_task_key(study.slug, t.id, seed, t.version, inputs, mode)}.json"
        if old.exists():
            store.write_json_atomic(path, json.loads(old.read_text()))
    return path


def run_tasks(study: Study, tasks_root: Path, runs_root: Path, *, seeds: str, mode: str,
              log: Callable[[str], None] = print, committed: Committed = NONE) -> None:
    """Tasks in this process, cached as JSON under `task_path` (or read from the committed report by key)."""
    from methodlab.core.device import set_threads

    for t in study.tasks:
        if not active(t, mode):
            continue
        for seed in arm_seeds(study, t.seeds, seeds, mode):
            inputs = task_inputs(study, t, seed, mode, runs_root, committed)
            if inputs is None:
                continue  # its arms have not run: the task (and the claims on it) stay NOT RUN
            path = task_path(study, t, seed, inputs, mode, tasks_root)
            if path.exists() or path.stem in committed.tasks:
                continue
            t0 = time.time()
            # one thread, as each run gets from its job's CPUs: a task shares the machine with the runs
            threads = set_threads(1)
            try:
                value = t.call(seed, inputs, mode)
            finally:
                set_threads(threads)
            store.write_json_atomic(path, {"task": t.id, "seed": seed, "value": value,
                                           "wall_s": round(time.time() - t0, 3)})
            log(f"task {t.id} seed {seed} in {time.time() - t0:.1f} s")


def _run_dir(study: Study, arm_id: str, seed: int, mode: str, runs_root: Path,
             committed: Committed = NONE) -> Path | None:
    arm = study.arm(arm_id)
    try:
        extra = dependency_overrides(study, arm, seed, mode, runs_root, committed) if arm.needs else ()
    except ConfigError:
        return None
    loaded, _ = load_arm(arm, seed, mode, extra)
    return runs_root / store.run_key(loaded, arm.id)


def task_inputs(study: Study, t, seed: int, mode: str, runs_root: Path, committed: Committed = NONE) -> dict | None:
    """A task's inputs (Task): the final metrics of the arms it needs (None while one has not run) and the resolved
    configs of the arms it reads the recipe of."""
    inputs = {a: _final_of(study, a, seed, mode, runs_root, committed) for a in t.needs}
    if any(v is None for v in inputs.values()):
        return None
    if t.configs:
        inputs["config"] = {a: load_arm(study.arm(a), seed, mode)[0].config.model_dump(mode="json")
                            for a in t.configs}
    return inputs


def _final_of(study: Study, arm_id: str, seed: int, mode: str, runs_root: Path,
              committed: Committed = NONE) -> dict | None:
    d = _run_dir(study, arm_id, seed, mode, runs_root, committed)
    rec = store.read_record(d) if d is not None else None
    rec = rec or (committed.runs.get(d.name) if d is not None else None)
    return rec["final"] if rec else None


def _last_checkpoint(run_dir: Path) -> str | None:
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.runners.lifecycle import CHECKPOINTS_DIR

    ck = latest_checkpoint(run_dir / CHECKPOINTS_DIR)
    return None if ck is None else str(ck)


def _history(study: Study, run_dir: Path) -> list[dict]:
    if study.history is None:
        return store.read_metrics(run_dir)
    if not study.history:
        return []
    keep = {"step", *study.history}
    rows = [{k: v for k, v in r.items() if k in keep} for r in store.read_metrics(run_dir)]
    return [r for r in rows if set(r) - {"step"}]


def collect(study: Study, runs_root: Path, tasks_root: Path, *, mode: str,
            committed: Committed = NONE) -> dict[str, Any]:
    """Every figure the report reads, from the store (a run it lacks: from the committed report under the same
    key, marked `from_report`): per arm x seed the record (wall, memory, when, where), the final metrics and the
    metrics history; per task x seed its value and key; the recipe actually run (config of seed runs). Runs not
    finished are absent (their claims read NOT RUN)."""
    runs: dict[str, dict[str, Any]] = {}
    recipes: dict[str, dict] = {}
    for arm in study.arms:
        if not active(arm, mode):
            continue
        for seed in arm_seeds(study, arm.seeds, "all", mode):
            d = _run_dir(study, arm.id, seed, mode, runs_root, committed)
            rec = store.read_record(d) if d is not None else None
            if rec:
                entry = {"key": rec["key"], "wall_s": rec["wall_s"], "peak_rss_mb": rec["peak_rss_mb"],
                         "started": rec["started"], "ended": rec["ended"], "node": rec.get("node"),
                         "final": rec["final"], "history": _history(study, d), "checkpoint": _last_checkpoint(d)}
            elif d is not None and d.name in committed.runs:
                entry = {**committed.runs[d.name], "from_report": True}
            else:
                continue
            runs.setdefault(arm.id, {})[str(seed)] = entry
            if arm.id not in recipes:
                loaded, _ = load_arm(arm, seed, mode)
                recipes[arm.id] = loaded.config.model_dump(mode="json")
    # the recipe of an arm with no finished run yet (an interim report's setting text reads it; never shown as run)
    planned = {}
    for arm in study.arms:
        seeds = arm_seeds(study, arm.seeds, "all", mode) if active(arm, mode) and arm.id not in recipes else ()
        if seeds:
            try:
                planned[arm.id] = load_arm(arm, seeds[0], mode)[0].config.model_dump(mode="json")
            except ConfigError:  # a dependent arm whose config needs its dependency's checkpoint path first
                pass
    tasks: dict[str, dict[str, Any]] = {}
    task_keys: dict[str, dict[str, str]] = {}
    for t in study.tasks:  # only the current keys: a stale result (older code, --quick inputs) is never read
        if not active(t, mode):
            continue
        for seed in arm_seeds(study, t.seeds, "all", mode):
            inputs = task_inputs(study, t, seed, mode, runs_root, committed)
            if inputs is None:
                continue
            path = task_path(study, t, seed, inputs, mode, tasks_root)
            if path.exists():
                tasks.setdefault(t.id, {})[str(seed)] = json.loads(path.read_text())["value"]
            elif path.stem in committed.tasks:
                tasks.setdefault(t.id, {})[str(seed)] = committed.tasks[path.stem]
            else:
                continue
            task_keys.setdefault(t.id, {})[str(seed)] = path.stem
    return {"slug": study.slug, "quick": mode == "quick", "mode": mode, "runs": runs, "tasks": tasks,
            "task_keys": task_keys, "recipes": recipes, "planned": planned}
