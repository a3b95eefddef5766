"""`methodlab reproduce ucan`: the spec's acceptance (Claims 1-3) and its report-only rows as a harness study.

Point clouds (jobs/ucan/train_analytic*.yaml): U-CAN and U-CAN w/o L_DC on development seeds 10-12, then seeds
0-2; the 1-step ablation on seed 0; every arm the same step budget. Baselines (jobs/ucan/eval_analytic.yaml, runs
of the `eval` setting): the noisy input and k-NN mean smoothing with 1, 2 and 3 iterations on the validation and
test shapes; the iteration count is chosen on the VALIDATION shapes and that count's test figures are the
baseline. Images (jobs/ucan/image_denoise.yaml): ZS-N2N with and without L_DC, seeds 10-12 then 0-2. Report only
(jobs/ucan/eval.yaml): the seed-0 models, the smoothing and the noisy input on the real meshes at 1 / 2 / 3 %
noise, and a rendering of one test torus (an `eval` run of the seed-0 model). Tasks `emd_floor`, `emd_density`
and the 10K / 50K development-seed arms of issue 44 item 10 (`point_arms`): diagnostics.py."""

from __future__ import annotations

from pathlib import Path

from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "ucan"
TRAIN, NODC, ONE, EVAL_A, EVAL_M, IMG = (f"jobs/{SLUG}/{n}.yaml" for n in (
    "train_analytic", "train_analytic_no_dc", "train_analytic_1step", "eval_analytic", "eval", "image_denoise"))
ITERS = (1, 2, 3)
NA = "n/a (not recovered)"
PC = {"ucan": "U-CAN", "nodc": "U-CAN w/o L_DC", "1step": "U-CAN 1-step"}
IMGS = {"img-plain": "ZS-N2N", "img-dc": "ZS-N2N + L_DC"}
MESH = {"mesh-noisy": "noisy input", **{f"mesh-knn{i}": f"k-NN mean ({i} it.)" for i in ITERS},
        "mesh-ucan": "U-CAN", "mesh-nodc": "U-CAN w/o L_DC"}
FAMS = ("ellipsoid", "torus", "capsule", "rounded_box", "capped_cylinder")
# --quick: 10 steps scored once on the test shapes, 60 image iterations, two real meshes at 2 % only; --full: the
# spec's 400 steps
QUICK_PC = ("max_steps=10", "eval_every=10", "eval_at_start=false", "eval_sets=[test]")
QUICK_IMG, QUICK_MESH = ("image_iters=60", "image_decay_every=30"), ("eval_noise_levels=[0.02]", "meshes=[bunny,kitten]")
FULL_PC = ("max_steps=400",)


def _arms() -> tuple[Arm, ...]:
    from methodlab.methods.ucan.diagnostics import point_arms

    pc = lambda i, job, seeds="both": Arm(i, job, ("eval_every=50",), quick=QUICK_PC, full=FULL_PC,  # noqa: E731
                                          seeds=seeds, label=PC[i])
    mesh_over = {"mesh-noisy": ("eval_method=identity",), "mesh-ucan": (), "mesh-nodc": (),
                 **{f"mesh-knn{i}": ("eval_method=knn_mean", "k=16", f"smoothing_iters={i}") for i in ITERS}}
    return (pc("ucan", TRAIN), pc("nodc", NODC), pc("1step", ONE, (0,)),
            Arm("noisy", EVAL_A, ("eval_method=identity",), seeds=(0,), label="noisy input (analytic)"),
            *(Arm(f"knn{i}", EVAL_A, (f"smoothing_iters={i}",), seeds=(0,), label=f"k-NN mean, {i} it.")
              for i in ITERS),
            *(Arm(a, IMG, (f"consistency={'true' if a == 'img-dc' else 'false'}",), quick=QUICK_IMG, label=lab)
              for a, lab in IMGS.items()),
            Arm("render", EVAL_A, ("eval_method=ucan", "render_family=torus"), seeds=(0,),
                needs=(("ucan", "checkpoint_path"),), label="seed-0 U-CAN on the test shapes (rendering)"),
            *(Arm(a, EVAL_M, mesh_over[a], quick=QUICK_MESH, seeds=(0,), label=f"{lab}, real meshes",
                  needs=((a[5:], "checkpoint_path"),) if a in ("mesh-ucan", "mesh-nodc") else ())
              for a, lab in MESH.items()),
            *point_arms(Arm, TRAIN, EVAL_A, FULL_PC))  # issue 44 item 10: 10K / 50K scans, development seeds


