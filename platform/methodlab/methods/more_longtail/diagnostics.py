"""more_longtail side studies as harness arms and their report sections (no fit runs here: reproduce.py declares
the arms, the harness runs them; these functions read only the report data `res`).

- Recipe screen (issue 27, `--full`): the acceptance job plus one recipe's overrides, the same for every arm, CE and
  LA, matched control and MORE (and the plain net where listed), development seeds 10-12; the selection signal is the
  balanced VALIDATION split. The current recipe (A He-uniform + shift) is the main arms' own dev-seed runs.
- Logit-effect trace (default): development seed 10, CE control vs MORE, every 10 epochs, for the job recipe and the
  first implementation's recipe (A with a = sqrt(5), no augmentation).
- Amplitude / schedule experiment (default, not under --quick): CE + MORE variants on the development seeds.
- Low-rank hypotheses (issue 44 item 4; default, not under --quick): A / B learning rate, their weight decay, B's
  init and when they start training, each in the control and in MORE, development seeds.
- Fashion-MNIST-LT report row (`--full`, the spec's report row): CE control vs CE + MORE, seeds 0-2."""

from __future__ import annotations

from methodlab.reproduce.tables import fmt, md_table, mean

# recipe -> (label, overrides of the acceptance job, arms); the first implementation's recipe pinned in `base`
_OLD = ("more.a_init=kaiming_sqrt5", "augment=none")
_CIFAR = ("lr=0.1", "weight_decay=2e-4", "batch_size=128", "epochs=200", "warmup_epochs=5", "lr_schedule=step",
          "lr_milestones=[160,180]")
RECIPES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "base": ("first implementation (A init a = sqrt(5), no augmentation)", _OLD, ("control", "more")),
    "kaiming0": ("A He-uniform (a = 0)", ("more.a_init=kaiming", "augment=none"), ("control", "more")),
    "shift1": ("+/-1 px shift augmentation", ("more.a_init=kaiming_sqrt5", "augment=shift"),
               ("plain", "control", "more")),
    "wd5e-3": ("weight decay 5e-3", (*_OLD, "weight_decay=5e-3"), ("control", "more")),
    "current": ("A He-uniform + shift augmentation (the acceptance recipe: the main arms' dev-seed runs)", (),
                ("plain", "control", "more")),
    "k0_wd5e-3": ("A He-uniform + weight decay 5e-3", ("more.a_init=kaiming", "augment=none", "weight_decay=5e-3"),
                  ("control", "more")),
    "cifarproto": ("A He-uniform + shift + the CIFAR-LT optimiser (lr 0.1, wd 2e-4, bs 128, 200 ep, warm-up 5, "
                   "x0.1 at 160/180)", ("more.a_init=kaiming", "augment=shift", *_CIFAR), ("control", "more")),
}
SCREEN_LOSSES = ("ce", "la")
TRACE = {"job": ("job recipe", ()), "first": ("first implementation", _OLD)}
TRACE_SEED, TRACE_EVERY = 10, 10
ABLATION = {"a0.5": ("a = 0.5, sin", ("more.amplitude=0.5",)), "a8": ("a = 8, sin", ("more.amplitude=8.0",)),
            "const": ("a = 2, const", ("more.schedule=const",)), "step": ("a = 2, sin per step",
                                                                         ("more.schedule_unit=step",))}

# Issue 44 item 4: why does the MORE loss shrink B A to ~1 % of W_g? Each hypothesis changes the low-rank part
# alike in the CE control (alpha = 0) and CE + MORE, development seeds only; the margin is MORE - its own control.
HYPOTHESES = {"lr10": ("A, B learning rate x10", ("more.lowrank_lr_mult=10",)),
              "lr3": ("A, B learning rate x3", ("more.lowrank_lr_mult=3",)),
              "lr0.3": ("A, B learning rate x0.3", ("more.lowrank_lr_mult=0.3",)),
              "wd0": ("no weight decay on A, B", ("more.lowrank_weight_decay=0",)),
              "binit": ("B ~ N(0, 0.05^2) at init (not B = 0)", ("more.b_init_std=0.05",)),
              "late": ("A, B train from epoch 75 of 150 (tail switches on at alpha's peak)", ("more.tail_start=0.5",))}
# the row that met both CE bars on the development seeds (0.5 / 2 / 8 amplitudes: ablation_section), run once on
# the reported seeds as well (the calibration rule: chosen on seeds 10-12, then seeds 0-4 once; claims unchanged)
HYP_REPORTED = ("wd0",)


def hyp_arm(name: str, kind: str) -> str:
    return f"hyp-{name}-{kind}"


def screen_arm(name: str, loss: str, arm: str) -> str:
    """The arm id of one screen cell (the current recipe is the main arm `<loss>-<arm>`)."""
    return f"{loss}-{arm}" if name == "current" else f"screen-{name}-{loss}-{arm}"


