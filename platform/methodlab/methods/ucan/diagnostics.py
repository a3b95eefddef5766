"""Side studies of ucan's reproduction (harness tasks of `reproduce.study()`; nothing here is a claim).

emd_floor: why the Noise2Noise signal is weak at 2K points. EMD between 512-point patches (the same ball) of two
scans of the even-numbered training shapes, for a perfect denoiser (clean a vs noisy b) against the identity
(noisy a vs noisy b), with the sampling floor (clean a vs clean b, independent surface samples) and pure noise
(clean a vs the same samples + noise) beside them."""

from __future__ import annotations

import numpy as np

FLOOR_ROWS = ("clean a vs clean b (independent samplings)", "noisy a vs noisy b (identity denoiser)",
              "clean a vs noisy b (perfect denoiser)", "clean a vs noisy a (same samples + noise)")


def emd_floor(n_points: int = 2000, noise: float = 0.02, patch: int = 512, rng_seed: int = 123) -> dict[str, float]:
    """Mean exact EMD (unit radius) per pair kind over the even-numbered training shapes (data seed 0)."""
    import torch

    from methodlab.data import ucan_shapes as U
    from methodlab.methods.ucan.model import emd

    rng = np.random.default_rng(rng_seed)
    rows: dict[str, list[float]] = {k: [] for k in FLOOR_ROWS}
    for sh in U.shape_sets(0, 4)["train"][::2]:
        ca, cb = U.sample_surface(sh, n_points, rng), U.sample_surface(sh, n_points, rng)
        na, nb = ca + noise * rng.normal(size=ca.shape), cb + noise * rng.normal(size=cb.shape)
        seed = na[rng.integers(n_points)]

        def crop(p):
            return torch.as_tensor(p[np.argsort(np.linalg.norm(p - seed, axis=1))[:patch]])
        x = crop(ca)
        rows[FLOOR_ROWS[0]].append(float(emd(x, crop(cb))))
        rows[FLOOR_ROWS[1]].append(float(emd(crop(na), crop(nb))))
        rows[FLOOR_ROWS[2]].append(float(emd(x, crop(nb))))
        rows[FLOOR_ROWS[3]].append(float(emd(x, x + noise * torch.as_tensor(rng.normal(size=(patch, 3))))))
    return {k: float(np.mean(v)) for k, v in rows.items()}


# ---- issue 44 item 10: the paper's point counts (10K and 50K scans) ----------------------------------------------
# (scan points, EMD patch points, thinning): the patch is `patch` points of the patch * thin nearest to the seed
# (thin 1: the kNN ball the training crops; thin 5: a random fifth of a 5x larger ball, the 2K density at 10K)
DENSITY = ((2000, 512, 1), (2000, 1024, 1), (10_000, 512, 1), (10_000, 1024, 1), (50_000, 512, 1),
           (50_000, 1024, 1), (10_000, 512, 5))
MODELS = {"indep": "independent samplings (our scans)", "shared": "shared samples + fresh noise"}


def emd_density(noise: float = 0.02, rng_seed: int = 123, patches_per_shape: int = 4) -> dict[str, float]:
    """Mean exact EMD between same-ball patches of two scans of the even-numbered training shapes, per DENSITY row
    and data model: `indep` (each scan a fresh surface sample + noise, as methods/ucan/data.py builds them) and
    `shared` (scan b = the SAME clean samples as scan a + fresh noise, a synthetic "draw the noise K times"), for
    the identity (noisy a vs noisy b) and a perfect denoiser (clean a vs noisy b), over `patches_per_shape` seeds
    per shape. Keys n/patch/thin/model/kind."""
    import torch

    from methodlab.data import ucan_shapes as U
    from methodlab.methods.ucan.model import emd

    out: dict[str, float] = {}
    for n, patch, thin in DENSITY:
        rng = np.random.default_rng([rng_seed, n, patch, thin])
        acc: dict[str, list[float]] = {}
        for sh in U.shape_sets(0, 4)["train"][::2]:
            ca, cb = U.sample_surface(sh, n, rng), U.sample_surface(sh, n, rng)
            na, nb, na2 = (c + noise * rng.normal(size=c.shape) for c in (ca, cb, ca))
            for seed in na[rng.choice(n, patches_per_shape, replace=False)]:
                def crop(p):
                    near = np.argsort(np.linalg.norm(p - seed, axis=1))[:patch * thin]
                    return torch.as_tensor(p[near if thin == 1 else rng.choice(near, patch, replace=False)])
                for model, b in (("indep", nb), ("shared", na2)):
                    cb_ = crop(b)
                    acc.setdefault(f"{model}/identity", []).append(float(emd(crop(na), cb_)))
                    acc.setdefault(f"{model}/perfect", []).append(float(emd(crop(ca), cb_)))
        out.update({f"{n}/{patch}/{thin}/{k}": float(np.mean(v)) for k, v in acc.items()})
    return out


