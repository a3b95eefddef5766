"""grokking_flatness: the measures against autograd / brute force, the regularizers' effect,
resume continuity, and the predictor's domain checks (spec: "Smoke test" and "A stub fails because")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methodlab.core import FieldError, RunContext
from methodlab.methods.grokking_flatness import measures
from methodlab.methods.grokking_flatness.config import Config
from methodlab.methods.grokking_flatness.train import fit
from tests.smoke import smoke_run


def _tiny(seed=0, n=12, d=5, k=4):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(k, d, generator=g, dtype=torch.float64)
    phi = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=g)
    return W, phi, y


def test_rf_trace_equals_trace_of_autograd_hessian():
    W, phi, y = _tiny()
    loss = lambda w: F.cross_entropy(phi @ w.T, y)  # noqa: E731 - mean CE w.r.t. the readout
    H = torch.autograd.functional.hessian(loss, W).reshape(W.numel(), W.numel())
    expected = W.pow(2).sum() * torch.trace(H)
    got = measures.relative_flatness_trace(W, phi, phi @ W.T)
    assert abs(float(got - expected)) / float(expected) < 1e-4


def test_rf_neuronwise_equals_petzka_definition():
    W, phi, y = _tiny(1)
    loss = lambda w: F.cross_entropy(phi @ w.T, y)  # noqa: E731
    k, d = W.shape
    H = torch.autograd.functional.hessian(loss, W)  # [k, d, k, d]
    kappa = sum(float(W[i] @ W[j]) * float(torch.trace(H[i, :, j, :])) for i in range(k) for j in range(k))
    got = float(measures.relative_flatness_neuronwise(W, phi, phi @ W.T))
    assert abs(got - kappa) / abs(kappa) < 1e-6


def test_cdnv_equals_bruteforce_numpy():
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(60, 7))
    y = rng.integers(0, 5, size=60)
    mus = {c: phi[y == c].mean(0) for c in range(5)}
    var = {c: ((phi[y == c] - mus[c]) ** 2).sum(1).mean() for c in range(5)}
    vals = [(var[a] + var[b]) / (2 * ((mus[a] - mus[b]) ** 2).sum()) for a in range(5) for b in range(5) if a != b]
    got = float(measures.cdnv(torch.tensor(phi), torch.tensor(y)))
    assert got == pytest.approx(np.mean(vals), rel=1e-9)
    # batch variant skips classes with < 2 samples
    y2 = y.copy()
    y2[0] = 9
    assert 9 not in measures.class_stats(torch.tensor(phi), torch.tensor(y2), min_count=2)[2].tolist()


def test_collapsed_features_have_zero_cdnv_and_nc1():
    mu = torch.eye(4, dtype=torch.float64) * 3
    y = torch.arange(4).repeat(5)
    phi = mu[y]
    assert float(measures.cdnv(phi, y)) == pytest.approx(0.0, abs=1e-12)
    assert float(measures.nc1(phi, y)) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("reg", ["collapse_prevent", "collapse_encourage", "anti_flat"])
def test_regularized_losses_have_finite_gradients(reg):
    cfg = Config(**{**Config.smoke, "reg": reg, "max_steps": 20, "log_every": 10})
    history = []
    fit(cfg, RunContext(report_fn=lambda m, c: history.append(m)))
    assert all(np.isfinite(h["train/loss"]) for h in history)
    assert any(h["reg/term"] != 0.0 for h in history), "regularizer term never active"


def test_anti_flat_raises_rf_vs_unregularized_twin():
    base = {**Config.smoke, "max_steps": 50, "log_every": 50, "cancel_step": 1000}
    rf = {}
    for reg in ("none", "anti_flat"):
        hist = []
        fit(Config(**base, reg=reg, lam=0.1), RunContext(report_fn=lambda m, c: hist.append(m)))
        rf[reg] = hist[-1]["rf"]
    assert rf["anti_flat"] > rf["none"], rf


def test_resume_continues_at_saved_step(tmp_path):
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    data = {"method": "grokking_flatness"}
    job = lambda steps: load_job(None, data=data, smoke=True, overrides=[f"max_steps={steps}", "checkpoint_every=50"])  # noqa: E731
    full = run_local(job(100), "full", str(tmp_path), quiet=True)
    run_local(job(50), "split", str(tmp_path), quiet=True)
    resumed = run_local(job(100), "split", str(tmp_path), quiet=True)
    lines = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [__import__("json").loads(x)["step"] for x in lines] == [50, 100]  # no step repeated from 0
    assert resumed["metrics"]["train/loss"] == pytest.approx(full["metrics"]["train/loss"], rel=1e-4)
    # resuming under a different config is refused, naming the field
    from methodlab.core import ConfigError

    other = load_job(None, data=data, smoke=True, overrides=["max_steps=100", "lr=1e-3"])
    with pytest.raises(ConfigError, match=r"different config \(lr\)"):
        run_local(other, "split", str(tmp_path), quiet=True)


def test_predictor_domain_checks(smoke_root):
    from pathlib import Path

    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.grokking_flatness.predictor import Input, Predictor

    run = smoke_run("grokking_flatness", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    out = pred([Input(a=3, b=5)])[0]
    assert 0 <= out.c < 23 and out.correct == (out.c == 8) and len(out.probs_top5) == 5
    assert sum(p for _, p in out.probs_top5) <= 1.0 + 1e-6
    with pytest.raises(FieldError, match=r"\[0\]\.a: must be < p = 23"):
        pred([Input(a=23, b=1)])
    with pytest.raises(FieldError, match=r"\[1\]\.op"):
        pred([Input(a=1, b=1), Input(a=1, b=1, op="-")])
    traj = pred.metrics()
    assert len(traj["steps"]) == len(traj["rf"]) > 0


def _batch_features(reg: str, lam: float = 1e-2):
    """A smoke model's forward pass on one training batch, as fit() does it."""
    from methodlab.methods.grokking_flatness.data import build_data
    from methodlab.methods.grokking_flatness.evaluate import forward_task
    from methodlab.methods.grokking_flatness.model import build_model

    torch.manual_seed(0)
    cfg = Config(**{**Config.smoke, "reg": reg, "lam": lam})
    data = build_data(cfg)
    model = build_model(cfg, data.vocab_size)
    _, _, logits, hidden, y = forward_task(model, data.x_train[:256], cfg.task)
    return cfg, model, logits, hidden, y


