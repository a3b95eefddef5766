"""Upper-bound experiment for the flights claim (issue 22): how much can prior-normalised per-mark thresholds
gain over argmax on NYC flights when the next-mark distribution is learned well from the history?

A gradient-boosted classifier (sklearn HistGradientBoosting, no sequence model) predicts the next carrier from
explicit features of the same history the TPP models see (marks and gaps up to the current event): event index,
elapsed time since the sequence's first event, the last 3 gaps and marks, and the carrier shares so far (which
identify the airport). Its class probabilities then go through exactly the method's post-process
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
