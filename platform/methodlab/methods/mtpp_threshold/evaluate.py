"""Evaluation of one split: NLL, mark-first thresholded prediction (the method), plain argmax p*(m),
the time-first pipeline, time MAE, and (generator data) the oracle from the true Hawkes intensities."""

from __future__ import annotations

import numpy as np
import torch

from methodlab.data.hawkes import next_event_oracle
from methodlab.methods.mtpp_threshold import tpp
from methodlab.methods.mtpp_threshold.model import LogNormMix
from methodlab.methods.mtpp_threshold.threshold import f1_summary, learn_thresholds, predict_marks, ratios


def _rows(p, chunk=64):
    """Consecutive row chunks, trimmed with the host lengths (no device read per chunk)."""
    n = p.marks.shape[0]
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        L = int(p.lengths[s:e].max())
        yield p.marks[s:e, :L], p.gaps[s:e, :L], p.mask[s:e, :L]


def collect(model, padded, stats):
    """p*(m) [N, M], history states [N, d], true next marks [N] and gaps [N] of every target of the split."""
    outs = [tpp.mark_probs_and_states(model, *b, stats) for b in _rows(padded)]
    return [torch.cat(x) for x in zip(*outs)]


def split_nll(model, padded, stats, eps) -> float:
    """Mean event NLL of a split, summed on the device and read once."""
    tot = torch.zeros((), dtype=torch.float64, device=padded.device)
    for marks, gaps, mask in _rows(padded):
        nll, _ = tpp.event_nll(model, marks, gaps, mask, stats, create_graph=False, eps=eps)
        tot += nll.detach().sum().double()
    n = int(np.maximum(padded.lengths - 1, 0).sum())
    return float(tot) / max(n, 1)


@torch.no_grad()
def val_mark_nll(model, data) -> float:
    """-log p*(m_true | history) averaged over the validation targets (the mark part of the likelihood)."""
    was = model.training
    model.eval()
    p, _, y, _ = collect(model, data.val, data.stats)
    model.train(was)
    p_true = p[torch.arange(len(y), device=y.device), y] / p.sum(1).clamp_min(1e-30)
    return float(-torch.log(p_true.clamp_min(1e-12)).mean())


def calibrate(model, data, cfg) -> np.ndarray:
    """Per-mark thresholds from the threshold split (train by default), outside back-propagation."""
    padded = data.train if cfg.threshold_split == "train" else data.val
    p, _, y, _ = collect(model, padded, data.stats)
    return learn_thresholds(ratios(p.cpu().numpy(), data.prior), y.cpu().numpy(), min_positives=cfg.min_positives,
                            candidates=cfg.threshold_candidates, n_quantiles=cfg.n_quantiles,
                            fallback=cfg.threshold_fallback)


def _add(out, prefix, suffix, pred, y, data):
    s = f1_summary(pred, y, data.n_marks, data.rare)
    for k in ("macro_f1", "micro_f1", "rare_f1"):
        out[f"{prefix}/{k}{suffix}"] = s[k]
    return s


