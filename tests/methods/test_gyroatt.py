"""gyroatt: the spec's property tests (a)-(f) against brute force, the E2R/generator contract, the
Claim-3 attention checks on a trained smoke model, serving field errors, and the shared smoke run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from methodlab.core import ConfigError, FieldError
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.methods.gyroatt import linalg as la
from methodlab.methods.gyroatt.config import Config
from methodlab.methods.gyroatt.grassmann import GEOMETRIES, Grassmann, SPSD, make_geometry
from methodlab.methods.gyroatt.layers import GyroAttention, RiemannianAdam, random_stiefel, stiefel_params
from methodlab.methods.gyroatt.spd import AIM, LCM, LEM
from tests.smoke import smoke_run

torch.set_default_dtype(torch.float32)
D = torch.float64


def spd(*shape, n=5, seed=0, cond=1.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, n, n, dtype=D, generator=g)
    return a @ a.transpose(-1, -2) / n + cond * 0.1 * torch.eye(n, dtype=D)


def orth(n, seed=0):
    return random_stiefel(n, n, torch.Generator().manual_seed(seed))


def brute_logm(x):
    lam, u = torch.linalg.eigh(x)
    return u @ torch.diag_embed(lam.log()) @ u.transpose(-1, -2)


def brute_expm(s):
    return torch.linalg.matrix_exp(s)


def proj(u):
    return u @ u.transpose(-1, -2)


def gr_points(k, n=6, p=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return la.qr_orth(torch.eye(n, p, dtype=D) + 0.4 * torch.randn(k, n, p, dtype=D, generator=g))


# ---------------------------------------------------------------------------------------------------- calculus
def test_spectral_functions_match_brute_force_and_gradcheck():
    x = spd(2, n=4, seed=1)
    assert torch.allclose(la.logm(x), brute_logm(x), atol=1e-10)
    assert torch.allclose(la.expm(la.logm(x)), x, atol=1e-10)
    assert torch.allclose(la.sqrtm(x) @ la.sqrtm(x), x, atol=1e-10)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: la.logm(la.sym(a)), (x,))
    # repeated eigenvalues: the Daleckii-Krein backward stays finite where 1/(l_i - l_j) would not
    eye = torch.eye(4, dtype=D, requires_grad=True)
    la.logm(eye * 2.0).sum().backward()
    assert torch.isfinite(eye.grad).all()


def test_eigh_top_gradient_of_projector_matches_finite_differences():
    x = spd(n=5, seed=3).requires_grad_(True)
    f = lambda a: proj(la.eigh_top(la.sym(a), 2)[0])  # noqa: E731  (gauge-invariant consumer)
    assert torch.autograd.gradcheck(f, (x,))


# ------------------------------------------------------------------------------------ (a) homomorphisms
@pytest.mark.parametrize("geom", [LEM(), LCM()])
def test_spd_homomorphism_property(geom):
    x, y, o = spd(n=5, seed=1), spd(n=5, seed=2), orth(5, 4)
    a, b = geom.encode(x), geom.encode(y)
    h = lambda r: geom.hom(r, o)  # noqa: E731
    lhs, rhs = geom.decode(h(geom.add(a, b))), geom.decode(geom.add(h(a), h(b)))
    assert torch.allclose(lhs, rhs, rtol=1e-5, atol=1e-8)
    t = 0.7
    assert torch.allclose(geom.decode(h(geom.scal(t, a))), geom.decode(geom.scal(t, h(a))), rtol=1e-5, atol=1e-8)
    # and the gyro operations are the closed forms of the spec table
    if isinstance(geom, LEM):
        assert torch.allclose(geom.decode(geom.add(a, b)), brute_expm(brute_logm(x) + brute_logm(y)), atol=1e-8)
    else:
        lx, ly = torch.linalg.cholesky(x), torch.linalg.cholesky(y)
        lsum = torch.tril(lx, -1) + torch.tril(ly, -1) + torch.diag_embed(torch.diagonal(lx) * torch.diagonal(ly))
        assert torch.allclose(geom.decode(geom.add(a, b)), lsum @ lsum.T, atol=1e-8)


def test_aim_homomorphism_is_exact_for_orthogonal_and_fails_for_plain_linear():
    aim, x, y, o = AIM(), spd(n=5, seed=1), spd(n=5, seed=2), orth(5, 4)
    assert torch.allclose(aim.hom(aim.add(x, y), o), aim.add(aim.hom(x, o), aim.hom(y, o)), rtol=1e-5, atol=1e-8)
    assert torch.allclose(aim.hom(aim.scal(0.3, x), o), aim.scal(0.3, aim.hom(x, o)), rtol=1e-5, atol=1e-8)
    w = torch.randn(5, 5, dtype=D, generator=torch.Generator().manual_seed(9))  # a stub's plain linear map
    assert not torch.allclose(aim.hom(aim.add(x, y), w), aim.add(aim.hom(x, w), aim.hom(y, w)), rtol=1e-3)


def test_grassmann_homomorphism_property():
    gr = Grassmann(6, 3)
    u, v = gr_points(2, seed=5)
    mats = (orth(3, 1), orth(3, 2))
    lhs, rhs = gr.hom(gr.add(u, v), mats), gr.add(gr.hom(u, mats), gr.hom(v, mats))
    assert torch.allclose(proj(lhs), proj(rhs), rtol=1e-5, atol=1e-8)
    assert torch.allclose(proj(gr.hom(gr.scal(0.6, u), mats)), proj(gr.scal(0.6, gr.hom(u, mats))), atol=1e-8)
    # a stub: a generic orthogonal map does not commute with (+) (it moves the identity I_{n,p})
    q = orth(6, 8)
    assert not torch.allclose(proj(q @ gr.add(u, v)), proj(gr.add(q @ u, q @ v)), atol=1e-3)


def test_grassmann_log_exp_inverse_and_identity():
    gr = Grassmann(6, 3)
    m, u = gr_points(2, seed=7)
    assert torch.allclose(proj(gr.exp(m, gr.log(m, u))), proj(u), atol=1e-8)
    ident = gr.identity()
    assert torch.allclose(proj(gr.add(ident, u)), proj(u), atol=1e-8)  # I_{n,p} is the left identity
    assert torch.allclose(proj(gr.add(gr.inverse(u), u)), proj(ident), atol=1e-7)


# ------------------------------------------------------------------------------ (b) weighted Frechet means
@pytest.mark.parametrize("name", GEOMETRIES)
def test_wfm_one_hot_and_identical_points(name):
    geom = make_geometry(name, 6, 3, karcher_iters=3)
    x = spd(1, 3, n=6, seed=11)
    rep = geom.encode(x)
    w = torch.eye(3, dtype=D).unsqueeze(0)
    out = geom.wfm(rep, w)
    same = geom.encode(x[:, :1].expand(1, 3, 6, 6))
    mean_same = geom.wfm(same, torch.full((1, 3, 3), 1 / 3, dtype=D))
    flat = lambda r: (proj(r[0]), r[1]) if isinstance(r, tuple) else ((proj(r),) if name == "grassmann" else (r,))  # noqa: E731
    for got, want in zip(flat(out), flat(rep)):
        assert torch.allclose(got, want, atol=1e-7), name
    for got, want in zip(flat(mean_same), flat(same)):
        assert torch.allclose(got, want, atol=1e-7), name


def test_lem_lcm_means_equal_closed_forms():
    x = spd(1, 4, n=5, seed=12)
    w = torch.softmax(torch.randn(1, 2, 4, dtype=D, generator=torch.Generator().manual_seed(1)), -1)
    lem = LEM()
    want = brute_expm(torch.einsum("bij,bjxy->bixy", w, brute_logm(x)))
    assert torch.allclose(lem.decode(lem.wfm(lem.encode(x), w)), want, atol=1e-8)
    lcm, l = LCM(), torch.linalg.cholesky(x)
    strict = torch.einsum("bij,bjxy->bixy", w, torch.tril(l, -1))
    diag = torch.exp(torch.einsum("bij,bjx->bix", w, torch.diagonal(l, dim1=-2, dim2=-1).log()))
    lbar = strict + torch.diag_embed(diag)
    assert torch.allclose(lcm.decode(lcm.wfm(lcm.encode(x), w)), lbar @ lbar.transpose(-1, -2), atol=1e-8)
    # a stub's Euclidean average is not the LEM mean
    assert not torch.allclose(torch.einsum("bij,bjxy->bixy", w, x), want, atol=1e-3)


def test_aim_karcher_flow_decreases_weighted_sum_of_squared_distances():
    aim = AIM()
    x = spd(1, 4, n=5, seed=13, cond=0.2)
    w = torch.softmax(torch.randn(1, 1, 4, dtype=D, generator=torch.Generator().manual_seed(2)), -1)
    cost = lambda m: (w * aim.dist2(m, x)).sum()  # noqa: E731
    costs = [float(cost(aim.wfm(x, w, iters=k))) for k in (0, 1, 3, 10)]
    assert costs[1] < costs[0] and costs[3] <= costs[1] + 1e-12
    # first-order optimality after convergence: sum_j w_j logm(M^-1/2 X_j M^-1/2) = 0
    def riem_grad(iters):
        isq = la.invsqrtm(aim.wfm(x, w, iters=iters)[0, 0])
        return sum(w[0, 0, j] * brute_logm(isq @ x[0, j] @ isq) for j in range(4)).abs().max()

    assert riem_grad(20) < 1e-5 and riem_grad(20) < 1e-3 * riem_grad(0)


def test_grassmann_karcher_flow_decreases_cost():
    gr = Grassmann(6, 3)
    u = gr_points(4, seed=14).unsqueeze(0)
    w = torch.full((1, 1, 4), 0.25, dtype=D)
    costs = [float((w * gr.dist2(gr.wfm(u, w, iters=k), u)).sum()) for k in (0, 1, 5)]
    assert costs[1] <= costs[0] + 1e-12 and costs[2] <= costs[1] + 1e-12


# ------------------------------------------------------------------------------------------- (c) distances
@pytest.mark.parametrize("name", GEOMETRIES)
def test_distances_symmetric_zero_diagonal(name):
    geom = make_geometry(name, 6, 3)
    rep = geom.encode(spd(1, 4, n=6, seed=15))
    d = geom.dist2(rep, rep)[0]
    assert torch.allclose(d, d.T, atol=1e-8)
    assert d.diagonal().abs().max() < 1e-7 and (d + torch.eye(4, dtype=D)).min() > 0


def test_aim_distance_affine_invariant_and_matches_brute_force():
    aim, x, y = AIM(), spd(1, 1, n=5, seed=16), spd(1, 1, n=5, seed=17)
    g = torch.randn(5, 5, dtype=D, generator=torch.Generator().manual_seed(3)) + 3 * torch.eye(5, dtype=D)
    d = aim.dist2(x, y)
    assert torch.allclose(d, aim.dist2(g @ x @ g.T, g @ y @ g.T), rtol=1e-6)
    isq = torch.linalg.inv(torch.linalg.cholesky(x[0, 0]))  # any square root gives the same spectrum
    brute = (torch.linalg.eigvalsh(isq @ y[0, 0] @ isq.T).log() ** 2).sum()
    assert torch.allclose(d[0, 0, 0], brute, rtol=1e-8)


def test_orthogonal_maps_are_isometries():
    o = orth(5, 21)
    x = spd(1, 3, n=5, seed=18)
    for geom in (LEM(), AIM()):
        r = geom.encode(x)
        assert torch.allclose(geom.dist2(geom.hom(r, o), geom.hom(r, o)), geom.dist2(r, r), atol=1e-8)


# --------------------------------------------------------------------- (d) outputs stay on the manifold
@pytest.mark.parametrize("name", GEOMETRIES)
def test_attention_outputs_stay_on_the_manifold(name):
    geom = make_geometry(name, 6, 3, karcher_iters=2)
    att = GyroAttention(geom, name, 6, 3, gen=torch.Generator().manual_seed(0))
    out, attn = att(geom.encode(spd(2, 3, n=6, seed=19)))
    assert torch.allclose(attn.sum(-1), torch.ones(2, 3, dtype=D)) and (attn > 0).all()
    out = geom.decode(out)
    parts = out if isinstance(out, tuple) else (out,)
    for part in parts:
        if part.shape[-1] != part.shape[-2]:  # subspace basis
            eye = torch.eye(part.shape[-1], dtype=D)
            assert (part.transpose(-1, -2) @ part - eye).abs().max() < 1e-5
        else:
            assert torch.linalg.eigvalsh(part).min() > 0


def test_spsd_token_alignment_is_rotation_invariant():
    geom = SPSD(6, 3, "lem")
    x = spd(n=6, seed=20)
    u, s = geom.encode(x)
    assert torch.allclose(u[:3], u[:3].T, atol=1e-10)  # polar-aligned top block
    assert torch.allclose(u @ geom.spd.decode(s) @ u.T, proj(u) @ x @ proj(u), atol=1e-8)


# ------------------------------------------------------------------------------------- (e) Stiefel steps
def test_stiefel_parameters_stay_orthonormal_after_10_steps():
    cfg = Config(f1=4, f2=8, d_out=6, geometry="spsd-aim")
    from methodlab.methods.gyroatt.model import build_model

    torch.manual_seed(0)  # the init and the batch: "they did move" is a threshold on a draw
    model = build_model(cfg, 5, 3)
    opt = RiemannianAdam(model, lr=0.05, weight_decay=1e-3)
    st = stiefel_params(model)
    assert len(st) == 1 + 3 * 3  # pre-BiMap + three (M1, M2, O) triples
    before = [w.detach().clone() for w in st]
    x, y = torch.randn(8, 5, 64), torch.randint(0, 3, (8,))
    for _ in range(10):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for w, w0 in zip(st, before):
        assert (w.T @ w - torch.eye(w.shape[1], dtype=D)).abs().max() < 1e-10
    assert any((w - w0).abs().max() > 1e-3 for w, w0 in zip(st, before))  # and they did move


# ------------------------------------------------------------------------ generator, E2R, config
def test_e2r_tokens_trace_normalised_and_segment_split():
    from methodlab.data.gyroatt_eeg import segment_bounds
    from methodlab.methods.gyroatt.model import e2r

    assert [b - a for a, b in segment_bounds(256, 3)] == [86, 85, 85]
    tok = e2r(torch.randn(2, 4, 257), 3)
    assert tok.shape == (2, 3, 4, 4) and tok.dtype == D
    tr = torch.diagonal(tok, dim1=-2, dim2=-1).sum(-1)
    assert torch.allclose(tr, torch.full_like(tr, 1 + 4e-5))


def test_generator_evidence_and_config_errors():
    from methodlab.data.gyroatt_eeg import synthetic_mi

    x, y, seg, names = synthetic_mi(4, seed=0, evidence="one_segment")
    assert x.shape == (16, 16, 256) and sorted(set(y.tolist())) == [0, 1, 2, 3] and set(seg.tolist()) <= {0, 1, 2}
    assert names[6] == "C3" and names[10] == "C4"
    x2, *_ = synthetic_mi(4, seed=0, evidence="one_segment")
    assert (x == x2).all()
    with pytest.raises(ConfigError, match="d_out"):
        from methodlab.specs.files import method_config

        method_config("gyroatt", {"d_out": 30, "f2": 20})
    with pytest.raises(ConfigError, match="data_path"):
        method_config("gyroatt", {"dataset": "npz"})


def test_npz_loader_runs_as_a_job(tmp_path):
    import numpy as np
    from methodlab.data.gyroatt_eeg import synthetic_mi
    from methodlab.methods.gyroatt.data import build_data

    x, y, _, names = synthetic_mi(10, seed=1)
    rec = np.arange(len(y)) % 2
    np.savez(tmp_path / "s.npz", X=x, y=y, recording=rec, sfreq=np.float64(128.0))
    data = build_data(Config(dataset="npz", data_path=str(tmp_path / "s.npz"), bandpass=(4.0, 40.0)))
    assert len(data.y_test) == 20 and len(data.y_train) + len(data.y_val) == 20 and data.sfreq == 128.0


# ------------------------------------------------------------- (f) smoke run, Claim-3 checks, serving
@pytest.fixture(scope="module")
def smoke(smoke_root):
    return smoke_run("gyroatt", smoke_root)


def test_smoke_training_lowers_training_loss(smoke):
    import json

    rows = [json.loads(r) for r in (Path(smoke["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[-1]["train/loss"] < rows[0]["train/loss"]


@pytest.fixture(scope="module")
def predictor(smoke):
    from methodlab.methods.gyroatt.predictor import Predictor

    return Predictor.from_checkpoint(latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints"))


def test_attention_depends_on_input_and_permutes_with_segments(predictor):
    """Claim 3's checks: weights vary across trials and permuting a trial's segments permutes its weights."""
    from methodlab.methods.gyroatt.data import build_data
    from methodlab.methods.gyroatt.evaluate import predict

    model, cfg = predictor.model, predictor.cfg
    x = build_data(cfg).x_test
    _, attn = predict(model, x)
    assert attn.std(0).mean() > 1e-3
    # permute tokens directly (segment lengths differ by one sample, so permute after E2R)
    s = model.tokens(x[:4])
    perm = torch.tensor([2, 0, 1])
    rep = model.geom.encode(s)
    _, a = model.att(rep)
    _, ap = model.att(model.geom.encode(s[:, perm]))
    assert (ap - a[:, perm][:, :, perm]).abs().max() < 1e-6
    assert (ap - a).abs().max() > 1e-6  # not trivially invariant


def test_fit_reports_claim3_permutation_error(smoke):
    """The fit's final metrics carry Claim 3's permutation check (the reproduction reads it from there)."""
    import json

    rows = [json.loads(r) for r in (Path(smoke["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert 0.0 <= rows[-1]["best/attn/perm_error"] < 1e-6 and rows[-1]["best/attn/std_over_trials"] > 0


def test_predictor_field_errors(predictor, smoke):
    from methodlab.methods.gyroatt.predictor import Input

    good = Input(trials=[[[0.1] * 256] * 16])
    out = predictor([good])[0]
    assert len(out.probabilities[0]) == 4 and math.isclose(sum(out.probabilities[0]), 1.0, rel_tol=1e-6)
    with pytest.raises(FieldError, match=r"\[0\]\.trials\[0\]"):
        predictor([Input(trials=[[[0.1] * 256] * 15])])
    with pytest.raises(FieldError, match="samples"):
        predictor([Input(trials=[[[0.1] * 200] * 16])])
    with pytest.raises(FieldError, match="sfreq"):
        predictor([Input(trials=good.trials, sfreq=250.0)])


# ------------------------------------------ issue 22 item 4: Riemannian operations vs scipy / numpy references
def _np(x):
    return x.detach().numpy()


@pytest.mark.parametrize("metric", ["lem", "lcm", "aim"])
def test_spd_operations_match_scipy_formulas(metric):
    import numpy as np
    import scipy.linalg as sl

    x, y = spd(2, n=5, seed=31)
    xn, yn = _np(x), _np(y)
    geom = {"lem": LEM(), "lcm": LCM(), "aim": AIM(karcher_iters=1)}[metric]
    dec = lambda a: _np(geom.decode(a))  # noqa: E731
    a, b = geom.encode(x), geom.encode(y)
    if metric == "lem":
        add = sl.expm(sl.logm(xn) + sl.logm(yn))
        scal = sl.expm(0.7 * sl.logm(xn))
        d = np.linalg.norm(sl.logm(xn) - sl.logm(yn))
    elif metric == "lcm":
        lx, ly = np.linalg.cholesky(xn), np.linalg.cholesky(yn)
        dg = lambda m: np.diag(np.diag(m))  # noqa: E731
        low = lambda m: np.tril(m, -1)  # noqa: E731
        lz = low(lx) + low(ly) + dg(lx) @ dg(ly)
        add = lz @ lz.T
        ls = low(0.7 * lx) + dg(lx) ** 0.7 * np.eye(5)
        scal = ls @ ls.T
        d = np.sqrt(np.linalg.norm(low(lx) - low(ly)) ** 2 + np.linalg.norm(np.log(np.diag(lx)) - np.log(np.diag(ly))) ** 2)
    else:
        s = sl.sqrtm(xn).real
        add = s @ yn @ s
        scal = sl.fractional_matrix_power(xn, 0.7).real
        isq = np.linalg.inv(s)
        d = np.linalg.norm(sl.logm(isq @ yn @ isq).real)
    np.testing.assert_allclose(dec(geom.add(a, b)), add, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dec(geom.scal(0.7, a)), scal, rtol=1e-7, atol=1e-9)
    d2 = geom.dist2(a[None, None], b[None, None])
    np.testing.assert_allclose(float(d2.sqrt()), d, rtol=1e-7)


def test_aim_karcher_flow_converges_to_the_stationary_point():
    import numpy as np
    import scipy.linalg as sl

    xs = spd(1, 4, n=5, seed=33)
    w = torch.softmax(torch.randn(1, 1, 4, dtype=D, generator=torch.Generator().manual_seed(2)), -1)
    m = _np(AIM().wfm(xs, w, iters=30)[0, 0])
    isq = np.linalg.inv(sl.sqrtm(m).real)
    grad = sum(float(w[0, 0, j]) * sl.logm(isq @ _np(xs[0, j]) @ isq).real for j in range(4))
    assert np.abs(grad).max() < 1e-8  # first-order condition of the weighted Frechet mean


def _gr_log_ref(m, u):
    """Absil et al.: (I - M M^T) U (M^T U)^-1 = Q S R^T (thin SVD) -> Log_M(U) = Q atan(S) R^T."""
    import numpy as np

    a = (np.eye(m.shape[0]) - m @ m.T) @ u @ np.linalg.inv(m.T @ u)
    q, s, rt = np.linalg.svd(a, full_matrices=False)
    return q @ np.diag(np.arctan(s)) @ rt


def test_grassmann_operations_match_svd_and_scipy_references():
    import numpy as np
    import scipy.linalg as sl

    gr = Grassmann(7, 3)
    m, u, v = gr_points(3, n=7, p=3, seed=35)
    mn, un, vn = _np(m), _np(u), _np(v)
    np.testing.assert_allclose(_np(gr.log(m, u)), _gr_log_ref(mn, un), atol=1e-9)
    # exp: Exp_M(T) = M R cos(S) R^T + Q sin(S) R^T for T = Q S R^T
    t = _gr_log_ref(mn, un) * 1.3
    q, s, rt = np.linalg.svd(t, full_matrices=False)
    ref = mn @ rt.T @ np.diag(np.cos(s)) @ rt + q @ np.diag(np.sin(s)) @ rt
    np.testing.assert_allclose(_np(proj(gr.exp(m, torch.from_numpy(t)))), ref @ ref.T, atol=1e-9)
    # distance: principal angles (scipy.linalg.subspace_angles)
    d2 = float(gr.dist2(u[None, None], v[None, None]))
    np.testing.assert_allclose(d2, (sl.subspace_angles(un, vn) ** 2).sum(), rtol=1e-7)
    # gyro addition / scaling by the definitions: Omega_U from [0; B] = Log_{I_{n,p}}(U)
    b = _gr_log_ref(np.eye(7, 3), un)[3:]
    om = np.block([[np.zeros((3, 3)), -b.T], [b, np.zeros((4, 4))]])
    np.testing.assert_allclose(_np(proj(gr.add(u, v))), proj(torch.from_numpy(sl.expm(om) @ vn)).numpy(), atol=1e-9)
    sc = sl.expm(0.4 * om)[:, :3]
    np.testing.assert_allclose(_np(proj(gr.scal(0.4, u))), sc @ sc.T, atol=1e-9)
    # scaling by 1 returns the point (span)
    np.testing.assert_allclose(_np(proj(gr.scal(1.0, u))), un @ un.T, atol=1e-9)


def test_grassmann_karcher_mean_is_stationary():
    import numpy as np

    gr = Grassmann(7, 3)
    us = gr_points(4, n=7, p=3, seed=37)[None]
    w = torch.softmax(torch.randn(1, 1, 4, dtype=D, generator=torch.Generator().manual_seed(3)), -1)
    m = _np(gr.wfm(us, w, iters=40)[0, 0])
    grad = sum(float(w[0, 0, j]) * _gr_log_ref(m, _np(us[0, j])) for j in range(4))
    assert np.abs(grad).max() < 1e-8


def test_spsd_encode_is_the_rank_p_approximation():
    import numpy as np

    x = spd(2, n=6, seed=39)
    geo = SPSD(6, 3, "lem")
    u, s = geo.encode(x)
    lam, vec = np.linalg.eigh(_np(x))
    ref = np.stack([v[:, -3:] @ np.diag(lv[-3:]) @ v[:, -3:].T for lv, v in zip(lam, vec)])
    recon = u @ la.expm(s) @ u.transpose(-1, -2)
    np.testing.assert_allclose(_np(recon), ref, atol=1e-9)


def test_subspace_gradients_match_finite_differences():
    gr = Grassmann(5, 2)
    g = torch.Generator().manual_seed(41)
    a = torch.randn(2, 5, 5, dtype=D, generator=g)
    x = (a @ a.transpose(-1, -2) + torch.diag(torch.arange(1.0, 6.0, dtype=D))).requires_grad_()
    w = torch.softmax(torch.randn(1, 2, 2, dtype=D, generator=g), -1)

    def f(x):
        u = la.eigh_top(x, 2)[0][None]
        return gr.dist2(u, u.flip(1)).sum() + (gr.tangent(gr.wfm(u, w)) * torch.arange(15, dtype=D)).sum()

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5, fast_mode=True)
