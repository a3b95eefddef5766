"""agbal: the spec's unit tests (density ratio vs the analytic ratio of two Gaussians, importance-weighted auxiliary
loss = target mean loss, selection returns b distinct unlabelled ids, LCMD with constant u = plain LCMD, one AL
round end to end on diabetes_shift), the maths against brute force (LCMD, MaxDet, NW / KRR propagation, posterior
variance, sketched NTK), the data facts, the table loaders, resume at the saved round, and the Predictor's domain."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import FieldError, RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.data import agbal_shift as src
from methodlab.methods.agbal import maths
from methodlab.methods.agbal.acquire import acquire
from methodlab.methods.agbal.config import Config
from methodlab.methods.agbal.model import FeatureMap, build_net
from methodlab.methods.agbal.predictor import Input, Predictor
from tests.smoke import smoke_run

torch.set_num_threads(1)


def _pdf(x, mu, s):
    return np.exp(-0.5 * ((x - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))


# ------------------------------------------------------------------------------------------------ density ratio
def test_ratio_recovers_analytic_ratio_of_two_gaussians():
    rng = np.random.default_rng(0)
    xt = rng.normal(0.0, 1.0, (4000, 1))
    xa = rng.normal(0.5, 1.3, (4000, 1))
    model = maths.fit_ratio(xt, xa, kind="logistic", features="quadratic")
    r = maths.clip_normalise(model.raw_ratio(xa), (0.01, 100))
    true = _pdf(xa[:, 0], 0, 1) / _pdf(xa[:, 0], 0.5, 1.3)
    true = true / true.mean()
    assert np.median(np.abs(r - true) / true) < 0.2


def test_linear_logistic_cannot_recover_a_variance_ratio():
    """Stub check: a ratio model without quadratic terms misses N(0,1)/N(0,2^2) (log ratio is quadratic)."""
    rng = np.random.default_rng(1)
    xt, xa = rng.normal(0, 1, (4000, 1)), rng.normal(0, 2, (4000, 1))
    true = _pdf(xa[:, 0], 0, 1) / _pdf(xa[:, 0], 0, 2)
    true /= true.mean()
    err = {}
    for feats in ("linear", "quadratic"):
        r = maths.clip_normalise(maths.fit_ratio(xt, xa, features=feats).raw_ratio(xa), (0.01, 100))
        err[feats] = np.median(np.abs(r - true) / true)
    assert err["quadratic"] < 0.2 < err["linear"]


def test_clip_normalise_and_ess():
    r = maths.clip_normalise(np.array([1e-5, 1.0, 3.0, 1e5]), (0.01, 100))
    assert r.mean() == pytest.approx(1.0) and r.max() / r.min() == pytest.approx(100 / 0.01)
    assert maths.ess(np.ones(50)) == pytest.approx(50)
    assert maths.ess(np.array([1.0] + [0.0] * 9)) == pytest.approx(1)
    blended, alpha = maths.ess_blend(np.array([10.0] + [0.0] * 9), 50)
    assert alpha == pytest.approx(1 / 50) and np.all(blended > 0.9)


def test_weighted_aux_loss_equals_target_mean_loss():
    """E_aux[r(x) l(x)] = E_target[l(x)] for a fixed model: Monte-Carlo with the true hetero_1d ratio."""
    rng = np.random.default_rng(0)
    n = 200_000
    comp = rng.random(n) < 0.85
    xa = np.where(comp, rng.normal(-1.5, 0.5, n), rng.normal(1.0, 0.5, n))
    xt = rng.normal(0, 1, n)
    loss = lambda x: (np.sin(3 * x) + 0.5 * x) ** 2  # noqa: E731 - the squared error of some fixed model
    weighted = np.mean(src.hetero_ratio_1d(xa[:, None]) * loss(xa))
    target = np.mean(loss(xt))
    assert weighted == pytest.approx(target, rel=0.1)
    assert abs(np.mean(loss(xa)) - target) / target > 0.1  # the unweighted mean is off: weighting matters here


def test_hetero_ratio_facts():
    assert src.hetero_ratio_1d(np.array([[1.0]]))[0] == pytest.approx(2.0, rel=0.05)
    assert src.hetero_ratio_1d(np.array([[-1.5]]))[0] == pytest.approx(0.19, abs=0.02)
    t = src.hetero_1d(seed=3, n_pool=500, n_test=100, n_aux=400, n0=20)
    assert t.x_pool.shape == (500, 1) and t.x_aux.shape == (400, 1) and len(set(t.labeled)) == 20
    assert np.mean(t.x_aux < 0) > 0.75
    f = src.friedman_shift(seed=0, n_pool=300, n_test=50, n_aux=200, n0=10)
    assert f.true_ratio(f.x_aux).shape == (200,) and f.x_pool.shape[1] == 10


# ------------------------------------------------------------------------------------------------ propagation
def test_nw_and_krr_match_brute_force():
    rng = np.random.default_rng(0)
    zq, za = rng.normal(size=(7, 3)), rng.normal(size=(11, 3))
    loss, r, h = rng.random(11), rng.random(11) + 0.1, 0.8
    k = np.array([[math.exp(-np.sum((q - a) ** 2) / (2 * h * h)) for a in za] for q in zq])
    nw = (k @ (r * loss)) / (k @ r + 1e-3)
    assert np.allclose(maths.propagate(zq, za, loss, r, h, method="nw", kappa=1e-3), nw)
    kaa = np.array([[math.exp(-np.sum((a - b) ** 2) / (2 * h * h)) for b in za] for a in za])
    krr = np.maximum(k @ np.linalg.solve(kaa + 0.5 * np.eye(11), r * loss), 0)
    assert np.allclose(maths.propagate(zq, za, loss, r, h, method="krr", ridge=0.5), krr)


def test_nw_with_a_narrow_kernel_cancels_r_and_krr_does_not():
    """The spec's pitfall: a kernel narrow against the scale of r makes NW independent of r; KRR scales by r."""
    za = np.array([[0.0], [10.0]])
    loss = np.array([1.0, 4.0])
    u1 = maths.propagate(np.array([[0.0]]), za, loss, np.array([1.0, 1.0]), 0.1, kappa=0)
    u5 = maths.propagate(np.array([[0.0]]), za, loss, np.array([5.0, 1.0]), 0.1, kappa=0)
    assert u1 == pytest.approx(u5)
    k1 = maths.propagate(np.array([[0.0]]), za, loss, np.array([1.0, 1.0]), 0.1, method="krr", ridge=1e-6)
    k5 = maths.propagate(np.array([[0.0]]), za, loss, np.array([5.0, 1.0]), 0.1, method="krr", ridge=1e-6)
    assert k5 == pytest.approx(5 * k1)


