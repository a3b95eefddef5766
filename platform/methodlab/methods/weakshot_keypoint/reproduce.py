"""`methodlab reproduce weakshot_keypoint`: the spec's acceptance experiment on the synthetic part-based classes,
as a harness study. Per training seed: stage 1 ONCE (arm `stage1`, jobs/weakshot_keypoint/pretrain_base.yaml),
then every arm from its checkpoint (`needs`: init_from) through the method's own `fit`: base-only (eval, support
shots 1 with the sanity checks of the heads, and 0), the method (transfer.yaml), naive self-training, keyness
only, correspondence only and the no-support protocol (transfer_zero_shot.yaml). Task `support_copy`: the
reference row. Development seed 10 runs before the reported seeds 0, 1, 2 (a seed costs about 20 CPU-minutes)."""

from __future__ import annotations


from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "weakshot_keypoint"
J = f"jobs/{SLUG}"
NA = "n/a (not recovered)"
ARMS = {  # arm -> (job file, support_shots, label)
    "base_only": ("base_only.yaml", 1, "base-only CAPE (stage-1 ckpt)"),
    "method": ("transfer.yaml", 1, "weak-shot method (keyness + corr.)"),
    "selftrain_naive": ("selftrain_naive.yaml", 1, "naive self-training"),
    "keyness_only": ("transfer_keyness_only.yaml", 1, "keyness transfer only"),
    "corr_only": ("transfer_corr_only.yaml", 1, "correspondence transfer only"),
    "base_only_zs": ("base_only.yaml", 0, "base-only, pseudo-support"),
    "method_zs": ("transfer_zero_shot.yaml", 0, "weak-shot method, pseudo-support"),
}
PCKS = ("eval/pck@0.05", "eval/pck@0.1", "eval/pck@0.2")
P2 = "eval/pck@0.2"
# --quick: a fast look (stage 1: 40 of the spec's 250 steps; stage 2: 16 of 120), one report per stage
QUICK1 = ("stage1_steps=40", "log_every=40")
QUICK2 = ("stage2_steps=16", "log_every=16")


def _arms() -> tuple[Arm, ...]:
    out = [Arm("stage1", f"{J}/pretrain_base.yaml", quick=QUICK1, label="stage 1 (base classes)")]
    for arm, (job, shots, label) in ARMS.items():
        extra = ("sanity_checks=true",) if arm == "base_only" else ()
        evals = ARMS[arm][0] == "base_only.yaml"
        out.append(Arm(arm, f"{J}/{job}", (f"support_shots={shots}", *extra), quick=() if evals else QUICK2,
                       needs=(("stage1", "init_from"),), label=label))
    return tuple(out)


def _pts(a: str, b: str):
    """Points of novel PCK@0.2: arm a minus arm b on the same seed."""
    def value(r, s):
        x, y = r.metric(a, s, P2), r.metric(b, s, P2)
        return None if x is None or y is None else 100 * (x - y)
    return value


def _pct(key: str):
    return lambda r, s: None if r.metric("base_only", s, key) is None else 100 * r.metric("base_only", s, key)


UNCAL = "uncalibrated: the spec's bar, measured here"
CLAIMS = (
    Claim("1a", f"method - base-only CAPE, novel PCK@0.2 points, support_shots 1 ({UNCAL})", _pts("method", "base_only"),
          ">=", 5.0, uses=("method", "base_only"), paper=NA),
    Claim("1b", f"method - naive self-training, PCK@0.2 points ({UNCAL})", _pts("method", "selftrain_naive"), ">=", 2.0,
          uses=("method", "selftrain_naive"), paper=NA),
    Claim("2a", f"keyness transfer only - base-only, PCK@0.2 points ({UNCAL})", _pts("keyness_only", "base_only"),
          ">=", 1.0, uses=("keyness_only", "base_only"), paper=NA),
    Claim("2b", f"correspondence transfer only - base-only, PCK@0.2 points ({UNCAL})", _pts("corr_only", "base_only"),
          ">=", 1.0, uses=("corr_only", "base_only"), paper=NA),
    Claim("3", f"no-support protocol (support_shots 0): method - base-only with the same pseudo-supports, "
          f"assignment-matched PCK@0.2 points ({UNCAL})", _pts("method_zs", "base_only_zs"), ">=", 3.0,
          uses=("method_zs", "base_only_zs"), paper=NA),
    Claim("S1", f"sanity: keypoint cell among the stage-1 keyness head's top 3 of a 7x7 window, % ({UNCAL})",
          _pct("sanity/keyness_top3"), ">=", 50.0, uses=("base_only",), paper=NA),
    Claim("S2", f"sanity: correspondence top-1 within 0.1 x max(bbox w, h), % ({UNCAL})", _pct("sanity/corr_top1"),
          ">=", 30.0, uses=("base_only",), paper=NA),
)