@pytest.mark.parametrize("reg,direction", [("collapse_prevent", +1), ("collapse_encourage", -1)])
def test_collapse_regularizer_gradient_moves_penultimate_features(reg, direction):
    """The collapse terms must act on phi (the features the readout W sees, answer position): their
    gradient reaches phi and the body's parameters, not W, and a small descent step on the term alone
    moves the batch CDNV in the intended direction (prevent: up, encourage: down). Fails if the term is
    detached, computed on other features, or has the wrong sign."""
    from methodlab.methods.grokking_flatness.train import regularizer

    cfg, model, logits, hidden, y = _batch_features(reg)
    hidden.retain_grad()
    term = regularizer(cfg, 0, model, logits, hidden, y)
    assert term is not None and term.requires_grad
    term.backward()
    g = hidden.grad
    assert g is not None and float(g[:, 0].norm()) > 0, "no gradient reaches the answer-position features"
    assert float(g[:, 1].norm()) == 0.0  # only the measured position is regularized
    assert model.W.grad is None or float(model.W.grad.norm()) == 0.0  # CDNV does not depend on the readout
    body = [p.grad for n, p in model.named_parameters() if not n.startswith("readout")]
    assert sum(float(x.norm()) for x in body if x is not None) > 0, "gradient does not reach the body"
    phi = hidden[:, 0].detach()
    before = float(measures.batch_cdnv(phi, y))
    step = 1e-3 * float(phi.norm()) * g[:, 0] / g[:, 0].norm()  # small descent step on the term
    after = float(measures.batch_cdnv(phi - step, y))
    assert direction * (after - before) > 0, (before, after)



