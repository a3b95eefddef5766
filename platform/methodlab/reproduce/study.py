"""A reproduction declared as data: arms (runs of the platform's runner), tasks (non-fit computations) and claims
(a value, a bar, a seed rule, the paper's number). Frozen dataclasses and plain functions; the harness
(`methodlab.reproduce.harness`) runs what is pending, judges the claims and renders the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

SeedSet = Literal["reported", "dev", "both"] | tuple[int, ...]  # or explicit seeds (a report-only run on seed 0)
OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}


@dataclass(frozen=True)
class Arm:
    """One setting run once per seed as an ordinary run of the platform's runner.

    `job`: a job file (repo-relative) or an inline job dict; `overrides`: key=value on top (as on the command line);
    `quick`: extra overrides under --quick (a fast look, shown as a reduced recipe); `full`: extra overrides under
    --full (the unreduced recipe, where the default one is reduced to fit the machine); `needs`: (arm id, config
    field) pairs: the field receives that arm's newest checkpoint for the same seed, so the arm runs after it.
    `skip_quick`: not run under --quick (a long side arm); `full_only`: run only under --full."""

    id: str
    job: str | dict
    overrides: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    seeds: SeedSet = "both"
    needs: tuple[tuple[str, str], ...] = ()
    label: str = ""
    full: tuple[str, ...] = ()
    skip_quick: bool = False
    full_only: bool = False
    spec: dict[str, Any] | None = None  # this arm's spec recipe where it differs from the study's (another dataset)
    smoke: bool = False  # the method's smoke preset under the overrides (toy studies, tests)


@dataclass(frozen=True)
class Task:
    """A computation that is not a fit (a baseline, a closed form, a probe, an oracle): `fn(seed, inputs, mode)`
    returns a JSON-able dict, cached by (id, seed, version, mode, inputs, code: store.task_key). `inputs`: {arm id:
    that arm's final metrics for this seed} for the arms in `needs`, and under "config" {arm id: that arm's resolved
    config for this seed and mode, as JSON} for the arms in `configs` (a task that needs an arm's recipe takes it
    here rather than from the study: the study's report text would otherwise be part of the task's code and
    re-key it); `mode`: "quick", "default" or "full" (a task sizes itself to it the way an arm's quick / full
    overrides do). `skip_quick`: not run under --quick;
    `full_only`: only under --full (a long side study)."""

    id: str
    fn: Callable[[int, dict, str], dict] | str  # or "package.module:function", imported when the task runs
    seeds: SeedSet = "reported"
    needs: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    version: str = "1"
    skip_quick: bool = False
    full_only: bool = False

    def call(self, seed: int, inputs: dict, mode: str) -> dict:
        """Run it (a "module:function" name is imported here, so a study loads without its side studies)."""
        fn = self.fn
        if isinstance(fn, str):
            import importlib

            module, _, name = fn.partition(":")
            fn = getattr(importlib.import_module(module), name)
        return fn(seed, inputs, mode)


@dataclass(frozen=True)
class Claim:
    """`value(results, seed)` -> a number (None when its runs are missing) for one seed, or for seed None the pooled
    value. `combine`: mean (the mean over the reported seeds meets the bar), every (each seed does), pooled (the
    pooled value does). `paper`: the paper's number for the same quantity; `official`: what the official code's logs
    give; `ceiling`: a measured ceiling shown beside the spec's bar (the bar itself never moves)."""

    id: str
    text: str
    value: Callable[[Any, int | None], float | None]
    op: str
    bar: float
    combine: Literal["mean", "every", "pooled"] = "mean"
    uses: tuple[str, ...] = ()
    paper: float | str | None = None
    official: str | None = None
    ceiling: str | None = None
    seeds: tuple[int, ...] | None = None  # judged on these seeds (an arm run on seed 0 only) instead of the reported

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"claim {self.id}: op {self.op!r}; allowed: {', '.join(OPS)}")


@dataclass(frozen=True)
class Study:
    slug: str
    arms: tuple[Arm, ...]
    claims: tuple[Claim, ...] = ()
    tasks: tuple[Task, ...] = ()
    reported_seeds: tuple[int, ...] = (0, 1, 2)
    dev_seeds: tuple[int, ...] = (10, 11, 12)
    quick_seeds: tuple[int, ...] = (0,)
    # The spec's recipe, {config key: value}: the report shows every key where the runs differ from it.
    spec_recipe: dict[str, Any] = field(default_factory=dict)
    # The method's own sections: markdown from the report JSON's data (so --render-only redraws them).
    sections: Callable[[Any], str] | None = None
    # The method's plots: (results, folder) -> [file names], from the same data.
    plots: Callable[[Any, Any], list[str]] | None = None
    title: str = ""
    # Metrics history kept in the report JSON per run: None = every key of every metrics.jsonl row, a tuple = those
    # keys only (with "step"), () = none. Keep it to what sections and plots read: the JSON is committed.
    history: tuple[str, ...] | None = None
    # What the claims run on, for the scoreboard: e.g. "MNIST (real, packaged)" or "synthetic ER DAGs".
    dataset: str = ""
    real_data: bool = False

    def arm(self, arm_id: str) -> Arm:
        for a in self.arms:
            if a.id == arm_id:
                return a
        raise KeyError(f"{self.slug}: no arm {arm_id!r}")

    def check(self) -> None:
        """Ids unique, dependencies known and acyclic, claims naming known arms / tasks."""
        ids = [a.id for a in self.arms] + [t.id for t in self.tasks]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"{self.slug}: duplicate arm / task ids {sorted(dup)}")
        known = set(ids)
        for a in self.arms:
            for dep, _ in a.needs:
                if dep not in {x.id for x in self.arms}:
                    raise ValueError(f"{self.slug}: arm {a.id} needs unknown arm {dep!r}")
        if "config" in known:
            raise ValueError(f"{self.slug}: 'config' is the task inputs' key for arm configs, not an arm / task id")
        for t in self.tasks:
            for dep in (*t.needs, *t.configs):
                if dep not in {x.id for x in self.arms}:
                    raise ValueError(f"{self.slug}: task {t.id} needs unknown arm {dep!r}")
        for c in self.claims:
            for u in c.uses:
                if u not in known:
                    raise ValueError(f"{self.slug}: claim {c.id} uses unknown arm / task {u!r}")
        order_arms(self.arms)


def seeds_of(which: SeedSet, study: Study) -> tuple[int, ...]:
    if isinstance(which, tuple):
        return which
    return {"reported": study.reported_seeds, "dev": study.dev_seeds,
            "both": study.dev_seeds + study.reported_seeds}[which]


def order_arms(arms: tuple[Arm, ...]) -> list[list[Arm]]:
    """Waves of arms: each wave needs only arms of earlier waves (a cycle is an error)."""
    left = {a.id: a for a in arms}
    done: set[str] = set()
    waves = []
    while left:
        wave = [a for a in left.values() if all(d in done for d, _ in a.needs)]
        if not wave:
            raise ValueError(f"arms depend on each other in a cycle: {sorted(left)}")
        waves.append(wave)
        done |= {a.id for a in wave}
        for a in wave:
            del left[a.id]
    return waves
