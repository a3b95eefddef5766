"""`make bench`: run every benchmarks/*.py (each writes benchmarks/results/<name>.json), then render
BENCHMARKS.md at the repo root from all result files.

Budget: `make bench` must finish in under 20 minutes on 2 cores, so by default the platform benchmarks run
with `--quick` (fewer, shorter repetitions) and the method benchmarks with fewer repetitions (QUICK below);
`make bench-full` (`run_all.py --full`) runs every script at its full settings. The wall time of every
script is recorded in results/bench_run.json and shown in BENCHMARKS.md. `--only a,b` runs a subset.

A result file is JSON: {"name", "title", "date", "machine", "versions", "rows": [{column: value}],
"goals": [{"name", "value", "goal", "met"}], "notes"}. Comparisons inside one file are measured side by
side in the same run; absolute times are context only."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Arguments `make bench` adds per script to stay in the 20-minute budget on a shared 2-core box (see each script's
# docstring); `make bench-full` drops them. Method benchmarks keep the rows their goals need and lose repetitions
# or the largest size (graphrta's 10^6-node row: 10^5 already gives its side-by-side ratio).
QUICK = {"train_overhead.py": ["--quick"], "train_scaling.py": ["--quick"], "tune_overhead.py": ["--quick"],
         "serve_load.py": ["--quick"],
         "graphrta_scale.py": ["--sizes", "full:1000,full:10000,full:100000,neighbor:100000", "--reps", "2"],
         "ctsketch_scaling.py": ["--reps", "3"], "gyroatt_ops.py": ["--reps", "10"],
         "unirl_throughput.py": ["--repeats", "3"],
         "mtpp_threshold_integration.py": ["--n", "500"]}  # 2,000 histories: 330 s of the budget for one ratio
PLATFORM = ("train_overhead", "train_scaling", "tune_overhead", "serve_load")
BUDGET_S = 20 * 60
SCRIPT_TIMEOUT_S = int(os.environ.get("METHODLAB_BENCH_SCRIPT_TIMEOUT", 900))


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def machine(threads: int | None = None, load_at_start: str | None = None) -> str:
    """Where a result was measured; the load average (1/5/15 min) tells readers how busy the shared box was."""
    parts = [f"{os.cpu_count()} CPUs", platform.machine()]
    if threads:
        parts.append(f"{threads} torch thread(s) per process")
    if load_at_start:
        parts.append(f"load average {load_at_start} at start")
    parts.append(f"load average {load_average()} at the end")
    return ", ".join(parts)


def versions() -> str:
    import importlib.metadata as md

    out = [f"python {platform.python_version()}"]
    for pkg in ("torch", "ray"):
        try:
            out.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(out)


def result(name: str, title: str, rows: list[dict], goals: list[dict], notes: str, *, threads: int | None = None,
           load_at_start: str | None = None) -> dict:
    """A result in this file's format (helper for the platform benchmarks; scripts may also write their own)."""
    return {"name": name, "title": title, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine(threads, load_at_start), "versions": versions(), "rows": rows, "goals": goals,
            "notes": notes}


class PeakRss:
    """Peak RSS (MiB) per role among this process's descendants, sampled every 0.2 s in a thread: Ray's
    workers set their process title (e.g. `ray::RayTrainWorker...`), `roles` maps a title fragment to a role."""

    def __init__(self, roles: dict[str, str]):
        import threading

        self.roles, self.peak = roles, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.2):
            for p in me.children(recursive=True):
                try:
                    title = " ".join(p.cmdline()[:2]) or p.name()
                    role = next((r for key, r in self.roles.items() if key in title), None)
                    if role:
                        self.peak[role] = max(self.peak.get(role, 0.0), p.memory_info().rss / 2**20)
                except psutil.Error:
                    pass


def spread(values: list[float]) -> dict:
    import statistics

    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_result(r: dict) -> Path:
    path = HERE / "results" / f"{r['name']}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(r, indent=1, default=float))
    print(f"wrote {path}")
    return path