@torch.no_grad()
def evaluate(model, data, cfg, thresholds, split: str = "test", time_eval: bool | None = None, nll: bool = True,
             oracle: bool = True, timefirst: bool = True) -> dict:
    padded = getattr(data, split)
    time_eval = cfg.time_eval if time_eval is None else time_eval
    model.eval()
    p, hist, y, tau = collect(model, padded, data.stats)
    p_np = p.cpu().numpy()  # one host copy of the split's scores: thresholds and F1 are numpy
    r = ratios(p_np, data.prior)
    y_np, tau_np = y.cpu().numpy(), tau.cpu().numpy()
    out = {f"{split}/events": float(len(y_np))}
    # mark part of the likelihood alone: -log p*(m_true | history) (issue 22 diagnostic; prior-only model = entropy)
    p_true = p[torch.arange(len(y), device=y.device), y] / p.sum(1).clamp_min(1e-30)
    out[f"{split}/mark_nll"] = float(-torch.log(p_true.clamp_min(1e-12)).mean())
    out[f"{split}/mark_nll_prior"] = float(-np.log(np.clip(data.prior[y_np], 1e-12, None)).mean())
    if nll:
        out[f"{split}/nll"] = split_nll(model, padded, data.stats, cfg.eps)
    pred_thr, pred_arg = predict_marks(r, thresholds), p_np.argmax(1)
    s_thr = _add(out, split, "", pred_thr, y_np, data)
    s_arg = _add(out, split, "_argmax", pred_arg, y_np, data)
    for m in range(data.n_marks):
        out[f"{split}/f1_m{m}"], out[f"{split}/f1_argmax_m{m}"] = s_thr["per_mark_f1"][m], s_arg["per_mark_f1"][m]
        out[f"{split}/mean_p_m{m}"] = float(p[:, m].mean())
        out[f"{split}/freq_m{m}"] = float(np.mean(y_np == m))
    out[f"{split}/mean_gap"] = float(tau_np.mean())
    gen = torch.Generator(device=p.device).manual_seed(cfg.seed * 7919 + 17)  # time samples drawn where they are used
    k = len(y_np) if cfg.max_time_eval_events is None else min(len(y_np), cfg.max_time_eval_events)
    if time_eval:
        out[f"{split}/time_events"] = float(k)
    kw = dict(tol=cfg.bisect_tol, max_steps=cfg.bisect_max_steps)
    if isinstance(model, LogNormMix):  # marks and time independent given the history: one time prediction
        if time_eval:
            et = model.expected_time(hist[:k], data.stats.log_mean, data.stats.log_std).cpu().numpy()
            out[f"{split}/mae"] = out[f"{split}/mae_argmax"] = float(np.abs(et - tau_np[:k]).mean())
            out[f"{split}/mean_expected_gap"] = float(et.mean())
    elif timefirst:
        # time-first pipeline: tau_hat = E[tau] (sampling m ~ p*(m), then tau | m), then argmax p*(m | tau_hat)
        if time_eval:
            n_s, sl = cfg.n_time_samples, slice(0, k)
        else:  # marks only: the time-first pipeline still needs an expected gap; a few samples on every target
            n_s, sl = 8, slice(0, len(y_np))
        t_first = tpp.expected_time_marginal(model, hist[sl], p[sl], data.stats, n_s, gen, **kw)
        pred_tf = tpp.mark_given_time(model, hist[sl], t_first, data.stats).argmax(1).cpu().numpy()
        _add(out, split, "_timefirst", pred_tf, y_np[sl], data)  # on the time-evaluated targets
        out[f"{split}/mean_expected_gap"] = float(t_first.mean())
        if time_eval:
            out[f"{split}/mae_timefirst"] = float(np.abs(t_first.cpu().numpy() - tau_np[sl]).mean())
            for name, pred in (("", pred_thr), ("_argmax", pred_arg)):
                et = tpp.expected_time_given_mark(model, hist[sl], torch.from_numpy(pred[sl]).to(hist.device),
                                                  data.stats, n_s, gen, **kw)
                out[f"{split}/mae{name}"] = float(np.abs(et.cpu().numpy() - tau_np[sl]).mean())
    if oracle and data.hawkes_params is not None:
        out.update(oracle_metrics(data, split))
    model.train()
    return out


def oracle_rows(padded, params):
    """True p(m) and E[tau | m] for every target of a split, from the generator's intensities."""
    ps, means = [], []
    for t, m in padded.seqs:
        p, mean = next_event_oracle(t, m, *params)
        ps.append(p[:-1])
        means.append(mean[:-1])
    return np.concatenate(ps), np.concatenate(means)


def oracle_metrics(data, split: str) -> dict:
    """The ceiling: the TRUE conditional mark probabilities, thresholded exactly like the model's."""
    p_tr, _ = oracle_rows(data.train, data.hawkes_params)
    y_tr = np.concatenate([m[1:] for _, m in data.train.seqs])
    eps = learn_thresholds(ratios(p_tr, data.prior), y_tr)
    p, mean = oracle_rows(getattr(data, split), data.hawkes_params)
    padded = getattr(data, split)
    y = np.concatenate([m[1:] for _, m in padded.seqs])
    tau = np.concatenate([np.diff(t) for t, _ in padded.seqs])
    out = {}
    pred = predict_marks(ratios(p, data.prior), eps)
    _add(out, split, "_oracle", pred, y, data)
    _add(out, split, "_oracle_argmax", p.argmax(1), y, data)
    out[f"{split}/mae_oracle"] = float(np.abs(mean[np.arange(len(y)), pred] - tau).mean())
    return out
