"""`methodlab reproduce ugodit`: the spec's acceptance experiment on 2 CPU cores.

Each job = one seed of one task: train the shared encoder with M = 4 (TRAIN_ITERATIONS, see below), then fit the test measurement for 400 iterations with each arm:
UGoDIT (frozen trained E + fresh decoder), aSeqDIP, vanilla DIP, random-encoder control. Order:
  0. calibration of the CPU MRI learning rate on the VALIDATION image (text): aSeqDIP's PSNR@400 (no training);
  1. development seed 10 (MRI 4x on shepp_logan_phantom, SR x2 on astronaut): the uncalibrated margins;
  2. reported seeds 0, 1, 2, run once; PASS/FAIL against the spec's bars;
  3. development seeds 11, 12 and the report-only rows (seed 0): deblur_nonlinear on astronaut, SR x2 on
     Fashion-MNIST sneakers (28 -> 32 padded).
Training iterations: the spec's 800 (80 outer x 10 inner). The spec lets them shrink (never the test budget) when
a claim exceeds 10 minutes: UGODIT_TRAIN_ITERATIONS=400 does that (reports/ugodit_train400.md was measured so,
while 8 engineers shared this machine's 2 cores at ~0.1 core per process).
Results are cached in reports/ugodit_runs.json (a rerun only computes what is missing); the report is rewritten
after every phase, so an interrupted run still shows what was measured."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from methodlab.core.device import set_threads
from methodlab.methods.ugodit.config import DEV_SEEDS, PRESETS, SEEDS
from methodlab.methods.ugodit.evaluate import curve_at, per_seed_margins

ARMS = ("ugodit", "aseqdip", "dip", "random_encoder")
ARM_NAMES = {"ugodit": "UGoDIT", "aseqdip": "aSeqDIP", "dip": "vanilla DIP", "random_encoder": "random-encoder control"}
CHECK_ITS = (50, 150, 400)
MRI_LRS = (3e-4, 1e-3, 3e-3)
TRAIN_ITERATIONS = int(os.environ.get("UGODIT_TRAIN_ITERATIONS", "800"))
DIAG_LAMS = (0.5, 0.1)
TRIVIAL = {"mri": "zero-filled", "sr": "bilinear", "deblur": "degraded image", "sr_fashion": "bilinear"}


def run_job(job: dict) -> dict:
    """Train E on the M training measurements (seed), then every arm on the test (or val) measurement."""
    from methodlab.methods.ugodit.algo import TrainState, fit_measurement
    from methodlab.methods.ugodit.config import Config
    from methodlab.methods.ugodit.data import build_problems
    from methodlab.methods.ugodit.evaluate import psnr, ssim

    set_threads(1)  # the recipe's one thread per process (fit no longer narrows by default)
    cfg = Config(**{**PRESETS[job["preset"]], **job.get("override", {}), "seed": job["seed"]})
    probs = build_problems(cfg)
    target = probs[job.get("target", "test")]
    t0 = time.perf_counter()
    out = {"key": job["key"], "image": target.name, "arms": {}, "train_iterations": 0, "train_seconds": 0.0,
           "trivial_psnr": psnr(target.trivial, target.gt), "trivial_ssim": ssim(target.trivial, target.gt)}
    enc = None
    if "ugodit" in job.get("arms", ARMS):
        st = TrainState(cfg, probs["train"], cfg.seed)
        while st.step < cfg.value("train_iterations"):
            st.train_step()
        out.update(train_seconds=time.perf_counter() - t0, train_loss_first=st.losses[0],
                   train_loss_last=st.losses[-1], train_iterations=st.step)
        enc = st.encoder.state_dict()
    for arm in job.get("arms", ARMS):
        r = fit_measurement(cfg, target, arm, enc if arm == "ugodit" else None, cfg.seed)
        out["arms"][arm] = {"curve": r["curve"], "seconds": r["seconds"]}
    return out


def _run_all(jobs: list[dict], cache: dict, cache_path: Path, workers: int, log) -> None:
    todo = [j for j in jobs if j["key"] not in cache]
    if not todo:
        return
    with ProcessPoolExecutor(max_workers=max(1, workers)) as ex:
        for res in ex.map(run_job, todo):
            cache[res["key"]] = res
            cache_path.write_text(json.dumps(cache))
            log(f"done {res['key']}: train {res['train_seconds']:.0f} s, "
                + ", ".join(f"{a} {curve_at(res, a, 400):.2f}" for a in res["arms"]))


def claims(results: list[dict], task: str) -> list[dict]:
    """The four claims on the mean over seeds (PSNR of the EMA output)."""
    m = lambda arm, it: float(np.mean([curve_at(r, arm, it) for r in results]))  # noqa: E731
    triv = float(np.mean([r["trivial_psnr"] for r in results]))
    rows = [
        ("1. transfer speeds up convergence", "PSNR_150(UGoDIT) - PSNR_150(aSeqDIP) >= +1.0 dB",
         m("ugodit", 150) - m("aseqdip", 150), 1.0),
        ("2. no cost in final quality", "PSNR_400(UGoDIT) - PSNR_400(aSeqDIP) >= -0.2 dB",
         m("ugodit", 400) - m("aseqdip", 400), -0.2),
        ("3. the trained encoder is what helps", "PSNR_150(UGoDIT) - PSNR_150(random encoder) >= +0.5 dB",
         m("ugodit", 150) - m("random_encoder", 150), 0.5),
        ("4a. UGoDIT beats the trivial reconstruction", f"PSNR_400(UGoDIT) - {TRIVIAL[task]} >= +2 dB",
         m("ugodit", 400) - triv, 2.0),
        ("4b. aSeqDIP beats the trivial reconstruction", f"PSNR_400(aSeqDIP) - {TRIVIAL[task]} >= +2 dB",
         m("aseqdip", 400) - triv, 2.0),
    ]
    return [{"claim": c, "bar": b, "value": v, "threshold": t, "pass": bool(v >= t)} for c, b, v, t in rows]


def _table(results: list[dict], seeds) -> list[str]:
    head = "| seed | arm | " + " | ".join(f"PSNR@{i}" for i in CHECK_ITS) + " | " + \
        " | ".join(f"SSIM@{i}" for i in CHECK_ITS) + " | fit s |"
    lines = [head, "|" + "---|" * (3 + 2 * len(CHECK_ITS)) + ""]
    for s, r in zip(seeds, results):
        for a in ARMS:
            lines.append(f"| {s} | {ARM_NAMES[a]} | " + " | ".join(f"{curve_at(r, a, i):.2f}" for i in CHECK_ITS) + " | "
                         + " | ".join(f"{curve_at(r, a, i, 'ssim_ema'):.3f}" for i in CHECK_ITS)
                         + f" | {r['arms'][a]['seconds']:.1f} |")
        lines.append(f"| {s} | {'trivial'} | {r['trivial_psnr']:.2f} | | | {r['trivial_ssim']:.3f} | | | |")
    for a in ARMS:
        lines.append(f"| **mean** | {ARM_NAMES[a]} | " + " | ".join(
            f"{np.mean([curve_at(r, a, i) for r in results]):.2f}" for i in CHECK_ITS) + " | " + " | ".join(
            f"{np.mean([curve_at(r, a, i, 'ssim_ema') for r in results]):.3f}" for i in CHECK_ITS) + " | |")
    lines.append(f"| **mean** | trivial | {np.mean([r['trivial_psnr'] for r in results]):.2f} | | | "
                 f"{np.mean([r['trivial_ssim'] for r in results]):.3f} | | | |")
    return lines


def _plot(panels: list[tuple[str, list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, results) in zip(axes[0], panels):
        for a in ARMS:
            its = [row["iteration"] for row in results[0]["arms"][a]["curve"]]
            ys = np.mean([[row["psnr_ema"] for row in r["arms"][a]["curve"]] for r in results], 0)
            ax.plot(its, ys, label=ARM_NAMES[a])
        ax.axhline(np.mean([r["trivial_psnr"] for r in results]), color="gray", ls=":", label="trivial")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylabel("PSNR of EMA output (dB)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_name(quick: bool = False) -> str:
    return "ugodit_quick" if quick else "ugodit" if TRAIN_ITERATIONS == 800 else f"ugodit_train{TRAIN_ITERATIONS}"


def main(out_dir: str = "reports", workers: int = 2, quick: bool = False) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / f"{report_name(quick)}_runs.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    quiet = os.environ.get("METHODLAB_QUIET") == "1"
    log = (lambda *_: None) if quiet else (lambda m: print(f"[ugodit {time.strftime('%H:%M:%S')}] {m}", flush=True))
    t_start = time.perf_counter()
    override = {"train_iterations": 40, "test_iterations": 150, "image_size": 32} if quick else \
        {"train_iterations": TRAIN_ITERATIONS}
    dev_seeds, seeds = ((10,), (0,)) if quick else (DEV_SEEDS, SEEDS)
    # 0. MRI learning rate on the validation image: aSeqDIP (random weights, no training) PSNR of the EMA at the end
    lr_jobs = [{"key": f"cal/mri/lr={lr:g}", "preset": "mri", "seed": 10, "target": "val", "arms": ("aseqdip",),
                "override": {**override, "test_lr": lr}} for lr in MRI_LRS]
    _run_all(lr_jobs, cache, cache_path, workers, log)
    t_end = override.get("test_iterations", 400)
    cal = {lr: curve_at(cache[j["key"]], "aseqdip", t_end) for lr, j in zip(MRI_LRS, lr_jobs)}
    mri_lr = max(cal, key=lambda k: cal[k])
    mri_over = {**override, "lr": mri_lr, "test_lr": mri_lr}

    def job(ph, t, s):
        return {"key": f"{ph}/{t}/{s}", "preset": t, "seed": s, "override": mri_over if t == "mri" else override}

    fashion_reason = None
    extra_jobs = [{"key": "only/deblur/0", "preset": "deblur", "seed": 0, "override": override}]
    try:
        from methodlab.data.ugodit_images import fashion_mnist

        fashion_mnist(7, 6)
        extra_jobs.append({"key": "only/sr_fashion/0", "preset": "sr_fashion", "seed": 0,
                           "override": {k: v for k, v in override.items() if k != "image_size"}})
    except Exception as err:  # MissingSourceError: the Debian package is absent
        fashion_reason = str(err)
    phases = [[job("dev", t, dev_seeds[0]) for t in ("mri", "sr")],
              [job("rep", t, s) for s in seeds for t in ("mri", "sr")],
              [job("dev", t, s) for s in dev_seeds[1:] for t in ("mri", "sr")], extra_jobs,
              # diagnostic for the SR claim 4: the autoencoding weight lambda anchors x to the bilinear input
              [{"key": f"diag/sr/lam={lam:g}", "preset": "sr", "seed": seeds[0], "arms": ("aseqdip",),
                "override": {**override, "lam": lam}} for lam in DIAG_LAMS]]
    path = None
    for ph in phases:
        _run_all(ph, cache, cache_path, workers, log)
        path = write_report(out, cache, cal, mri_lr, dev_seeds, seeds, fashion_reason,
                            time.perf_counter() - t_start, quick, override)
        log(f"report: {path}")
    return path


def write_report(out: Path, cache: dict, cal: dict, mri_lr: float, dev_seeds, seeds, fashion_reason, wall: float,
                 quick: bool, override: dict) -> Path:
    name = report_name(quick)
    L = [f"# UGoDIT reproduction{' (QUICK: not the acceptance run)' if quick else ''}", "",
         "Generated by `methodlab reproduce ugodit` (spec `methods/ugodit.md`, issue #29). CPU presets of the spec: "
         "64 x 64 grayscale images from scikit-image (training camera, moon, coins, brick; validation text; test "
         "shepp_logan_phantom for MRI, astronaut for SR / deblur), M = 4, encoder retrained per seed for "
         f"{override.get('train_iterations', 800)} iterations ({override.get('train_iterations', 800) // 10} outer x 10 "
         "inner; the spec's preset is 800" + ("" if override.get("train_iterations", 800) == 800 else ": shrunk because "
         "8 engineers share this machine's 2 cores - the training budget shrinks, never the test budget, as the spec "
         "says") + "), test fits of "
         f"{override.get('test_iterations', 400)} iterations; skip net 32 ch / 4 scales (SR, deblur), "
         "U-Net 16-32-64-64 (MRI 4x, 4 simulated coils, 16 of 64 lines, 5 central). Measurements from data seed 0 "
         "for every seed. PSNR / SSIM of the EMA output (decay 0.99; magnitude for MRI) against the ground truth, "
         "both divided by the ground truth's max, data range 1. Every number below was measured by this run.", ""]
    L += ["## Calibration (validation image only)", "",
          "CPU MRI learning rate (used for training and test), chosen by aSeqDIP's PSNR (EMA) at the last test "
          "iteration on the validation image `text` (seed 10; random weights, so no encoder training is needed; "
          "the spec's preset is 1e-3):", "",
          "| lr | val PSNR (dB) |", "|---|---|"]
    L += [f"| {lr:g}{' (chosen)' if lr == mri_lr else ''} | {v:.2f} |" for lr, v in cal.items()]
    summary_rows = []
    panels = []
    for task, title in (("mri", "MRI 4x, shepp_logan_phantom"), ("sr", "SR x2, astronaut")):
        dev_s = [s for s in dev_seeds if f"dev/{task}/{s}" in cache]
        rep_s = [s for s in seeds if f"rep/{task}/{s}" in cache]
        dev = [cache[f"dev/{task}/{s}"] for s in dev_s]
        rep = [cache[f"rep/{task}/{s}"] for s in rep_s]
        missing = [f"dev {s}" for s in dev_seeds if s not in dev_s] + [f"seed {s}" for s in seeds if s not in rep_s]
        if missing:
            L += ["", f"## {title}", "", f"**Not measured (run interrupted or still running): {', '.join(missing)}.**"]
        if not dev or not rep:
            continue
        dev_seeds_t, seeds_t = dev_s, rep_s
        cdev, crep = claims(dev, task), claims(rep, task)
        per = per_seed_margins(rep)
        L += ["", f"## {title}", "", "### Claims (mean over seeds; every bar is the spec's, marked uncalibrated there)", "",
              f"| claim | bar | paper | dev seeds {', '.join(map(str, dev_seeds_t))} (mean) | reported seeds "
              f"{', '.join(map(str, seeds_t))} (per seed) | reported mean | result |",
              "|---|---|---|---|---|---|---|"]
        for cd, cr, k in zip(cdev, crep, per):
            L.append(f"| {cr['claim']} | {cr['bar']} | n/a (not recovered) | {cd['value']:+.2f} dB | "
                     + ", ".join(f"{v:+.2f}" for v in per[k]) + f" | {cr['value']:+.2f} dB | "
                     + ("PASS" if cr["pass"] else f"FAIL (short by {cr['threshold'] - cr['value']:.2f} dB)") + " |")
            summary_rows.append((title, cr))
        L += ["", "### Reported seeds: PSNR / SSIM at iterations 50, 150, 400", ""] + _table(rep, seeds_t)
        L += ["", "### Development seeds", ""] + _table(dev, dev_seeds_t)
        L += ["", "Times (s, wall on the shared machine): encoder training per seed " + ", ".join(
            f"seed {s}: {r['train_seconds']:.0f}" for s, r in zip(seeds_t, rep)) + "; dev " + ", ".join(
            f"{s}: {r['train_seconds']:.0f}" for s, r in zip(dev_seeds_t, dev)) + ". Training loss first -> last: "
            + ", ".join(f"{r['train_loss_first']:.3g} -> {r['train_loss_last']:.3g}" for r in rep) + "."]
        panels.append((f"{title} (seeds {', '.join(map(str, seeds_t))})", rep))
    diag = [(lam, cache[f"diag/sr/lam={lam:g}"]) for lam in DIAG_LAMS if f"diag/sr/lam={lam:g}" in cache]
    if diag and f"rep/sr/{seeds[0]}" in cache:
        base = cache[f"rep/sr/{seeds[0]}"]
        L += ["", "## Diagnostic: SR x2 aSeqDIP against the autoencoding weight lambda (seed "
              f"{seeds[0]}, test image; not used to choose anything)", "",
              "| lambda | PSNR@150 | PSNR@400 | PSNR@400 of the last output (no EMA) | bilinear |", "|---|---|---|---|---|",
              f"| 2.0 (paper) | {curve_at(base, 'aseqdip', 150):.2f} | {curve_at(base, 'aseqdip', 400):.2f} | "
              f"{curve_at(base, 'aseqdip', 400, 'psnr'):.2f} | {base['trivial_psnr']:.2f} |"]
        L += [f"| {lam:g} | {curve_at(r, 'aseqdip', 150):.2f} | {curve_at(r, 'aseqdip', 400):.2f} | "
              f"{curve_at(r, 'aseqdip', 400, 'psnr'):.2f} | {r['trivial_psnr']:.2f} |" for lam, r in diag]
        L += ["", "The term lambda * mse(x, z) with z initialised at the bilinear image and refreshed to the output "
              "every 10 steps keeps the reconstruction near the bilinear input within a 400-step budget; vanilla DIP "
              "(lambda 0, fixed input) is the arm that clears the bilinear baseline."]
    if not quick:  # issue 29: `python -m methodlab.methods.ugodit.diagnostics [--task sr]` measured these
        from methodlab.methods.ugodit.diagnostics import TASKS, json_path, section

        for tk in TASKS:  # MRI, then SR x2
            if json_path(out, tk).exists():
                L += [""] + section(json.loads(json_path(out, tk).read_text()), cache)
    L += ["", "## Report-only rows (seed 0, no bar)", ""]
    for key, title in (("only/deblur/0", "deblur_nonlinear, astronaut (parametric blur, not comparable with the "
                        "paper's BKSE GAN blur)"), ("only/sr_fashion/0", "SR x2, Fashion-MNIST sneaker (28 -> 32 padded)")):
        if key not in cache:
            L += [f"- {title}: skipped: {fashion_reason or 'not run'}"]
            continue
        r = cache[key]
        L += [f"### {title}", "", f"encoder training {r['train_seconds']:.0f} s; test image {r['image']}", ""]
        L += _table([r], (0,))
        panels.append((title.split(",")[0] + ", " + r["image"], [r]))
    png = out / f"{name}.png"
    if panels:
        _plot(panels, png)
    L += ["", f"![PSNR against iterations]({png.name})", "",
          "## Summary", "", "| task | claim | measured | result |", "|---|---|---|---|"]
    L += [f"| {t} | {c['claim']} | {c['value']:+.2f} dB | {'PASS' if c['pass'] else 'FAIL'} |" for t, c in summary_rows]
    L += ["", f"Wall time of this invocation: {wall / 60:.1f} min (runs cached in `{name}_runs.json` are not re-run; "
          "per-run times are in the tables). Paper figures: n/a (not recovered) - the official README shows results "
          "only as an image and the stored arXiv copy has no tables."]
    md = out / f"{name}.md"
    md.write_text("\n".join(L) + "\n")
    return md