def test_posterior_variance_matches_gp_formula():
    rng = np.random.default_rng(0)
    fq, fl = rng.normal(size=(6, 4)), rng.normal(size=(5, 4))
    var = maths.posterior_variance(fq, fl, ridge=0.1)
    lam = 0.1 * np.mean((fq ** 2).sum(1))
    kqq, kql, kll = fq @ fq.T, fq @ fl.T, fl @ fl.T
    gp = np.diag(kqq - kql @ np.linalg.solve(kll + lam * np.eye(5), kql.T))
    assert np.allclose(var, gp)


# ------------------------------------------------------------------------------------------------ selection
def _lcmd_brute(f, fl, b, cand):
    centres, chosen = [*fl], []
    for _ in range(b):
        rest = [i for i in cand if i not in chosen]
        d = {i: min(float(np.sum((f[i] - c) ** 2)) for c in centres) for i in rest}
        owner = {i: int(np.argmin([np.sum((f[i] - c) ** 2) for c in centres])) for i in rest}
        size = {}
        for i in rest:
            size[owner[i]] = size.get(owner[i], 0.0) + d[i]
        big = max(size, key=size.get)
        pick = max((i for i in rest if owner[i] == big), key=lambda i: d[i])
        chosen.append(pick)
        centres.append(f[pick])
    return chosen


def test_lcmd_matches_brute_force():
    rng = np.random.default_rng(0)
    f, fl = rng.normal(size=(40, 3)), rng.normal(size=(4, 3))
    cand = np.array([i for i in range(40) if i % 5])
    assert maths.lcmd(f, fl, 8, cand) == _lcmd_brute(f, fl, 8, list(cand))


def test_maxdet_is_greedy_log_det():
    rng = np.random.default_rng(1)
    f, fl = rng.normal(size=(15, 4)), rng.normal(size=(2, 4))
    lam = 0.1 * np.mean((f ** 2).sum(1))
    sel = maths.maxdet(f, fl, 3, np.arange(15), ridge=0.1)
    chosen = []
    for _ in range(3):
        def logdet(i):
            rows = np.concatenate([fl, f[chosen + [i]]])
            return np.linalg.slogdet(rows @ rows.T + lam * np.eye(len(rows)))[1]
        chosen.append(max((i for i in range(15) if i not in chosen), key=logdet))
    assert sel == chosen


