"""Training faults, injected for real: a Ray Train worker SIGKILLed at a step (max_failures=1), the
`methodlab run` driver SIGKILLed and re-run under the same name, and a process killed inside a
checkpoint write. Each run is a `methodlab` subprocess with its own embedded Ray, so the fault
variables reach the workers through the environment they inherit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from methodlab.core.checkpoint import latest_checkpoint, load_checkpoint
from tests.reliability.helpers import (cli_env, fault_records, jsonl, methodlab, ray_procs, ray_tmpdir, spawn, stop_ray,
                                       wait_for)

JOB = "jobs/grokking_flatness/cpu.yaml"
STEPS = ["log_every=50", "checkpoint_every=50", "scaling.cpus_per_worker=1"]
# Long enough that the driver is killed mid-run: with Train polling its workers every 0.2 s a 300-step smoke
# run finished before the test saw its step-100 checkpoint and killed the driver.
DRIVER_STEPS = 2000


def _ckpt_history(run_dir: Path) -> list[int]:
    ck = load_checkpoint(latest_checkpoint(run_dir))
    return [int(h["step"]) for h in ck.extras["history"]]


@pytest.mark.ray
@pytest.mark.slow
def test_train_worker_killed_resumes_from_last_checkpoint(tmp_path, record):
    tmp, marker = ray_tmpdir(), tmp_path / "fault.json"
    env = cli_env(tmp, METHODLAB_FAULT_KILL_AT_STEP=100, METHODLAB_FAULT_ONCE_FILE=marker)
    try:
        r = methodlab("run", JOB, "--smoke", "max_steps=200", *STEPS, "run.max_failures=1", "--name", "wk",
                      "--storage", str(tmp_path), "-q", env=env)
    finally:
        left = stop_ray(tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    fired = fault_records(marker)
    steps = [int(x["step"]) for x in jsonl(tmp_path / "wk" / "metrics.jsonl")]
    record.update(injected="SIGKILL of the rank-0 Ray Train worker at its step-100 report (max_failures=1)",
                  times=len(fired), survived=f"run finished at step {steps[-1] if steps else None}; "
                  f"reported steps {steps}", lost="the killed step-100 report, recomputed from the step-50 checkpoint",
                  figures={"reported_steps": steps, "leftover_ray_processes": left})
    assert len(fired) == 1 and fired[0]["step"] == 100 and fired[0]["pid"] != os.getpid()
    # restarted from the step-50 checkpoint: no step repeated or skipped, finished at max_steps
    assert steps == [50, 100, 150, 200]
    assert _ckpt_history(tmp_path / "wk") == [50, 100, 150, 200]


@pytest.mark.ray
@pytest.mark.slow
def test_train_driver_killed_then_rerun_same_name_resumes(tmp_path, record):
    tmp = ray_tmpdir()
    env = cli_env(tmp)
    args = ["run", JOB, "--smoke", f"max_steps={DRIVER_STEPS}", *STEPS, "--name", "drv", "--storage", str(tmp_path), "-q"]
    metrics = tmp_path / "drv" / "metrics.jsonl"
    proc = spawn(*args, env=env, log=tmp_path / "first.log")
    try:
        wait_for(lambda: any(r.get("_checkpoint") and r["step"] >= 100 for r in jsonl(metrics)), 400,
                 what="a checkpointed report at step >= 100")
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies without any cleanup
        proc.wait(30)
        # Ray's head processes share the driver's fate (PR_SET_PDEATHSIG): count what outlived it
        try:
            wait_for(lambda: not ray_procs(tmp), 60, what="the killed driver's Ray processes to exit")
            orphans = 0
        except TimeoutError:
            orphans = len(ray_procs(tmp))
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_ray(tmp)
    before = [int(r["step"]) for r in jsonl(metrics)]
    resume_step = int(json.loads((latest_checkpoint(tmp_path / "drv") / "state.json").read_text())["step"])
    tmp2 = ray_tmpdir()
    try:
        r = methodlab(*args, env=cli_env(tmp2))
    finally:
        stop_ray(tmp2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = [int(r["step"]) for r in jsonl(metrics)][len(before):]
    missing = sorted(set(range(50, DRIVER_STEPS + 1, 50)) - set(before) - set(after))
    restored = after[0] - 50 if after else None
    record.update(injected="SIGKILL of the `methodlab run` driver (Ray Train, 1 worker) after a checkpointed report",
                  times=1, survived=f"re-run of the same name resumed from step {restored} and finished at "
                  f"{after[-1] if after else None}; the final checkpoint's history is continuous",
                  lost=f"recomputed: steps {[s for s in after if s <= resume_step] or 'none'} (Ray Train restores from its "
                       f"own snapshot, step {restored}, though the orphaned worker had persisted step {resume_step} before "
                       f"it died); metrics.jsonl rows missing: {missing or 'none'}",
                  figures={"steps_before_kill": before, "steps_after_rerun": after, "restored_from": restored,
                           "newest_checkpoint_on_disk": resume_step, "ray_processes_outliving_driver": orphans,
                           "metrics_rows_missing": missing})
    assert orphans == 0, "Ray processes outlived the killed driver"
    # resumed from a checkpoint (not step 0) and skipped nothing past the newest checkpoint on disk
    assert after and 100 <= after[0] <= resume_step + 50 and after[-1] == DRIVER_STEPS, (before, after)
    assert _ckpt_history(tmp_path / "drv") == list(range(50, DRIVER_STEPS + 1, 50))


def test_kill_inside_checkpoint_write_keeps_previous_checkpoint(tmp_path, record):
    """`methodlab run --local`: the 2nd checkpoint write dies between temp folder and rename."""
    marker = tmp_path / "fault.json"
    env = cli_env(None, METHODLAB_FAULT_KILL_IN_CHECKPOINT=2, METHODLAB_FAULT_ONCE_FILE=marker)
    args = ["run", JOB, "--local", "--smoke", "max_steps=150", "log_every=50", "checkpoint_every=50",
            "--name", "ck", "--storage", str(tmp_path), "-q"]
    r = methodlab(*args, env=env, timeout=300)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    fired = fault_records(marker)
    assert len(fired) == 1 and fired[0]["kind"] == "kill_in_checkpoint" and fired[0]["save"] == 2
    survivor = latest_checkpoint(tmp_path / "ck" / "checkpoints")
    ck = load_checkpoint(survivor, load_torch_state=True)  # the previous checkpoint loads completely
    assert ck.state["step"] == 50 and ck.torch_state is not None
    # the re-run (marker present: the fault stays quiet) resumes from it and finishes
    r2 = methodlab(*args, env=env, timeout=300)
    assert r2.returncode == 0, r2.stderr[-2000:]
    steps = [int(x["step"]) for x in jsonl(tmp_path / "ck" / "metrics.jsonl")]
    record.update(injected="SIGKILL inside save_checkpoint (2nd write, after the temp folder, before the rename), "
                           "`methodlab run --local`", times=len(fired),
                  survived=f"checkpoint at step {ck.state['step']} loaded (weights, optimizer state); re-run resumed "
                           f"and finished at step {steps[-1]}", lost="the step-100 report being written",
                  figures={"reported_steps": steps})
    assert steps == [50, 100, 150]


SCRIPT = textwrap.dedent("""
    import sys, torch
    from methodlab.core.checkpoint import save_checkpoint
    d, step = sys.argv[1], int(sys.argv[2])
    save_checkpoint(d, method="m", config={"c": 1}, weights={"w": torch.full((3,), float(step))},
                    state={"step": step}, torch_state={"optimizer": {"s": torch.ones(2)}})