# ---- the study's arms and section for the point counts (kept here: reproduce.py has a 300-line budget) --------------
POINTS = {"10k": 10_000, "50k": 50_000}
PC_ARMS = {"ucan-10k": ("10k", 512), "ucan-10k-p1024": ("10k", 1024), "ucan-50k": ("50k", 512),
           "ucan-shared": ("2k", 512), "ucan-10k-shared": ("10k", 512)}
SHARED = ("ucan-shared", "ucan-10k-shared")  # scan_sampling=shared: one clean sample, K noise draws (N2NM)
SPEC_STEPS = "ucan-400"  # the default ucan arm at the spec's step count
# measured by the probe of issue 44 item 10 (2-core shared CPU, load ~3, 1 torch thread; seconds)
PROBE = {"step512": (0.37, 0.35), "step1024_10k": 1.07, "eval2k": 3.9, "eval10k": 65.0, "eval50k_shape": 16.2,
         "build10k": 2.1, "build50k": 6.3, "lsa": {512: 0.08, 1024: 0.33, 2048: 1.19, 4096: 4.76}}


def point_arms(arm_cls, train_job: str, eval_job: str, full: tuple[str, ...]) -> tuple:
    """Development-seed arms at the paper's scan sizes (skip_quick): U-CAN at 10K (the CPU preset's 512-point
    patches, and the spec's 1024), U-CAN at 50K (test shapes scored once, at the end), and the noisy input and
    k-NN smoothing (1-3 it.) at 10K and 50K for Claim 1's denominators (seed 0, as at 2K)."""
    arms = []
    for aid, (tag, patch) in PC_ARMS.items():
        n = {"2k": 2000, **POINTS}[tag]
        over = [] if tag == "2k" else [f"n_points={n}"]
        over += [f"patch_points={patch}", *(["scan_sampling=shared"] if aid in SHARED else [])]
        over += ["eval_every=50"] if tag == "2k" else ["eval_every=125"] if tag == "10k" else \
            ["eval_at_start=false", "eval_every=100000", "eval_sets=[test]"]
        # the shared-sample 2K arm met 1a's bar on the development seeds, so it runs once on the reported seeds too
        arms.append(arm_cls(aid, train_job, tuple(over), full=full, seeds="both" if aid == "ucan-shared" else "dev",
                            skip_quick=True,
                            label=f"U-CAN, {n:,}-point scans, {patch}-point patches"
                            + (", shared clean sample per shape" if aid in SHARED else "")))
    # issue 44 (iii): claims 1a / 1b at the spec's 400 steps (the study's ucan arm runs 250), on every seed
    arms.append(arm_cls(SPEC_STEPS, train_job, ("eval_every=50", *full), full=full, skip_quick=True,
                        label="U-CAN, 2,000-point scans, the spec's 400 steps"))
    for tag, n in POINTS.items():
        arms.append(arm_cls(f"noisy-{tag}", eval_job, (f"n_points={n}", "eval_method=identity"), seeds=(0,),
                            skip_quick=True, label=f"noisy input ({n:,} points)"))
        arms += [arm_cls(f"knn{i}-{tag}", eval_job, (f"n_points={n}", f"smoothing_iters={i}"), seeds=(0,),
                         skip_quick=True, label=f"k-NN mean, {i} it. ({n:,} points)") for i in (1, 2, 3)]
    return tuple(arms)


def _knn(res, tag: str):
    """(iterations chosen on the VALIDATION shapes, its test P2S) of the k-NN arms at this scan size."""
    suffix = "" if tag == "2k" else f"-{tag}"
    val = {i: res.metric(f"knn{i}{suffix}", 0, "val/p2s") for i in (1, 2, 3)}
    if None in val.values():
        return None, None
    i = min(val, key=val.get)
    return i, res.metric(f"knn{i}{suffix}", 0, "test/p2s")