@pytest.fixture(scope="module")
def tiny_state():
    from methodlab.methods.agbal.train import fit_ratio, train_round

    cfg = Config(data="hetero_1d", n_pool=300, n_test=100, n_aux=200, n0=20, hidden=[16, 16], epochs=5, kernel="ll")
    from methodlab.methods.agbal.data import build_task

    task = build_task(cfg)
    _, r, _ = fit_ratio(cfg, task)
    return cfg, task, train_round(cfg, task, list(task.labeled), 0, r)


@pytest.mark.parametrize("strategy", ["agbal", "random", "lcmd", "agbal_unweighted"])
@pytest.mark.parametrize("selection", ["lcmd", "maxdet", "top_b", "maxdiag"])
def test_selection_returns_b_distinct_unlabelled_ids(tiny_state, strategy, selection):
    cfg, task, st = tiny_state
    cfg = cfg.model_copy(update={"selection": selection})
    lab = list(task.labeled)
    cand = np.setdiff1d(np.arange(len(task.x_pool)), lab)
    acq = acquire(cfg, st, task.x_pool, task.x_pool[lab], cand, 25, strategy, np.random.default_rng(0))
    assert len(acq.selected) == 25 == len(set(acq.selected))
    assert not set(acq.selected) & set(lab) and all(0 <= i < len(task.x_pool) for i in acq.selected)


def test_lcmd_with_constant_surrogate_equals_plain_lcmd(tiny_state, monkeypatch):
    from methodlab.methods.agbal import acquire as acq_mod

    cfg, task, st = tiny_state
    lab = list(task.labeled)
    cand = np.setdiff1d(np.arange(len(task.x_pool)), lab)
    plain = acquire(cfg, st, task.x_pool, task.x_pool[lab], cand, 20, "lcmd", np.random.default_rng(0)).selected
    monkeypatch.setattr(acq_mod, "surrogate", lambda *a, **k: np.full(len(a[2]), 0.37))
    const = acquire(cfg, st, task.x_pool, task.x_pool[lab], cand, 20, "agbal", np.random.default_rng(0)).selected
    assert const == plain
    monkeypatch.setattr(acq_mod, "surrogate", lambda *a, **k: np.linspace(0.01, 5, len(a[2])))
    varied = acquire(cfg, st, task.x_pool, task.x_pool[lab], cand, 20, "agbal", np.random.default_rng(0)).selected
    assert varied != plain  # a non-constant u changes the batch


def test_sketched_ntk_approximates_exact_ntk():
    torch.manual_seed(0)
    net = build_net(3, [32, 32], "silu", seed=0)
    x = np.random.default_rng(0).normal(size=(6, 3))
    grads = []
    for row in x:
        net.zero_grad()
        net(torch.as_tensor(row[None], dtype=torch.float32)).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]).double().numpy())
    g = np.stack(grads)
    exact = g @ g.T
    feats = FeatureMap(net, "ntk", 4096, seed=0, d_in=3)(x)
    approx = feats @ feats.T
    assert np.corrcoef(exact.ravel(), approx.ravel())[0, 1] > 0.95
    ll = FeatureMap(net, "ll", 512, seed=0, d_in=3)(x)
    assert ll.shape == (6, 32)


# ------------------------------------------------------------------------------------------------ loaders
@pytest.mark.parametrize("fmt", ["csv", "parquet", "npz"])
def test_table_loader_round_trip(tmp_path, fmt):
    import pandas as pd

    rng = np.random.default_rng(0)
    tables = {k: (rng.normal(size=(n, 3)), rng.normal(size=n)) for k, n in
              (("labeled", 10), ("pool", 30), ("auxiliary", 20), ("test", 15))}
    paths = {}
    for k, (x, y) in tables.items():
        p = tmp_path / f"{k}.{fmt}"
        if fmt == "npz":
            np.savez(p, X=x, **({} if k == "pool" else {"y": y}))
        else:
            df = pd.DataFrame(x, columns=["a", "b", "c"])
            if k != "pool":
                df["y"] = y
            df.to_csv(p, index=False) if fmt == "csv" else df.to_parquet(p)
        paths[k] = str(p)
    t = src.load_tables(paths["labeled"], paths["pool"], paths["auxiliary"], paths["test"])
    assert np.allclose(t.x_lab, tables["labeled"][0]) and np.allclose(t.y_aux, tables["auxiliary"][1])
    assert t.y_pool is None and t.x_pool.shape == (30, 3) and len(t.labeled) == 0