# The spec's CPU recipe (Acceptance setup, Hyperparameters, Model components: descriptor d = 64 on CPU); the
# transfer weights lambda_kt / lambda_ct are the arms' own (ablations), not recipe keys.
SPEC_RECIPE = {"n_base": 12, "n_novel": 4, "base_images": 200, "novel_unlabeled": 300, "novel_val": 50,
               "novel_test": 100, "image_size": 64, "stride": 2, "window": 7, "lr": 1e-3, "stage1_steps": 250,
               "stage2_steps": 120, "batch_pairs": 16, "novel_pairs": 8, "pseudo_refresh_every": 40,
               "conf_threshold": 0.3, "tau_c": 0.07, "ema_decay": 0.999, "embed": 64}


def _p(v) -> str:
    return "—" if v is None else f"{100 * v:.1f}"


def _pck_rows(res, seeds) -> list[list]:
    rows = []
    for arm, (_, shots, label) in ARMS.items():
        per = [res.metric(arm, s, P2) for s in seeds]
        rows.append([label, str(shots), " / ".join(_p(v) for v in per),
                     *(_p(mean(res.metric(arm, s, k) for s in seeds)) for k in PCKS), NA])
    copy = res.task("support_copy", 0)
    if copy:
        rows.append(["support copy (reference, no model)", "1", "—", *(_p(copy[k]) for k in PCKS), NA])
    return rows


def _sanity(res, seeds, head: bool = True) -> list[str]:
    def col(k):
        return [res.metric("base_only", s, f"sanity/{k}") for s in seeds]
    if not any(v is not None for v in col("keyness_top3")):
        return []
    rows = [["keyness: keypoint cell in the head's top 3 of a 7x7 window", ">= 50 %",
             " / ".join(_p(v) for v in col("keyness_top3")), _p(mean(col("keyness_top3"))),
             f"chance {_p(mean(col('keyness_chance')))}; Harris {_p(mean(col('harris_top3')))}"],
            ["correspondence: top-1 within 0.1 x max(bbox w, h)", ">= 30 %",
             " / ".join(_p(v) for v in col("corr_top1")), _p(mean(col("corr_top1"))),
             f"chance {_p(mean(col('corr_chance')))}; identity copy {_p(mean(col('identity_copy')))}"]]
    return ["## Sanity checks of the stage-1 heads (novel test images, eval seed 0; claims S1, S2)", "",
            "Run inside the base-only arm's `fit` (config `sanity_checks`) on the stage-1 checkpoint it evaluates.",
            ""] * head + md_table(["check", "bar", "per seed", "mean", "reference (mean)"], rows)


def _times(res) -> list[str]:
    rows = []
    for arm in ("stage1", *ARMS):
        walls = [res.run(arm, s)["wall_s"] for s in res.seeds(arm)]
        if walls:
            rows.append([arm, fmt(mean(walls), 0), fmt(sum(walls) / 60, 1), str(len(walls))])
    return ["## Times (wall seconds per run from the run records; the machine is shared)", "",
            *md_table(["arm", "mean wall s per run", "run-minutes summed", "runs"], rows)]