def _results(runs: dict[str, list[dict]], configs: dict | None = None):
    """Harness report data holding these histories (final = grokking_summary of the history, as fit reports it)."""
    from methodlab.methods.grokking_flatness.reproduce import study
    from methodlab.methods.grokking_flatness.summary import grokking_summary
    from methodlab.reproduce.report import Results

    data = {"runs": {arm: {"0": {"final": {**h[-1], **grokking_summary(h)}, "history": h}} for arm, h in runs.items()},
            "tasks": {}, "recipes": configs or {}, "quick": False, "mode": "default"}
    return Results(data, study())


def test_train_accuracy_reading_is_the_same_for_t_mem_and_the_claims():
    """One reading of "train acc >= 99 % at a step" (best of the last 3 logs) for t_mem, the RF-drop filter
    and the anti-flat check at the baseline's t_gen, whatever the log spacing; the claims' value functions."""
    from methodlab.methods.grokking_flatness import reproduce as R
    from methodlab.methods.grokking_flatness.summary import grokking_summary, memorised, train_acc_at

    def hist(train, val, every=100, cdnv=None):
        return [{"step": every * (i + 1), "train/accuracy": t, "val/accuracy": v, "rf": 100.0 / (i + 1),
                 "cdnv": (cdnv or 1.0) / (i + 1)} for i, (t, v) in enumerate(zip(train, val))]

    base = hist([0.5, 0.995, 0.2, 0.3, 0.999, 1.0, 1.0, 1.0], [0.0, 0.1, 0.1, 0.1, 0.2, 0.5, 0.96, 0.99])
    assert grokking_summary(base)["t_mem"] == 200  # first step whose reading is >= 99 %
    assert [train_acc_at(base, s) for s in (200, 300, 400, 500)] == [0.995, 0.995, 0.995, 0.999]
    assert [h["step"] for h in memorised(base)] == [200, 300, 400, 500, 600, 700, 800]
    # CDNV 1 / k over 8 logs: at t_gen = 700 it has made (1 - 1/7) / (1 - 1/8) of its total decrease
    assert grokking_summary(base)["cdnv_drop_frac_at_t_gen"] == pytest.approx((1 - 1 / 7) / (1 - 1 / 8))
    af = hist([0.5, 0.9, 0.7, 0.2, 0.999, 0.3, 0.3, 0.3], [0.0] * 8)  # t_gen = 700: last 3 logs 0.999, 0.3, 0.3
    prevent = hist([1.0] * 8, [0.0] * 5 + [0.96] * 3, cdnv=3.0)  # t_gen 600; CDNV 3x the baseline's
    r = _results({"baseline": base, "anti_flat": af, "collapse_prevent": prevent})
    assert R.ratio_a(r, 0) == 3.5 and R.af_reading(r, 0) == (0.0, 0.999) and R.af_val(r, 0) == 0.0
    assert R.timing("collapse_prevent")(r, 0) == pytest.approx(abs(math.log2(600 / 700)))
    assert R.cdnv_ratio("collapse_prevent")(r, 0) == pytest.approx(3.0)
    assert R.rf_offset(r, 0) == pytest.approx(abs(grokking_summary(base)["rf_drop_step"] - 700) / 700)
    r = _results({"baseline": base, "anti_flat": hist([0.5] * 3 + [0.999] + [0.3] * 5, [0.0] * 9)})
    assert R.af_reading(r, 0)[1] == 0.3 and R.af_val(r, 0) == math.inf  # the 0.999 log is 4 logs back
    r = _results({"baseline": base, "anti_flat": af[:6]})  # the anti-flat run ended before t_gen: not read (fails)
    assert math.isnan(R.af_reading(r, 0)[0]) and R.af_val(r, 0) == math.inf
    r = _results({"baseline": base})  # arms that did not run: their claims read None (NOT RUN), not failed
    assert R.af_val(r, 0) is None and R.timing("collapse_prevent")(r, 0) is None and R.ratio_a(r, 0) == 3.5
    never = _results({"baseline": hist([1.0] * 4, [0.1] * 4), "collapse_prevent": prevent})
    assert R.ratio_a(never, 0) == 0.0 and R.timing("collapse_prevent")(never, 0) == math.inf