def test_round_setting_on_example_tables_proposes_a_batch(tmp_path):
    from methodlab.methods.agbal.train import fit_round

    d = src.write_example_tables(tmp_path / "tables", n_labeled=32, n_pool=200, n_aux=150, n_test=100)
    files = {k: str(d / f"{k}.csv") for k in ("labeled", "pool", "auxiliary", "test")}
    cfg = Config(data="files", data_files=files, batch_size=10, hidden=[16, 16], epochs=5, kernel="ll")
    written = []
    ctx = RunContext(quiet=True, report_fn=lambda m, ck: written.append(Predictor.from_checkpoint(ck) if ck else None))
    m = fit_round(cfg, ctx)
    assert m["proposal/size"] == 10 and math.isfinite(m["eval/rmse"])
    assert written[-1] is not None and written[-1].d == 10


# ------------------------------------------------------------------------------------------------ smoke + serve
def test_smoke_round_loop_on_diabetes_shift(smoke_root):
    run = smoke_run("agbal", smoke_root)
    m = run["metrics"]
    cfg = run["config"]
    assert m["round"] == cfg.rounds and m["n_labeled"] == cfg.n0 + cfg.rounds * cfg.batch_size
    assert math.isfinite(m["eval/auc_log"]) and math.isfinite(m["surrogate/spearman"])


def _predictor(smoke_root) -> Predictor:
    run = smoke_run("agbal", smoke_root)
    return Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))


def test_predictor_answers_and_is_stateless(smoke_root):
    from pydantic import TypeAdapter

    pred = _predictor(smoke_root)
    ta = TypeAdapter(pred.input_model())
    rows = (0.05 * np.random.default_rng(0).normal(size=(20, 10))).tolist()
    req = ta.validate_python({"task": "acquire", "pool": rows, "labeled_ids": [3, 4], "batch_size": 5})
    a, b = pred([req])[0], pred([req])[0]
    assert a.selected_ids == b.selected_ids and len(set(a.selected_ids)) == 5 and not {3, 4} & set(a.selected_ids)
    assert all(math.isfinite(s) and s >= 0 for s in a.scores)
    p = pred([ta.validate_python({"task": "predict", "x": rows[:4]})])[0]
    assert len(p.y_hat) == 4 == len(p.uncertainty_surrogate)
    big = pred([ta.validate_python({"task": "predict", "x": [[1e6] * 10, [-1e6] * 10]})])[0]
    assert all(math.isfinite(v) for v in big.y_hat + big.uncertainty_surrogate)
    dup = pred([ta.validate_python({"task": "acquire", "pool": [[0.0] * 10] * 6, "batch_size": 6})])[0]
    assert sorted(dup.selected_ids) == list(range(6))
    default = pred([ta.validate_python({"task": "acquire", "pool": rows, "labeled_ids": [0]})])[0]
    assert len(default.selected_ids) == min(pred.b, 19)  # no batch_size: the checkpoint's b, capped


@pytest.mark.parametrize("body,field", [
    ({"task": "predict", "x": [[0.0] * 3]}, "x"),
    ({"task": "acquire", "pool": [[0.0] * 10] * 3, "labeled_ids": [1, 1], "batch_size": 1}, "labeled_ids"),
    ({"task": "acquire", "pool": [[0.0] * 10] * 3, "labeled_ids": [3], "batch_size": 1}, "labeled_ids"),
    ({"task": "acquire", "pool": [[0.0] * 10] * 3, "labeled_ids": [0], "batch_size": 3}, "batch_size"),
    ({"task": "acquire", "pool": [[0.0] * 10] * 3, "batch_size": 0}, "batch_size"),
])
def test_predictor_domain_errors(smoke_root, body, field):
    pred = _predictor(smoke_root)
    with pytest.raises(FieldError) as info:
        pred([Input.model_validate(body)] if body.get("batch_size", 1) >= 1 else [Input.model_construct(**body)])
    assert field in info.value.field


