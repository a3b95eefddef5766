"""monotone_gbt (LGBT-D): root-law maths against quadrature, the loss gradient against autograd, the MAP optimum,
the M-matrix against direct inversion and against finite differences, the paper's counter-example, the
monotonicity test on identity + one-hot (passes) and Gaussian (fails) embeddings, the synthetic generator
(ordered pairs, every draw kept; the official Python filter as a flag), the prior sampler (covariance P^-1), the
stubs that must fail (zeros, identity only), the data loaders, resume, and the predictor's domain."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import ConfigError, FieldError, RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.data.monotone_gbt_synthetic import (generate, official_python_filter, onehot_groups, sample_beta,
                                                    sample_pairs)
from methodlab.methods.monotone_gbt import settings
from methodlab.methods.monotone_gbt.config import Config
from methodlab.methods.monotone_gbt.model import (Comparisons, comparison_laplacian, embeddings, fd_check, fit_map,
                                                  gram_with_alpha, hessian, knn_laplacian, loss_and_grad, m_matrix,
                                                  monotonicity_test, nmse, random_laplacian)
from methodlab.methods.monotone_gbt.predictor import Predictor
from methodlab.methods.monotone_gbt.rootlaw import Binary, Gaussian, KAry, Uniform, make_law
from tests.smoke import smoke_run

torch.set_num_threads(1)
LAWS = [Uniform(), Binary(), KAry(11), KAry(3), Gaussian(0.7)]


# ------------------------------------------------------------------------------------------- root laws
def _quad(law, s):
    """Brute force: Phi(s) = log E_f[e^{sr}], E[r|s], Var[r|s], P(r>0|s) by quadrature / exact sums."""
    if isinstance(law, Uniform):
        r = np.linspace(-1, 1, 200_001)
        w = np.full_like(r, 1.0)
        w[0] = w[-1] = 0.5  # trapezoid
        w /= w.sum()
    elif isinstance(law, Binary):
        r, w = np.array([-1.0, 1.0]), np.array([0.5, 0.5])
    elif isinstance(law, KAry):
        r, w = law.points, np.full(law.k, 1.0 / law.k)
    else:
        r = np.linspace(-12, 12, 400_001)
        w = np.exp(-r ** 2 / (2 * law.var))
        w /= w.sum()
    e = w * np.exp(s * r)
    z = e.sum()
    mu = (e * r).sum() / z
    return math.log(z), mu, (e * r * r).sum() / z - mu ** 2, e[r > 0].sum() / z + 0.5 * e[r == 0].sum() / z * 0


@pytest.mark.parametrize("law", LAWS, ids=lambda l: f"{l.name}{getattr(l, 'k', '')}")
def test_root_law_matches_quadrature(law):
    for s in (-3.0, -0.7, -1e-4, 0.0, 2e-3, 0.04, 0.3, 1.9):
        phi, mu, var, _ = _quad(law, s)
        a = np.array([s])
        assert law.phi(a)[0] == pytest.approx(phi, abs=1e-8)
        assert law.dphi(a)[0] == pytest.approx(mu, abs=1e-8)
        assert law.d2phi(a)[0] == pytest.approx(var, abs=1e-7)
    if isinstance(law, (Binary, KAry)):  # exact sums: P(r > 0 | s) too
        s = 0.8
        w = np.exp(s * (law.points if isinstance(law, KAry) else np.array([-1.0, 1.0])))
        pts = law.points if isinstance(law, KAry) else np.array([-1.0, 1.0])
        assert law.p_positive(np.array([s]))[0] == pytest.approx(w[pts > 0].sum() / w.sum())


def test_uniform_phi_is_finite_and_stable_up_to_500_and_kary2_is_binary():
    s = np.concatenate([np.linspace(-500, 500, 20_001), [0.0, 1e-12, -1e-9, 1e-3, 0.05]])
    for law in LAWS:
        for f in (law.phi, law.dphi, law.d2phi, law.p_positive):
            assert np.all(np.isfinite(f(s))), (law.name, f.__name__)
    u = Uniform()
    big = np.array([500.0, -500.0])
    assert u.phi(big) == pytest.approx(500 - math.log(1000), rel=1e-12)
    assert u.dphi(big) == pytest.approx([1 - 1 / 500, -1 + 1 / 500])
    assert np.all(u.d2phi(s) > 0)  # strictly convex
    x = np.linspace(-4, 4, 41)
    assert np.allclose(u.p_positive(x), 1 / (1 + np.exp(-x)))  # (e^s - 1)/(e^s - e^-s) = sigmoid(s)
    assert np.allclose(KAry(2).phi(x), Binary().phi(x)) and np.allclose(KAry(2).dphi(x), np.tanh(x))
    # continuity at the series/closed-form switches
    for t in (1e-3, 0.05, 1e-2, 20.0):
        a, b = np.array([t * (1 - 1e-9)]), np.array([t * (1 + 1e-9)])
        gap = 3e-9 * t + 1e-12  # the true change over [a, b] is at most 2e-9 t (|Phi'|, |Phi''| <= 1)
        assert abs(u.phi(a) - u.phi(b))[0] < gap and abs(u.dphi(a) - u.dphi(b))[0] < gap


def test_samplers_match_the_law_mean():
    rng = np.random.default_rng(0)
    for law in LAWS:
        for s in (-1.3, 0.0, 2.5):
            r = law.sample(np.full(40_000, s), rng)
            assert abs(r.mean() - law.dphi(np.array([s]))[0]) < 0.02, (law.name, s)
            if not isinstance(law, Gaussian):
                assert r.min() >= -1 and r.max() <= 1
    r = Uniform().sample(np.full(10_000, 1e-8), rng)  # |s| < 1e-6: U(-1, 1)
    assert abs(r.mean()) < 0.03 and r.std() == pytest.approx(1 / math.sqrt(3), abs=0.02)


# --------------------------------------------------------------------------------------- loss and MAP fit
def _torch_phi_uniform(s):
    a = s.abs()
    small = a < 1e-3
    safe = torch.where(small, torch.ones_like(a), a)
    big = safe - torch.log(2 * safe) + torch.log1p(-torch.exp(-2 * safe))
    return torch.where(small, s ** 2 / 6 - s ** 4 / 180, big)


def test_loss_gradient_matches_autograd_with_a_laplacian():
    rng = np.random.default_rng(3)
    a_n, d = 12, 4
    x = embeddings("gbt_embedding", a_n, rng.standard_normal((d, a_n)), 0.7)
    a, b = sample_pairs(rng, a_n, 40)
    data = Comparisons(a, b, rng.uniform(-1, 1, 40), a_n)
    lap = 0.3 * knn_laplacian(x[a_n:], 3)
    sigma = 1.7
    for beta in (rng.standard_normal(a_n + d) * 0.5, rng.standard_normal(a_n + d) * 30):
        f, g = loss_and_grad(beta, x, sigma, lap, data, Uniform())
        bt = torch.tensor(beta, requires_grad=True)
        xt, lt = torch.tensor(x), torch.tensor(lap)
        th = xt.T @ bt
        dd = th[torch.tensor(a)] - th[torch.tensor(b)]
        loss = (bt @ bt) / (2 * sigma ** 2) + 0.5 * th @ lt @ th + (_torch_phi_uniform(dd) - torch.tensor(data.r) * dd).sum()
        loss.backward()
        assert f == pytest.approx(float(loss.detach()), rel=1e-10)
        assert np.abs(g - bt.grad.numpy()).max() / np.abs(g).max() < 1e-5
    # the prior term is 1/2 beta^T (sigma^-2 I + x L x^T) beta
    beta = rng.standard_normal(a_n + d)
    empty = Comparisons(np.zeros(0, int), np.zeros(0, int), np.zeros(0), a_n)
    p = np.eye(a_n + d) / sigma ** 2 + x @ lap @ x.T
    assert loss_and_grad(beta, x, sigma, lap, empty, Uniform())[0] == pytest.approx(0.5 * beta @ p @ beta)


def test_map_optimum_lbfgs_equals_newton_and_gbt_cannot_generalise():
    inst = generate(5, 15, 6, 12, Uniform())  # 12 comparisons over 15 items: some never compared
    data = Comparisons(inst.a, inst.b, inst.r, 15)
    for kind in ("gbt_embedding", "gbt", "embedding"):
        x = embeddings(kind, 15, inst.x_feat)
        r1 = fit_map(x, data, Uniform(), solver="lbfgs", tol=1e-10)
        r2 = fit_map(x, data, Uniform(), solver="newton", tol=1e-12)
        assert r1.converged and r2.converged
        assert np.allclose(r1.theta, r2.theta, atol=1e-6)
    never = np.setdiff1d(np.arange(15), np.concatenate([inst.a, inst.b]))
    assert len(never) > 0
    gbt = fit_map(np.eye(15), data, Uniform())
    assert np.allclose(gbt.theta[never], 0.0, atol=1e-8)  # GBT: never-compared alternatives score 0
    lgbtd = fit_map(embeddings("gbt_embedding", 15, inst.x_feat), data, Uniform())
    assert np.all(np.abs(lgbtd.theta[never]) > 1e-4)  # LGBT-D: they get scores from their features


def test_stubs_fail_the_nmse_bounds():
    inst = generate(0, 20, 10, 71, Uniform())
    assert nmse(np.zeros(20), inst.theta_true) == pytest.approx(1.0)  # returning zeros: nMSE = 1
    data = Comparisons(inst.a, inst.b, inst.r, 20)
    ident = fit_map(embeddings("gbt_embedding", 20, np.zeros((0, 20))), data, Uniform()).theta  # x = I only
    gbt = fit_map(np.eye(20), data, Uniform()).theta
    assert np.allclose(ident, gbt)  # ... equals GBT, so it cannot beat GBT by the margin


# --------------------------------------------------------------------------------------------- monotonicity
def test_m_matrix_push_through_equals_direct_inverse():
    rng = np.random.default_rng(1)
    a_n, d, sigma = 7, 3, 0.6
    x = rng.standard_normal((d, a_n))
    h = random_laplacian(a_n, rng, "gaussian")
    lap = knn_laplacian(x, 2)
    direct = x.T @ np.linalg.inv(np.eye(d) / sigma ** 2 + x @ (lap + h) @ x.T) @ x
    assert np.allclose(m_matrix(x.T @ x, h, sigma, lap), direct, atol=1e-10)
    assert np.allclose(m_matrix(x.T @ x, h), np.linalg.inv(np.eye(a_n) + x.T @ x @ h) @ x.T @ x)
    y = random_laplacian(9, rng, "binary")
    assert np.allclose(y, y.T) and np.allclose(y.sum(1), 0) and set(np.unique(y[~np.eye(9, dtype=bool)])) <= {0.0, -1.0}


def test_counter_example_violates_monotonicity():
    """x_a = (1, 0), x_b = (2, 0), x_c = (0, 1), embedding only: 'a beats b' lowers a's score, c is unaffected."""
    x = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
    data = Comparisons(np.array([0]), np.array([1]), np.array([0.5]), 3)
    res = fd_check(x, data, Uniform(), pairs=[(0, 1)])
    assert res["fd_violations"] == 1 and res["m_violations"] == 1 and res["agree"] == 1.0
    base = fit_map(x, data, Uniform(), solver="newton", tol=1e-13).theta
    more = fit_map(x, Comparisons(data.a, data.b, np.array([0.6]), 3), Uniform(), solver="newton", tol=1e-13).theta
    assert more[0] < base[0] and abs(more[2] - base[2]) < 1e-12  # a's score went DOWN; c unchanged
    assert not monotonicity_test(x.T @ x, np.random.default_rng(0), 20)["good"]
    assert settings.monotonicity_check(Config(embedding=x.tolist(), nb_iter=20), RunContext(quiet=True))["mono/good"] == 0.0


