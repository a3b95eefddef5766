"""Judge a study's claims and render its report, as pure functions of the report data (`harness.collect`):
reports/<slug>.json holds that data beside the verdicts, so `--render-only` redraws the same markdown from
the JSON alone, byte for byte, with no run store."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from methodlab.reproduce.study import OPS, Study, seeds_of

PASS, FAIL, NOT_RUN = "PASS", "FAIL", "NOT RUN"


class Results:
    """What a claim's value function, a method's sections and its plots read: the report data."""

    def __init__(self, data: dict, study: Study):
        self.data, self.study = data, study
        self.quick = bool(data.get("quick"))
        self.mode = data.get("mode", "quick" if self.quick else "default")
        self.reported_seeds = tuple(study.quick_seeds if self.quick else study.reported_seeds)
        self.dev_seeds = () if self.quick else tuple(study.dev_seeds)

    def run(self, arm: str, seed: int) -> dict | None:
        return self.data["runs"].get(arm, {}).get(str(seed))

    def final(self, arm: str, seed: int) -> dict | None:
        r = self.run(arm, seed)
        return r["final"] if r else None

    def metric(self, arm: str, seed: int, key: str) -> float | None:
        f = self.final(arm, seed)
        v = None if f is None else f.get(key)
        return None if v is None else float(v)

    def history(self, arm: str, seed: int) -> list[dict]:
        r = self.run(arm, seed)
        return r["history"] if r else []

    def task(self, task_id: str, seed: int) -> Any:
        return self.data["tasks"].get(task_id, {}).get(str(seed))

    def seeds(self, arm: str) -> list[int]:
        return sorted(int(s) for s in self.data["runs"].get(arm, {}))

    def config(self, arm: str) -> dict:
        """The resolved config the arm ran (its first seed's; seeds differ only in `seed`), or, before any of its
        runs finished, the one it will run (so an interim report's setting text is the recipe, not blanks)."""
        return (self.data.get("recipes") or {}).get(arm) or (self.data.get("planned") or {}).get(arm, {})


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def judge(study: Study, res: Results, seeds: tuple[int, ...] | None = None) -> list[dict]:
    """Verdicts on the reported seeds (or on `seeds`, e.g. the development ones; a pooled claim is judged on the
    reported seeds only: its value function reads them itself)."""
    out = []
    seeds = res.reported_seeds if seeds is None else seeds
    for c in study.claims:
        if c.combine == "pooled" and seeds != res.reported_seeds:
            continue
        mine = seeds
        if c.seeds is not None:  # its own seeds (on the reported pass only; under --quick those run)
            if seeds != res.reported_seeds:
                continue
            mine = tuple(s for s in c.seeds if not res.quick or s in res.reported_seeds) or tuple(c.seeds[:1])
        per_seed = {s: _num(c.value(res, s)) for s in mine} if c.combine != "pooled" else {}
        if c.combine == "pooled":
            ours = _num(c.value(res, None))
        elif per_seed and all(v is not None for v in per_seed.values()):
            ours = sum(per_seed.values()) / len(per_seed)
        else:
            ours = None
        ok = OPS[c.op]
        if c.combine == "every":
            verdict = NOT_RUN if ours is None else PASS if all(ok(v, c.bar) for v in per_seed.values()) else FAIL
        else:
            verdict = NOT_RUN if ours is None else PASS if ok(ours, c.bar) else FAIL
        out.append({"id": c.id, "text": c.text, "op": c.op, "bar": c.bar, "combine": c.combine,
                    "per_seed": {str(k): v for k, v in per_seed.items()}, "ours": ours, "verdict": verdict,
                    "paper": c.paper, "official": c.official, "ceiling": c.ceiling})
    return out


def recipe_differences(study: Study, data: dict) -> list[tuple[str, str, Any, Any]]:
    """(arm, key, the spec's value, the value run) for every spec recipe key an arm's config differs on."""
    rows = []
    arms = {a.id: a for a in study.arms}
    for arm, cfg in sorted(data.get("recipes", {}).items()):
        spec = arms[arm].spec if arm in arms and arms[arm].spec is not None else study.spec_recipe
        for key, want in spec.items():
            if key in cfg and cfg[key] != want:
                rows.append((arm, key, want, cfg[key]))
    return rows


def dev_seed_order(res: Results) -> list[dict]:
    """Per arm with development seeds: did every dev run end before the first reported run started (from the
    run records, the same rule for every method)."""
    rows = []
    for arm in res.study.arms:
        dev = [res.run(arm.id, s) for s in res.dev_seeds if res.run(arm.id, s)]
        rep = [res.run(arm.id, s) for s in res.reported_seeds if res.run(arm.id, s)]
        if not set(res.dev_seeds) & set(seeds_of(arm.seeds, res.study)):  # an arm run on reported seeds only
            continue
        last_dev = max((r["ended"] for r in dev), default=None)
        first_rep = min((r["started"] for r in rep), default=None)
        before = None if not dev or not rep else last_dev <= first_rep
        rows.append({"arm": arm.id, "dev_runs": len(dev), "reported_runs": len(rep), "last_dev_ended": last_dev,
                     "first_reported_started": first_rep, "dev_first": before})
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def render_markdown(study: Study, data: dict, claims: list[dict], plots: list[str],
                    out_dir: Path | None = None) -> str:
    res = Results(data, study)
    lines = [f"# {study.title or study.slug}: reproduction", ""]
    flag = {"quick": " --quick", "full": " --full"}.get(res.mode, "")
    lines.append(f"Rendered by `methodlab reproduce {study.slug}{flag}` from the run store (every figure below is in "
                 f"`{study.slug}.json`; `--render-only` redraws this file from it).")
    n_runs = sum(len(a) for a in data["runs"].values())
    n_report = runs_from_report(data)
    if n_report:
        lines.append(f"{n_report} of its {n_runs} runs were read from the report committed before this render, under "
                     "the keys this code and these configs give (the same runs; marked * in the runs table), not "
                     "rerun in this store.")
    if res.quick:
        lines.append("")
        lines.append("**Reduced recipe (`--quick`)**: one seed and the arms' quick overrides; not the acceptance run.")
    elif res.mode == "full":
        lines += ["", "**Unreduced recipe (`--full`)**: the arms' full overrides on top of their job files."]
    legacy = f"legacy/{study.slug}.md"
    if (Path(out_dir) / legacy).exists() if out_dir is not None else False:
        lines += ["", f"The report before this harness (rendered by the method's own script, not rerun here) is "
                  f"[{legacy}]({legacy}); a claim whose runs have not finished yet reads NOT RUN above, never that "
                  "report's figure."]
    seeds = [str(s) for s in res.reported_seeds]
    lines += ["", "## Claims", "", "| claim | bar | " + " | ".join(f"seed {s}" for s in seeds) +
              " | ours | paper | verdict |", "|---|---|" + "---|" * len(seeds) + "---|---|---|"]
    for c in claims:
        bar = f"{c['op']} {_fmt(c['bar'])} ({c['combine']})" + (f"; measured ceiling: {c['ceiling']}" if c["ceiling"] else "")
        vals = " | ".join(_fmt(c["per_seed"].get(s)) for s in seeds)
        paper = _fmt(c["paper"]) + (f" (official code: {c['official']})" if c["official"] else "")
        lines.append(f"| **{c['id']}** {c['text']} | {bar} | {vals} | {_fmt(c['ours'])} | {paper} | {c['verdict']} |")
    diffs = recipe_differences(study, data)
    lines += ["", "## Recipe run against the spec's", ""]
    if diffs:
        grouped: dict = {}  # one row per (setting, spec, run), naming the arms that ran it
        for a, k, w, v in diffs:
            grouped.setdefault((k, json.dumps(w, default=str), json.dumps(v, default=str)), []).append(a)
        n_arms = len(data.get("recipes", {}))
        lines += ["| setting | spec | run | arms |", "|---|---|---|---|"]
        for (k, w, v), arms in grouped.items():
            who = f"all {n_arms}" if len(arms) == n_arms and n_arms > 1 else ", ".join(arms)
            lines.append(f"| {k} | {_fmt(json.loads(w))} | {_fmt(json.loads(v))} | {who} |")
    else:
        lines.append("Every arm ran the spec's recipe on the keys it names." if study.spec_recipe else
                     "The study names no spec recipe keys.")
    for arm in study.arms:
        if res.quick and arm.quick:
            lines.append(f"- `{arm.id}` under --quick: {', '.join(arm.quick)}")
    dev_claims = [c for c in judge(study, res, res.dev_seeds) if c["ours"] is not None] if res.dev_seeds else []
    if dev_claims:
        dseeds = [str(s) for s in res.dev_seeds]
        lines += ["", "## Claims on the development seeds", "",
                  "The same claims on seeds " + ", ".join(dseeds) + " (where the recipe was chosen; not the verdict).",
                  "", "| claim | bar | " + " | ".join(f"seed {s}" for s in dseeds) + " | mean | meets the bar |",
                  "|---|---|" + "---|" * len(dseeds) + "---|---|"]
        for c in dev_claims:
            vals = " | ".join(_fmt(c["per_seed"].get(s)) for s in dseeds)
            lines.append(f"| {c['id']} | {c['op']} {_fmt(c['bar'])} ({c['combine']}) | {vals} | {_fmt(c['ours'])} | "
                         f"{'yes' if c['verdict'] == PASS else 'no'} |")
    order = dev_seed_order(res)
    if order:
        lines += ["", "## Development seeds", "", "| arm | dev runs | reported runs | dev seeds finished first |",
                  "|---|---|---|---|"]
        lines += [f"| {r['arm']} | {r['dev_runs']} | {r['reported_runs']} | "
                  f"{'yes' if r['dev_first'] else 'no' if r['dev_first'] is False else '—'} |" for r in order]
    walls = [r["wall_s"] for a in data["runs"].values() for r in a.values()]
    lines += ["", "## Runs", "", f"{len(walls)} runs, {sum(walls) / 60:.1f} min of run time summed (wall time and peak "
              f"memory of each run from its record; at most {max_concurrent(data)} of this study's runs overlapped, "
              "and other work may have shared the machine: compare wall times within one table only).", "",
              "| arm | seed | wall s | peak MB | node | key |", "|---|---|---|---|---|---|"]
    for arm in study.arms:
        for s in res.seeds(arm.id):
            r = res.run(arm.id, s)
            lines.append(f"| {arm.id} | {s} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | "
                         f"{(r.get('node') or 'local')[:8]} | `{r['key']}`{' *' if r.get('from_report') else ''} |")
    if study.sections is not None:
        lines += ["", study.sections(res).rstrip()]
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    return "\n".join(lines) + "\n"


def runs_from_report(data: dict) -> int:
    """How many of the report data's runs were read from the committed report (harness.Committed), not the store."""
    return sum(bool(r.get("from_report")) for a in data["runs"].values() for r in a.values())


def max_concurrent(data: dict) -> int:
    """The most of this study's runs whose [started, ended] intervals overlap (from their records)."""
    events = sorted((t, d) for a in data["runs"].values() for r in a.values()
                    for t, d in ((r["started"], 1), (r["ended"], -1)))  # an end sorts before a start at the same time
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def render(study: Study, data: dict, out_dir: Path) -> Path:
    """reports/<slug>.json (data + verdicts) and reports/<slug>.md (+ the study's plots), written whole."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = Results(data, study)
    claims = judge(study, res)
    plots = list(study.plots(res, out_dir)) if study.plots is not None else []
    doc = {"slug": study.slug, "title": study.title or study.slug, "dataset": study.dataset,
           "real_data": study.real_data, "mode": res.mode, "reduced": None if not data["runs"] else res.mode == "quick" or bool(
               recipe_differences(study, data)), "claims": claims, "plots": plots, "data": data}
    (out_dir / f"{study.slug}.json").write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
    md = out_dir / f"{study.slug}.md"
    md.write_text(render_markdown(study, data, claims, plots, out_dir))
    return md


def render_from_json(study: Study, out_dir: Path) -> Path:
    """--render-only: the committed JSON's data alone, no run store."""
    doc = json.loads((Path(out_dir) / f"{study.slug}.json").read_text())
    return render(study, doc["data"], out_dir)