def test_specialised_schema_rejects_wrong_width_and_repeats(smoke_root):
    from pydantic import TypeAdapter, ValidationError

    ta = TypeAdapter(_predictor(smoke_root).input_model())
    with pytest.raises(ValidationError):
        ta.validate_python({"task": "predict", "x": [[0.0] * 9]})
    with pytest.raises(ValidationError):
        ta.validate_python({"task": "acquire", "pool": [[0.0] * 10] * 20001, "batch_size": 1})
    schema = ta.json_schema()
    assert "AcquireInput" in str(schema) and "uniqueItems" in str(schema)


def test_resume_continues_at_the_saved_round(tmp_path):
    from methodlab.methods.agbal.train import fit

    cfg = Config(data="hetero_1d", n_pool=300, n_test=100, n_aux=200, n0=20, batch_size=10, rounds=2,
                 hidden=[16, 16], epochs=5, kernel="ll")
    saved = {}

    def report(m, ck):
        if ck is not None and m["round"] == 1:
            import shutil

            shutil.copytree(ck, tmp_path / "r1")
            saved["m"] = m

    fit(cfg, RunContext(quiet=True, report_fn=report))
    ctx = RunContext(quiet=True, checkpoint=tmp_path / "r1")
    out = fit(cfg, ctx)
    rounds = [h["round"] for h in ctx.history]
    assert rounds == [0, 1, 2] and out["n_labeled"] == 40


def test_violated_conditions_name_what_the_schema_cannot_state(smoke_root):
    pred = _predictor(smoke_root)
    pool = [[0.0] * 10] * 4
    ok = {"task": "acquire", "pool": pool, "labeled_ids": [0, 3], "batch_size": 2}
    assert Predictor.violated_conditions(ok) == [] and Predictor.violated_conditions({"task": "predict", "x": pool}) == []
    bad_ids = {**ok, "labeled_ids": [4]}
    bad_b = {**ok, "batch_size": 3}
    assert len(Predictor.violated_conditions(bad_ids)) == 1 and len(Predictor.violated_conditions(bad_b)) == 1
    for body in (bad_ids, bad_b):  # a body breaking a named condition is answered 422 (FieldError), never 5xx
        with pytest.raises(FieldError):
            pred([Input.model_validate(body)])
    assert "len(pool)" in (pred.input_model().__args__[0].__args__[1].__doc__ or "")


def test_study_judges_claim2_on_seeds_0_to_9_and_claim3_with_krr():
    """The reproduction study (revised spec): Claim 2 pools AGBAL vs LCMD over seeds 0-9 (NOT RUN while one is
    missing), Claim 3 and the surrogate check read the krr hetero_1d arms, and the propagation default is krr."""
    from methodlab.methods.agbal.reproduce import CLAIM2_SEEDS, study
    from methodlab.reproduce.report import NOT_RUN, PASS, Results, judge

    st = study()
    st.check()
    assert Config().propagation == "krr" and CLAIM2_SEEDS == tuple(range(10))
    assert set(CLAIM2_SEEDS) <= set(st.arm("friedman-agbal").seeds)
    assert "propagation=krr" in st.arm("hetero-agbal").overrides

    def run(auc, sp=None):
        h = [{"step": 0, "eval/log_rmse": 0.0, **({} if sp is None else {"surrogate/spearman": sp})}]
        return {"final": {"eval/auc_log": auc}, "history": h, "wall_s": 1.0}

    runs = {"friedman-agbal": {str(s): run(0.70) for s in CLAIM2_SEEDS},
            "friedman-lcmd": {str(s): run(0.73) for s in CLAIM2_SEEDS},
            "friedman-random": {str(s): run(0.80) for s in (0, 1, 2)},
            "hetero-agbal": {str(s): run(-1.5, 0.5) for s in (0, 1, 2)},
            "hetero-agbal_unweighted": {str(s): run(-1.4) for s in (0, 1, 2)}}
    data = {"quick": False, "mode": "default", "runs": runs, "tasks": {}, "recipes": {}}
    verdicts = {c["id"]: c for c in judge(st, Results(data, st))}
    assert {k: v["verdict"] for k, v in verdicts.items()} == {"1": PASS, "2": PASS, "3": PASS, "S": PASS}
    assert abs(verdicts["2"]["ours"] - 0.03) < 1e-9 and abs(verdicts["3"]["ours"] - 0.1) < 1e-9
    del runs["friedman-lcmd"]["9"]
    assert {c["id"]: c["verdict"] for c in judge(st, Results(data, st))}["2"] == NOT_RUN