def _sg(v) -> str:
    return "—" if v is None else f"{v:+.2f}"


def _pct(v) -> str:
    return fmt(None if v is None else 100 * v, 1)


def _m(res, arm: str, key: str, seeds) -> float | None:
    return mean(res.metric(arm, s, key) for s in seeds)


def _d(res, a: str, b: str, key: str, seeds) -> float | None:
    """Mean over the seeds both arms ran of 100 * (a - b)."""
    v = [(res.metric(a, s, key), res.metric(b, s, key)) for s in seeds]
    return mean(100 * (x - y) for x, y in v if x is not None and y is not None)


def screen_section(res) -> list[str]:
    dev = res.dev_seeds
    screen = [screen_arm(n, loss, arm) for n, (_, _, arms) in RECIPES.items() if n != "current"
              for loss in SCREEN_LOSSES for arm in arms]
    n = sum(len(res.seeds(a)) for a in screen)
    rows = []
    for name, (label, _, arms) in RECIPES.items():
        for loss in SCREEN_LOSSES:
            a = {arm: screen_arm(name, loss, arm) for arm in arms}
            if not n or not all(res.seeds(a[x]) for x in ("control", "more")):
                continue
            cell = lambda k: " / ".join(_pct(_m(res, a[x], k, dev)) for x in arms)  # noqa: E731
            diff = lambda k1, k2: f"{_sg(_d(res, a['more'], a['control'], k1, dev))} / " \
                f"{_sg(_d(res, a['more'], a['control'], k2, dev))}"  # noqa: E731
            rows.append([label, loss.upper(), str(sum(1 for s in dev if res.run(a["more"], s))), cell("val/balanced_acc"),
                         diff("val/balanced_acc", "val/acc_few"), cell("eval/balanced_acc"),
                         diff("eval/balanced_acc", "eval/acc_few"), fmt(_m(res, a["more"], "train/loss_task", dev)),
                         f"{fmt(_m(res, a['control'], 'eval/disc_few', dev))} / "
                         f"{fmt(_m(res, a['more'], 'eval/disc_few', dev))}"])
    if not n:
        return ["## Recipe screen (development seeds; `--full`)", "",
                "Not run in this mode: `methodlab reproduce more_longtail --full` runs the issue-27 screen that chose "
                "the acceptance recipe (its pre-harness figures are in the legacy report).", ""]
    return ["## Recipe screen (development seeds " + ", ".join(map(str, dev)) + ", issue 27; `--full`, not gated)", "",
            "Each recipe changes the acceptance job the same way for every arm (cells: control / MORE, / plain where "
            "listed). Selection signal: the balanced validation split (images outside train and test; one image moves "
            "a class's accuracy by several points); test figures are shown for the record. "
            f"{n} screen fits beside the main arms' development-seed runs.", "",
            *md_table(["recipe", "loss", "seeds", "val bal. acc %", "val MORE - control: All / Few",
                       "test bal. acc %", "test MORE - control: All / Few", "final task loss (MORE)",
                       "Few-test logit change^2: control / MORE"], rows)]


def trace_section(res) -> list[str]:
    """Across training (development seed 10, CE): alpha, task loss, ||BA||/||W_g||, Few-test logit change, accuracy."""
    out = []
    for key, (name, _) in TRACE.items():
        hc = {int(h["epoch"]): h for h in res.history(f"trace-{key}-control", TRACE_SEED) if "epoch" in h}
        hm = {int(h["epoch"]): h for h in res.history(f"trace-{key}-more", TRACE_SEED) if "epoch" in h}
        eps = sorted(set(hc) & set(hm))
        if not eps:
            continue
        g = lambda h, k, nd=None: fmt(h.get(k), nd)  # noqa: E731
        rows = [[str(e), g(hm[e], "train/alpha", 2), f"{g(hc[e], 'train/loss_task')} / {g(hm[e], 'train/loss_task')}",
                 f"{g(hc[e], 'train/lowrank_rel')} / {g(hm[e], 'train/lowrank_rel')}",
                 f"{g(hc[e], 'eval/disc_few')} / {g(hm[e], 'eval/disc_few')}",
                 f"{_pct(hc[e].get('eval/balanced_acc'))} / {_pct(hm[e].get('eval/balanced_acc'))}",
                 f"{_pct(hc[e].get('eval/acc_few'))} / {_pct(hm[e].get('eval/acc_few'))}"] for e in eps]
        rel = lambda e: hm[e].get("train/lowrank_rel") or 0.0  # noqa: E731
        peak = max(eps, key=rel)
        half = next((e for e in eps if e > peak and rel(e) <= 0.5 * rel(peak)), None)
        note = f"MORE's ||BA||/||W_g|| peaks at {fmt(rel(peak))} (epoch {peak}); " + (
            f"it is halved by epoch {half} (alpha {fmt(hm[half].get('train/alpha'), 1)}); " if half else "") + (
            f"at epoch {eps[-1]} it is {fmt(rel(eps[-1]))} against the control's {g(hc[eps[-1]], 'train/lowrank_rel')}, "
            f"and the squared logit change on Few-class test images is {g(hm[eps[-1]], 'eval/disc_few')} against "
            f"{g(hc[eps[-1]], 'eval/disc_few')}.")
        out += [f"**{name}**", "", *md_table(["epoch", "alpha (MORE)", "task loss", "||BA||/||W_g||",
                                             "logit change^2 on Few test", "balanced acc %", "Few acc %"], rows), note, ""]
    if not out:
        return []
    return [f"## The low-rank part's effect across training (development seed {TRACE_SEED}, CE)", "",
            f"Every {TRACE_EVERY} epochs (arms `trace-*`): alpha(t) of the MORE arm, the training task loss, ||B A|| / "
            "||W_g|| (summed over the wrapped layers), the mean squared logit change due to B A on the Few-class test "
            "images, and the balanced test accuracy; control / MORE in each cell. `job recipe` is the acceptance "
            "recipe; `first implementation` is the recipe before issue 27 (A with a = sqrt(5), no augmentation).", "",
            *out]