def render() -> Path:
    lines = ["# Benchmarks", "", "Regenerated by `make bench` from `benchmarks/results/*.json`. Ratios are measured side by "
             "side in one run; absolute numbers depend on the machine named in each section.", ""]
    files = sorted((HERE / "results").glob("*.json"),
                   key=lambda f: (f.stem != "bench_run", f.stem not in PLATFORM, PLATFORM.index(f.stem) if f.stem in PLATFORM else 0, f.stem))
    summary = []
    if not files:
        lines.append("(no results yet)")
    for f in files:
        r = json.loads(f.read_text())
        lines += [f"## {r.get('title', r.get('name', f.stem))}", "",
                  f"`{f.relative_to(ROOT)}` — {r.get('date', '?')}, {r.get('machine', '?')}, {r.get('versions', '')}", ""]
        rows = r.get("rows") or _rows_of_free_form(r)
        if rows and not all(isinstance(x, dict) for x in rows):  # a script with its own row shape: show it as is
            lines += ["```", json.dumps(rows, indent=1, default=str)[:4000], "```", ""]
            rows = []
        if rows:
            cols = list(dict.fromkeys(k for row in rows for k in row))
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            for row in rows:
                lines.append("| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
            lines.append("")
        goals = r.get("goals") or []
        if goals:
            lines += ["| goal | measured | target | met |", "|---|---|---|---|"]
            for g in goals:
                met = "-" if g["met"] is None else ("yes" if g["met"] else "NO")  # None: context, not a goal
                lines.append(f"| {g['name']} | {_fmt(g['value'])} | {g['goal']} | {met} |")
                summary.append(f"| {r.get('name', f.stem)} | {g['name']} | {_fmt(g['value'])} | {g['goal']} | {met} |")
            lines.append("")
        if r.get("notes"):
            lines += [r["notes"], ""]
    if summary:
        lines += ["## Closing note: every goal", "", "| benchmark | goal | measured | target | met |", "|---|---|---|---|---|",
                  *summary, ""]
    out = ROOT / "BENCHMARKS.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def _rows_of_free_form(r: dict) -> list[dict]:
    """A result file without `rows` (an older method benchmark): a dict-of-dicts value becomes one row per
    key, and the scalar values one settings row, so nothing measured is left out of BENCHMARKS.md."""
    rows = []
    for key, value in r.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            rows += [{key: name, **{k: v for k, v in sub.items() if not isinstance(v, (dict, list))}} for name, sub in value.items()]
    scalars = {k: v for k, v in r.items() if isinstance(v, (int, float, str, bool)) and k not in ("title", "name", "date", "machine", "versions", "notes")}
    return rows + ([scalars] if scalars else [])


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def main(argv: list[str]) -> None:
    full = "--full" in argv
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--only=")), None)
    # gpu_check.py needs a GPU: `make gpu-check` runs it on one (its last result is still rendered above);
    # ddp_check.py is a correctness check (`make ddp-check`; tests/unit/test_ddp_check.py runs it on the CPU)
    scripts = sorted(p for p in HERE.glob("*.py") if p.name not in ("run_all.py", "__init__.py", "gpu_check.py",
                                                                   "ddp_check.py")
                     and not p.name.startswith("_"))
    if only:
        scripts = [p for p in scripts if p.stem in only or p.name in only]
    failed, rows, t_all = [], [], time.time()
    for s in scripts:
        extra = [] if full else QUICK.get(s.name, [])
        print(f"== {s.name} {' '.join(extra)}  (load average {load_average()})", flush=True)
        t0 = time.time()
        # Own session, so a script that overruns is stopped with everything it started (Ray included).
        proc = subprocess.Popen([sys.executable, str(s), *extra], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # one stuck script must not eat the whole budget
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
        rows.append({"script": s.name, "args": " ".join(extra), "seconds": round(time.time() - t0, 1), "rc": rc,
                     "load average at the end": load_average()})
        print(f"   {s.name}: rc {rc}, {rows[-1]['seconds']:.0f} s", flush=True)
        if rc != 0:
            failed.append(s.name)
    total = time.time() - t_all
    if only:  # a subset: record what ran, with no budget verdict (the total is not the whole of `make bench`)
        write_result({**result("bench_run", "`run_all.py --only`: what ran and how long", rows, [],
                               f"Partial run of {', '.join(only)} only; the 20-minute budget applies to the whole "
                               "`make bench`, which this is not."), "full": full, "only": only})
    else:
        goal = {"name": "`make bench` total wall time, s" + (" (--full)" if full else ""), "value": round(total),
                "goal": f"< {BUDGET_S} (2 cores)", "met": total < BUDGET_S}
        write_result({**result("bench_run", "`make bench`: what ran and how long", rows, [goal] if not full else [],
                               "Each script's wall time in this run; rc != 0 means the script failed and its "
                               "result file is from an earlier run."),
                      "full": full})
    print(f"wrote {render()}  (total {total:.0f} s)")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--render"]:
        print(render())
    else:
        main(sys.argv[1:])
