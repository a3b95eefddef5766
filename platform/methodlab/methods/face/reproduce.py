"""`methodlab reproduce face`: Claims 1-3 (synthetic, 3 seeds) and Claim 4 (MovieLens, 3 seeds), every run
through the method's own `fit` (stages pretrain -> map -> align in one run; LightGCN = the pretrain stage,
map-only = the map stage, random tokens and popularity computed in the same evaluation).
Writes reports/face.md and reports/face.png."""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

SEEDS = (0, 1, 2)
DEV_SEEDS = (10, 11, 12)
# the spec's CPU preset (align 60 steps, align_rows 64), the same for every arm (LightGCN = stage 0, map-only =
# stage 1 and FACE-align = stage 2 of one run; random tokens and popularity in the same evaluation)
# torch_threads=1: one thread per run (the runs go to a process pool), as the config's former default gave
SPEC_CPU = dict(embedding_size=64, layer_num=2, word_num=8, word_dim=32, ffn_dim=64, codebook_size=8000, align_rows=64,
                batch_size=256, pretrain_epochs=40, patience=None, align_steps=60, log_every=10, torch_threads=1)
SPEC_DATASETS = {"synthetic": dict(data="synthetic", map_epochs=5), "movielens": dict(data="movielens", map_epochs=2)}
# Reduced for the shared CPU (load average ~27 on 2 cores at 12:00 UTC: one single-thread run got ~5 % of a core), every
# arm alike: map 2 epochs (synthetic, spec 5) / 1 (MovieLens, spec 2), align 60 steps of 32 rows (spec 64); the
# synthetic set skips the diagnostic text retrieval (Claim 4 is MovieLens only). METHODLAB_FACE_PRESET=spec: the spec's.
REDUCED_CPU = SPEC_CPU | dict(align_rows=32)
REDUCED_DATASETS = {"synthetic": dict(data="synthetic", map_epochs=2, eval_items=2),
                    "movielens": dict(data="movielens", map_epochs=1)}
PRESET = os.environ.get("METHODLAB_FACE_PRESET", "reduced")
CPU = SPEC_CPU if PRESET == "spec" else REDUCED_CPU
DATASETS = SPEC_DATASETS if PRESET == "spec" else REDUCED_DATASETS
_CODE = ("methods/face/model.py", "methods/face/train.py", "methods/face/data.py", "methods/face/backbone.py",
         "methods/face/evaluate.py", "methods/face/config.py", "data/face_data.py")


