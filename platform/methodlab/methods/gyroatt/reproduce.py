"""`methodlab reproduce gyroatt`: the spec's acceptance on SyntheticMI as a harness study. Every arm is a run of
jobs/gyroatt/acceptance.yaml with overrides (the arms a claim reads on development seeds 10-12 first, then 0-2; the
comparison arms on 0-2); the pyriemann baselines are runs of its `riemann` setting (deterministic, seed 0).

Claim 1: GyroAtt-SPD-LEM, ramp evidence, 60 epochs: >= 0.70 and >= TS+LR - 5 points; MAtt and SPDNet beside it.
Claim 2 (revised 2026-12-05: 20 epochs, was 5): each of the 7 geometries trains 20 epochs without NaN and reaches
>= 0.40, mean over the seeds (one claim row per geometry; Claim 2 holds when all seven do). Claim 3: one_segment
evidence: the attention weights vary over test trials and follow a permutation of the segments (both measured
inside the fit, `evaluate.attention_stats`); the gap to uniform attention, SPDNet, MAtt and score=neg_sq_dist is
reported, not barred. Every accuracy is the test accuracy of the epoch with the lowest validation loss."""

from __future__ import annotations


from methodlab.methods.gyroatt.grassmann import GEOMETRIES
from methodlab.reproduce import Arm, Claim, Study
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import fmt, md_table, mean

SLUG = "gyroatt"
JOB = f"jobs/{SLUG}/acceptance.yaml"
ACC = "best/test/accuracy"  # test accuracy of the epoch with the lowest validation loss
SANITY = (0.55, 0.85)  # spec: TS+LR outside this band means the generator differs from the spec
C2_EPOCHS = 20
QUICK = ("epochs=5", "checkpoint_every=5")
ONE = ("evidence_profile=one_segment",)
C1 = {"gyroatt": ("GyroAtt-SPD-LEM", ()), "matt": ("MAtt", ("arch=matt",)), "spdnet": ("SPDNet", ("arch=spdnet",))}
C3 = {**C1, "uniform": ("GyroAtt-SPD-LEM, uniform attention", ("attention=uniform",)),
      "neg_sq_dist": ("GyroAtt-SPD-LEM, score=neg_sq_dist", ("score=neg_sq_dist",))}
RIEM = {"ts_lr": "pyriemann TS+LR", "mdm": "pyriemann MDM"}


def _arms() -> tuple[Arm, ...]:
    # the arms a claim reads run the development seeds first; the comparison arms run the reported seeds only
    seeds = lambda k: "both" if k == "gyroatt" else "reported"  # noqa: E731
    return (*(Arm(f"c1-{k}", JOB, over, quick=QUICK, seeds=seeds(k), label=f"{lab}, ramp")
              for k, (lab, over) in C1.items()),
            *(Arm(f"c2-{g}", JOB, (f"geometry={g}", f"epochs={C2_EPOCHS}", f"checkpoint_every={C2_EPOCHS}"),
                  quick=QUICK, label=f"GyroAtt-{g}, {C2_EPOCHS} epochs") for g in GEOMETRIES),
            *(Arm(f"c3-{k}", JOB, (*over, *ONE), quick=QUICK, seeds=seeds(k), label=f"{lab}, one_segment")
              for k, (lab, over) in C3.items()),
            *(Arm(f"riem{c}-{k}", JOB, ("setting=riemann", f"riemann_classifier={k}", *(ONE if c == 3 else ())),
                  seeds=(0,), label=f"{lab}, {'one_segment' if c == 3 else 'ramp'}")
              for c in (1, 3) for k, lab in RIEM.items()))


def _acc(r, arm, s):
    return r.metric(arm, s, ACC)


def _riem(r, c, k="ts_lr"):
    return r.metric(f"riem{c}-{k}", 0, "test/accuracy")


def _gap(r, s):
    a, b = _acc(r, "c1-gyroatt", s), _riem(r, 1)
    return None if a is None or b is None else a - b


def _c2(g: str) -> Claim:
    return Claim(f"2-{g}", f"{g}: test accuracy after {C2_EPOCHS} epochs, no NaN (a run that fails reads NOT RUN) "
                 "(revised 2026-12-05: 20 epochs, was 5)", lambda r, s: _acc(r, f"c2-{g}", s), ">=", 0.40,
                 uses=(f"c2-{g}",), paper="n/a (synthetic)")


