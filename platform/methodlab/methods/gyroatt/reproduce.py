"""`methodlab reproduce gyroatt`: Claims 1-3 of the spec's acceptance on SyntheticMI, 3 seeds, plus the
pyriemann baselines. Writes reports/gyroatt.md and reports/gyroatt.png. Finished runs under
results/reproduce/gyroatt/ are reused by a re-run."""

from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from methodlab.methods.gyroatt.grassmann import GEOMETRIES

SEEDS = (0, 1, 2)
C2_SEEDS = 3  # how many of the seeds Claim 2 runs (issue 22: all three)
C2_LONG_EPOCHS = 20  # issue 22 item 4: the longer run beside the spec's 5-epoch bar (subspace geometries)
SUBSPACE = ("spsd-aim", "spsd-lem", "spsd-lcm", "grassmann")
JOB = "jobs/gyroatt/acceptance.yaml"
SPAN = "best/test/accuracy"  # test accuracy of the epoch with the lowest validation loss
SANITY = (0.55, 0.85)  # spec: TS+LR outside this band means the generator differs from the spec
CLAIM1 = {"gyroatt-spd-lem": [], "matt": ["arch=matt"], "spdnet": ["arch=spdnet"]}
CLAIM3 = {"gyroatt-spd-lem": [], "gyroatt-uniform": ["attention=uniform"], "spdnet": ["arch=spdnet"],
          "matt": ["arch=matt"], "gyroatt-neg_sq_dist": ["score=neg_sq_dist"]}


def _run(args) -> dict:
    name, overrides, storage = args
    from methodlab.core.device import set_threads

    set_threads(1)  # one torch (and BLAS) thread per worker process, as before
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    try:
        out = run_local(load_job(JOB, overrides=overrides), name, storage, quiet=True)
        return {**out["metrics"], "run_dir": out["run_dir"]}
    except Exception as err:  # a NaN or a crash is a Claim-2 result, not a reason to lose the other runs
        return {"error": f"{type(err).__name__}: {err}"}


def tasks_for(seeds, c2_seeds) -> list[tuple[str, list[str]]]:
    tasks = []
    for s in c2_seeds:
        for g in GEOMETRIES:
            tasks.append((f"c2-{g}-seed{s}", [f"geometry={g}", "epochs=5", "checkpoint_every=5", f"seed={s}"]))
    for s in c2_seeds:
        for g in SUBSPACE:
            tasks.append((f"c2long-{g}-seed{s}", [f"geometry={g}", f"epochs={C2_LONG_EPOCHS}",
                                                  f"checkpoint_every={C2_LONG_EPOCHS}", f"seed={s}"]))
    for s in seeds:
        for label, over in CLAIM1.items():
            tasks.append((f"c1-{label}-seed{s}", [*over, f"seed={s}"]))
        for label, over in CLAIM3.items():
            tasks.append((f"c3-{label}-seed{s}", [*over, "evidence_profile=one_segment", f"seed={s}"]))
    return tasks


def claim2_lines(res, c2_seeds) -> tuple[bool, list[str]]:
    """Claim 2 table (spec: 5 epochs, each geometry >= 0.40) and the longer subspace run beside it."""
    c2_rows = {g: [res[f"c2-{g}-seed{s}"] for s in c2_seeds] for g in GEOMETRIES}
    c2_ok = {g: all("error" not in r and r.get(SPAN, 0) >= 0.40 for r in rows) for g, rows in c2_rows.items()}
    cols = " | ".join(f"seed {s}" for s in c2_seeds)
    row = lambda lab, vals: f"| {lab} | " + " | ".join(f3(v) for v in vals) + f" | {f3(mean(vals))} |"  # noqa: E731
    ok = all(c2_ok.values())
    L = [f"## Claim 2 (all 7 geometries train 5 epochs without NaN, each >= 0.40): {'PASS' if ok else 'FAIL'}", "",
         f"Seeds {list(c2_seeds)}; pass = every seed of the geometry finite and >= 0.40 (spec bar, unchanged).", "",
         f"| geometry | {cols} | mean | pass |", "|---|" + "---|" * (len(c2_seeds) + 2)]
    for g, rows in c2_rows.items():
        L.append(row(g, [r.get(SPAN, float("nan")) for r in rows]) + f" {'PASS' if c2_ok[g] else 'FAIL'} |")
    long = {g: [res.get(f"c2long-{g}-seed{s}", {}) for s in c2_seeds] for g in SUBSPACE}
    if all(long.values()):
        L += ["", f"Longer run, not the claim (same recipe, {C2_LONG_EPOCHS} epochs, subspace geometries; "
                  "spec bar 0.40 at 5 epochs):", "", f"| geometry | {cols} | mean | >= 0.40 |",
              "|---|" + "---|" * (len(c2_seeds) + 2)]
        for g, rows in long.items():
            vals = [r.get(SPAN, float("nan")) for r in rows]
            L.append(row(g, vals) + f" {'yes' if all(v >= 0.40 for v in vals) else 'no'} |")
    return ok, L


