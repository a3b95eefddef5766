"""`methodlab reproduce` for a study: plan, run what is pending, run the tasks, collect, render."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from methodlab.core.errors import ConfigError
from methodlab.reproduce import harness, report
from methodlab.reproduce.study import Study


def arms_for_claims(study: Study, claim_ids: list[str]) -> set[str]:
    """The arms the named claims use, with the arms they depend on (transitively) and the tasks' arms."""
    known = {c.id: c for c in study.claims}
    unknown = [c for c in claim_ids if c not in known]
    if unknown:
        raise ConfigError(f"--claims: {study.slug} has no claim {', '.join(unknown)} (claims: {', '.join(known)})",
                          field="--claims")
    tasks = {t.id: t for t in study.tasks}
    todo = [u for c in claim_ids for u in known[c].uses]
    arms: set[str] = set()
    while todo:
        u = todo.pop()
        if u in tasks:
            todo += list(tasks[u].needs)
        elif u not in arms:
            arms.add(u)
            todo += [d for d, _ in study.arm(u).needs]
    return arms


def default_out_dir(study: Study, mode: str) -> Path:
    """reports/ holds the acceptance runs only: a --quick look renders beside its store."""
    return Path("results") / "reproduce" / study.slug / "quick-report" if mode == "quick" else Path("reports")


def reproduce(study: Study, *, out_dir: str | Path | None = None, storage: str | Path | None = None,
              seeds: str = "all", quick: bool = False, full: bool = False, claims: str = "",
              render_only: bool = False, from_store: bool = False, reuse: bool = True,
              budget_s: float | None = None, address: str | None = None, use_ray: bool = True, workers: int = 2,
              assume_shared_storage: bool = False, log: Callable[[str], None] = print) -> Path:
    if quick and full:
        raise ConfigError("--quick and --full: choose one (a fast look, or the unreduced recipe)", field="--full")
    mode = "quick" if quick else "full" if full else "default"
    out = Path(out_dir) if out_dir is not None else default_out_dir(study, mode)
    if render_only:
        if not (out / f"{study.slug}.json").exists():
            raise ConfigError(f"--render-only: {out / (study.slug + '.json')} does not exist: run the reproduction "
                              "first", field="--render-only")
        return report.render_from_json(study, out)
    root = Path(storage) if storage else Path("results") / "reproduce" / study.slug
    if "://" in str(root):
        raise ConfigError(f"--storage {root}: the reproduction store is a path every node mounts (an NFS-style "
                          "share on a cluster), not a URI", field="--storage")
    runs_root, tasks_root = root.resolve() / "runs", root.resolve() / "tasks"
    selected = arms_for_claims(study, [c for c in claims.split(",") if c]) if claims else None
    committed = harness.Committed.read(out / f"{study.slug}.json") if reuse else harness.NONE
    pending = harness.plan(study, runs_root, seeds=seeds, mode=mode, arms=selected, committed=committed)
    if from_store:  # what has finished so far (a long reproduction's interim report): nothing is started
        log(f"{study.slug}: {len(pending)} runs not finished (NOT RUN in the report)")
        pending = []
    if use_ray and pending:
        from methodlab.runners.paths import check_shared_storage
        from methodlab.runners.ray_session import init_ray

        init_ray(address, quiet=True)
        # a multi-node cluster needs a store every node reaches (the storage rule of multi-node runs)
        check_shared_storage(str(runs_root), assume_shared_storage)
    t0 = time.time()
    log(f"{study.slug}: {len(pending)} runs pending" + ("" if mode == "default" else f" (--{mode})"))
    harness.execute(study, pending, runs_root, mode=mode, use_ray=use_ray, address=address, workers=workers,
                    budget_s=budget_s, log=log)
    if not from_store:
        harness.run_tasks(study, tasks_root, runs_root, seeds=seeds, mode=mode, log=log, committed=committed)
    data = harness.collect(study, runs_root, tasks_root, mode=mode, committed=committed)
    reused = report.runs_from_report(data)
    if reused:
        log(f"{study.slug}: {reused} runs read from the committed report {committed.source} (same keys), not rerun")
    md = report.render(study, data, out)
    if mode != "quick":  # the scoreboard beside the reports it reads (README's table: --scoreboard)
        from methodlab.reproduce.scoreboard import write

        write(out, readme=None)
    log(f"{study.slug}: rendered {md} ({time.time() - t0:.0f} s)")
    return md
