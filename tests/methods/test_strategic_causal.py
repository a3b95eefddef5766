"""strategic_causal: the spec's unit tests (C from B against the series, e* >= 0, q in [0, 1], l1 picks
argmax a_j g_j, closed forms against the generic convex solver (claim A), the beta constraint of the design,
the cvd_scm_v2 noise scales, the root-feature uncertainty closed form), the stubs that must fail claims B-D,
the general (penalty) design and its resume at the saved restart, the user-data loader, and the predictor's
domain (unknown / missing names, out-of-range values -> 4xx, every schema-valid request -> a finite answer)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from methodlab.core import ConfigError, FieldError, RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.data.strategic_causal_scm import check_dag, cvd_graph, cvd_scm, read_graph, unit_variance_scales
from methodlab.methods.strategic_causal import model as M
from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.data import build_problem
from methodlab.methods.strategic_causal.predictor import Input, Predictor
from methodlab.methods.strategic_causal.train import fit, fit_uncertainty_sweep
from tests.smoke import smoke_run

SLUG = "strategic_causal"


def random_dag(rng, d: int, density: float = 0.5) -> np.ndarray:
    B = np.triu(rng.normal(0, 0.6, (d, d)) * (rng.random((d, d)) < density), 1)
    perm = rng.permutation(d)  # a DAG in a shuffled order
    return B[np.ix_(perm, perm)]


@pytest.fixture(scope="module")
def v2():
    """cvd_scm_v2, seed 0, n = 5,000: the acceptance data (sampling + all designs ~1 s)."""
    prob = build_problem(Config(seed=0, n=5000))
    C, eye = prob.C, np.eye(prob.d)
    args = (prob.abilities, prob.mutable, prob.desirable)
    des = {"lr": M.accuracy_only(prob.X_train, prob.y_train),
           "causal": M.design_l2(prob.X_train, prob.y_train, C, *args, 0.6),
           "unaware": M.design_l2(prob.X_train, prob.y_train, eye, *args, 0.6),
           "causal_l1": M.design_l1(prob.X_train, prob.y_train, C, *args, 0.05),
           "unaware_l1": M.design_l1(prob.X_train, prob.y_train, eye, *args, 0.05)}
    return prob, des


def ev(prob, des, p, C=None):
    return M.evaluate_design(des, prob.C if C is None else C, prob.abilities, prob.mutable, prob.desirable, p, 1.0,
                             prob.X_test, prob.y_test, prob.names)


# ------------------------------------------------------------------------------------- maths
def test_contribution_matrix_is_the_path_series_of_a_dag():
    rng = np.random.default_rng(0)
    for _ in range(20):
        d = int(rng.integers(2, 9))
        B = random_dag(rng, d)
        series = sum(np.linalg.matrix_power(B.T, k) for k in range(d))  # (B^T)^d = 0 for a DAG
        assert np.allclose(M.contribution_matrix(B), series, atol=1e-12)
        assert np.allclose(np.diag(M.contribution_matrix(B)), 1.0)
    # improvement coordinates: C~ = diag(s) C diag(s)
    B, s = cvd_graph("cvd_scm_v2"), np.array([1, 1, -1, -1, -1, -1, -1, -1.0])
    C_nat = M.contribution_matrix(B)
    assert np.allclose(M.contribution_matrix(M.improvement_graph(B, s)), s[:, None] * C_nat * s[None, :])


def test_cyclic_graph_refused():
    B = np.zeros((3, 3))
    B[0, 1] = B[1, 2] = B[2, 0] = 0.5
    with pytest.raises(ConfigError, match="cycle"):
        check_dag(B, ["a", "b", "c"])


def test_closed_form_best_responses_match_the_convex_solver():
    """Claim A: l2, l1 with budget, l1.5 on 40 random (C, w, a) (the reproduction runs the spec's 100):
    max |e_closed - e_solver| <= 1e-4."""
    rng = np.random.default_rng(1)
    worst = {1.0: 0.0, 1.5: 0.0, 2.0: 0.0}
    for _ in range(40):
        d = int(rng.integers(3, 9))
        C = M.contribution_matrix(random_dag(rng, d))
        w, a = rng.normal(size=d), rng.uniform(0.2, 2.0, d)
        mut = rng.random(d) < 0.8
        g = M.gains(C, w)
        for p in worst:
            e = M.best_response(g, a, p, 1.0, mut)
            e_num = M.best_response_numeric(g, a, p, 1.0, mut)
            assert np.all(e >= 0) and np.all(e[~mut] == 0)
            q = M.desirable_share(e, rng.random(d) < 0.5)
            assert math.isnan(q) or 0.0 <= q <= 1.0
            worst[p] = max(worst[p], float(np.max(np.abs(e - e_num))))
    assert max(worst.values()) <= 1e-4, worst


def test_l1_picks_argmax_a_g_and_splits_ties():
    g, a = np.array([0.5, 0.9, 0.7, 2.0]), np.array([2.0, 1.0, 1.0, 1.0])
    mut = np.array([True, True, True, False])  # the best raw gain is immutable
    e = M.best_response(g, a, 1.0, budget=3.0, mutable=mut)
    assert e.tolist() == [6.0, 0.0, 0.0, 0.0]  # argmax a g = feature 0 (1.0 > 0.9), e = a B
    e = M.best_response(np.array([1.0, 1.0, -1.0]), np.ones(3), 1.0, budget=1.0)
    assert e.tolist() == [0.5, 0.5, 0.0]
    assert M.best_response(-np.ones(3), np.ones(3), 1.0).sum() == 0.0  # no positive gain: no effort
    # l2: e = a^2 g+
    assert np.allclose(M.best_response(np.array([1.0, -1.0, 0.5]), np.array([2.0, 1.0, 1.0]), 2.0), [4.0, 0.0, 0.5])


def test_cvd_scm_v2_noise_scales_and_unit_variance():
    s = unit_variance_scales(cvd_graph("cvd_scm_v2"))
    assert np.allclose(s, [1, 1, 1, 1, 0.870, 0.794, 0.891, 0.866], atol=1e-3)
    t = cvd_scm("cvd_scm_v2", 5000, 0)
    sd = t.x_train.std(0)
    assert np.all((sd > 0.97) & (sd < 1.03)) and abs(t.y_train.mean() - 0.7) < 1e-3
    v1 = cvd_scm("cvd_scm_v1", 5000, 0)
    assert v1.x_train[:, 5].std() > 1.1  # v1: N(0, 1) noise, descendants have variance > 1


def test_root_feature_uncertainty_closed_form():
    """Sigma_w = sigma^2 e_k e_k^T on a root k: e*_k = a_k^2 m_k / (1 + lam a_k^2 sigma^2), others unchanged."""
    rng = np.random.default_rng(2)
    B = np.triu(rng.normal(0, 0.5, (6, 6)), 1)  # node 0 is a root
    C = M.contribution_matrix(B)
    w, a = np.abs(rng.normal(size=6)), rng.uniform(0.5, 2, 6)
    for sigma, lam in [(0.0, 1.0), (0.5, 1.0), (1.0, 3.0), (2.0, 0.1)]:
        Sw = np.zeros((6, 6))
        Sw[0, 0] = sigma ** 2
        m, S = M.moments_w(C, w, Sw)
        e = M.mean_variance_response(m, S, a, lam, 2.0)
        ci = M.best_response(M.gains(C, w), a, 2.0)
        assert abs(e[0] - a[0] ** 2 * max(m[0], 0.0) / (1 + lam * a[0] ** 2 * sigma ** 2)) <= 1e-6
        assert np.allclose(e[1:], ci[1:], atol=1e-6)
    # the other responders agree on the same problem: C-uncertainty with sigma_c = 0 is complete information
    m, S = M.moments_mc(B, w, np.zeros((6, 6)), 0.0, 20)
    assert np.allclose(M.mean_variance_response(m, S, a, 1.0, 2.0), M.best_response(M.gains(C, w), a, 2.0), atol=1e-8)


# ------------------------------------------------------------------------------------- designs
def test_designs_on_cvd_scm_v2_seed0(v2):
    prob, des = v2
    lr, causal, unaware = ev(prob, des["lr"], 2), ev(prob, des["causal"], 2), ev(prob, des["unaware"], 2)
    assert lr["q"] <= 0.35  # B(i)
    assert causal["q"] >= 0.6 - 1e-6 and lr["accuracy"] - causal["accuracy"] <= 0.06  # B(ii)
    assert ev(prob, des["unaware"], 2, C=np.eye(prob.d))["q"] >= 0.6 - 1e-6  # believed q
    assert unaware["q"] <= 0.58  # C(ii): the true q falls short
    c1, u1 = ev(prob, des["causal_l1"], 1), ev(prob, des["unaware_l1"], 1)
    assert c1["q"] == 1.0 and prob.desirable[prob.index(c1["target"])]
    assert lr["accuracy"] - c1["accuracy"] <= 0.03
    assert u1["q"] == 0.0 and u1["target"] == "bmi" and u1["gain_ratio"] >= 1.5
    assert prob.names[des["unaware_l1"].info["target"]] == "smoking"
    for d in des.values():
        assert abs(np.linalg.norm(d.w) - 1) < 1e-12


def test_l2_design_meets_beta_for_every_beta():
    prob = build_problem(Config(seed=3, n=800))
    for beta in (0.0, 0.3, 0.6, 0.9, 1.0):
        d = M.design_l2(prob.X_train, prob.y_train, prob.C, prob.abilities, prob.mutable, prob.desirable, beta)
        e = M.best_response(M.gains(prob.C, d.w), prob.abilities, 2.0, mutable=prob.mutable)
        q = M.desirable_share(e, prob.desirable)
        assert np.isnan(q) or q >= beta - 1e-6, (beta, q)


def test_stubs_fail(v2):
    """Ignoring C (g = w) evaluates the C = I design at its believed q and keeps its l1 effort on smoking;
    returning the accuracy-only LR as the design misses q >= 0.6; ignoring variance keeps the share constant."""
    prob, des = v2
    eye = np.eye(prob.d)
    stub_q = ev(prob, des["unaware"], 2, C=eye)["q"]
    assert stub_q > 0.58 and ev(prob, des["unaware"], 2)["q"] <= 0.58
    assert ev(prob, des["unaware_l1"], 1, C=eye)["target"] == "smoking" and ev(prob, des["unaware_l1"], 1)["target"] == "bmi"
    assert ev(prob, des["lr"], 2)["q"] < 0.6 - 1e-6
    w = des["causal"].w
    shares, stub = [], []
    for sigma in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        Sw = np.zeros((prob.d, prob.d))
        Sw[0, 0] = sigma ** 2
        m, S = M.moments_w(prob.C, w, Sw)
        e = M.mean_variance_response(m, S, prob.abilities, 1.0, 2.0, mutable=prob.mutable)
        shares.append(e[0] / e.sum())
        e_stub = M.mean_variance_response(m, 0 * S, prob.abilities, 1.0, 2.0, mutable=prob.mutable)
        stub.append(e_stub[0] / e_stub.sum())
    assert all(b < a for a, b in zip(shares, shares[1:])) and shares[-1] / shares[0] <= 0.7
    assert np.ptp(stub) < 1e-12


def test_general_penalty_design_and_resume(tmp_path):
    """The non-convex design (p = 2 here, comparable with the convex one): feasible, no worse than the convex
    program's loss (it may use negative gains); a run killed after restart 2 resumes at restart 2, same answer."""
    cfg = Config(seed=0, n=300, solver="penalty", restarts=3)
    ctx = RunContext(quiet=True)
    saved = {}

    def report(metrics, ckpt):
        if ckpt is not None:
            import shutil

            dst = tmp_path / f"ck{metrics['step']}"
            shutil.copytree(ckpt, dst)
            saved[metrics["step"]] = dst

    ctx.report_fn = report
    out = fit(cfg, ctx)
    assert [h["step"] for h in ctx.history] == [1, 2, 3]
    assert out["train/feasible"] == 1.0 and out["eval/q"] >= 0.6 - 1e-6
    prob = build_problem(cfg)
    convex = M.design_l2(prob.X_train, prob.y_train, prob.C, prob.abilities, prob.mutable, prob.desirable, 0.6)
    assert out["eval/train_loss"] <= convex.train_loss + 1e-3
    ctx2 = RunContext(quiet=True, checkpoint=saved[2])
    out2 = fit(cfg, ctx2)
    assert [h["step"] for h in ctx2.history] == [3]
    assert out2["eval/train_loss"] == pytest.approx(out["eval/train_loss"], abs=1e-9)
    ctx3 = RunContext(quiet=True, checkpoint=saved[3])  # a finished run reports again at its step
    assert fit(cfg, ctx3)["eval/accuracy"] == out["eval/accuracy"] and ctx3.history[0]["step"] == 3


def test_uncertainty_sweep_setting():
    cfg = Config(seed=0, n=1000, uncertain_features=["exercise"], sigma_w=1.0)
    ctx = RunContext(quiet=True)
    out = fit_uncertainty_sweep(cfg, ctx)
    assert out["eval/uncertain_share_strictly_decreasing"] == 1.0
    assert out["eval/uncertain_share_ratio"] <= 0.7 and out["eval/complete_information_q"] >= 0.6 - 1e-6
    assert out["eval/q"] < out["eval/complete_information_q"]
    # C-uncertainty and the acceptance-probability individual run and give shares in [0, 1]
    for kw in ({"uncertainty": "C", "mc_samples": 200, "sigma_grid": [0.0, 0.5]},
               {"responder_objective": "prob", "prob_individuals": 5, "sigma_grid": [0.5]}):
        o = fit_uncertainty_sweep(cfg.model_copy(update=kw), RunContext(quiet=True))
        assert 0.0 <= o["eval/q"] <= 1.0


# ------------------------------------------------------------------------------------- data
def test_user_table_graph_and_flags(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    a = rng.normal(size=n)
    b = 0.8 * a + rng.normal(size=n)
    y = (b + 0.3 * rng.normal(size=n) > 0).astype(int)
    (tmp_path / "d.csv").write_text("a,b,label\n" + "\n".join(f"{u},{v},{t}" for u, v, t in zip(a, b, y)))
    (tmp_path / "edges.csv").write_text("cause,effect,weight\na,b,0.8\n")
    (tmp_path / "matrix.csv").write_text("0,0.8\n0,0\n")
    (tmp_path / "flags.json").write_text(json.dumps({"a": {"desirable": True}, "b": {"ability": 0.5}}))
    assert np.allclose(read_graph(tmp_path / "edges.csv", ["a", "b"]), read_graph(tmp_path / "matrix.csv", ["a", "b"]))
    cfg = Config(scm="file", data_path=str(tmp_path / "d.csv"), graph_path=str(tmp_path / "edges.csv"),
                 flags_path=str(tmp_path / "flags.json"), beta=0.5)
    prob = build_problem(cfg)
    assert prob.C[1, 0] == pytest.approx(0.8) and prob.abilities.tolist() == [1.0, 0.5]
    out = fit(cfg, RunContext(quiet=True))
    assert out["eval/q"] >= 0.5 - 1e-6 and out["eval/accuracy"] > 0.6
    (tmp_path / "bad.json").write_text(json.dumps({"zzz": {"sign": 1}}))
    with pytest.raises(ConfigError, match="zzz"):
        build_problem(cfg.model_copy(update={"flags_path": str(tmp_path / "bad.json")}))


def test_config_refuses_unknown_names_and_bad_values():
    with pytest.raises(ValidationError):
        Config(weights={"nope": 1.0})
    with pytest.raises(ValidationError):
        Config(abilities={"exercise": 0.0})
    with pytest.raises(ValidationError):
        Config(solver="penalty", cost_p=1.0)
    with pytest.raises(ValidationError):
        Config(scm="file")


# ------------------------------------------------------------------------------------- smoke + serving
def test_smoke_run_reports_l2_and_l1_designs(smoke_root):
    run = smoke_run(SLUG, smoke_root)
    m = run["metrics"]
    assert m["eval/q"] >= 0.6 - 1e-6 and 0.5 < m["eval/accuracy"] <= 1.0
    assert m["l1/q"] == 1.0 and m["l1/target_desirable"] == 1.0
    assert m["baseline_lr/q"] < 0.6


def test_predictor_domain_and_finite_answers(smoke_root):
    run = smoke_run(SLUG, smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    names = pred.names
    ad = TypeAdapter(pred.input_model())
    full = {n: 0.1 for n in names}
    for bad in ({"features": {"exercise": 1.0}},  # missing names
                {"features": {**full, "foo": 1.0}},  # unknown name
                {"features": {**full, "bmi": 11.0}},  # out of range
                {"features": full, "classifier": {"weights": {"bar": 1.0}}},
                {"features": full, "classifier": {"weights": {"bmi": 101.0}}},
                {"features": full, "beliefs": {"sigma_w": -1.0}},
                {"features": full, "beliefs": {"risk_aversion": 1000.0}}):
        with pytest.raises(ValidationError):
            ad.validate_python(bad)
    with pytest.raises(FieldError, match="foo"):  # the generic Input: names are checked by the predictor
        pred([Input(features={**full, "foo": 1.0})])
    with pytest.raises(FieldError, match="missing"):
        pred([Input(features={"exercise": 1.0})])
    # the deployed design at complete information: q = beta
    out = pred([ad.validate_python({"features": full})])[0]
    assert out.desirable_share == pytest.approx(0.6, abs=1e-6) and set(out.best_response_effort) == set(names) - {"age"}
    # random schema-valid requests, extremes included: finite answers
    rng = np.random.default_rng(0)
    items = []
    for k in range(60):
        item = {"features": {n: float(rng.choice([-10, 10, rng.uniform(-10, 10)])) for n in names}}
        if k % 2:
            item["classifier"] = {"weights": {n: float(rng.uniform(-100, 100)) for n in names if rng.random() < 0.7},
                                  "threshold": float(rng.uniform(-1e4, 1e4))}
        if k % 3:
            sw = float(rng.uniform(0, 10)) if k % 2 else {n: float(rng.uniform(0, 10)) for n in names[:3]}
            item["beliefs"] = {"sigma_w": sw, "risk_aversion": float(rng.choice([0.0, 100.0, rng.uniform(0, 100)]))}
        items.append(ad.validate_python(item))
    for o in pred(items):
        json.loads(json.dumps(o.model_dump(mode="json"), allow_nan=False))
        assert all(v >= 0 for v in o.best_response_effort.values())
        assert o.desirable_share is None or 0.0 <= o.desirable_share <= 1.0