def claim2_main(out_dir: str = "reports", workers: int = 2) -> Path:
    """Claim 2 alone (3 seeds, 5 epochs) plus the longer subspace run -> reports/gyroatt_claim2.md.
    Same run names and storage as main(), so a later full `methodlab reproduce gyroatt` reuses them."""
    t0 = time.time()
    storage = str(Path("results/reproduce/gyroatt").resolve())
    tasks = [(n, o, storage) for n, o in tasks_for((), SEEDS[:C2_SEEDS])]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        res = dict(zip([t[0] for t in tasks], pool.map(_run, tasks)))
    _, L = claim2_lines(res, SEEDS[:C2_SEEDS])
    errors = [f"- {n}: {r['error']}" for n, r in sorted(res.items()) if "error" in r]
    head = ["# gyroatt — Claim 2 rerun (issue 22 item 4)", "",
            f"Command: `python -m methodlab.methods.gyroatt.reproduce --claim2`; wall time {time.time() - t0:.0f} s "
            f"({workers} runs at a time, 1 torch thread each); setting `{JOB}` with geometry=<g>, epochs=5.", ""]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "gyroatt_claim2.md"
    report.write_text("\n".join(head + L + ([""] + errors if errors else [])) + "\n")
    return report


def permutation_error(run_dir: str) -> float:
    """Max |A(perm tokens) - perm(A(tokens))| on test trials of a trained Claim-3 model (spec: <= 1e-6)."""
    import torch

    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.gyroatt.data import build_data
    from methodlab.methods.gyroatt.predictor import Predictor

    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run_dir) / "checkpoints"))
    model = pred.model
    x = build_data(pred.cfg).x_test[:64]
    with torch.no_grad():
        s = model.tokens(x)
        worst = 0.0
        for perm in ([1, 2, 0], [2, 0, 1], [0, 2, 1]):
            p = torch.tensor(perm, device=s.device)
            _, a = model.att(model.geom.encode(s))
            _, ap = model.att(model.geom.encode(s[:, p]))
            worst = max(worst, float((ap - a[:, p][:, :, p]).abs().max()))
    return worst