def _claim1_rows(res) -> list[list[str]]:
    from methodlab.reproduce.tables import fmt, mean

    def k(v, f=1e3):
        return None if v is None else f * v
    rows = []
    for aid, tag, patch, seeds in (("ucan", "2k", 512, res.dev_seeds), ("ucan", "2k", 512, res.reported_seeds),
                                   *((a, t, p, res.dev_seeds) for a, (t, p) in PC_ARMS.items()),
                                   ("ucan-shared", "2k", 512, res.reported_seeds),
                                   (SPEC_STEPS, "2k", 512, res.dev_seeds), (SPEC_STEPS, "2k", 512, res.reported_seeds)):
        noisy = res.metric("noisy" if tag == "2k" else f"noisy-{tag}", 0, "test/p2s")
        it, knn = _knn(res, tag)
        p = [res.metric(aid, s, "test/p2s") for s in seeds]
        got = [s for s, v in zip(seeds, p) if v is not None]
        n = {"2k": 2000, **POINTS}[tag]
        name = f"{n:,}" + (" shared" if aid in SHARED else "") + (", 400 steps" if aid == SPEC_STEPS else "")
        knn_cell = f"{fmt(k(knn), 3)} ({it} it.)" if knn is not None else "—"
        if not got:
            rows.append([name, str(patch), ", ".join(map(str, seeds)),
                         "not run", fmt(k(noisy), 3), "—",
                         knn_cell, "—", "—"])
            continue
        m = mean(p)
        cd = mean(res.metric(aid, s, "test/cd") for s in got)
        r1a = None if noisy is None else m / noisy
        r1b = None if knn is None else m / knn
        per_seed = " / ".join(fmt(k(v), 3) for v in p if v is not None)
        rows.append([name, str(patch), ", ".join(map(str, got)),
                     f"{per_seed} (mean {fmt(k(m), 3)})",
                     fmt(k(noisy), 3), fmt(r1a, 3),
                     knn_cell, fmt(r1b, 3), fmt(k(cd, 1e4), 3)])
    return rows