CLAIMS = (
    Claim("1a", "GyroAtt-SPD-LEM test accuracy, SyntheticMI ramp evidence, 60 epochs (chance 0.25; spec prototype "
          "0.774)", lambda r, s: _acc(r, "c1-gyroatt", s), ">=", 0.70, uses=("c1-gyroatt",), paper="n/a (synthetic)"),
    Claim("1b", "GyroAtt-SPD-LEM accuracy - pyriemann TS+LR accuracy (same split; TS+LR deterministic)", _gap, ">=",
          -0.05, uses=("c1-gyroatt", "riem1-ts_lr"), paper="n/a (synthetic)"),
    *(_c2(g) for g in GEOMETRIES),
    Claim("3a", "one_segment: std of GyroAtt-SPD-LEM's attention weights over test trials (not constant)",
          lambda r, s: r.metric("c3-gyroatt", s, "best/attn/std_over_trials"), ">", 1e-3, combine="every",
          uses=("c3-gyroatt",)),
    Claim("3b", "one_segment: max error of the attention weights under a permutation of a trial's segments "
          "(64 test trials, every permutation of 3)", lambda r, s: r.metric("c3-gyroatt", s, "best/attn/perm_error"),
          "<=", 1e-6, combine="every", uses=("c3-gyroatt",)),
)

SPEC_RECIPE = {"n_train_per_class": 200, "n_val_per_class": 20, "n_test_per_class": 80, "segments": 3, "f1": 16,
               "f2": 12, "d_out": 8, "lr": 5e-3, "batch_size": 32, "weight_decay": 1e-3}


def _row(r, label, arm, seeds, key=ACC, nd=3):
    vals = [r.metric(arm, s, key) for s in seeds]
    return [label, *(fmt(v, nd) for v in vals), fmt(mean(vals), nd)]


def _ep(r, arm):
    return r.config(arm).get("epochs", "—")


def _c2_row(r, g, seeds):
    row = _row(r, g, f"c2-{g}", seeds)
    m = mean(_acc(r, f"c2-{g}", s) for s in seeds)
    return [*row, fmt(None if m is None else m >= 0.40)]


def sections(res) -> str:
    seeds = res.reported_seeds
    cols = [f"seed {s}" for s in seeds]
    ts1, ts3 = _riem(res, 1), _riem(res, 3)
    band = "—" if ts1 is None else "inside" if SANITY[0] <= ts1 <= SANITY[1] else \
        "OUTSIDE (the generator differs from the spec)"
    out = ["## Setting", "",
           "GyroAtt (Wang et al., NeurIPS 2025, OpenReview lovTDtbsdZ) on the spec's SyntheticMI generator: 16 channels "
           "of the colin27 10-20 montage, 4 classes, 2 s at 128 Hz, 200 train / 20 val / 80 test trials per class, "
           "data seed 0 for every model seed; front end F1 = 16, F2 = 12, k = 12, BiMap 12 -> 8, m = 3, Adam lr 5e-3, "
           "batch 32, weight decay 1e-3, power activation p = 0.5, separate Q/K/V maps "
           f"({JOB}). Every accuracy is the test accuracy of the epoch with the lowest validation loss.", "",
           f"## Claim 1: ramp evidence, {_ep(res, 'c1-gyroatt')} epochs", "",
           *md_table(["model", *cols, "mean"], [_row(res, lab, f"c1-{k}", seeds) for k, (lab, _) in C1.items()]),
           f"pyriemann (deterministic, seed-independent): TS+LR {fmt(ts1, 3)}, MDM {fmt(_riem(res, 1, 'mdm'), 3)}; "
           f"TS+LR sanity band {SANITY}: {band} (spec: 0.806 with 200 train trials per class). Spec prototype of "
           "GyroAtt-SPD-LEM: 0.774 (0.797 / 0.781 / 0.744).", "",
           f"## Claim 2: the 7 geometries, {_ep(res, 'c2-spd-lem')} epochs (revised 2026-12-05: {C2_EPOCHS})", "",
           "The spec's bar was first 0.40 after 5 epochs; it was revised to 20 epochs (the 5-epoch budget was the "
           "spec's CPU choice, not the paper's; the subspace geometries learn slower). The 5-epoch figures and the "
           "operation checks against scipy are in the legacy report.", "",
           *md_table(["geometry", *cols, "mean", "mean >= 0.40"], [_c2_row(res, g, seeds) for g in GEOMETRIES]),
           f"## Claim 3: one_segment evidence, {_ep(res, 'c3-gyroatt')} epochs (the accuracy gap is reported, not barred)",
           "",
           *md_table(["model", *cols, "mean"], [_row(res, lab, f"c3-{k}", seeds) for k, (lab, _) in C3.items()]),
           f"pyriemann on this split: TS+LR {fmt(ts3, 3)}, MDM {fmt(_riem(res, 3, 'mdm'), 3)}.", "",
           *md_table(["diagnostic (GyroAtt-SPD-LEM)", *cols, "mean"], [
               _row(res, "attention std over test trials", "c3-gyroatt", seeds, "best/attn/std_over_trials", 4),
               ["max permutation error", *(fmt(res.metric("c3-gyroatt", s, "best/attn/perm_error")) for s in seeds),
                ""],
               _row(res, "evidence-segment weight x m (1 = uniform)", "c3-gyroatt", seeds,
                    "best/attn/evidence_weight_x_m"),
               _row(res, "same, score=neg_sq_dist", "c3-neg_sq_dist", seeds, "best/attn/evidence_weight_x_m")]),
           "With the MAtt score in (0, 1] a softmax can favour a token by at most a factor e, so the evidence weight "
           "stays near the uniform share and the gap to uniform attention is small (the spec's measurement); "
           "score=neg_sq_dist is the spec's alternative row.", "",
           "## Not run here", "",
           "- Real datasets (BCI IV-2a, MAMEM-SSVEP-II, BCI-ERN): no recordings ship offline; "
           "`jobs/gyroatt/bci_iv_2a.yaml` and siblings run them from an .npz / -epo.fif export. The paper's GyroAtt "
           "numbers were not found (spec); MAtt's own: 74.71 (BCI IV-2a), 65.50 (MAMEM-SSVEP-II), 76.01 (BCI-ERN).",
           "- GDLNet baseline (spec 1b) is not implemented."]
    return "\n".join(out)