def test_finite_differences_agree_with_the_m_matrix():
    inst = generate(11, 8, 3, 25, Uniform())
    data = Comparisons(inst.a, inst.b, inst.r, 8)
    for kind in ("gbt_embedding", "embedding"):
        res = fd_check(embeddings(kind, 8, inst.x_feat), data, Uniform())
        assert res["agree"] == 1.0 and res["max_rel_err"] < 1e-3, kind
    res = fd_check(embeddings("gbt_embedding", 8, inst.x_feat), data, Uniform())
    assert res["fd_violations"] == 0  # identity rows + few features: monotone here


def test_identity_plus_onehot_passes_and_gaussian_fails():
    rng = np.random.default_rng(0)
    for lap in ("binary", "gaussian"):
        for _ in range(5):
            g = onehot_groups(rng, 15, 3)
            assert g.sum(0).tolist() == [1.0] * 15 and np.all(g.sum(1) >= 1)
            assert monotonicity_test(np.eye(15) + g.T @ g, rng, 100, lap)["good"]
    fails = sum(not monotonicity_test(gram_with_alpha(rng.standard_normal((3, 15)), 0.0), rng, 100)["good"]
                for _ in range(10))
    assert fails >= 9


# ----------------------------------------------------------------------------------------------- generator
def test_generator_draws_ordered_pairs_with_replacement_and_keeps_every_draw():
    rng = np.random.default_rng(0)
    a, b = sample_pairs(rng, 5, 200_000)
    assert np.all(a != b)
    counts = np.bincount(a * 5 + b, minlength=25).reshape(5, 5)
    off = counts[~np.eye(5, dtype=bool)]
    assert np.all(np.abs(off / 200_000 - 1 / 20) < 0.003)
    inst = generate(0, 20, 10, 291, Uniform())
    assert len(inst.r) == 291 and inst.x_feat.shape == (10, 20) and inst.beta_true.shape == (30,)
    rng = np.random.default_rng(0)
    x_feat = rng.standard_normal((10, 20))
    assert np.allclose(inst.x_feat, x_feat) and np.allclose(inst.beta_true, rng.standard_normal(30))  # spec order
    assert np.allclose(inst.theta_true, inst.beta_true[:20] + x_feat.T @ inst.beta_true[20:])
    fa, fb, fr = official_python_filter(inst.a, inst.b, inst.r)
    assert np.all(fa < fb) and 0.3 * 291 < len(fr) < 0.6 * 291  # the official script drops about half
    short = generate(0, 20, 10, 291, Uniform(), keep_all_draws=False)
    assert len(short.r) == len(fr)