def ablation_section(res) -> list[str]:
    dev = res.dev_seeds
    if not any(res.seeds(f"abl-{k}") for k in ABLATION):
        return []
    ca, cf = _m(res, "ce-control", "eval/balanced_acc", dev), _m(res, "ce-control", "eval/acc_few", dev)
    rows = [["CE control (alpha = 0)", _pct(ca), _pct(cf), "—", "—", fmt(_m(res, "ce-control", "eval/disc_ratio", dev), 2)]]
    for arm, label in [("ce-more", "a = 2.0, sin (default)")] + [(f"abl-{k}", v[0]) for k, v in ABLATION.items()]:
        if res.seeds(arm):
            rows.append([f"CE + MORE, {label}", _pct(_m(res, arm, "eval/balanced_acc", dev)),
                         _pct(_m(res, arm, "eval/acc_few", dev)), _sg(_d(res, arm, "ce-control", "eval/balanced_acc", dev)),
                         _sg(_d(res, arm, "ce-control", "eval/acc_few", dev)), fmt(_m(res, arm, "eval/disc_ratio", dev), 2)])
    return ["## Amplitude / schedule experiment (development seeds " + ", ".join(map(str, dev)) + ", CE; not gated)", "",
            "Does another amplitude or schedule of the same implementation reach the CE margins? The acceptance recipe "
            "(arms `abl-*`); only `more.amplitude` / `more.schedule` / `more.schedule_unit` change.", "",
            *md_table(["arm", "All %", "Few %", "All - control", "Few - control", "disc ratio"], rows)]