def plots(res, folder) -> list[str]:
    plt = pyplot()

    seeds = res.reported_seeds
    fig, ax = plt.subplots(1, 3, figsize=(17, 4.8))
    panels = [("Claim 1: ramp evidence (60 epochs)", [f"c1-{k}" for k in C1]),
              (f"Claim 2: 7 geometries ({C2_EPOCHS} epochs)", [f"c2-{g}" for g in GEOMETRIES]),
              ("Claim 3: one_segment evidence (60 epochs)", [f"c3-{k}" for k in C3])]
    for a, (title, arms) in zip(ax, panels):
        for i, arm in enumerate(arms):
            vals = [v for s in seeds for v in [_acc(res, arm, s)] if v is not None]
            a.bar(i, mean(vals) or 0.0, color="tab:blue" if arm in ("c1-gyroatt", "c3-gyroatt") or arm[:2] == "c2"
                  else "tab:gray", alpha=0.7)
            a.plot([i] * len(vals), vals, "k.", ms=6)
        a.set_xticks(range(len(arms)), [x.split("-", 1)[1] for x in arms], rotation=30, ha="right", fontsize=8)
        a.axhline(0.25, color="k", ls=":", lw=1)
        a.set_ylim(0, 1)
        a.set_title(title, fontsize=10)
        a.set_ylabel("test accuracy (best val loss)")
    for i, (c, k, color) in enumerate(((1, "ts_lr", "tab:red"), (1, "mdm", "tab:orange"), (3, "ts_lr", "tab:red"))):
        if _riem(res, c, k) is not None:
            ax[0 if c == 1 else 2].axhline(_riem(res, c, k), color=color, ls="--", lw=1, label=RIEM[k])
    ax[0].axhline(0.70, color="tab:green", ls=":", lw=1, label="Claim 1 bar 0.70")
    ax[0].legend(fontsize=7)
    ax[1].axhline(0.40, color="tab:green", ls=":", lw=1)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=100)


def study() -> Study:
    return Study(slug=SLUG, title="gyroatt (GyroAtt)", arms=_arms(), claims=CLAIMS, spec_recipe=SPEC_RECIPE,
                 sections=sections, plots=plots, history=(),
                 dataset="SyntheticMI (synthetic motor-imagery EEG, montage-based generator)", real_data=False)