""")


@pytest.mark.parametrize("phase", ["before_rename", "mid_replace"])
def test_kill_while_replacing_a_checkpoint_folder(tmp_path, record, phase):
    """save_checkpoint over an existing folder, killed at each point of the replace."""
    d = tmp_path / "ckpt"
    run = lambda step, **env: subprocess.run([sys.executable, "-c", SCRIPT, str(d), str(step)],  # noqa: E731
                                             env=cli_env(None, **env), capture_output=True, text=True, timeout=120)
    assert run(1).returncode == 0
    r = run(2, METHODLAB_FAULT_KILL_IN_CHECKPOINT=1, METHODLAB_FAULT_CHECKPOINT_PHASE=phase)
    assert r.returncode == -signal.SIGKILL, r.stderr
    found = latest_checkpoint(tmp_path)
    state = load_checkpoint(found).state if found else None
    record.update(injected=f"SIGKILL inside save_checkpoint replacing an existing folder ({phase})", times=1,
                  survived=f"{found.name if found else 'no'} checkpoint found by latest_checkpoint, step "
                           f"{state and state['step']}", lost="the new checkpoint being written (expected)",
                  figures={"found": found.name if found else None})
    # before the rename the old checkpoint stays; mid-replace (after the atomic swap) the new one is in place
    assert found == d and state["step"] == (1 if phase == "before_rename" else 2)