def emd_floor(seed: int, inputs: dict, mode: str) -> dict:
    from methodlab.methods.ucan.diagnostics import emd_floor as floor

    return floor()


def emd_density(seed: int, inputs: dict, mode: str) -> dict:
    from methodlab.methods.ucan.diagnostics import emd_density as dens

    return dens()


def knn_choice(r) -> int | None:
    """The smoothing's iteration count with the lowest P2S on the VALIDATION shapes (the test shapes never choose)."""
    val = {i: r.metric(f"knn{i}", 0, "val/p2s") for i in ITERS}
    return None if None in val.values() else min(val, key=val.get)


def _p(r, arm, s, key="test/p2s"):
    return r.metric(arm, 0 if arm in ("noisy", "knn1", "knn2", "knn3") else s, key)


def _ratio(a, b):
    return None if a is None or b is None else a / b


def _margin(r, s, key, factor, unit):
    u, n = _p(r, "ucan", s, key), _p(r, "nodc", s, key)
    return None if u is None or n is None else unit * (u - factor * n)


def _knn_ratio(r, s):
    i = knn_choice(r)
    return None if i is None else _ratio(_p(r, "ucan", s), _p(r, f"knn{i}", 0))


def _psnr_gap(r, s):
    a, b = r.metric("img-dc", s, "image/psnr"), r.metric("img-plain", s, "image/psnr")
    return None if a is None or b is None else a - b


UNCAL = "(uncalibrated factor)"
KNN = tuple(f"knn{i}" for i in ITERS)
CLAIMS = (
    Claim("1a", f"P2S(U-CAN) / P2S(noisy input), 10 analytic test shapes {UNCAL}",
          lambda r, s: _ratio(_p(r, "ucan", s), _p(r, "noisy", s)), "<=", 0.6, uses=("ucan", "noisy"), paper=NA),
    Claim("1b", "P2S(U-CAN) / P2S(k-NN mean smoothing), its iteration count (1-3) chosen on the validation shapes "
          f"{UNCAL}", _knn_ratio, "<=", 0.9, uses=("ucan", *KNN), paper=NA),
    Claim("2a", "P2S(U-CAN) - 0.97 x P2S(U-CAN w/o L_DC), x1e-3 (mean <= 0 is the spec's mean P2S(U-CAN) <= 0.97 x "
          f"mean P2S(w/o L_DC)) {UNCAL}", lambda r, s: _margin(r, s, "test/p2s", 0.97, 1e3), "<=", 0.0,
          uses=("ucan", "nodc"), paper=NA),
    Claim("2b", "CD(U-CAN) - 1.02 x CD(U-CAN w/o L_DC), x1e-4 (mean <= 0 is the spec's mean CD(U-CAN) <= 1.02 x mean "
          f"CD(w/o L_DC)) {UNCAL}", lambda r, s: _margin(r, s, "test/cd", 1.02, 1e4), "<=", 0.0,
          uses=("ucan", "nodc"), paper=NA),
    Claim("3", "PSNR(ZS-N2N + L_DC) - PSNR(ZS-N2N), dB, camera 128 x 128 crop at sigma 25/255", _psnr_gap, ">=", 0.2,
          uses=("img-dc", "img-plain"), paper="nearly 1 dB (McMaster18)"),
)

# The spec's acceptance recipe on the keys every arm shares (k 16, CPU widths, 512-point patches, 2 pairs per step
# and S = 3 are in the training job files; lambda_DC and S vary by arm on purpose; the image recipe, 128 x 128 crop,
# sigma 25, 600 iterations halved at 300, lr 1e-3, is jobs/ucan/image_denoise.yaml's and exists only in its arms,
# whose other configs would list the unused defaults).
SPEC_RECIPE = {"max_steps": 400, "lr": 1e-4, "lr_schedule": "constant", "n_points": 2000, "noise": 0.02,
               "mesh_points": 10000}


