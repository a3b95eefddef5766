"""Issue 42 item 5: Ray Train output fit for a terminal. A `methodlab run` Train job (a subprocess with its own
embedded Ray, while the suite's Ray runs beside it) shows the local runner's progress bar, none of Ray's
per-report lines and no PlacementGroupCleaner traceback about "multiple active Ray instances"; SIGINT after
its first checkpoint ends it within 10 s (exit 130), the checkpoint stays, and a rerun resumes from it."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path

import pytest

from methodlab.core.checkpoint import latest_checkpoint
from tests.reliability.helpers import cli_env, jsonl, methodlab, ray_procs, ray_tmpdir, spawn, stop_ray, wait_for

JOB = "jobs/grokking_flatness/cpu.yaml"


@pytest.mark.ray

def interrupt_when(proc, ready, log: Path, what: str) -> float:
    """Wait until `ready()` (the process still running), send SIGINT, wait for the exit; seconds it took."""
    wait_for(lambda: ready() or proc.poll() is not None, 300, every=0.2, what=what)
    assert proc.poll() is None, log.read_text()[-3000:]
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    finally:
        took = time.time() - sent
    return took


def test_sigint_stops_a_train_run_within_10s_keeping_its_checkpoint(ray_cluster, tmp_path):
    # ray_cluster: the suite's own embedded Ray, a second Ray instance on this machine during the run
    tmp = ray_tmpdir()
    args = ["run", JOB, "--smoke", "max_steps=5000", "log_every=50", "checkpoint_every=50",
            "scaling.cpus_per_worker=1", "--name", "sig", "--storage", str(tmp_path)]
    log = tmp_path / "run.log"
    metrics = tmp_path / "sig" / "metrics.jsonl"
    proc = spawn(*args, env=cli_env(tmp), log=log)
    try:
        took = interrupt_when(proc, lambda: any(r.get("_checkpoint") for r in jsonl(metrics)), log,
                              "the run's first checkpoint")
        try:  # the run's Ray went with it (its processes are found by their temp dir)
            wait_for(lambda: not ray_procs(tmp), 20, what="the run's Ray processes to exit")
            left = 0
        except TimeoutError:
            left = len(ray_procs(tmp))
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_ray(tmp)
    text = log.read_text()
    assert proc.returncode == 130 and took < 10, (proc.returncode, round(took, 1), text[-3000:])
    assert left == 0, f"{left} Ray processes of the interrupted run still running 20 s after it exited"
    ckpt = latest_checkpoint(tmp_path / "sig" / "checkpoints")
    assert ckpt is not None and ckpt.parent == tmp_path / "sig" / "checkpoints", text[-3000:]
    step = int(json.loads((ckpt / "state.json").read_text())["step"])
    assert ckpt.name == f"checkpoint_{step:010d}" and step >= 50
    said = [x for x in text.splitlines() if x.startswith("interrupted: the same command resumes from ")]
    assert len(said) == 1 and Path(said[0].rsplit(" ", 1)[-1]).parent == ckpt.parent, text[-3000:]
    # what the terminal showed: the progress bar, not Ray's per-report dicts or the cleaner's traceback
    assert "[grokking_flatness] |" in text and "step/s" in text, text[-3000:]
    for noise in ("Reporting training result", "TrainingReport(", "Checkpoint successfully created",
                  "Found multiple active Ray instances", "PlacementGroupCleaner"):
        assert noise not in text, f"{noise!r} printed:\n{text[-3000:]}"
    # no traceback of the driver (Ray's actors prefix their lines with "(TrainController pid=...)"; on an
    # overloaded machine Ray Train may log a "safe to ignore" resource-request timeout with one)
    assert not [x for x in text.splitlines() if x.startswith("Traceback")], text[-3000:]
    # a rerun resumes from that checkpoint (--local: the same folder layout, no second Ray start-up)
    before = [int(r["step"]) for r in jsonl(metrics)]
    r = methodlab(*args[:3], f"max_steps={step + 50}", *args[4:], "--local", env=cli_env(None))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"resuming from {ckpt}" in r.stderr
    assert [int(x["step"]) for x in jsonl(metrics)][len(before):] == [step + 50]


def test_ray_trains_per_report_line_is_silenced_in_the_worker(caplog):
    """Ray Train logs `Reporting training result N: TrainingReport(<all metrics>)` at INFO on a logger named after
    its module's file (out of reach of the `ray.train` level and of RunConfig's LoggingConfig)."""
    from ray.train.v2._internal.execution import context

    from methodlab.runners.train import quiet_ray_train_reports

    quiet_ray_train_reports()
    assert logging.getLogger(context.__file__).getEffectiveLevel() >= logging.WARNING
    assert not logging.getLogger(context.__file__).isEnabledFor(logging.INFO)


def test_train_progress_follows_the_controllers_metrics_file(tmp_path):
    """The driver's bar is fed by the rows MetricsRecorder appends (rows of an earlier run are skipped)."""
    from methodlab.runners.progress import Progress
    from methodlab.runners.train import ReportFollower

    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 5}) + "\n")  # an earlier run's row
    progress = Progress("m", "acc", total=100, every_s=0.0)
    seen: list[dict] = []
    progress.update = lambda metrics=None, pos=None: seen.append(metrics)  # type: ignore[method-assign]
    follower = ReportFollower(path, progress, every_s=0.05)
    follower.start()
    with path.open("a") as fh:
        fh.write(json.dumps({"step": 10, "acc": 0.5}) + "\n" + '{"step": 2')  # the last row is half written
        fh.flush()
        time.sleep(0.3)
        fh.write('0, "acc": 0.7}\n')
    follower.stop()
    assert seen == [{"step": 10, "acc": 0.5}, {"step": 20, "acc": 0.7}]


@pytest.mark.ray
def test_sigint_stops_a_sweep_within_10s_keeping_its_state(tmp_path):
    """`methodlab tune`: Ctrl-C after a trial's first checkpoint; Tune saves the sweep state, the CLI says how to
    continue (not Tune's `Tuner.restore(...)`) and exits 130 within 10 s."""
    from tests.reliability.helpers import grokking_sweep_space

    tmp = ray_tmpdir()
    space = grokking_sweep_space(tmp_path, num_samples=2, max_steps=5000, concurrent=1, cpus=1)
    sweep, log = tmp_path / "store" / "sw", tmp_path / "tune.log"
    proc = spawn("tune", "run", str(space), "--name", "sw", "--storage", str(tmp_path / "store"), env=cli_env(tmp),
                 log=log)
    try:
        took = interrupt_when(proc, lambda: list(sweep.glob("*/checkpoint_*")), log, "a trial's first checkpoint")
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_ray(tmp)
    text = log.read_text()
    assert proc.returncode == 130 and took < 10, (proc.returncode, round(took, 1), text[-3000:])
    assert f"continue with `methodlab tune resume {sweep}`" in text, text[-3000:]
    assert "Tuner.restore" not in text and not [x for x in text.splitlines() if x.startswith("Traceback")], text[-3000:]
    assert list(sweep.glob("experiment_state-*.json")) and list(sweep.glob("*/checkpoint_*"))
