"""Ray Tune overhead of the platform: trial launch latency, and ASHA vs FIFO compute on the grokking
regularizer space, in one invocation on one embedded local Ray.

1. Launch to first report: 16 trials of a trivial function trainable (1 CPU each, as the platform's
   single-worker trials; reports once and returns; 2 at a time). Launch = the moment the trial's CPU slot
   was free (sweep start, or the end of the trial before it in that slot); report = arrival of its first
   result at the driver (Tune callbacks). Median / min / max over the trials.
2. ASHA vs FIFO: the same search space (search_spaces/grokking_flatness/regularizers.yaml: reg x lam x lr, its
   four seeded starting points) swept twice through runners.tune.build_tuner (the `methodlab tune` path)
   with seeded random search, so both sweeps try the same configurations, FIFO first then ASHA (or the
   reverse with --reverse). To fit the budget the task is shrunk: p 31, d_model 64, train_frac 0.6,
   `--steps` steps per trial, a measurement every 100 steps, stop 100 steps after val acc >= 0.95;
   ASHA grace period 200 steps, reduction factor 4. Trial-steps = sum over trials of the last step reached.
   Why grace 200: on the shrunk task val accuracy is 0.01 for every configuration at step 100 (a rung there
   would stop trials at random), 0.47 at 200 and on its plateau (0.56) from 300 (measured, reg none, seed 0).
Goals: median launch-to-report < 2 s; ASHA reaches FIFO's best val accuracy (within 0.01) with <= 0.5x
FIFO's trial-steps.
    .venv/bin/python benchmarks/tune_overhead.py [--quick] [--samples 12] [--steps 1200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPACE = HERE.parent / "search_spaces/grokking_flatness/regularizers.yaml"
N_LAUNCH = 16
CONCURRENT = 2  # 1-CPU trials on the 2-CPU local Ray
GRACE, REDUCTION = 200, 4  # ASHA rungs at 200, 800, 3200 steps (see the docstring)


def trivial(config):
    from ray import tune

    tune.report({"x": 1.0})


def launch_latency(reuse: bool) -> tuple[list[float], float]:
    """Seconds from a trial's launch to its first result reaching the driver. Launch = the moment its CPU slot
    was free: the sweep's first controller step for the first CONCURRENT trials, else the completion of the
    trial whose slot it took (on_trial_start fires only once the actor is up, which would hide its start-up)."""
    from ray import tune

    class Launch(tune.Callback):
        def __init__(self):
            self.begin, self.start, self.first, self.done = None, {}, {}, []

        def on_step_begin(self, iteration, trials, **info):
            self.begin = self.begin or time.time()

        def on_trial_start(self, iteration, trials, trial, **info):
            self.start.setdefault(trial.trial_id, time.time())

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.first.setdefault(trial.trial_id, time.time())

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.done.append(time.time())

    cb = Launch()
    storage = tempfile.mkdtemp(prefix="tune-launch-")
    t0 = time.perf_counter()
    tuner = tune.Tuner(tune.with_resources(trivial, {"cpu": 1}), param_space={"i": tune.grid_search(list(range(N_LAUNCH)))},
                       tune_config=tune.TuneConfig(max_concurrent_trials=CONCURRENT, reuse_actors=reuse),
                       run_config=tune.RunConfig(name="launch", storage_path=storage, verbose=0, callbacks=[cb]))
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    assert not grid.errors, grid.errors
    shutil.rmtree(storage, ignore_errors=True)
    order = sorted(cb.start, key=cb.start.get)
    done = sorted(cb.done)
    lat = []
    for k, tid in enumerate(order):
        launch = cb.begin if k < CONCURRENT else done[k - CONCURRENT]
        lat.append(cb.first[tid] - launch)
    return lat, wall


def sweep(scheduler: str, samples: int, steps: int, storage: str) -> dict:
    from methodlab.runners.tune import build_tuner
    from methodlab.specs.files import load_search_space

    grace = GRACE
    space = load_search_space(SPACE, [
        f"num_samples={samples}", "search_alg.type=random", "search_alg.seed=0", f"scheduler.type={scheduler}",
        f"scheduler.grace_period={grace}", f"scheduler.max_t={steps}", f"scheduler.reduction_factor={REDUCTION}",
        f"config.max_steps={steps}", "config.p=31", "config.d_model=64", "config.train_frac=0.6",
        "config.log_every=100", "config.checkpoint_every=100000", "config.cancel_step=" + str(steps // 2)])
    name = f"sweep-{scheduler}"
    (Path(storage) / name).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    grid = build_tuner(space, name, storage, quiet=True).fit()
    wall = time.perf_counter() - t0
    trials = []
    for res in grid:
        df = res.metrics_dataframe
        if df is None or "step" not in df:
            continue
        trials.append({"config": {k: res.config.get(k) for k in ("reg", "lam", "lr")},
                       "last_step": int(df["step"].max()), "best": float(df["val/accuracy"].max())})
    return {"wall": wall, "trials": trials, "errors": len(grid.errors), "trial_steps": sum(t["last_step"] for t in trials),
            "best": max(t["best"] for t in trials), "grace": grace}


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=None, help="Trials per sweep (default 12, --quick 8).")
    ap.add_argument("--steps", type=int, default=None, help="Steps per trial (max_t; default 1600, --quick 800).")
    ap.add_argument("--reverse", action="store_true", help="Run the ASHA sweep first.")
    ap.add_argument("--quick", action="store_true", help="The `make bench` budget.")
    args = ap.parse_args()
    samples = args.samples or (8 if args.quick else 12)
    steps = args.steps or (800 if args.quick else 1600)
    sys.path.insert(0, str(HERE))
    from run_all import load_average, result, spread, write_result

    from methodlab.runners.ray_session import init_ray

    load0, t_all = load_average(), time.time()
    init_ray(None, num_cpus=2, quiet=True)
    launches = {}
    for reuse in (False, True):
        launches[reuse] = launch_latency(reuse)
        print(f"  launch->first report (reuse_actors={reuse}): median {statistics.median(launches[reuse][0]):.2f} s "
              f"over {len(launches[reuse][0])} trials", flush=True)
    lat, launch_wall = launches[False]
    storage = tempfile.mkdtemp(prefix="tune-asha-")
    order = ["asha", "fifo"] if args.reverse else ["fifo", "asha"]
    sw = {}
    for s in order:
        sw[s] = sweep(s, samples, steps, storage)
        print(f"  {s}: best val acc {sw[s]['best']:.3f}, trial-steps {sw[s]['trial_steps']}, wall {sw[s]['wall']:.0f} s",
              flush=True)
    shutil.rmtree(storage, ignore_errors=True)
    sl = spread(lat)
    rows = []
    for reuse, (ls, wall) in launches.items():
        sp = spread(ls)
        rows.append({"measure": f"launch -> first report, trivial trainable ({len(ls)} trials), s; reuse_actors={reuse}"
                                + (" (before: Tune's default)" if not reuse else " (platform default: runners/tune.py sets it)"),
                     "min": sp["min"], "median": sp["median"], "max": sp["max"], "sweep wall s": wall})
    for s in ("fifo", "asha"):
        rows.append({"measure": f"{s.upper()} sweep ({samples} trials x <= {steps} steps)", "best val acc": sw[s]["best"],
                     "trial-steps": sw[s]["trial_steps"], "sweep wall s": sw[s]["wall"], "errors": sw[s]["errors"]})
    ratio = sw["asha"]["trial_steps"] / sw["fifo"]["trial_steps"]
    same = sw["asha"]["best"] >= sw["fifo"]["best"] - 0.01
    reuse_med = statistics.median(launches[True][0])
    goals = [{"name": "median launch -> first report, s (platform default: reuse_actors=True for single-worker trials)",
              "value": reuse_med, "goal": "< 2", "met": reuse_med < 2},
             {"name": "before: a new actor per trial (Tune's default reuse_actors=False)", "value": sl["median"],
              "goal": "< 2", "met": sl["median"] < 2},
             {"name": "ASHA / FIFO trial-steps (ASHA best within 0.01 of FIFO's)", "value": ratio,
              "goal": "<= 0.5 and same best", "met": ratio <= 0.5 and same},
             {"name": "ASHA best - FIFO best val accuracy", "value": sw["asha"]["best"] - sw["fifo"]["best"],
              "goal": ">= -0.01", "met": same}]
    per_trial = {s: [(t["config"]["reg"], round(t["best"], 3), t["last_step"]) for t in sw[s]["trials"]] for s in sw}
    notes = (f"Launch latency: without actor reuse every trial starts a fresh Ray worker process that imports Ray "
             f"and Tune again; Tune's TuneConfig(reuse_actors=True) keeps the 1-CPU trial actors alive between trials. "
             f"Fix applied: build_tuner passes reuse_actors=True for single-worker function trials (fit() re-seeds "
             f"and rebuilds its model per trial; torch.set_num_threads is set per trial); the sweeps below run "
             f"through build_tuner with it. "
             f"Sweeps: seeded random search (same configurations in both), 2 concurrent 1-CPU trials, ASHA grace "
             f"{sw['asha']['grace']} steps, max_t {steps}, reduction {REDUCTION}; order {' then '.join(order)}. Per trial "
             f"(reg, best val acc, last step): {json.dumps(per_trial)}. Total wall {time.time() - t_all:.0f} s.")
    out = result("tune_overhead", "Platform: Ray Tune launch latency and ASHA vs FIFO compute (issue 11.3)", rows,
                 goals, notes, threads=1, load_at_start=load0)
    write_result(out)
    return out


if __name__ == "__main__":
    main()