def _mrow(r, arm, seeds, label):
    p = [_p(r, arm, s) for s in seeds]
    c = [_p(r, arm, s, "test/cd") for s in seeds]
    cy = [_p(r, arm, s, "test/p2s/capped_cylinder") for s in seeds]
    return [label, "—", fmt(_k(mean(p), 1e3), 3), fmt(_k(mean(c), 1e4), 3), fmt(_k(mean(cy), 1e3), 3), "—"]


def _k(v, k):
    return None if v is None else k * v


def _analytic(r, seeds) -> list[str]:
    rows = []
    for arm, lab in PC.items():
        got = [s for s in seeds if r.final(arm, s)] if arm != "1step" else [0] if r.final("1step", 0) else []
        for s in got:
            rows.append([lab, str(s), fmt(_k(_p(r, arm, s), 1e3), 3), fmt(_k(_p(r, arm, s, "test/cd"), 1e4), 3),
                         fmt(_k(_p(r, arm, s, "test/p2s/capped_cylinder"), 1e3), 3),
                         fmt(_k(_p(r, arm, s, "val/p2s"), 1e3), 3)])
        if len(got) > 1:
            rows.append(_mrow(r, arm, got, f"**{lab} mean**"))
    best = knn_choice(r)
    for arm, lab in (("noisy", "noisy input"), *((f"knn{i}", f"k-NN mean smoothing, {i} it."
                                                   + (" (chosen on validation)" if i == best else "")) for i in ITERS)):
        rows.append([lab, "—", fmt(_k(_p(r, arm, 0), 1e3), 3), fmt(_k(_p(r, arm, 0, "test/cd"), 1e4), 3),
                     fmt(_k(_p(r, arm, 0, "test/p2s/capped_cylinder"), 1e3), 3),
                     fmt(_k(_p(r, arm, 0, "val/p2s"), 1e3), 3)])
    test_best = min(ITERS, key=lambda i: _p(r, f"knn{i}", 0) or float("inf"))
    fam = [[lab, *(fmt(_k(mean([_p(r, arm, s, f"test/p2s/{f}") for s in (seeds if arm in ("ucan", "nodc") else [0])]),
                          1e3), 3) for f in FAMS)]
           for arm, lab in (*PC.items(), ("noisy", "noisy input"), (f"knn{best}", f"k-NN mean ({best} it.)"))]
    return ["## Analytic test shapes (P2S x1e-3, CD x1e-4)", "",
            *md_table(["method", "seed", "P2S", "CD", "P2S capped cylinder (held-out family)", "P2S validation"], rows),
            f"The smoothing's iteration count is chosen on the validation shapes ({best} it.); on the test shapes the "
            f"best count is {test_best} it. (the legacy report's oracle choice). Per family (P2S x1e-3, mean over "
            "the reported seeds; capped_cylinder is the held-out family):", "",
            *md_table(["method", *FAMS], fam)]


def _images(r, seeds) -> list[str]:
    rows = [[lab, str(s), fmt(r.metric(a, s, "image/psnr"), 2), fmt(r.metric(a, s, "image/psnr_noisy"), 2),
             fmt((r.run(a, s) or {}).get("wall_s"), 0)] for a, lab in IMGS.items() for s in seeds if r.final(a, s)]
    rows += [[f"**{lab} mean**", "—", fmt(mean(r.metric(a, s, "image/psnr") for s in seeds), 2), "", ""]
             for a, lab in IMGS.items()]
    cfg = r.config("img-dc")
    return [f"## Image variant (Claim 3): camera crop rows / cols 192-319, sigma 25/255, {cfg.get('image_iters', '—')} "
            f"iterations (lr {fmt(cfg.get('image_lr'))} halved every {cfg.get('image_decay_every', '—')})", "",
            *md_table(["arm", "seed", "PSNR dB", "noisy PSNR dB", "wall s"], rows),
            "Paper (McMaster18): ZS-N2N + L_DC is \"nearly 1 dB\" above ZS-N2N; absolute PSNR n/a (not recovered).", ""]