def test_prior_sample_has_covariance_inverse_precision():
    rng = np.random.default_rng(0)
    x = np.vstack([np.eye(4), rng.standard_normal((2, 4))])
    lap = 2.0 * knn_laplacian(x[4:], 2)
    p = np.eye(6) / 0.8 ** 2 + x @ lap @ x.T
    draws = np.array([sample_beta(rng, x, 0.8, lap) for _ in range(15_000)])
    assert np.allclose(np.cov(draws.T), np.linalg.inv(p), atol=0.03)


# ------------------------------------------------------------------------------------ smoke + settings
def test_smoke_run_and_lgbtd_beats_gbt_on_average(smoke_root):
    run = smoke_run("monotone_gbt", smoke_root)
    m = run["metrics"]
    assert math.isfinite(m["eval/sq_err"]) and 0 < m["eval/nmse"] < 1 and m["train/converged"] == 1.0
    cfg = run["config"]
    out = settings.sweep_synthetic(cfg, RunContext(quiet=True))  # smoke: A=10, N=50, 5 seeds
    assert out["seeds"] == 5 and out["eval/nmse/gbt_embedding"] < out["eval/nmse/gbt"]


def test_sweep_resumes_without_refitting_done_n(tmp_path):
    cfg = Config(**{**Config.smoke, "sweep_n": [20, 40], "sweep_seeds": 3, "sweep_models": ["gbt_embedding", "gbt"]})
    saved = []

    def keep(metrics, ck):
        if ck is not None:
            import shutil

            dst = tmp_path / f"ck{len(saved)}"
            shutil.copytree(ck, dst)
            saved.append(dst)

    full = settings.sweep_synthetic(cfg, RunContext(quiet=True, report_fn=keep))
    calls = []
    orig = settings.sweep_instance
    try:
        settings.sweep_instance = lambda *a, **k: calls.append(a) or orig(*a, **k)
        ctx = RunContext(quiet=True, checkpoint=saved[0])
        again = settings.sweep_synthetic(cfg, ctx)
    finally:
        settings.sweep_instance = orig
    assert len(calls) == 3 and all(c[2] == 40 for c in calls)  # only N = 40 refitted, for its 3 seeds
    assert again["eval/nmse/gbt_embedding"] == pytest.approx(full["eval/nmse/gbt_embedding"])