def sections(res) -> str:
    seeds = res.reported_seeds
    c1, c2 = res.config("stage1"), res.config("method")
    out = ["## Setting", "",
           f"Synthetic part-based classes: {c1.get('n_base')} base + {c1.get('n_novel')} novel classes, "
           f"{c1.get('image_size')} px input, stride {c1.get('stride')}, window r = {c1.get('window')} cells; stage 1 "
           f"{c1.get('stage1_steps')} steps x {c1.get('batch_pairs')} pairs, once per seed and shared by every arm; "
           f"stage 2 {c2.get('stage2_steps')} steps x ({c2.get('batch_pairs')} base + {c2.get('novel_pairs')} novel "
           f"pairs), pseudo labels refreshed every {c2.get('pseudo_refresh_every')} steps; Adam {c1.get('lr')}. Novel "
           f"test set: {c1.get('n_novel')} classes x {c1.get('novel_test')} images; novel_unlabeled_source = "
           f"{c2.get('novel_unlabeled_source')}; support_shots per row. The paper's method section, tables and code "
           f"were not recovered: every loss, window, weight and threshold is the spec's platform design (P), every bar "
           f"is uncalibrated, and the paper column reads {NA}.", "",
           "## PCK on the novel test images (%)", "",
           *md_table(["method / arm", "support_shots", "PCK@0.2 per seed", "PCK@0.05 mean", "PCK@0.1 mean",
                      "PCK@0.2 mean", "paper"], _pck_rows(res, seeds)),
           "Related published anchor (standard CAPE on MP-100, not weak-shot): CapeFormer 1-shot PCK@0.2 89.45 / 84.88 / "
           "83.59 / 83.59 / 85.09 on splits 1-5; not comparable to the synthetic set.", "",
           *_sanity(res, seeds)]
    if res.dev_seeds and any(res.final(a, s) for a in ARMS for s in res.dev_seeds):
        out += [f"## Development seed(s) {', '.join(map(str, res.dev_seeds))} (run before the reported seeds; same "
                "job files, bars unchanged)", "", *md_table(["method / arm", "support_shots", "PCK@0.2 per seed",
                                                             "PCK@0.05", "PCK@0.1", "PCK@0.2", "paper"],
                                                            _pck_rows(res, res.dev_seeds)[:len(ARMS)]),
                *_sanity(res, res.dev_seeds, head=False)]
    out += [*_times(res), "## Notes", "",
            "- Every stage-2 arm (method, ablations, naive self-training) also trains on base batches for its stage-2 "
            "steps; the base-only row (the stage-1 checkpoint, as the spec defines it) does not. Naive self-training gets "
            "the same extra base steps, so claim 1b isolates what the keyness / correspondence targets add over raw "
            "pseudo labels.",
            "- support_shots 0 figures are assignment-matched: each pseudo-keypoint is mapped to a keypoint id by a "
            "Hungarian assignment fitted on the 50 labelled validation images per novel class, then applied to the test "
            "images. The pseudo-support of a class = the unlabeled image (of its first 20) whose K_c strongest distinct "
            "keyness peaks (NMS 2 cells) score highest under the stage-1 model; base-only and the method share it.",
            "- Design choices (P) behind config fields: c_j = heatmap mass within 1 cell of the argmax (`conf_radius`); "
            "the keyness and correspondence heads are detached when they build targets on novel images (they are learned "
            "on base classes only); the correspondence target searches a 9-cell window around the pseudo label "
            "(`corr_window`); L_cs uses detached descriptors sampled at the student's predictions (`cs_term`).", ""]
    return "\n".join(out)


def plots(res, folder) -> list[str]:
    plt = pyplot()
    import numpy as np

    seeds = res.reported_seeds
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    drawn = False
    for i, arm in enumerate(ARMS):
        curves = [[(h["stage2_step"], h[P2]) for h in res.history(arm, s) if h.get("stage") in (0, 2) and P2 in h]
                  for s in seeds]
        curves = [c for c in curves if c]
        if not curves:
            continue
        drawn = True
        n = min(len(c) for c in curves)
        xs = [p[0] for p in curves[0][:n]]
        ys = 100 * np.mean([[p[1] for p in c[:n]] for c in curves], 0)
        target = ax[1] if arm.endswith("_zs") else ax[0]
        if len(xs) == 1:
            target.axhline(ys[0], ls="--", color=f"C{i}", label=arm)
        else:
            target.plot(xs, ys, marker="o", color=f"C{i}", label=arm)
    if not drawn:
        plt.close(fig)
        return []
    for a, t in zip(ax, ("support_shots 1", "support_shots 0 (assignment-matched)")):
        a.set(xlabel="stage-2 step", ylabel="novel PCK@0.2 (%, mean of seeds)", title=t)
        a.legend(fontsize=7)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=90)


def study() -> Study:
    from methodlab.methods.weakshot_keypoint.diagnostics import support_copy

    return Study(slug=SLUG, title=SLUG, arms=_arms(), claims=CLAIMS,
                 tasks=(Task("support_copy", support_copy, seeds=(0,)),), dev_seeds=(10,),
                 spec_recipe=SPEC_RECIPE, sections=sections, plots=plots,
                 history=("stage", "stage2_step", P2), dataset="synthetic part-based keypoint classes (procedural, "
                 "scikit-image textures)", real_data=False)