def point_count_section(res) -> list[str]:
    """### Point counts and EMD against the official code (issue 44 item 10): the comparison, the probe's timings,
    Claim 1 at 10K / 50K on the development seeds beside 2K, and the EMD density diagnostic."""
    from methodlab.reproduce.tables import fmt, md_table

    P = PROBE
    run10, run10p, run50 = (250 * P["step512"][1] + 3 * P["eval10k"], 250 * P["step1024_10k"] + 3 * P["eval10k"],
                            250 * P["step512"][1] + 10 * P["eval50k_shape"] + P["build50k"])
    out = ["### Point counts and EMD against the official code (issue 44 item 10)", "",
           "**Official code.** No U-CAN repository is public in the stored index (project page gloriasze.github.io/"
           "U-CAN; no snapshot of junshengzhou/U-CAN or GloriaSze/U-CAN), so the comparison is against the paper "
           "text and the two codes it builds on: ScoreDenoise (luost26/score-denoise, `train.py`, "
           "`datasets/patch.py`), whose PUNet protocol U-CAN follows, and Noise2NoiseMapping (mabaorui/"
           "Noise2NoiseMapping, `noise2noise.py`; Ma, Liu, Han, ICML 2023: the EMD noise-to-noise loss, same "
           "senior authors).", "",
           *md_table(["point", "reference code", "ours", "verdict"], [
               ["points per training scan", "ScoreDenoise: PUNet 10K / 30K / 50K Poisson clouds "
                "(`--resolutions`); U-CAN evaluates at 10K and 50K", "2,000 (analytic shapes)",
                "differs: 10K / 50K arms below"],
               ["training patch", "ScoreDenoise: the 1,000 nearest points of a random seed (`patch_size=1000`); "
                "N2NM: 5,000 random points of the whole cloud, no patch", "512 nearest (CPU preset), spec 1,024",
                "differs: a 1,024-point arm below"],
               ["EMD solver", "N2NM: `tf_approxmatch` (approximate matching CUDA kernel); U-CAN: not stated",
                "exact Hungarian (scipy `linear_sum_assignment`) on <= 1,024 points", "differs; exact is the "
                "definition, an approximate kernel is a cost choice for matched sets above ~2K points"],
               ["noisy observations", "N2NM: the SAME base points + fresh noise per draw; U-CAN: not recovered "
                "(spec: synthetic data \"draws noise K times\")", "a fresh surface sample + noise per scan",
                "differs from N2NM (see the diagnostic below)"]]),
           f"**Probe (2-core CPU shared with a running reproduction, load ~3, 1 torch thread).** Train step "
           f"(2 pairs of 512-point patches): {P['step512'][0]} s at 2K, {P['step512'][1]} s at 10K (the patch, not the "
           f"scan, sets it); 1,024-point patches at 10K: {P['step1024_10k']} s. Evaluation of the 20 val + test shapes "
           f"(2,000-point inference patches): {P['eval2k']} s at 2K, {P['eval10k']:.0f} s at 10K, "
           f"~{P['eval50k_shape']} s per shape at 50K. Exact assignment: "
           + ", ".join(f"{k:,} pts {v} s" for k, v in P["lsa"].items()) + " (~n^2 here): a whole 10K cloud would "
           "take ~30 s per assignment, 6 per step, ~12 h per 250-step run; that needs a GPU matching kernel and a "
           "config beyond patch_points <= 1,024 (a method change, not made). One development-seed run at the default "
           f"250 steps projects to {run10 / 60:.1f} min (10K, 512; evaluations at 0 / 125 / 250), {run10p / 60:.1f} "
           f"min (10K, 1,024) and {run50 / 60:.1f} min (50K, 512; test shapes once, at the end): all under 15 min, so "
           "the arms run in the default mode on development seeds 10-12 (`--full`: 400 steps).", "",
           "Claim 1 at the paper's scan sizes (development seeds; the 'shared' row after them the reported seeds; "
           "P2S x1e-3 on the 10 test shapes sampled at that size, CD x1e-4; the first two 2K rows are the study's own "
           "arms, 250 steps like every row without a step count). The '400 steps' rows are the spec's step count, "
           "the unreduced recipe of claims 1a / 1b, on the development and then the reported seeds:", "",
           *md_table(["scan points", "patch", "seeds", "P2S U-CAN", "P2S noisy", "1a ratio (bar 0.6)",
                      "P2S k-NN (val-chosen)", "1b ratio (bar 0.9)", "CD U-CAN"], _claim1_rows(res))]
    d = res.task("emd_density", 0)
    if not d:
        return out + ["EMD density diagnostic: not run.", ""]

    def gap(key: str, m: str) -> str:
        return f"{100 * (1 - d[f'{key}/{m}/perfect'] / d[f'{key}/{m}/identity']):+.1f} %"
    rows = []
    for n, patch, thin in DENSITY:
        key = f"{n}/{patch}/{thin}"
        cells = [f"{n:,}", f"{patch}" + (f" of the {patch * thin:,} nearest" if thin > 1 else "")]
        for m in MODELS:
            cells += [f"{fmt(d[f'{key}/{m}/identity'], 4)} / {fmt(d[f'{key}/{m}/perfect'], 4)}", gap(key, m)]
        rows.append(cells)
    sizes = ("2000/512/1", "10000/512/1", "50000/512/1")
    return out + [
        "Why more points need not help this loss: EMD (unit radius) between same-ball patches of two scans of the 10 "
        "even-numbered training shapes (4 patch seeds each), identity (noisy a vs noisy b) / perfect denoiser "
        "(clean a vs noisy b); gap = how far the perfect denoiser's N2N loss lies below the identity's (the "
        "training signal).", "",
        *md_table(["scan points", "EMD patch", f"{MODELS['indep']}: identity / perfect", "gap",
                   f"{MODELS['shared']}: identity / perfect", "gap"], rows),
        "With independent samplings (our scans) the gap is " + " / ".join(gap(k, "indep") for k in sizes)
        + " at 2K / 10K / 50K; with shared samples " + " / ".join(gap(k, "shared") for k in sizes) + ". The "
        "sampling floor does shrink with density, but so does the clean surface's advantage: on dense kNN patches "
        "two samples of the same noisy distribution match each other about as well as (10K) or better than (50K) "
        "the clean surface matches either, so the bijective loss stops rewarding denoising. More points are "
        "therefore not expected to lower Claim 1's ratio under this loss (the arms above test it). Thinning the 10K "
        f"patch to the 2K density (512 random of the 2,560 nearest) gives {gap('10000/512/5', 'indep')} / "
        f"{gap('10000/512/5', 'shared')}. Shared-sample scans (one clean sample, K noise draws, as N2NM) are now "
        "the option `scan_sampling=shared` (default `fresh`, the spec's reading); the `... shared` rows of the "
        "table above train U-CAN with it at 2K and 10K on the development seeds (a recipe change is chosen there "
        "before any reported seed runs); the 2K arm met 1a's bar there, so it then ran once on the reported seeds "
        "0-2 (the table's last row). The claims above keep the default sampling; the shared row is a recipe variant "
        "shown beside them. Thinned EMD patches (train.py's crop_patch_pair) are not built.", ""]