def hypothesis_section(res) -> list[str]:
    dev = res.dev_seeds
    if not any(res.seeds(hyp_arm(k, "more")) for k in HYPOTHESES):
        return []
    rows, meets, shrink = [], [], []
    for name, (label, _) in [("", ("paper's reading (the main arms ce-control / ce-more)", ()))] + list(HYPOTHESES.items()):
        ctl, mo = (f"ce-{k}" for k in ("control", "more")) if not name else (hyp_arm(name, k) for k in ("control", "more"))
        if not res.seeds(mo):
            continue
        d_all, d_few = _d(res, mo, ctl, "eval/balanced_acc", dev), _d(res, mo, ctl, "eval/acc_few", dev)
        bad = {a: sum(res.metric(a, s, "train/finite") == 0.0 for s in dev) for a in (ctl, mo)}
        if d_all is not None and d_few is not None and d_all >= 1 and d_few >= 3 and not any(bad.values()):
            meets.append(label)  # the P1 / P2 bars

        rc, rm = _m(res, ctl, "train/lowrank_rel", dev), _m(res, mo, "train/lowrank_rel", dev)
        if not any(bad.values()) and rc and rm:
            shrink.append((rc / rm, name or "paper"))

        def rel(a):
            return f"diverged (NaN loss, {bad[a]} of {len(dev)} seeds)" if bad[a] else fmt(_m(res, a, "train/lowrank_rel", dev), 3)
        rows.append([label, _pct(_m(res, ctl, "eval/balanced_acc", dev)), _pct(_m(res, mo, "eval/balanced_acc", dev)),
                     _sg(d_all), _sg(d_few), rel(ctl), rel(mo), fmt(_m(res, mo, "eval/disc_ratio", dev), 2)])
    return ["## Why the low-rank part vanishes: hypotheses on the development seeds " + ", ".join(map(str, dev)) +
            " (CE; not gated)", "",
            "Issue 44 item 4. Official code: not located (the spec's source check; searched again on 2026-12-06 by "
            "the paper's title and its low-rank / discrepancy terms in the stored code index: no repository), so "
            "the hypotheses are those the paper's construction, as the spec transcribes it, rules out. The paper's "
            "setting (ResNet-32 on CIFAR-100-LT, GPU-sized) needs CIFAR files that no package ships: "
            "jobs/more_longtail/cifar_lt.yaml runs it on a user's copy; not run here (no GPU lent, no files). "
            "Each row changes the low-rank part the same way in the alpha = 0 control and in MORE "
            "(arms `hyp-<name>-control` / `hyp-<name>-more`), so the margins are MORE minus its own control. "
            "`||BA|| / ||W_g||` is the summed Frobenius norm of the low-rank deltas over that of the general weights "
            "at the end of training (`train/lowrank_rel`). The weight of the discrepancy term is the amplitude "
            "experiment above (a = 0.5 / 2 / 8).", "",
            *md_table(["hypothesis", "control All %", "MORE All %", "All: MORE - control", "Few: MORE - control",
                       "||BA||/||W_g|| control", "||BA||/||W_g|| MORE", "disc ratio"], rows),
            *([f"In every row that trained without diverging ({', '.join(n for _, n in shrink)}), MORE's low-rank "
               f"part ends {min(r for r, _ in shrink):.0f}-{max(r for r, _ in shrink):.0f}x smaller than its own "
               "control's: the discrepancy term itself shrinks B A, under each of these changes to A and B's "
               "training.", ""] if shrink else []),
            "Rows whose dev-seed margins meet both CE bars (All >= +1, Few >= +3, P1 / P2): "
            + ("; ".join(meets) if meets else "none") + ". A row that meets them is a candidate recipe for the "
            "reported seeds (the calibration rule: chosen here, then run once on seeds 0-4); none is adopted by this "
            "table alone.", "", *_hyp_reported(res)]


def _hyp_reported(res) -> list[str]:
    seeds = res.reported_seeds
    rows = []
    for name in HYP_REPORTED:
        ctl, mo = hyp_arm(name, "control"), hyp_arm(name, "more")
        got = [s for s in seeds if res.final(ctl, s) and res.final(mo, s)]
        if not got:
            continue
        rows.append([HYPOTHESES[name][0], ", ".join(map(str, got)),
                     " / ".join(_sg(_d(res, mo, ctl, "eval/balanced_acc", [s])) for s in got),
                     _sg(_d(res, mo, ctl, "eval/balanced_acc", got)), _sg(_d(res, mo, ctl, "eval/acc_few", got)),
                     fmt(_m(res, mo, "train/lowrank_rel", got), 3)])
    if not rows:
        return []
    return ["The same rows on the reported seeds, run once after the development seeds (not the claims' recipe; "
            "the claims above stay on the spec's one optimiser):", "",
            *md_table(["hypothesis", "seeds", "All: MORE - control per seed", "All (mean; P1 bar +1)",
                       "Few (mean; P2 bar +3)", "||BA||/||W_g|| MORE"], rows)]


def fmnist_section(res) -> list[str]:
    arms = ("fm-ce-control", "fm-ce-more")
    if not any(res.seeds(a) for a in arms):
        return ["Fashion-MNIST-LT report row: not run in this mode (the spec keeps it out of the default "
                "reproduction: `methodlab reproduce more_longtail --full`).", ""]
    rows = []
    for a in arms:
        ss = res.seeds(a)
        rows.append([a, " / ".join(_pct(res.metric(a, s, "eval/balanced_acc")) for s in ss),
                     *(_pct(_m(res, a, f"eval/{k}", ss)) for k in ("balanced_acc", "acc_many", "acc_medium", "acc_few")),
                     fmt(_m(res, a, "eval/disc_ratio", ss), 2), fmt(mean(res.run(a, s)["wall_s"] for s in ss), 0)])
    return ["## Fashion-MNIST-LT IF 100 (report row, not gated; `--full`)", "",
            "14,886 training images (6000 ... 60), the 10,000 balanced test images, MLP 784-256-256-10 with all Linear "
            "layers wrapped (r = 8), 30 epochs, batch 128 (`jobs/more_longtail/fmnist_lt.yaml`, the current A init); "
            "Many / Medium / Few with the paper's fixed cut-offs (>100 / 20-100 / <20 training images: 8 / 2 / 0 "
            "classes, so Few is empty).", "",
            *md_table(["arm", "balanced acc per seed", "All", "Many", "Medium", "Few", "disc ratio", "s per run"], rows)]
