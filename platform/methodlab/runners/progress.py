"""Progress for runs and sweeps: the bar and `track` live in core (methods use them through
RunContext.progress); here, the compact Tune console line per trial event."""

from __future__ import annotations

import sys
import time

from methodlab.core.progress import Progress, _fmt, _hms, env_quiet, track  # noqa: F401  (re-exported for the runners)


def tune_console(metric: str, time_attr: str, params: list[str], sweep_dir: str, num_samples: int,
                 every_s: float = 10.0):
    """A ray.tune.Callback printing one short line per trial event: its id, the swept params (once),
    the time attribute and the method's key metric. Tune's own table stays off (verbose=0): in Ray 2.60
    the default output engine ignores CLIReporter columns and prints every metric of every report."""
    from ray import tune

    class KeyMetrics(tune.Callback):
        def __init__(self):
            self.metric, self.time_attr, self.params, self.every = metric, time_attr, params, every_s
            self.sweep_dir, self.num_samples = sweep_dir, num_samples
            self.last: dict = {}

        def __getstate__(self):
            return {**self.__dict__, "last": {}}

        def _say(self, text: str) -> None:
            print(f"[tune] {text}", file=sys.stderr, flush=True)

        def on_trial_start(self, iteration, trials, trial, **info):
            shown = ", ".join(f"{p.split('.')[-1]}={_fmt((trial.config or {}).get(p))}" for p in self.params)
            self._say(f"{trial.trial_id} started  {shown}")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            now = time.time()
            if now - self.last.get(trial.trial_id, 0) < self.every:
                return
            self.last[trial.trial_id] = now
            self._say(f"{trial.trial_id} {self.time_attr}={_fmt(result.get(self.time_attr))}  "
                      f"{self.metric}={_fmt(result.get(self.metric))}")

        def on_trial_complete(self, iteration, trials, trial, **info):
            last = trial.last_result or {}
            from methodlab.runners.results import read_early_stops

            how = "stopped early by ASHA" if trial.trial_id in read_early_stops(self.sweep_dir) else "finished"
            n_done = sum(t.status in ("TERMINATED", "ERROR") and t is not trial for t in trials) + 1
            self._say(f"{trial.trial_id} {how} at {self.time_attr}={_fmt(last.get(self.time_attr))}  "
                      f"{self.metric}={_fmt(last.get(self.metric))}  ({n_done}/{self.num_samples} trials done)")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._say(f"{trial.trial_id} ERROR (see {trial.local_path or 'the trial folder'}/error.txt)")

    return KeyMetrics()