def _meshes(r) -> list[str]:
    best = knn_choice(r)
    arms = [a for a in MESH if r.final(a, 0) and not (a.startswith("mesh-knn") and a != f"mesh-knn{best}")]
    rows, skipped = [], set()
    for a in arms:
        f = r.final(a, 0)
        skipped |= {f"{k[8:]}: {v}" for k, v in f.items() if k.startswith("skipped/")}
        for key in sorted(k for k in f if k.startswith("meshes/") and k.endswith("/cd") and k.count("/") == 3):
            _, tag, name, _ = key.split("/")
            p2m = f.get(f"meshes/{tag}/{name}/p2m")
            rows.append([tag.replace("pct", " %"), name, MESH[a], fmt(1e4 * f[key], 3),
                         "n/a (point set, no faces)" if p2m is None else fmt(1e4 * p2m, 3)])
    if not rows:
        return []
    rows.sort(key=lambda x: (float(x[0].split()[0]), x[1], list(MESH.values()).index(x[2])))
    return ["## Real scanned meshes (report only; CD and P2M x1e-4, never mixed with P2S)", "",
            "10,000 points area-weighted on the bunny (pymeshfix StanfordBunny.ply) and CGAL fandisk; CGAL kitten is "
            "a point set without faces (its own points are the clean set, no P2M). Seed-0 models trained on the "
            f"analytic families only, applied unchanged (1,000-point patches); k-NN with the validation-chosen {best} "
            "it. P2M = mean squared point-to-mesh distance of the output points. Paper: n/a (not recovered).", "",
            *md_table(["noise", "mesh", "method", "CD", "P2M"], rows),
            *([f"Skipped: {'; '.join(sorted(skipped))}", ""] if skipped else [])]


PAPER = [("1 %", "2.676 / 1.046", "2.521 / 0.463", NA), ("2 %", "3.903 / 1.700", "3.686 / 1.074", NA),
         ("3 %", "5.251 / 2.720", "4.708 / 1.942", NA)]


def sections(res) -> str:
    seeds, cfg = res.reported_seeds, res.config("ucan")
    out = ["## Setting", "",
           "U-CAN (Zhou et al., NeurIPS 2025, arXiv 2510.25210) on the spec's analytic substitute: 5 training "
           "families x 4 shapes, 2,000 points, noise 2 % of the unit bounding-sphere radius, K = 4 noisy scans per "
           f"shape; {cfg.get('patch_points', '—')}-point patch pairs ({cfg.get('patch_pairs', '—')} per step), "
           f"S = {cfg.get('steps', '—')}, k = {cfg.get('k', '—')}, encoder {cfg.get('enc_widths', '—')}, exact EMD "
           f"(scipy linear_sum_assignment), Adam lr {fmt(cfg.get('lr'))} ({cfg.get('lr_schedule', '—')}), "
           f"**{cfg.get('max_steps', '—')} steps for every point-cloud arm** (the spec's 400 shrunk alike for the "
           "shared 2-core machine; `--full` runs 400; the point-count table's '400 steps' rows run it on every seed, "
           "arm ucan-400). Test: 10 shapes (2 each of ellipsoid, torus, capsule, rounded box with held-out "
           "parameters + 2 capped cylinders, the held-out family), one noisy scan each. P2S = mean "
           "exact distance to the true surface; CD = squared Chamfer against the clean samples. Seeds vary the "
           "network initialisation and the patch sampling. lr 1e-3 (spec 1e-4, not from the paper) was chosen before "
           "this study on development seeds 10-12 scored on the validation shapes (reports/legacy/ucan/ucan_dev.json).",
           ""]
    out += _analytic(res, seeds) + _images(res, seeds) + _meshes(res)
    floor = res.task("emd_floor", 0)
    out += ["## Why the point-cloud bars are hard here: the EMD Noise2Noise signal at 2K points", ""]
    if not floor:
        out += ["EMD floor (task `emd_floor`): not run.", ""]
    else:
        from methodlab.methods.ucan.diagnostics import FLOOR_ROWS

        gap = 100 * (1 - floor[FLOOR_ROWS[2]] / floor[FLOOR_ROWS[1]])
        out += [*md_table(["512-point patches of two scans (same ball), 10 training shapes", "EMD (unit radius)"],
                          [[k, fmt(floor[k], 4)] for k in FLOOR_ROWS]),
                "Two scans sample the surface at different points; at 2,000 points the sampling mismatch dominates "
                f"the 2 % noise, so the N2N loss of a perfect denoiser is only {gap:.1f} % below the identity's. k-NN "
                "smoothing lowers P2S by pulling points together (its CD grows with the iterations), which the EMD "
                "objective penalises. The final iterate is reported, not the best one (curves in the plot).", ""]
    from methodlab.methods.ucan.diagnostics import point_count_section

    out += point_count_section(res)
    return "\n".join(out + [
        "## Paper anchors (PUNet 10K, CD / P2M x1e-4; not comparable with the analytic figures above)", "",
        *md_table(["noise", "U-CAN 1-step (paper Table 4)", "ScoreDenoise (supervised)", "U-CAN full (paper)"], PAPER)])


