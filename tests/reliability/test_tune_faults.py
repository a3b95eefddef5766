"""Sweep faults: a trial SIGKILLed once is retried from its checkpoint and the sweep completes; a
sweep whose driver is SIGKILLed finishes with `methodlab tune resume DIR` without repeating finished
trials. (tests/ray/test_train_tune.py covers resuming a sweep that had already finished.)"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest

from tests.reliability.helpers import (cli_env, fault_records, grokking_sweep_space, methodlab, ray_tmpdir, spawn,
                                       stop_ray, trial_results, wait_for)

pytestmark = [pytest.mark.ray, pytest.mark.slow]
STEPS_KILLED = 1000





def test_trial_killed_once_is_retried_from_its_checkpoint(tmp_path, record):
    tmp, marker = ray_tmpdir(), tmp_path / "fault.json"
    env = cli_env(tmp, METHODLAB_FAULT_KILL_AT_STEP=100, METHODLAB_FAULT_ONCE_FILE=marker)
    try:
        r = methodlab("tune", str(grokking_sweep_space(tmp_path, 2)), "--name", "sw", "--storage", str(tmp_path / "store"), "-q",
                      env=env)
    finally:
        stop_ray(tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = tmp_path / "store" / "sw"
    fired = fault_records(marker)
    table = pd.read_parquet(sweep / "summary.parquet")
    steps = {name: [int(x["step"]) for x in rows] for name, rows in trial_results(sweep).items()}
    killed = Path(fired[0]["cwd"]).name if fired else None
    record.update(injected="SIGKILL of one Tune trial's worker process at its step-100 report (max_failures=1)",
                  times=len(fired), survived=f"{len(table)} of 2 trials finished, {int((table['status'] == 'ERROR').sum())} "
                  f"errored; the killed trial's reported steps {steps.get(killed)}",
                  lost="the killed trial's step-100 report, recomputed from its step-50 checkpoint",
                  figures={"steps_per_trial": steps})
    assert len(fired) == 1 and killed in steps
    assert len(table) == 2 and (table["status"] != "ERROR").all() and (table["final/step"] == 200).all()
    # retried from its step-50 checkpoint: not from 0, no step reported twice
    assert steps[killed] == [50, 100, 150, 200]


def test_killed_sweep_driver_finishes_with_tune_resume(tmp_path, record):
    tmp = ray_tmpdir()
    sweep = tmp_path / "store" / "sk"
    # 1,000 steps a trial: with actor reuse three 200-step trials finished in ~6 s, before a saved sweep state
    # showed a finished trial, so the driver was never killed mid-sweep
    proc = spawn("tune", str(grokking_sweep_space(tmp_path, 3, STEPS_KILLED)), "--name", "sk", "--storage", str(tmp_path / "store"), "-q",
                 env=cli_env(tmp), log=tmp_path / "first.log")

    def one_finished_and_saved():
        """Trials TERMINATED in Tune's saved sweep state, with their rows there. (The driver writes trial files in a
        staging folder and syncs them to the storage with each state snapshot and at the end, so comparing file
        times missed the window when three trials took ~15 s: the final sync touches every result.json last.)"""
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended (rc {proc.returncode}) before a finished trial was seen in its saved state")
        states = sorted(sweep.glob("experiment_state-*.json"), key=lambda p: p.stat().st_mtime)
        try:
            data = json.loads(states[-1].read_text()) if states else {}
        except (OSError, ValueError):  # being written
            return None
        ids = set()
        for item in data.get("trial_data", []):
            state = json.loads(item[0]) if isinstance(item[0], str) else item[0]
            if state.get("status") == "TERMINATED":
                ids.add(state.get("trial_id"))
        done = [n for n, rows in trial_results(sweep).items()
                if n.split("_")[2] in ids and rows and rows[-1].get("step") == STEPS_KILLED]
        return done or None

    try:
        finished = wait_for(one_finished_and_saved, 600, what="a finished trial in the saved sweep state")
        before = {n: len(rows) for n, rows in trial_results(sweep).items()}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_ray(tmp)
    tmp2 = ray_tmpdir()
    try:
        r = methodlab("tune", "resume", str(sweep), "-q", env=cli_env(tmp2))
    finally:
        stop_ray(tmp2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = trial_results(sweep)
    table = pd.read_parquet(sweep / "summary.parquet")
    repeated = [n for n in finished if len(after[n]) != before[n]]
    record.update(injected="SIGKILL of the `methodlab tune` driver after >= 1 trial finished (3 trials, 1 at a time)",
                  times=1, survived=f"`methodlab tune resume` finished the sweep: {len(table)} trials, "
                  f"{int((table['status'] == 'ERROR').sum())} errored; {len(finished)} finished trial(s) not repeated",
                  lost=f"repeated finished trials: {repeated or 'none'}",
                  figures={"finished_before_kill": len(finished), "rows_before": before,
                           "rows_after": {n: len(v) for n, v in after.items()}})
    assert not repeated
    assert len(table) == 3 and (table["status"] != "ERROR").all() and (table["final/step"] == STEPS_KILLED).all()
    assert all([int(x["step"]) for x in rows][-1] == STEPS_KILLED for rows in after.values())
