"""Side studies of the flights claim (issue 22), run by the reproduction study (reproduce.py) as a harness
Task (the ceiling) and rendered from its arms (the probe, the mark-head variants, 4x the steps, October
thresholds): why IFNMTPP's flights marks are weak, and how much the thresholds can gain on flights at all.

The ceiling: a gradient-boosted classifier (sklearn HistGradientBoosting, no sequence model) predicts the next
carrier from explicit features of the same history the TPP models see (marks and gaps up to the current event):
event index, elapsed time since the sequence's first event, the last 3 gaps and marks, and the carrier shares so
far (which identify the airport). Its class probabilities then go through exactly the method's post-process
(p / training prior, per-mark F1-optimal thresholds learned on the training split, argmax(r - eps)), beside plain
argmax. A constant model (the training prior) is the floor. Not part of the paper: a measurement of the data."""

from __future__ import annotations

import numpy as np

from methodlab.methods.mtpp_threshold.threshold import f1_summary, learn_thresholds, predict_marks, ratios

N_LAST = 3


def history_features(padded, n_marks: int, stats) -> tuple[np.ndarray, np.ndarray]:
    """One row per prediction target (event i+1 of a sequence, i >= 0) from events 0..i only; returns (X, y)."""
    X, Y = [], []
    for t, m in padded.seqs:
        t, m = np.asarray(t, float), np.asarray(m, np.int64)
        n = len(t)
        if n < 2:
            continue
        i = np.arange(n - 1)  # history ends at event i, target is event i + 1
        gaps = np.r_[0.0, np.diff(t)]
        onehot = np.eye(n_marks)[m]
        counts = np.cumsum(onehot, 0)[:-1]
        shares = counts / (i + 1)[:, None]
        cols = [i, t[:-1] - t[0]]
        for k in range(N_LAST):
            j = i - k
            ok = j >= 0
            cols.append(np.where(ok, gaps[np.clip(j, 0, None)], -1.0))
            cols.append(np.where(ok, m[np.clip(j, 0, None)], n_marks))  # n_marks = "no event"
        X.append(np.column_stack(cols + [shares]))
        Y.append(m[1:])
    return np.concatenate(X).astype(np.float32), np.concatenate(Y)


GBT = {"max_iter": 100, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 200, "l2_regularization": 1.0}