def code_hash() -> str:
    """Hash of the code a run's figures depend on (the report and this file excluded)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for rel in _CODE:
        h.update(rel.encode()); h.update((root / rel).read_bytes())
    return h.hexdigest()[:16]


def run_key(cfg: dict) -> str:
    """Cache key of one run: its full resolved config and the code hash, so a stale run is never reused."""
    from methodlab.methods.face.config import Config

    full = Config(**cfg).model_dump(mode="json")
    return hashlib.sha256((json.dumps(full, sort_keys=True) + code_hash()).encode()).hexdigest()[:20]


def run_one(job: dict) -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.face.config import Config
    from methodlab.methods.face.train import fit

    t0 = time.perf_counter()
    ctx = RunContext(quiet=True)
    out = fit(Config(**job["config"]), ctx)
    return {"data": job["data"], "seed": job["config"]["seed"], "final": out, "history": ctx.history,
            "wall_s": time.perf_counter() - t0, "key": job["key"], "config": job["config"],
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _mean(rows, key):
    v = [r["final"].get(key) for r in rows]
    v = [x for x in v if x is not None]
    return float(np.mean(v)) if v else float("nan")


def _load(path: Path) -> list[dict]:
    return json.loads(path.read_text()) if path.exists() else []


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False, full: bool = False) -> Path:
    """Reported seeds 0-2 of both datasets (`face_runs.json`). Env: METHODLAB_FACE_SEEDS="10,11,12" runs the
    development seeds instead (`face_dev_runs.json`, the report's "Development seeds" section;
    METHODLAB_FACE_MOVIELENS_SEEDS overrides the MovieLens seeds);
    METHODLAB_FACE_DATA="synthetic" limits the datasets. Runs whose key (config + code hash) is already in the
    json are reused, never ones of another config or code version. METHODLAB_FACE_REPORT_ONLY=1 runs nothing and
    rewrites the report from the runs already in the json."""
    out = Path(out_dir); out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    seeds = tuple(int(x) for x in os.environ["METHODLAB_FACE_SEEDS"].split(",")) if os.environ.get("METHODLAB_FACE_SEEDS") else SEEDS
    data = os.environ.get("METHODLAB_FACE_DATA", "synthetic,movielens").split(",")
    ml_seeds = tuple(int(x) for x in os.environ["METHODLAB_FACE_MOVIELENS_SEEDS"].split(",")) \
        if os.environ.get("METHODLAB_FACE_MOVIELENS_SEEDS") else seeds
    dev = all(s >= 10 for s in seeds + ml_seeds)
    runs_path = out / ("face_dev_runs.json" if dev else "face_runs.json")
    jobs = []
    for s in sorted(set(seeds) | set(ml_seeds)):  # interleaved, so a cut-short run has both datasets at the first seed
        for name, over in DATASETS.items():
            if name not in data or s not in (ml_seeds if name == "movielens" else seeds):
                continue
            cfg = {**CPU, **over, "seed": s}
            if quick:
                cfg |= {"pretrain_epochs": 3, "map_epochs": 1, "align_steps": 10}
            jobs.append({"data": name, "config": cfg})
    if full:
        jobs.append({"data": "movielens_smollm2", "config": {**CPU, **DATASETS["movielens"], "seed": 0,
                                                              "backbone": "smollm2", "align_steps": 20}})
    for j in jobs:
        j["key"] = run_key(j["config"])
    keys = {j["key"] for j in jobs}
    previous = _load(runs_path)
    cached = {r["key"]: r for r in previous if r.get("key") in keys}
    others = [r for r in previous if r.get("key") not in keys]  # other seeds' runs stay: a subset rerun loses nothing
    results = list(cached.values())
    todo = [j for j in jobs if j["key"] not in cached]
    if os.environ.get("METHODLAB_FACE_REPORT_ONLY"):  # rewrite the report from the json, run nothing
        todo = []
    from concurrent.futures import as_completed

    if todo:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
            futs = [pool.submit(run_one, j) for j in todo]
            for fut in as_completed(futs):
                r = fut.result()
                r["history"] = [h for h in r["history"] if "align_step" in h]
                results.append(r)
                runs_path.write_text(json.dumps(others + results, indent=1, default=float))  # partial results survive
    if todo or not os.environ.get("METHODLAB_FACE_REPORT_ONLY"):
        runs_path.write_text(json.dumps(others + results, indent=1, default=float))
    results = others + results
    wall = time.perf_counter() - t0 if todo else None
    if dev:
        dev_rows, wall_dev = results, wall
        main_rows = [r for r in _load(out / "face_runs.json") if r.get("key")]
        wall_main = None
    else:
        main_rows, wall_main = results, wall
        dev_rows, wall_dev = _load(out / "face_dev_runs.json"), None
    main_rows.sort(key=lambda r: (r["data"], r["seed"])); dev_rows.sort(key=lambda r: (r["data"], r["seed"]))
    return write_report(main_rows, out, wall_main, dev_rows=dev_rows, cached=len(cached), wall_dev=wall_dev,
                        workers=workers if not dev else None)


def _dev_order(dev_rows: list[dict], main_rows: list[dict]) -> str:
    """When each development seed ran relative to the reported runs (from start = finish - wall and finish)."""
    def iv(r):
        end = calendar.timegm(time.strptime(r["finished"], "%Y-%m-%d %H:%M UTC"))
        return end - r["wall_s"], end
    main = [iv(r) for r in main_rows if r.get("finished")]
    if not main:
        return ""
    first, last = min(a for a, _ in main), max(b for _, b in main)
    parts = []
    for r in sorted(dev_rows, key=lambda r: (r["data"], r["seed"])):
        if not r.get("finished"):
            continue
        a, b = iv(r)
        when = "before" if b <= first else "after" if a >= last - 60 else "alongside"
        parts.append(f"{r['data']} seed {r['seed']} ran {when} the reported runs")
    return ("Order (not the project's rule, which runs development seeds first): " + "; ".join(parts) + ".") if parts else ""


def _span(rows: list[dict]) -> float:
    """Seconds from the earliest run start (finish - wall) to the latest finish (finish times to the minute)."""
    import calendar

    t = [(calendar.timegm(time.strptime(r["finished"], "%Y-%m-%d %H:%M UTC")), r["wall_s"]) for r in rows if r.get("finished")]
    return max(f for f, _ in t) - min(f - w for f, w in t) if t else float("nan")


def _concurrency(rows: list[dict]) -> int:
    """Most runs alive at once (from start = finish - wall and finish, to the minute)."""
    import calendar

    iv = [(calendar.timegm(time.strptime(r["finished"], "%Y-%m-%d %H:%M UTC")) - r["wall_s"],
           calendar.timegm(time.strptime(r["finished"], "%Y-%m-%d %H:%M UTC"))) for r in rows if r.get("finished")]
    return max((sum(a <= t0 + 60 and t0 <= b for a, b in iv) for t0, _ in iv), default=1)


def _f(x) -> str:
    return "nan" if x is None or x != x else f"{x:.4f}"


def _times_table(rows: list[dict]) -> list[str]:
    L = ["| dataset | seed | setup | pretrain (epochs) | pretrain eval | map | map eval | align | align eval | run wall |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["final"]
        t = lambda k: f"{g[k]:.0f}" if k in g else "n/a"
        L.append(f"| {r['data']} | {r['seed']} | {t('time/setup_s')} | {t('time/pretrain_s')} ({t('time/pretrain_epochs')}) | "
                 f"{t('time/pretrain_eval_s')} | {t('time/map_s')} | {t('time/map_eval_s')} | {t('time/align_s')} | "
                 f"{t('time/align_eval_s')} | {r['wall_s']:.0f} |")
    return L


def _claims(syn: list[dict], ml: list[dict]) -> list[tuple]:
    """(claim, bar, per-seed figures, mean, pass) for every claim with runs."""
    out = []
    per = lambda rows, key: ", ".join(f"{r['final'].get(key, float('nan')):.4f}" for r in rows)
    if syn:
        pa, pm = _mean(syn, "align/precision_item"), _mean(syn, "map/precision_item")
        ch, pr = _mean(syn, "chance/precision_item"), _mean(syn, "random/precision_item")
        bar1 = max(0.25, 3 * pm, 10 * ch)
        out.append(("1. precision FACE-align >= max(0.25, 3 x map-only, 10 x chance)", f">= {bar1:.4f}",
                    per(syn, "align/precision_item"), pa, pa >= bar1))
        out.append(("1b. metric check: random precision in [0.5, 2] x chance", f"[{0.5 * ch:.4f}, {2 * ch:.4f}]",
                    per(syn, "random/precision_item"), pr, 0.5 * ch <= pr <= 2 * ch))
        rc, rk = _mean(syn, "align/recon_cos"), _mean(syn, "align/recon_cos_const")
        out.append(("2. recon cosine >= 0.7", ">= 0.7", per(syn, "align/recon_cos"), rc, rc >= 0.7))
        out.append(("2b. recon cosine >= constant + 0.2", f">= {rk + 0.2:.4f}", per(syn, "align/recon_cos"), rc, rc >= rk + 0.2))
    for tag, rows, num in (("3", syn, "synthetic"), ("4b", ml, "MovieLens")):
        if not rows:
            continue
        fa, lg, po = _mean(rows, "align/test/recall@20"), _mean(rows, "pretrain/test/recall@20"), _mean(rows, "popularity/test/recall@20")
        out.append((f"{tag}. {num}: LightGCN+FACE R@20 >= LightGCN - 0.005 (delta {fa - lg:+.4f})", f">= {lg - 0.005:.4f}",
                    per(rows, "align/test/recall@20"), fa, fa >= lg - 0.005))
        out.append((f"{tag}. {num}: both >= 2 x popularity R@20 (LightGCN {lg:.4f})", f">= {2 * po:.4f}",
                    per(rows, "pretrain/test/recall@20"), min(fa, lg), min(fa, lg) >= 2 * po))
    if ml:
        ha, hm = _mean(ml, "align/hit@10"), _mean(ml, "map/hit@10")
        out.append(("4. Hit@10 >= 0.30", ">= 0.30", per(ml, "align/hit@10"), ha, ha >= 0.30))
        out.append(("4. Hit@10 >= map-only + 0.10", f">= {hm + 0.10:.4f}", per(ml, "align/hit@10"), ha, ha >= hm + 0.10))
    return out


def _figures(rows: list[dict], name: str) -> list[str]:
    """Per-seed tables of one dataset (recommendation, then the descriptor figures)."""
    L = [f"| method | seed | Recall@20 | NDCG@20 | paper |", "|---|---|---|---|---|"]
    for label, pre in (("popularity", "popularity"), ("LightGCN (stage 0)", "pretrain"), ("LightGCN+FACE map-only", "map"),
                       ("LightGCN+FACE (align)", "align")):
        for r in rows:
            L.append(f"| {label} | {r['seed']} | {_f(r['final'].get(pre + '/test/recall@20'))} | "
                     f"{_f(r['final'].get(pre + '/test/ndcg@20'))} | n/a (not recovered) |")
        L.append(f"| **{label}** | mean | {_f(_mean(rows, pre + '/test/recall@20'))} | {_f(_mean(rows, pre + '/test/ndcg@20'))} | n/a (not recovered) |")
    L.append("")
    if name == "synthetic":
        L += ["| seed | FACE-align items | FACE-align users | map-only items | map-only users | random items | chance items | "
              "codebook usage (align) | recon cos | constant |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        keys = ["align/precision_item", "align/precision_user", "map/precision_item", "map/precision_user",
                "random/precision_item", "chance/precision_item", "align/codebook_usage", "align/recon_cos", "align/recon_cos_const"]
        for r in rows + [None]:
            g = r["final"] if r else {k: _mean(rows, k) for k in keys}
            L.append(f"| {r['seed'] if r else 'mean'} | " + " | ".join(_f(g.get(k)) for k in keys) + " |")
    else:
        L += ["| seed | Hit@10 FACE-align | map-only | random tokens | codebook usage (align) |", "|---|---|---|---|---|"]
        keys = ["align/hit@10", "map/hit@10", "random/hit@10", "align/codebook_usage"]
        for r in rows + [None]:
            g = r["final"] if r else {k: _mean(rows, k) for k in keys}
            L.append(f"| {r['seed'] if r else 'mean'} | " + " | ".join(_f(g.get(k)) for k in keys) + " |")
    L.append("")
    return L


def write_report(results: list[dict], out: Path, wall: float | None, dev_rows: list[dict] | None = None,
                 cached: int = 0, wall_dev: float | None = None, workers: int | None = None) -> Path:
    dev_rows = dev_rows or []
    syn = [r for r in results if r["data"] == "synthetic"]
    ml = [r for r in results if r["data"] == "movielens"]
    L: list[str] = []
    seeds_of = lambda rows: ", ".join(str(r["seed"]) for r in rows) or "none"
    walls = [r["wall_s"] for r in results]
    when = sorted(r.get("finished", "") for r in results)
    L += ["# FACE — reproduction report", "",
          "Spec: `methods/face.md` (FACE, NeurIPS 2025, arXiv 2510.15729). Written by `methodlab reproduce face` "
          "(development seeds: `METHODLAB_FACE_SEEDS=10 METHODLAB_FACE_DATA=synthetic methodlab reproduce face`; report only: "
          "`METHODLAB_FACE_REPORT_ONLY=1 methodlab reproduce face`).",
          (f"Reproduction wall time {wall / 60:.1f} min" if wall is not None else
           f"Reproduction wall time about {_span(results) / 60:.0f} min (first start to last finish of the runs in `face_runs.json`)")
          + f" on the shared 2-core CPU ({_concurrency(results)} runs in parallel, separate processes, 1 torch thread each, "
          f"nice 5, other engineers' jobs on the same 2 cores, load average ~10-28); per-run wall {min(walls, default=0):.0f}-{max(walls, default=0):.0f} s"
          + (f"; runs finished {when[0]} to {when[-1]}" if when and when[0] else "") + ".",
          f"Seeds run: synthetic {seeds_of(syn)}; MovieLens {seeds_of(ml)}. Code hash {code_hash()}"
          + (f"; {cached} run(s) reused from the json (same config and code hash)" if cached and wall is not None else "") + ".", "",
          f"Recipe: {'the spec' + chr(39) + 's CPU preset' if PRESET == 'spec' else 'the spec' + chr(39) + 's CPU preset REDUCED for time'}, every arm alike: "
          f"LightGCN d=64, L=2; W=8, w=32, FFN 64; MiniLM codebook V'=8,000 "
          f"(filtered vocabulary); batch 256; pretrain <= 40 epochs (early stop, patience 10); map "
          f"{DATASETS['synthetic']['map_epochs']} epochs (synthetic) / {DATASETS['movielens']['map_epochs']} (MovieLens); "
          f"align {CPU['align_steps']} steps with align_rows {CPU['align_rows']}"
          + ("" if PRESET == "spec" else " (spec: map 5 / 2 epochs, align_rows 64; reduced because on the shared 2-core "
             "CPU, at load average ~27, one single-thread run received ~5 % of a core and the spec's runs, started at "
             "11:43 UTC, had done ~1/5 of their work after 19 min; `METHODLAB_FACE_PRESET=spec` runs the spec's preset)")
          + ". LightGCN = the stage-0 "
          "checkpoint, map-only = stage 1 and FACE-align = stage 2 of the same run; random tokens and popularity in the "
          "same evaluation. The data are the same for every seed. Paper column: n/a (not recovered) for every row. "
          "Thresholds are the spec's bars (uncalibrated); the development seed(s) below ran with the same code and "
          "recipe.", ""]
    claims = _claims(syn, ml)
    if claims:
        L += ["## Pass / fail (reported seeds)", "", "| claim | bar | per seed | mean | result |", "|---|---|---|---|---|"]
        L += [f"| {c} | {b} | {ps} | {m:.4f} | {'PASS' if ok else 'FAIL'} |" for c, b, ps, m, ok in claims]
        L.append("")
    for name, rows in (("synthetic", syn), ("MovieLens", ml)):
        if rows:
            L += [f"## {name}: recommendation (test, training items masked) and descriptors", ""] + _figures(rows, name.lower())
    if results:
        L += ["## Times per stage and seed (wall seconds; each single-thread run received roughly 5-10 % of a core)", ""] + _times_table(results)
        L += ["", "setup = MiniLM load, codebook filter, data (k-means concepts / MovieLens split), cached profile "
              "embeddings; pretrain/map/align = training of that stage (align includes the precision/val logging every "
              "10 steps); eval = the stage's full evaluation (ranking, descriptors, reconstruction, text retrieval).", ""]
    L += _causes(syn, ml, out)
    L += _spec_seed(out)
    L += _diagnosis(results, out)
    if dev_rows:
        dsyn = [r for r in dev_rows if r["data"] == "synthetic"]; dml = [r for r in dev_rows if r["data"] == "movielens"]
        fin = sorted(r.get("finished", "") for r in dev_rows)
        L += ["## Development seeds (same code and recipe as the reported seeds)", "",
              f"Seeds: synthetic {seeds_of(dsyn)}; MovieLens {seeds_of(dml)}"
              + (f"; wall {wall_dev / 60:.1f} min" if wall_dev else "")
              + (f"; runs finished {fin[0]} to {fin[-1]}" if fin and fin[0] else "")
              + ". The recipe is the one above, not chosen on these seeds. " + _dev_order(dev_rows, results)
              + " The uncalibrated bars measured:", "",
              "| claim | bar | per seed | mean | result |", "|---|---|---|---|---|"]
        L += [f"| {c} | {b} | {ps} | {m:.4f} | {'PASS' if ok else 'FAIL'} |" for c, b, ps, m, ok in _claims(dsyn, dml)]
        L.append("")
        for name, rows in (("synthetic", dsyn), ("MovieLens", dml)):
            if rows:
                L += [f"### {name}, development seeds", ""] + _figures(rows, name.lower())
        L += ["### Times, development seeds (seconds)", ""] + _times_table(dev_rows) + [""]
    L += ["## Example descriptors (first reported seed, FACE-align)", ""]
    try:
        ex = _examples(results)
        L += [f"- **{e['data']} {e['entity']} {e['id']}** — profile: {e['profile']}  \n  descriptors: {', '.join(e['descriptors'])}" for e in ex]
    except Exception as err:  # pragma: no cover
        L.append(f"(examples unavailable: {err})")
    L += ["", "![precision and L_align against align steps](face.png)", ""]
    path = out / "face.md"
    path.write_text("\n".join(L))
    _plot(results or dev_rows, out / "face.png")
    return path


def _causes(syn: list[dict], ml: list[dict], out: Path) -> list[str]:
    """Why each failing claim fails, with the figures of the runs and of the probes (face_diagnosis.json)."""
    p = out / "face_diagnosis.json"
    d = json.loads(p.read_text()) if p.exists() else {}
    h, a, m, c = d.get("hub", {}), d.get("align", {}), d.get("movielens", {}), d.get("cf", {})
    L = []
    if syn:
        pa, pm, ch = _mean(syn, "align/precision_item"), _mean(syn, "map/precision_item"), _mean(syn, "chance/precision_item")
        bar1 = max(0.25, 3 * pm, 10 * ch)
        if pa < bar1:
            t = (f"**Claim 1 falls short** by {bar1 - pa:.3f}: FACE-align precision {pa:.4f} = {pa / max(ch, 1e-9):.1f} x chance "
                 f"({ch:.4f}) and {pa / max(pm, 1e-9):.2f} x map-only ({pm:.4f}), bar {bar1:.2f}. The descriptors use "
                 f"{_mean(syn, 'align/codebook_usage') * 100:.1f} % of the codebook.")
            if h:
                t += (f" Cause (probes below, dev seed 10): the quantiser collapses onto a few hub tokens per slot "
                      f"({min(h['distinct_tokens_per_slot'])}-{max(h['distinct_tokens_per_slot'])} distinct tokens per slot over 800 items "
                      "after the map stage; the codebook term pulls the used codes onto the z_e clouds), so most entities "
                      "share most words; this is the spec's rule (squared L2 to the "
                      "mapped filtered codebook, greedy distinct) and the official code's, not a metric bug, and spreading the "
                      f"tokens (slot-centred z_e: usage {h['usage_slot_centred'] * 100:.0f} %) leaves precision at chance "
                      f"({h['precision_slot_centred']:.4f}). The alignment signal itself is usable: the true concept words "
                      f"through the align stage's input path retrieve their profile at Hit@10 {h['gt_words_hit10_train_path']:.2f} "
                      f"(learned words {h['learned_words_hit10_train_path']:.2f}), i.e. the loss points the right way, but in these "
                      f"runs {CPU['align_steps']} steps of {CPU['align_rows']} rows at weight 0.1 do not move z_e out of the "
                      "hubs' Voronoi cells.")
            curves = [{h["align_step"]: h["align/precision_item"] for h in r["history"] if "align/precision_item" in h} for r in syn]
            steps = sorted(set.intersection(*(set(cv) for cv in curves))) if curves and all(curves) else []
            if steps:
                t += (" Within the align stage precision rises slowly, far below the bar: mean over the seeds by align step "
                      + ", ".join(f"{st_}: {np.mean([cv[st_] for cv in curves]):.4f}" for st_ in steps)
                      + f" (map-only, step 0: {pm:.4f}).")
            if a and a.get("curve"):
                cv = [(s_, p_) for s_, p_, _ in a["curve"] if p_ is not None]
                t += (f" Longer alignment does not close the gap: {cv[-1][0]} steps reach precision {cv[-1][1]:.4f} "
                      f"(step 60: {dict(cv).get(60, float('nan')):.4f}).")
            L += [t, ""]
    if ml:
        lg, po = _mean(ml, "pretrain/test/recall@20"), _mean(ml, "popularity/test/recall@20")
        fa = _mean(ml, "align/test/recall@20")
        if min(lg, fa) < 2 * po:
            t = (f"**Claim 4b popularity floor falls short** by {2 * po - min(lg, fa):.4f}: LightGCN itself reaches {lg:.4f} = "
                 f"{lg / max(po, 1e-9):.2f} x popularity ({po:.4f}); FACE changes R@20 by {fa - lg:+.4f}, so the bar fails on the "
                 "base CF model, not on FACE.")
            if c:
                big = max(c, key=lambda x: int(x[3:]))
                t += (f" Training LightGCN longer does not reach it (dev seed 10, epoch cap {big[3:]}: {c[big]['epochs_run']} "
                      f"epochs, Recall@20 {c[big]['recall@20']:.4f} = {c[big]['recall@20'] / c[big]['popularity']:.2f} x popularity): "
                      "the d=64, L=2 LightGCN of the CPU preset does not double the popularity ranking on this temporal split.")
            L += [t, ""]
        ha, hm = _mean(ml, "align/hit@10"), _mean(ml, "map/hit@10")
        if ha < max(0.30, hm + 0.10):
            t = (f"**Claim 4 falls short** by {max(0.30, hm + 0.10) - ha:.3f}: Hit@10 {ha:.4f} (map-only {hm:.4f}, random tokens "
                 f"{_mean(ml, 'random/hit@10'):.4f}, chance 0.10) with {_mean(ml, 'align/codebook_usage') * 100:.1f} % of the "
                 "codebook used: the same per-slot hub collapse as Claim 1, so the descriptor text is generic.")
            if m:
                t += (f" The text path is not the limit: 8 codebook words copied from each movie's own profile reach Hit@10 "
                      f"{m['oracle_profile_words_hit10']:.3f}.")
            L += [t, ""]
    return (["## Why the failing claims fail", ""] + L) if L else []


def _spec_seed(out: Path) -> list[str]:
    """The spec's own CPU preset (map 5 epochs, align 60 x 64 rows) on synthetic seed 0, if it was run
    (`METHODLAB_FACE_PRESET=spec METHODLAB_FACE_SEEDS=0 METHODLAB_FACE_DATA=synthetic methodlab reproduce face
    --out-dir DIR`, its face_runs.json copied to reports/face_spec_runs.json)."""
    p = out / "face_spec_runs.json"
    rows = [r for r in _load(p) if r["data"] == "synthetic"]
    if not rows:
        return []
    L = ["## The spec's own CPU preset on one seed (map 5 epochs, align 60 steps x 64 rows; synthetic)", "",
         "| seed | precision align | map-only | chance | usage | recon cos | R@20 LightGCN / +FACE | map s | align s | wall s |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["final"]
        L.append(f"| {r['seed']} | {_f(g.get('align/precision_item'))} | {_f(g.get('map/precision_item'))} | "
                 f"{_f(g.get('chance/precision_item'))} | {_f(g.get('align/codebook_usage'))} | {_f(g.get('align/recon_cos'))} | "
                 f"{_f(g.get('pretrain/test/recall@20'))} / {_f(g.get('align/test/recall@20'))} | {g.get('time/map_s', 0):.0f} | "
                 f"{g.get('time/align_s', 0):.0f} | {r['wall_s']:.0f} |")
    for r in rows:
        cv = [(h["align_step"], h["align/precision_item"]) for h in r["history"] if "align/precision_item" in h]
        if cv:
            L += ["", f"Seed {r['seed']}, precision by align step: " + ", ".join(f"{a}: {b:.4f}" for a, b in cv)
                  + ". The spec's setting does not close Claim 1's gap either (bar 0.25)."]
    return L + [""]


def _diagnosis(results: list[dict], out: Path) -> list[str]:
    """The cause of each failing claim, from the probe file (face_diagnosis.json, written by face.diagnose)."""
    p = out / "face_diagnosis.json"
    if not p.exists():
        return []
    d = json.loads(p.read_text())
    return ["## Diagnosis (probes on development seed 10, map stage of the spec's preset (5 epochs); "
            "`python -m methodlab.methods.face.diagnose`)", ""] + d.get("lines", []) + [""]


def _examples(results):
    ex = []
    for r in results:
        if r["seed"] == min(x["seed"] for x in results):
            for e in r["final"].get("examples_align", [])[:5]:
                ex.append(e | {"data": r["data"]})
    return ex


def _plot(results, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for r in results:
        h = [x for x in r["history"] if "align_step" in x]
        if not h:
            continue
        steps = [x["align_step"] for x in h]
        ax[1].plot(steps, [x["align/l_align"] for x in h], label=f"{r['data']} s{r['seed']}")
        if "align/precision_item" in h[0]:
            ax[0].plot(steps, [x["align/precision_item"] for x in h], label=f"seed {r['seed']}")
    ax[0].set_title("synthetic: item descriptor precision"); ax[0].set_xlabel("align step")
    ax[1].set_title("L_align (mean of the last 10 steps)"); ax[1].set_xlabel("align step")
    ax[0].legend(); ax[1].legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=90); plt.close(fig)