def mean(xs) -> float:
    xs = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def f3(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def plot(res, seeds, c2_seeds, riem, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(17, 4.8))
    panels = [("Claim 1: ramp evidence (60 epochs)", "c1", list(CLAIM1)),
              ("Claim 2: 7 geometries (5 epochs)", "c2", list(GEOMETRIES)),
              ("Claim 3: one_segment evidence (60 epochs)", "c3", list(CLAIM3))]
    for a, (title, pre, labels) in zip(ax, panels):
        for i, lab in enumerate(labels):
            vals = [res[f"{pre}-{lab}-seed{s}"].get(SPAN, float("nan")) for s in (c2_seeds if pre == "c2" else seeds)]
            a.bar(i, mean(vals), color="tab:blue" if "gyroatt" in lab or pre == "c2" else "tab:gray", alpha=0.7)
            a.plot([i] * len(vals), vals, "k.", ms=6)
        a.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
        a.axhline(0.25, color="k", ls=":", lw=1)
        a.set_ylim(0, 1)
        a.set_title(title, fontsize=10)
        a.set_ylabel("test accuracy (best val loss)")
    ax[0].axhline(riem["c1"]["ts_lr"], color="tab:red", ls="--", lw=1, label="pyriemann TS+LR")
    ax[0].axhline(riem["c1"]["mdm"], color="tab:orange", ls="--", lw=1, label="pyriemann MDM")
    ax[0].axhline(0.70, color="tab:green", ls=":", lw=1, label="claim bar 0.70")
    ax[0].legend(fontsize=7)
    ax[1].axhline(0.40, color="tab:green", ls=":", lw=1)
    ax[2].axhline(riem["c3"]["ts_lr"], color="tab:red", ls="--", lw=1)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> Path:
    t0 = time.time()
    seeds = SEEDS[:1] if quick else SEEDS
    storage = str(Path("results/reproduce/gyroatt").resolve())
    # Claim 2 (5-epoch runs) on C2_SEEDS only: on the shared 2-core machine the 3-seed set did not fit the
    # session's time (the 60-epoch runs took ~10x their uncontended 26 s); C2_SEEDS = seeds restores it.
    c2_seeds = seeds[:C2_SEEDS]
    tasks = [(n, o, storage) for n, o in tasks_for(seeds, c2_seeds)]
    print(f"[gyroatt] {len(tasks)} runs, {workers} at a time (1 torch thread each) -> {storage}", flush=True)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        res = dict(zip([t[0] for t in tasks], pool.map(_run, tasks)))

    from methodlab.methods.gyroatt.config import Config
    from methodlab.methods.gyroatt.riemann import riemann_scores
    from methodlab.specs.files import load_job

    riem = {}
    for key, over in (("c1", []), ("c3", ["evidence_profile=one_segment"])):
        cfg: Config = load_job(JOB, overrides=over).config
        riem[key] = {c: riemann_scores(cfg.model_copy(update={"riemann_classifier": c}))["test/accuracy"]
                     for c in ("ts_lr", "mdm")}
    acc = lambda n: res[n].get(SPAN, float("nan"))  # noqa: E731

    # Claim 1
    lem = [acc(f"c1-gyroatt-spd-lem-seed{s}") for s in seeds]
    c1 = mean(lem) >= 0.70 and mean(lem) >= riem["c1"]["ts_lr"] - 0.05
    # Claim 2
    _, c2_lines = claim2_lines(res, c2_seeds)
    # Claim 3
    g3 = [res[f"c3-gyroatt-spd-lem-seed{s}"] for s in seeds]
    stds = [r.get("best/attn/std_over_trials", float("nan")) for r in g3]
    perm_err = [permutation_error(r["run_dir"]) if "run_dir" in r else float("nan") for r in g3]
    c3 = all(x > 1e-3 for x in stds) and all(e <= 1e-6 for e in perm_err)
    band_ok = SANITY[0] <= riem["c1"]["ts_lr"] <= SANITY[1]

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "gyroatt.png"
    plot(res, seeds, c2_seeds, riem, png)
    seed_cols = " | ".join(f"seed {s}" for s in seeds)
    hdr = f"| model | {seed_cols} | mean |\n|---|" + "---|" * (len(seeds) + 1)
    row = lambda lab, vals: f"| {lab} | " + " | ".join(f3(v) for v in vals) + f" | {f3(mean(vals))} |"  # noqa: E731
    errors = {n: r["error"] for n, r in res.items() if "error" in r}
    L = [
        "# gyroatt — reproduction report", "",
        "Paper: *GyroAtt: Towards a General Attention Framework on Gyrovector Spaces for Matrix Manifolds* (NeurIPS 2025).",
        f"Command: `methodlab reproduce gyroatt{' --quick' if quick else ''}`; wall time {time.time() - t0:.0f} s "
        f"({workers} runs at a time, 1 torch thread each); seeds {list(seeds)}.",
        f"Setting: `{JOB}`: SyntheticMI (16 channels of the colin27 10-20 montage, 4 classes, 2 s at 128 Hz, 200 train / "
        "20 val / 80 test trials per class, data seed 0 for every model seed), front end F1=16, F2=12, k=12, BiMap "
        "12 -> 8, m=3, Adam lr 5e-3, batch 32, weight decay 1e-3, power activation p=0.5, separate Q/K/V maps. "
        "Every accuracy is the test accuracy of the epoch with the lowest validation loss.", "",
        f"## Claim 1 (works, ramp evidence, 60 epochs): {'PASS' if c1 else 'FAIL'}", "",
        "Pass: GyroAtt-SPD-LEM mean >= 0.70 and >= pyriemann TS+LR - 0.05.", "", hdr,
    ]
    for lab in CLAIM1:
        L.append(row(lab, [acc(f"c1-{lab}-seed{s}") for s in seeds]))
    L += ["", f"pyriemann (deterministic): TS+LR {f3(riem['c1']['ts_lr'])}, MDM {f3(riem['c1']['mdm'])}. "
              f"TS+LR sanity band {SANITY}: {'inside' if band_ok else 'OUTSIDE (generator differs from the spec)'}; "
              "spec measurement 0.806 with 200 train trials per class.",
          f"Mean GyroAtt-SPD-LEM {f3(mean(lem))} vs TS+LR - 0.05 = {f3(riem['c1']['ts_lr'] - 0.05)}; spec prototype "
          "0.774 (0.797 / 0.781 / 0.744).", "",
          ]
    L += c2_lines
    L += ["", f"## Claim 3 (attention is input-dependent, one_segment evidence, 60 epochs): {'PASS' if c3 else 'FAIL'}", "",
          "Pass: the attention weights of GyroAtt-SPD-LEM vary over test trials (std > 1e-3) and permuting a trial's "
          "segments permutes its weights (max error <= 1e-6). The accuracy gap to the uniform-attention ablation is "
          "reported, not barred.", "", hdr]
    for lab in CLAIM3:
        L.append(row(lab, [acc(f"c3-{lab}-seed{s}") for s in seeds]))
    ev = [res[f"c3-gyroatt-spd-lem-seed{s}"].get("best/attn/evidence_weight_x_m", float("nan")) for s in seeds]
    ev2 = [res[f"c3-gyroatt-neg_sq_dist-seed{s}"].get("best/attn/evidence_weight_x_m", float("nan")) for s in seeds]
    L += ["", f"pyriemann on this split: TS+LR {f3(riem['c3']['ts_lr'])}, MDM {f3(riem['c3']['mdm'])}.", "",
          "| diagnostic (GyroAtt-SPD-LEM) | " + seed_cols + " | mean |", "|---|" + "---|" * (len(seeds) + 1),
          row("attention std over test trials", stds), row("max permutation error", perm_err),
          row("evidence-segment weight x m (1 = uniform)", ev), row("same, score=neg_sq_dist", ev2), "",
          "Permutation error is printed with 3 decimals; the raw values: " + ", ".join(f"{e:.1e}" for e in perm_err) + ".",
          "Expected from the spec's measurement: with the MAtt score in (0, 1] the softmax can favour a token by at "
          "most a factor e, so the evidence weight stays near the uniform share and the gap to uniform attention is "
          "small; score=neg_sq_dist is the spec's reported alternative row.", ""]
    if errors:
        L += ["## Runs that failed", ""] + [f"- {n}: {e}" for n, e in sorted(errors.items())] + [""]
    L += ["## Not run here", "",
          "- Real datasets (BCI IV-2a, MAMEM-SSVEP-II, BCI-ERN): no recordings ship offline; `jobs/gyroatt/bci_iv_2a.yaml` "
          "and siblings run them from an .npz / -epo.fif export. The paper's GyroAtt numbers were not found (spec).",
          "- GDLNet baseline (spec 1b) is not implemented.", "", f"![accuracies]({png.name})"]
    report = out / "gyroatt.md"
    report.write_text("\n".join(L) + "\n")
    return report


if __name__ == "__main__":
    import sys

    if "--claim2" in sys.argv:
        print(claim2_main())
    else:
        print(main())