def flights_ceiling(data, seed: int = 0, max_train_rows: int | None = 80_000, min_positives: int = 5,
                    gbt: dict | None = None) -> dict:
    """Fit the classifier on (a random subset of) the training targets; thresholds learned on the training split
    (the method's setting; in-sample probabilities) and, as a check, on the October validation split; test metrics."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    M = data.n_marks
    Xtr, ytr = history_features(data.train, M, data.stats)
    Xva, yva = history_features(data.val, M, data.stats)
    Xte, yte = history_features(data.test, M, data.stats)
    rng = np.random.default_rng(seed)
    fit_idx = np.arange(len(ytr)) if not max_train_rows or len(ytr) <= max_train_rows else \
        np.sort(rng.choice(len(ytr), max_train_rows, replace=False))
    cat = np.zeros(Xtr.shape[1], bool)
    cat[[3 + 2 * k for k in range(N_LAST)]] = True  # the last marks are categorical
    clf = HistGradientBoostingClassifier(**{**GBT, **(gbt or {})}, categorical_features=cat, early_stopping=False,
                                         random_state=seed)
    clf.fit(Xtr[fit_idx], ytr[fit_idx])

    def probs(X):
        p = np.full((len(X), M), 1e-9)
        p[:, clf.classes_] = clf.predict_proba(X)
        return p / p.sum(1, keepdims=True)

    def nll(p, y):
        return float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-12, None))))

    P = {"gbt": (probs(Xtr), probs(Xva), probs(Xte)),
         "prior": tuple(np.tile(data.prior, (len(y), 1)) for y in (ytr, yva, yte))}
    out = {"train_rows": float(len(fit_idx)), "test_events": float(len(yte))}
    for name, (p_tr, p_va, p_te) in P.items():
        out[f"{name}/mark_nll"], out[f"{name}/val_mark_nll"] = nll(p_te, yte), nll(p_va, yva)
        arg = f1_summary(p_te.argmax(1), yte, M, data.rare)
        for k in ("macro_f1", "rare_f1", "micro_f1"):
            out[f"{name}/{k}_argmax"] = arg[k]
        for where, p_fit, y_fit, sfx in (("train", p_tr, ytr, ""), ("val", p_va, yva, "_valthr")):
            eps = learn_thresholds(ratios(p_fit, data.prior), y_fit, min_positives=min_positives)
            thr = f1_summary(predict_marks(ratios(p_te, data.prior), eps), yte, M, data.rare)
            for k in ("macro_f1", "rare_f1", "micro_f1"):
                out[f"{name}/{k}{sfx}"] = thr[k]
    return out


# ---- the harness Task and the diagnosis section (issue 22) -------------------------------------------------------
# The probe (a): 208 training sequences spread over Jan-Sep in batches of 8 for 10 epochs = the 260 Adam steps of
# the spec's flights recipe (819 / 32 x 10), 40 spread test sequences, marks only (no time MAE); lr 2e-3 (the spec
# default) and 5e-3 (the top of its range), IFNMTPP and LogNormMix alike, development seeds.
PROBE = ("max_train_sequences=208", "max_eval_sequences=40", "subset=spread", "batch_size=8", "min_epochs=0",
         "max_epochs=10", "patience=10", "eval_every=2", "time_eval=false", "torch_threads=1",
         "scaling.cpus_per_worker=1")
PROBE_LRS = ("2e-3", "5e-3")
HEAD_SEED = 10
# (c) the mark head at the probe's budget (lr 5e-3, seed 10): weights projected to >= 0 after every step (the
# research code's relu on weight.data), and in addition the research code's init with c = 1.
HEAD = {"head-project": ("nonneg_weights=project", "epoch_val_f1=false"),
        "head-research-c1": ("nonneg_weights=project", "init=research", "tanh_parameter=1.0", "epoch_val_f1=false")}
# (d) 4x the Adam steps at full scale (batch 8 sequences), projected weights; (e) the same models' thresholds
# re-learned on October (the `calibrate` setting on (d)'s checkpoints).
X4 = ("batch_size=8", "nonneg_weights=project", "epoch_val_f1=false")
MODELS = (("ifn", "IFNMTPP"), ("lnm", "LogNormMix"))


def ceiling(seed: int, inputs: dict, mode: str) -> dict:
    """Task: the boosted-trees ceiling on the full flights split (one torch / BLAS thread)."""
    from methodlab.core.device import set_threads
    from methodlab.methods.mtpp_threshold.config import Config
    from methodlab.methods.mtpp_threshold.data import build_data

    set_threads(1)
    return flights_ceiling(build_data(Config.model_validate({"dataset": "flights"})), seed=seed)


def _f3(xs) -> str:
    return ", ".join(f"{x:.3f}" for x in xs)


def _pm(xs) -> str:
    return ", ".join(f"{x:+.3f}" for x in xs)


def _avg(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def _gain(f: dict) -> float:
    return f["test/macro_f1"] - f["test/macro_f1_argmax"]


def lost(f: dict, n_marks: int = 16) -> str:
    """Marks that argmax predicts well (F1 >= 0.1) and thresholding loses (F1 < 0.05), with their test shares."""
    ms = [m for m in range(n_marks) if f"test/f1_argmax_m{m}" in f
          and f[f"test/f1_argmax_m{m}"] >= 0.1 and f[f"test/f1_m{m}"] < 0.05]
    return "none" if not ms else " ".join(f"m{m} ({f[f'test/freq_m{m}']:.0%})" for m in ms)


def _runs(res, arm: str) -> list[tuple[int, dict, float]]:
    """(seed, final metrics, wall s) of every finished seed of an arm."""
    return [(s, res.final(arm, s), res.run(arm, s)["wall_s"]) for s in res.seeds(arm)]


def render(res) -> list[str]:
    """The flights diagnosis from whatever of its arms and tasks finished (nothing when none did)."""
    probe = {(w, lr): _runs(res, f"probe-{w}-lr{lr}") for w, _ in MODELS for lr in PROBE_LRS}
    ceil = [(s, res.task("ceiling", s)) for s in res.study.dev_seeds if res.task("ceiling", s)]
    if not any(probe.values()) and not ceil:
        return []
    L = ["## Flights diagnosis (issue 22): why IFNMTPP's marks are weak, and the measured ceiling", "",
         "**(a) Mark-signal probe at the spec's optimiser budget** (development seeds). The flights recipe gives "
         "819 / 32 x 10 = 260 Adam steps. Probe: 208 training sequences spread over Jan-Sep (all three airports), "
         "batch 8, 10 epochs = 260 steps, spec sizes, lr 2e-3 (spec default) and 5e-3 (top of the spec's range) for "
         "both models, best validation-NLL epoch restored; test = 40 Nov-Dec sequences spread over the split. Mark "
         "NLL = -log p*(m | history) (for IFNMTPP p*(m) = Gamma*(m, 0)); 'prior' = the training mark frequencies.", "",
         "| model | lr | seeds | test mark NLL (per seed) | prior's mark NLL | argmax macro-F1 | thresholded macro-F1 "
         "| thr - argmax (per seed) |", "|---|---|---|---|---|---|---|---|"]
    for w, name in MODELS:
        for lr in PROBE_LRS:
            rr = probe[(w, lr)]
            if not rr:
                continue
            g = lambda k: [f[k] for _, f, _ in rr]  # noqa: E731
            gains = [_gain(f) for _, f, _ in rr]
            L.append(f"| {name} | {lr} | {', '.join(str(s) for s, _, _ in rr)} | {_avg(g('test/mark_nll')):.3f} "
                     f"({_f3(g('test/mark_nll'))}) | {_avg(g('test/mark_nll_prior')):.3f} | "
                     f"{_avg(g('test/macro_f1_argmax')):.3f} ({_f3(g('test/macro_f1_argmax'))}) | "
                     f"{_avg(g('test/macro_f1')):.3f} ({_f3(g('test/macro_f1'))}) | {_avg(gains):+.3f} ({_pm(gains)}) |")
    nll = lambda w, lr, k="test/mark_nll": _avg([f[k] for _, f, _ in probe[(w, lr)]])  # noqa: E731
    lo, hi = PROBE_LRS
    if probe[("ifn", lo)] and probe[("ifn", hi)]:
        L += ["", f"Reading: at the recipe's 260 steps and lr {lo}, IFNMTPP's test mark NLL is {nll('ifn', lo):.3f} "
              f"against the prior's {nll('ifn', lo, 'test/mark_nll_prior'):.3f} (LogNormMix {nll('lnm', lo):.3f}); at "
              f"lr {hi} {nll('ifn', hi):.3f} (LogNormMix {nll('lnm', hi):.3f}), argmax macro-F1 "
              f"{nll('ifn', hi, 'test/macro_f1_argmax'):.3f} vs {nll('ifn', lo, 'test/macro_f1_argmax'):.3f} at {lo}: "
              "the flights recipe takes lr 5e-3 for both models. IFNMTPP's only mark-specific inputs are the per-mark "
              "time vectors a_m, b_m, seen through a non-negative d_I x d_I map, so every mark starts with the same "
              "Gamma and the marks separate only after a plateau whose length is set by the step size."]
    if ceil:
        g = lambda k: [t[k] for _, t in ceil]  # noqa: E731
        L += ["", "**(b) Ceiling: a strong classifier on the same history** (Task `ceiling`, development seeds "
              f"{', '.join(str(s) for s, _ in ceil)}). Gradient-boosted trees (sklearn HistGradientBoosting, 100 "
              "iterations, 15 leaves, 80,000 random training targets per seed) predict the next carrier from explicit "
              "history features, then exactly the method's post-process (p / training prior, per-mark F1-optimal "
              f"thresholds, argmax(r - eps)). Full Jan-Sep / Nov-Dec split ({int(ceil[0][1]['test_events'])} test "
              "targets).", "",
              "| scores | test mark NLL | argmax macro-F1 | thresholded (train thresholds, as the method) | thr - argmax "
              "| thresholded (October thresholds) | thr - argmax |", "|---|---|---|---|---|---|---|"]
        for key, lab in (("gbt", "boosted trees"), ("prior", "training prior (constant)")):
            a, t, v = g(f"{key}/macro_f1_argmax"), g(f"{key}/macro_f1"), g(f"{key}/macro_f1_valthr")
            L.append(f"| {lab} | {_avg(g(f'{key}/mark_nll')):.3f} | {_avg(a):.3f} ({_f3(a)}) | {_avg(t):.3f} ({_f3(t)}) "
                     f"| {_avg(t) - _avg(a):+.3f} | {_avg(v):.3f} ({_f3(v)}) | {_avg(v) - _avg(a):+.3f} |")
        gain = _avg(g("gbt/macro_f1")) - _avg(g("gbt/macro_f1_argmax"))
        L += ["", f"With a well-learned next-mark distribution (boosted trees, test mark NLL "
              f"{_avg(g('gbt/mark_nll')):.3f}) the same thresholds gain {gain:+.3f} macro-F1 over argmax: the flights "
              f"bar (+0.02) is {'within' if gain >= 0.02 else 'beyond'} what the data allows once p(m | history) is "
              "learned."]
    fl = _runs(res, "flights-ifn")
    if fl:
        L += ["", "Marks that argmax predicts with F1 >= 0.1 and the thresholded rule drops below 0.05 (test share), "
              "flights claim runs: " + "; ".join(f"seed {s}: {lost(f)}" for s, f, _ in fl) + "."]
    return L + _head(res) + _x4(res, _avg([t["gbt/mark_nll"] for _, t in ceil]) if ceil else None)


def _head(res) -> list[str]:
    rows = [("clamp in forward, U(0, 1/d) init (the probe's IFNMTPP at lr 5e-3)", res.run(f"probe-ifn-lr{PROBE_LRS[1]}",
                                                                                         HEAD_SEED))]
    rows += [(name, res.run(name, HEAD_SEED)) for name in HEAD]
    rows = [(n, r) for n, r in rows if r is not None]
    if len(rows) < 2:
        return []
    L = ["", f"**(c) The mark head at the same step budget** (`--full` only). The probe of (a) at lr 5e-3, seed "
         f"{HEAD_SEED}: weights projected to >= 0 after every step (`nonneg_weights: project`, the research code's relu "
         "on weight.data; clamping in the forward pass leaves a weight pushed below 0 without a gradient), and in "
         "addition the research code's init (nn.Linear default then relu, xavier per-mark vectors) with c = 1.", "",
         "| variant | Adam steps | negative weights | test mark NLL (prior) | argmax macro-F1 | thresholded | "
         "thr - argmax | wall s |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        f = r["final"]
        neg = f.get("train/negative_weight_share")
        L.append(f"| {name} | {26 * int(f['epoch'])} | {'n/a' if neg is None else f'{neg:.0%}'} | "
                 f"{f['test/mark_nll']:.3f} ({f['test/mark_nll_prior']:.3f}) | {f['test/macro_f1_argmax']:.3f} | "
                 f"{f['test/macro_f1']:.3f} | {_gain(f):+.3f} | {r['wall_s']:.0f} |")
    return L


def _curve(history: list[dict]) -> list[dict]:
    """The validation rows of a run, one per epoch (the final row repeats the last epoch with the restored model)."""
    seen: set = set()
    return [h for h in history if "val/mark_nll" in h and "epoch" in h and not (h["epoch"] in seen or seen.add(h["epoch"]))]


def _x4(res, gbt_nll: float | None) -> list[str]:
    runs = {w: _runs(res, f"x4-{w}") for w, _ in MODELS}
    if not runs["ifn"]:
        return []
    L = ["", "**(d) 4x the steps at full scale** (`--full` only, development seeds). The whole flights split, batch 8 "
         "sequences (up to 1,030 Adam steps in 10 epochs, 4x those of batch 32), lr 5e-3, projected weights, early "
         "stopping on October NLL (patience 3), thresholds on the training split, IFNMTPP and LogNormMix alike; the "
         "best October-NLL epoch is restored.", "",
         "| model | seeds | epochs | test mark NLL = per seed (prior) | argmax macro-F1 | thresholded macro-F1 | "
         "thr - argmax (per seed) | marks lost by thresholding (per seed) | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for w, name in MODELS:
        rr = runs[w]
        if rr:
            g = lambda k: [f[k] for _, f, _ in rr]  # noqa: E731
            gains = [_gain(f) for _, f, _ in rr]
            L.append(f"| {name} | {', '.join(str(s) for s, _, _ in rr)} | {', '.join(str(int(f['epoch'])) for _, f, _ in rr)} "
                     f"| {_avg(g('test/mark_nll')):.3f} = {_f3(g('test/mark_nll'))} ({_avg(g('test/mark_nll_prior')):.3f}) "
                     f"| {_avg(g('test/macro_f1_argmax')):.3f} | {_avg(g('test/macro_f1')):.3f} | {_avg(gains):+.3f} "
                     f"({_pm(gains)}) | {'; '.join(lost(f) for _, f, _ in rr)} | {', '.join(f'{t:.0f}' for _, _, t in rr)} |")
    curves = [(s, _curve(res.history("x4-ifn", s))) for s, _, _ in runs["ifn"]]
    L += ["", "IFNMTPP validation (October) mark NLL by epoch: " + "; ".join(
        f"seed {s}: " + ", ".join(f"e{int(h['epoch'])} {h['val/mark_nll']:.3f}" for h in c) for s, c in curves if c) + "."]
    fi = [f for _, f, _ in runs["ifn"]]
    pr, mn = _avg([f["test/mark_nll_prior"] for f in fi]), _avg([f["test/mark_nll"] for f in fi])
    g = _avg([_gain(f) for f in fi])
    L += ["", f"Reading: with 4x the Adam steps IFNMTPP's test mark NLL is {mn:.3f} against the prior's {pr:.3f}; "
          f"thresholding gains {g:+.3f} macro-F1 over argmax ({'at or above' if g >= 0.02 else 'below'} the +0.02 bar)."
          + (f" IFNMTPP's p*(m | history) recovers {(pr - mn) / (pr - gbt_nll):.0%} of the mark information the boosted "
             "trees of (b) extract from the same history ((prior - IFNMTPP) / (prior - trees) test mark NLL)."
             if gbt_nll is not None and pr > gbt_nll else "")]
    val = {w: _runs(res, f"x4val-{w}") for w, _ in MODELS}
    if not val["ifn"]:
        return L
    L += ["", "**(e) Thresholds re-learned on October for the models of (d)** (the `calibrate` setting on (d)'s "
          "final checkpoints: the same trained weights; only the split the per-mark thresholds are fitted on changes, "
          "from Jan-Sep, the sequences the model was fitted to, to the October validation split).", "",
          "| model | seeds | thresholded (train thresholds, (d)) | thresholded (October thresholds) | argmax macro-F1 | "
          "thr - argmax, October thresholds (per seed) | marks lost (per seed) |", "|---|---|---|---|---|---|---|"]
    for w, name in MODELS:
        rr = val[w]
        if rr:
            d = {s: f for s, f, _ in runs[w]}
            gains = [_gain(f) for _, f, _ in rr]
            L.append(f"| {name} | {', '.join(str(s) for s, _, _ in rr)} | "
                     f"{_avg([d[s]['test/macro_f1'] for s, _, _ in rr if s in d]):.3f} | "
                     f"{_avg([f['test/macro_f1'] for _, f, _ in rr]):.3f} | {_avg([f['test/macro_f1_argmax'] for _, f, _ in rr]):.3f} "
                     f"| {_avg(gains):+.3f} ({_pm(gains)}) | {'; '.join(lost(f) for _, f, _ in rr)} |")
    gv = _avg([_gain(f) for _, f, _ in val["ifn"]])
    L += ["", f"Reading: with October thresholds IFNMTPP's thresholded - argmax macro-F1 is {gv:+.3f} (bar +0.02) on "
          f"the development seeds: {'neither (d) nor (e) clears' if max(g, gv) < 0.02 else 'this clears'} the bar. "
          "The flights claim runs the recipe of its section (batch 32, lr 5e-3, training-split thresholds)."]
    return L


# ---- issue 44: the official code on the flights claim's training recipe -------------------------------------------
# The dev arm `official-opt`: the research code's optimiser (AdamW), schedule (linear warm-up over 20 % of the planned
# steps, then half a cosine to 0) and fixed budget (no early stopping; best October-NLL weights after the warm-up), on
# the flights claim's recipe otherwise (batch 32, 10 epochs = 260 steps, lr 5e-3 of issue 22, train thresholds).
OFFICIAL_OPT = ("optimizer=adamw", "lr_schedule=warmup_cosine", "warmup_fraction=0.2", "min_epochs=10",
                "epoch_val_f1=false")
_REPO = ("The paper's repository, github.com/undes1red/IFNMTPP (linked from arXiv 2510.20414), is not in the stored "
         "index and could not be fetched; its author's research framework **undes1red/tpp-playground**, which holds "
         "the IFN model (\"Integration-free Neural Marked Temporal Point Process\") and the trainer it runs under, was "
         "read instead: `src/TPP/model/ifn/model.py` (IFNModel.train_procedure, loss_function, nll_loss_oversample, "
         "train_step, choose_metric), `src/TPP/model/ifn/submodel.py` (IFN.default_forward), "
         "`src/toolbox/modules/nonneg_mlp/nonneg.py` (NonNegLinear), `src/TPP/trainer.py` (TPPTrainer.task, save), "
         "`src/TPP/trainer_arguments.py`, `src/TPP/optimizer/optim.py` (ScheduledOptim, get_lr_sheduler), "
         "`parameter_set/TPP/ifib_c_parameter_set.py` (the per-dataset recipes of IFIB-C, the sibling model the config "
         "docstring already cites; IFN's own `parameter_set/TPP/ifn_parameter_set.py` is imported there but not "
         "stored) and the IFIB-C synthetic model card under `model/hawkes_1_v2/`.")
_POINTS = (
    ("optimiser", "AdamW (torch defaults: weight decay 0.01; `optimizer.yml` extras not published)",
     "Adam, no weight decay", "differs: new option `optimizer: adamw` (+ `weight_decay`)"),
    ("learning rate", "2e-3 on every dataset", "5e-3 (issue 22; the spec's default 2e-3)",
     "differs: ours is sized to a budget 100-1,000x smaller (below)"),
    ("lr schedule", "linear warm-up from 0 over n_warmup_steps (20 % of the steps on StackOverflow / Retweet / MOOC / "
     "BookOrder, 10 % synthetic), then half a cosine (n_cycles 0.5) to 0 at the last step", "constant",
     "differs: new option `lr_schedule: warmup_cosine` (+ `warmup_fraction`)"),
    ("gradient clipping", "grad_clip 0 = off, in every recipe", "off (grad_clip null)", "matches"),
    ("history encoder", "1-layer LSTM over [mark embedding, standardised time]; d_history 32, d_intensity 64, 3 "
     "monotone layers (synthetic model card; the real-data sizes are in unpublished yml files)",
     "1-layer LSTM over the same inputs, 64 / 64 / 3 (spec)",
     "matches in structure, ours wider; not a plausible cause (LogNormMix learns with the same encoder)"),
    ("batch size", "32 sequences (StackOverflow, Retweet, MOOC), 8 (BookOrder), 128 (synthetic)", "32", "matches"),
    ("step budget, early stopping", "a fixed n_training_steps (200k StackOverflow, 400k Retweet / MOOC, 20k BookOrder, "
     "10k synthetic), no early stopping; evaluation every 1 % of the steps, a checkpoint kept when validation and test NLL "
     "both reach new lows (Metric.compare), none during warm-up", "at most 10 epochs = 260 steps, early stopping on October "
     "NLL (patience 3), best October-NLL epoch restored",
     "differs: 2-3 orders of magnitude fewer steps; the fixed budget and the after-warm-up selection are in "
     "`warmup_cosine` + min_epochs = max_epochs (validation NLL only: the test-NLL condition reads the test split)"),
    ("training loss", "event NLL per event + the survival term (survival_loss_during_training: true in the constructor; the "
     "model yml files are not published); an "
     "earlier revision trains on nll_loss_oversample (each event x rarest mark count / its mark's count; padding is "
     "counted as mark 0 there)", "event NLL, no survival (the paper: off), no reweighting (`loss_weighting: "
     "batch_balanced` is the oversampling loss)", "differs on the survival term (ours follows the paper); not changed"),
    ("non-negative weights", "relu on weight.data before every forward (a projection), nn.Linear init then relu",
     "flights recipe: clamp in the forward pass, U(0, 1/d) init", "differs; `nonneg_weights: project` and "
     "`init: research` exist since issue 22 (mark-head variants, --full)"),
)


def official(res) -> list[str]:
    """The issue-44 subsection: repository, files, per-point verdicts, and the dev arm when it ran."""
    L = ["", "### Official code comparison (issue 44)", "", _REPO, "",
         "| point | research code | ours (flights claim) | verdict |", "|---|---|---|---|"]
    L += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _POINTS]
    L += ["", "Reading: the schedule, the optimiser and above all the step budget differ; clipping, batch size and the "
          "encoder's structure match. The research code's budgets are out of reach here (a flights epoch of 26 steps "
          "takes minutes on one thread), so the development arm `official-opt` runs its optimiser, schedule and fixed "
          "budget (AdamW, warm-up over 20 % then cosine to 0, no early stopping, best October NLL after the warm-up) on "
          "the flights claim's recipe otherwise (batch 32, 10 epochs = 260 steps, lr 5e-3)."]
    L += _budget(res)
    rr = _runs(res, "official-opt")
    if rr:
        gains = [_gain(f) for _, f, _ in rr]
        L += ["", "| seeds | test mark NLL (prior) | argmax macro-F1 | thresholded macro-F1 | thr - argmax (per seed) "
              "| wall s |", "|---|---|---|---|---|---|",
              f"| {', '.join(str(s) for s, _, _ in rr)} | {_avg([f['test/mark_nll'] for _, f, _ in rr]):.3f} "
              f"({_avg([f['test/mark_nll_prior'] for _, f, _ in rr]):.3f}) | "
              f"{_avg([f['test/macro_f1_argmax'] for _, f, _ in rr]):.3f} | {_avg([f['test/macro_f1'] for _, f, _ in rr]):.3f} "
              f"| {_avg(gains):+.3f} ({_pm(gains)}) | {', '.join(f'{t:.0f}' for _, _, t in rr)} |", "",
              f"On the development seeds the research code's optimiser and schedule give thr - argmax {_avg(gains):+.3f} "
              f"(bar +0.02): {'at or above' if _avg(gains) >= 0.02 else 'below'} the bar."]
    return L


def _budget(res) -> list[str]:
    """Issue 44 (iii): the spec's epoch budget for the flights claim, priced from this study's own IFNMTPP runs."""
    rr = [(f["epoch"], t) for _, f, t in _runs(res, "flights-ifn") if f and f.get("epoch")]
    if not rr:
        return []
    per = [t / e for e, t in rr]
    lo, hi = 60 * min(per) / 3600, 200 * max(per) / 3600
    return ["", f"The spec's epoch budget (at least 60 epochs, then early stopping with patience >= 10, up to 200) "
            f"was not run for the flights claim: its IFNMTPP runs here took {min(per):.0f}-{max(per):.0f} s an epoch "
            f"on one thread (wall / epochs of the `flights-ifn` runs), so that budget is {lo:.1f}-{hi:.1f} hours "
            "per seed and model on this 2-core machine. It is sized for a GPU (`methodlab run "
            "jobs/mtpp_threshold/flights.yaml min_epochs=60 max_epochs=200 patience=10 scaling.use_gpu=true`), "
            "and no GPU was lent to this project's sessions."]