def test_digits_claim_reads_every_epoch_of_the_regularized_phase():
    """D1 is the smallest gap over the logs up to the cancel step (not the phase mean); D2 the final gap."""
    from methodlab.methods.grokking_flatness import reproduce as R

    b = [{"step": s, "val/accuracy": 0.9} for s in (5, 10, 15, 20)]
    a = [{"step": s, "val/accuracy": v} for s, v in ((5, 0.5), (10, 0.85), (15, 0.6), (20, 0.88))]
    r = _results({"digits-baseline": b, "digits-anti_flat": a}, {"digits-anti_flat": {"cancel_step": 15}})
    assert [round(g, 6) for _, g in R.digits_gaps(r, 0)] == [40.0, 5.0, 30.0]
    assert R.d_gap(r, 0) == pytest.approx(5.0) and R.d_final(r, 0) == pytest.approx(2.0)


def test_d1_probe_reads_its_own_unregularized_twin_and_the_rf_ratio_at_the_phase_end():
    """The step-count probe's gaps are against `digits-baseline-long` (not the 500-step baseline), over the logs up
    to its own cancel step; the RF ratio is read at the phase's last log; the section renders only what ran."""
    from methodlab.methods.grokking_flatness import diagnostics as D

    b = [{"step": s, "val/accuracy": 0.9, "rf": 10.0} for s in (500, 1000, 1500)]
    wrong = [{"step": s, "val/accuracy": 0.5, "rf": 10.0} for s in (500, 1000, 1500)]
    a = [{"step": s, "val/accuracy": v, "rf": rf} for s, v, rf in ((500, 0.85, 20.0), (1000, 0.7, 300.0),
                                                                  (1500, 0.89, 5.0))]
    r = _results({"digits-baseline-long": b, "digits-baseline": wrong, "digits-anti_flat-long": a},
                 {"digits-anti_flat-long": {"cancel_step": 1000, "lam": 0.01, "max_steps": 1500, "log_every": 500}})
    assert [round(g, 6) for _, g in D.digits_gaps(r, 0, "digits-anti_flat-long", "digits-baseline-long")] == [5.0, 20.0]
    row = D._d1_probe_rows(r)[0]
    assert row[1:7] == ["5.0", "12.5", "20.0", "20.0", "1 / 2", "30"]  # RF 300 / 10 at step 1,000, not 5 / 10
    text = "\n".join(D.probe_section(r))
    assert "D1 at the official step count" in text and "B2 on the official RF quantity" not in text
    assert D.probe_section(_results({"digits-baseline": wrong})) == []


def test_rf_position_changes_the_measure_not_the_training():
    """The B2 probe's premise: `baseline-official_pair` trains exactly as the baseline on the same host (only the
    logged RF differs), so a t_gen gap between the two in the report is the hosts' rounding, not the measure."""
    base = {**Config.smoke, "max_steps": 100, "log_every": 25, "reg": "none"}
    hist = {}
    for pos in ("answer", "official_pair"):
        hist[pos] = []
        fit(Config(**base, rf_position=pos), RunContext(report_fn=lambda m, c, h=hist[pos]: h.append(m)))
    for a, b in zip(hist["answer"], hist["official_pair"]):
        assert (a["train/loss"], a["val/accuracy"], a["w_norm"]) == (b["train/loss"], b["val/accuracy"], b["w_norm"])
    assert hist["answer"][-1]["rf"] != hist["official_pair"][-1]["rf"]