def plots(res, folder) -> list[str]:
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for (arm, lab), c in zip(PC.items(), ("C0", "C1", "C2")):
        for j, s in enumerate(res.seeds(arm)):
            h = [x for x in res.history(arm, s) if "test/p2s" in x]
            ax[0].plot([x["step"] for x in h], [1e3 * x["test/p2s"] for x in h], color=c, alpha=0.5 if s >= 10 else 0.9,
                       marker="o", ms=3, ls=":" if s >= 10 else "-", label=lab if j == 0 else None)
    best = knn_choice(res)
    for arm, lab, ls in (("noisy", "noisy input", ":"), (f"knn{best}", f"k-NN mean ({best} it., chosen on val)", "--")):
        if _p(res, arm, 0) is not None:
            ax[0].axhline(1e3 * _p(res, arm, 0), color="gray" if arm == "noisy" else "k", ls=ls, label=lab)
    ax[0].set(xlabel="training step", ylabel="P2S x1e3 (10 test shapes)", title="P2S against training steps "
              "(dotted: development seeds)")
    ax[0].legend(fontsize=7)
    for (arm, lab), c in zip(IMGS.items(), ("C1", "C0")):
        for j, s in enumerate(res.seeds(arm)):
            h = [x for x in res.history(arm, s) if "image/psnr" in x]
            ax[1].plot([x["step"] for x in h], [x["image/psnr"] for x in h], color=c, label=lab if j == 0 else None)
    ax[1].set(xlabel="iteration", ylabel="PSNR (dB)", title="Camera 128 x 128, sigma 25: PSNR during the fit")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(folder) / f"{SLUG}.png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    names = [f"{SLUG}.png"]
    f = res.final("render", 0)
    if f and "render/noisy" in f:
        from methodlab.methods.ucan.settings import unpack_f16

        pts = {k: unpack_f16(f[f"render/{k}"], 3) for k in ("noisy", "out")}
        dist = {k: unpack_f16(f[f"render/d_{k}"]) for k in ("noisy", "out")}
        fig = plt.figure(figsize=(10, 4.5))
        vmax = float(np.quantile(dist["noisy"], 0.98))
        for k, (key, title) in enumerate((("noisy", "noisy (2 %)"), ("out", "U-CAN (seed 0)"))):
            a = fig.add_subplot(1, 2, k + 1, projection="3d")
            sc = a.scatter(*pts[key].T, c=dist[key], s=2, cmap="viridis", vmin=0, vmax=vmax)
            a.set_title(f"{f['render/name']}: {title}, P2S {1e3 * dist[key].mean():.2f}e-3", fontsize=9)
            a.set_axis_off()
        fig.colorbar(sc, ax=fig.axes, shrink=0.6, label="distance to the true surface")
        fig.savefig(Path(folder) / f"{SLUG}_render.png", dpi=100, metadata={"Software": None})
        plt.close(fig)
        names.append(f"{SLUG}_render.png")
    return names


def study() -> Study:
    return Study(slug=SLUG, title="ucan (U-CAN)", arms=_arms(), claims=CLAIMS,
                 tasks=(Task("emd_floor", emd_floor, seeds=(0,)),
                        Task("emd_density", emd_density, seeds=(0,), skip_quick=True)),
                 spec_recipe=SPEC_RECIPE, sections=sections,
                 plots=plots, history=("test/p2s", "image/psnr"),
                 dataset="analytic shapes with exact P2S (synthetic) + skimage camera crop; real meshes report only",
                 real_data=False)