# -------------------------------------------------------------------------------------------------- data
def test_movielens_user_547_comparisons():
    from methodlab.data.monotone_gbt_real import movielens_user

    d = movielens_user(547, 1000, 0)
    assert len(d.item_ids) == 2391 and d.x_feat.shape == (20, 2391)
    pairs = {(min(a, b), max(a, b)) for a, b in zip(d.a.tolist(), d.b.tolist())}
    assert len(pairs) == 1000 and np.all(d.a != d.b)
    assert np.all(np.abs(d.r) <= 1) and np.allclose(np.round(d.r * 9), d.r * 9)  # 0.5-star steps / 4.5
    assert np.all(d.x_feat.sum(0) >= 1) and 1.8 < d.x_feat.sum(0).mean() < 2.6


def test_tournesol_and_triples_loaders(tmp_path):
    from methodlab.data.monotone_gbt_real import tournesol, triples

    (tmp_path / "c.csv").write_text(
        "public_username,video_a,video_b,criteria,score,score_max,week_date\n"
        "u1,v1,v2,largely_recommended,5,10,2024-01-01\nu1,v2,v3,largely_recommended,-10,10,2024-01-01\n"
        "u1,v1,v3,importance,3,10,2024-01-01\nu2,v1,v3,largely_recommended,3,10,2024-01-01\n")
    md = [("yt:v1", {"name": "a", "uploader": "A", "channel_id": "c1"}), ("yt:v2", {"name": "b", "uploader": "B", "channel_id": "c2"}),
          ("yt:v3", {"name": "c", "uploader": "A", "channel_id": "c1"})]
    import csv

    with open(tmp_path / "m.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["uid", "metadata"])
        for uid, m in md:
            w.writerow([uid, json.dumps(m)])
    d = tournesol(str(tmp_path / "c.csv"), str(tmp_path / "m.csv"), "u1")
    assert d.item_ids == ["v1", "v2", "v3"] and d.r.tolist() == [0.5, -1.0]
    assert d.feature_names == ["c1", "c2"] and d.x_feat.tolist() == [[1, 0, 1], [0, 1, 0]]
    (tmp_path / "t.csv").write_text("item_a,item_b,r\nx,y,0.5\ny,z,-0.25\n")
    (tmp_path / "f.csv").write_text("id,g1,g2\nx,1,0\ny,0,1\nz,1,1\n")
    t = triples(str(tmp_path / "t.csv"), str(tmp_path / "f.csv"))
    assert t.item_ids == ["x", "y", "z"] and t.x_feat.shape == (2, 3) and t.r.tolist() == [0.5, -0.25]
    cfg = Config(data="csv", comparisons_path=str(tmp_path / "t.csv"), metadata_path=str(tmp_path / "f.csv"), folds=2)
    saved = []

    def keep(metrics, ck):
        if ck is not None:
            import shutil

            saved.append(shutil.copytree(ck, tmp_path / f"ck{len(saved)}"))

    out = settings.cv_real(cfg, RunContext(quiet=True, report_fn=keep))
    assert math.isfinite(out["eval/cv/gbt_embedding"]) and out["eval/cv/constant"] >= 0
    pred = Predictor.from_checkpoint(saved[-1])  # the last CV checkpoint serves (a sweep's best trial can be served)
    assert pred.items == ["x", "y", "z"] and pred.n_features == 2
    with pytest.raises(Exception, match="gbt.fit"):
        Predictor.from_checkpoint(saved[0])


def test_config_refuses_incomplete_real_data_and_bad_embedding():
    with pytest.raises(Exception):
        Config(data="tournesol")
    with pytest.raises(Exception):
        Config(embedding=[[1.0, 2.0], [1.0]])
    with pytest.raises(ConfigError):
        settings.monotonicity_check(Config(), RunContext(quiet=True))


# ---------------------------------------------------------------------------------------------- predictor
def test_predictor_domain_and_new_items(smoke_root):
    run = smoke_run("monotone_gbt", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    model = pred.input_model()
    schema = model.model_json_schema()
    assert schema["properties"]["pairs"]["items"]["items"]["enum"] == [str(k) for k in range(10)]
    assert schema["properties"]["pairs"]["items"]["uniqueItems"] is True
    ok = model.model_validate({"pairs": [["0", "1"], ["1", "new"]], "items": {"new": [1.0] + [0.0] * 9}})
    out = pred([ok])[0]
    s = out.scores["0"] - out.scores["1"]
    assert out.pred_r[0] == pytest.approx(Uniform().dphi(np.array([s]))[0])
    assert out.p_a_preferred[0] == pytest.approx(1 / (1 + math.exp(-s)))
    assert out.scores["new"] == pytest.approx(float(pred.beta_feat[0]))  # x_new^T beta_feat, identity coordinate 0
    bad = [({"pairs": [["0", "0"]]}, "pairs[0]"), ({"pairs": [["0", "ghost"]]}, "pairs[0][1]"),
           ({"pairs": [["0", "n"]], "items": {"n": [1.0, 2.0]}}, "items.n")]
    for body, field in bad:  # the generic Input admits these; the specialised schema refuses the wrong length itself
        with pytest.raises(FieldError) as info:
            pred([Predictor.Input.model_validate(body)])
        assert field in info.value.field
    from pydantic import ValidationError

    for body in ({"pairs": []}, {"pairs": [["0", "1"]], "items": {"n": [float("nan")] * 10}},
                 {"pairs": [["0", "1"]], "items": {"n": [1e300] * 10}}, {"pairs": [["0", "1", "2"]]}):
        with pytest.raises(ValidationError):
            model.model_validate(body)
