"""Side computations of the unirl reproduction, run as harness Tasks.

`acceptance_sweep`: the spec's acceptance sweep, `methodlab tune search_spaces/unirl/o2o_acceptance.yaml` (8 trials of
5k offline + 5k online Pendulum steps, Optuna seed 0, ASHA on the number of evaluations, 2 at a time), run through the
platform's tune entry point in a child process (its own Ray session), in a scratch folder that is removed afterwards;
the task keeps the sweep's summary table (one row per trial). Under --quick a small budget: 4 trials, one at a time,
500 + 500 steps with an evaluation every 100 (still 10 evaluations, so ASHA's rungs at 3 and 6 stay where they are)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SPACE = "search_spaces/unirl/o2o_acceptance.yaml"
METRIC = "eval/normalized_score_last3"
PARAMS = ("alg", "alpha", "ref_update_every", "normalize_weights", "lr")
QUICK = ("num_samples=4", "max_concurrent_trials=1", "config.max_steps=500", "config.online_steps=500",
         "config.eval_every=100", "config.checkpoint_every=500", "config.eval_episodes=3", "config.hidden=[64,64]")


def _plain(v):
    """A summary cell as a JSON value (numpy scalars unwrapped, NaN -> None)."""
    if hasattr(v, "item"):
        v = v.item()
    return None if isinstance(v, float) and math.isnan(v) else v


def acceptance_sweep(seed: int, inputs: dict, mode: str, *, repo: Path, timeout_s: float = 3600) -> dict:
    """Run the sweep and return {trials: [...], overrides, wall_s}; the sweep's own seeds are in its file."""
    import time

    import pandas as pd

    over = list(QUICK) if mode == "quick" else []
    scratch = Path(tempfile.mkdtemp(prefix="unirl-sweep-"))
    t0 = time.time()
    try:
        cmd = [sys.executable, "-m", "methodlab.cli.main", "tune", "run", str(repo / SPACE), *over,
               "--storage", str(scratch), "--name", "sweep", "-q"]
        done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout_s)
        summary = scratch / "sweep" / "summary.parquet"
        if done.returncode != 0 or not summary.exists():  # recorded (claims S* fail and the report says why)
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:]
            return {"space": SPACE, "overrides": over, "trials": [], "wall_s": round(time.time() - t0, 1),
                    "error": f"exit {done.returncode}: " + " | ".join(tail)[-800:]}
        table = pd.read_parquet(summary)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    trials = [{"trial": str(row["trial_id"]), "status": str(row["status"]), "evaluations": int(row["iterations"] or 0),
               "stopped_early": bool(row.get("stopped_early")), "final": _plain(row.get(f"final/{METRIC}")),
               **{p: _plain(row.get(f"config/{p}")) for p in PARAMS}} for _, row in table.iterrows()]
    return {"space": SPACE, "overrides": over, "trials": trials, "wall_s": round(time.time() - t0, 1)}


def sweep_counts(value: dict | None) -> dict | None:
    """Trials completed, errored, stopped by ASHA before their 10th evaluation; the best trial's final metric."""
    if not value:
        return None
    t = value["trials"]
    ok = [x for x in t if x["status"] != "ERROR"]
    finals = [x["final"] for x in ok if x["final"] is not None]
    return {"completed": len(ok), "errored": len(t) - len(ok), "early": sum(1 for x in ok if x["evaluations"] < 10),
            "best": max(finals) if finals else -math.inf}
