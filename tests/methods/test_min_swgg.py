"""min_swgg (DGSWP): the lifted cost against brute force and exact OT, the Stein estimator against its
formula, the spec's smoke claims (h >= W2^2, h falls, permutation plan, finite gradient, eps -> large
shrinks it), a stub that fails them, a real roll-back, manifold maths, resume, and the predictor's domain."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from pydantic import ValidationError

from methodlab.core import FieldError, RunContext
from methodlab.methods.min_swgg import swgg
from methodlab.methods.min_swgg.config import Config
from methodlab.methods.min_swgg.data import (hyperbolic_clouds, lorentz_to_poincare, minkowski_ip,
                                             poincare_to_lorentz, wrapped_normal)
from methodlab.methods.min_swgg.flows import exp_poincare
from methodlab.methods.min_swgg.predictor import Input, Predictor
from tests.smoke import smoke_run

torch.set_num_threads(1)


def _clouds(n=16, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randn(n, d, generator=g) * 1.5 + 0.7


def _w2(x, y):
    n = len(x)
    return ot.emd2(np.full(n, 1 / n), np.full(n, 1 / n), ot.dist(x.double().numpy(), y.double().numpy()))


def _smoke_fit(lr=0.01, eps=0.05, seed=0, **kw):
    x, y = _clouds()
    gen = torch.Generator().manual_seed(seed)
    g = swgg.build_slice("linear", 5, generator=gen)
    opt = torch.optim.Adam(g.parameters(), lr=lr)
    return x, y, g, swgg.dgswp(x, y, g, opt, n_iter=50, eps=eps, n_samples=10, generator=gen, **kw)


# ------------------------------------------------------------------------------------ the lifted cost
def test_lifted_cost_equals_bruteforce_loop_and_gram_path():
    x, y = _clouds(n=23, d=7)
    th = torch.randn(6, 7, generator=torch.Generator().manual_seed(0))
    px, py = th @ x.T, th @ y.T
    got = swgg.lifted_cost(x, y, px, py)
    gram = swgg.lifted_cost(x, y, px, py, gram=swgg.Gram(x, y))
    for s in range(6):
        ix, iy = np.argsort(px[s].numpy(), kind="stable"), np.argsort(py[s].numpy(), kind="stable")
        brute = np.mean([((x[i] - y[j]) ** 2).sum().item() for i, j in zip(ix, iy)])
        assert float(got[s]) == pytest.approx(brute, rel=1e-5)
        assert float(gram[s]) == pytest.approx(brute, rel=1e-5)


def test_h_upper_bounds_exact_w2_and_sorting_plan_is_a_permutation():
    x, y = _clouds()
    w2 = _w2(x, y)
    for s in range(50):
        g = swgg.build_slice("linear", 5, generator=torch.Generator().manual_seed(s))
        sigma, tau = swgg.sorting_plan(g, x, y)
        P = swgg.dense_plan(sigma, tau)
        assert torch.allclose(P.sum(0), torch.full((16,), 1 / 16, dtype=torch.float64))
        assert torch.allclose(P.sum(1), torch.full((16,), 1 / 16, dtype=torch.float64))
        h = swgg.h_value(g, x, y)
        assert h >= w2 - 1e-6 * max(1.0, w2)
        assert h == pytest.approx(float((P * torch.cdist(x.double(), y.double()).pow(2)).sum()), rel=1e-5)


def test_one_dimensional_sorting_plan_is_exact():
    """In 1-D the sorting plan IS the OT plan: h(theta) = W2^2 for any positive slice."""
    x, y = _clouds(n=30, d=1)
    g = swgg.build_slice("linear", 1)
    with torch.no_grad():
        g.weight.fill_(1.0)
    assert swgg.h_value(g, x, y) == pytest.approx(_w2(x, y), rel=1e-5)


# ------------------------------------------------------------------------------- the Stein estimator
def test_smoothed_gradient_matches_its_formula():
    x, y = _clouds()
    g = swgg.build_slice("linear", 5, generator=torch.Generator().manual_seed(1))
    est = swgg.smoothed_grad(g, x, y, eps=0.3, n_samples=7, generator=torch.Generator().manual_seed(5))
    noise = swgg.draw_noise(g, 7, torch.Generator().manual_seed(5))  # the same draws
    h0 = swgg.h_value(g, x, y)
    hs = []
    for s in range(1, 8):
        gs = swgg.build_slice("linear", 5)
        with torch.no_grad():
            gs.weight.copy_(g.weight + 0.3 * noise["weight"][s])
            gs.bias.copy_(g.bias + 0.3 * noise["bias"][s])
        hs.append(swgg.h_value(gs, x, y))
    manual = sum((h - h0) * noise["weight"][s + 1] for s, h in enumerate(hs)) / (7 * 0.3)
    assert float(est.h0) == pytest.approx(h0, rel=1e-6)  # device scalars (0-d tensors): read here
    assert float(est.smoothed) == pytest.approx(np.mean(hs), rel=1e-6)
    assert torch.allclose(est.grads["weight"], manual, rtol=1e-4, atol=1e-6)


def test_mlp_slice_vmap_path_equals_module_calls():
    x, y = _clouds()
    g = swgg.build_slice("mlp64", 5, generator=torch.Generator().manual_seed(2))
    noise = swgg.draw_noise(g, 3, torch.Generator().manual_seed(0))
    got = swgg.perturbed_h(g, x, y, noise, 0.1)
    for s in range(4):
        gs = swgg.build_slice("mlp64", 5)
        gs.load_state_dict({k: v + 0.1 * noise[k][s] for k, v in g.state_dict().items()})
        assert float(got[s]) == pytest.approx(swgg.h_value(gs, x, y), rel=1e-5)


# ------------------------------------------------------------------------ smoke claims of the spec
def test_smoke_claims_h_falls_and_bounds():
    x, y, g, res = _smoke_fit()
    w2 = _w2(x, y)
    assert res.h >= w2 - 1e-9
    assert min(res.history) >= w2 - 1e-6
    assert res.h < res.h_init, "h did not fall over 50 iterations"
    P = swgg.dense_plan(res.sigma, res.tau)
    assert torch.equal((P > 0).sum(0), torch.ones(16, dtype=torch.long))
    assert torch.equal((P > 0).sum(1), torch.ones(16, dtype=torch.long))
    assert swgg.h_value(g, x, y) == pytest.approx(res.h, rel=1e-6)  # h is the cost of the RETURNED slice


def test_stub_fixed_direction_fails_h_falls():
    """A frozen slice (lr = 0: never moves) is the stub the spec's 'h falls' check must reject."""
    _, _, _, res = _smoke_fit(lr=0.0)
    assert not (res.h < res.h_init)


def test_gradient_is_finite_and_shrinks_as_eps_grows():
    x, y = _clouds()
    g = swgg.build_slice("linear", 5, generator=torch.Generator().manual_seed(0))
    norms = {}
    for eps in (0.05, 1e3):
        gen = torch.Generator().manual_seed(3)
        gs = [swgg.smoothed_grad(g, x, y, eps=eps, n_samples=10, generator=gen).grads["weight"] for _ in range(20)]
        assert all(torch.isfinite(v).all() for v in gs)
        norms[eps] = float(torch.stack(gs).norm(dim=-1).mean())
    assert norms[1e3] < 0.01 * norms[0.05]


def test_rollback_restores_a_deep_copy_of_the_best_iterate():
    x, y, g, res = _smoke_fit(rollback=True, rollback_on="h", lr=0.05)
    assert res.h == pytest.approx(min(res.history), rel=1e-6)
    assert 0 <= res.best_iter < 50
    # without roll-back the last iterate is kept; with it, the best (a different slice whenever best < last)
    _, _, g2, res2 = _smoke_fit(rollback=False, lr=0.05)
    assert res2.best_iter == 50
    if res.best_iter < 49:
        assert not torch.allclose(g.weight, g2.weight)


def test_smoothed_rollback_keeps_best_smoothed_iterate():
    x, y, g, res = _smoke_fit(rollback=True, rollback_on="smoothed", lr=0.05)
    assert res.best_iter == int(np.argmin(res.smoothed))
    assert res.h == pytest.approx(res.history[res.best_iter], rel=1e-6)


def test_dgswp_beats_equal_budget_random_search_on_plan_data():
    """Claim shape of the plan acceptance on one small seed: optimised slice <= random search with the same
    number of h evaluations (POT), which a stub (fixed slice) does not reach."""
    from methodlab.methods.min_swgg.data import moons_embedded
    from methodlab.methods.min_swgg.evaluate import random_search_cost

    s, t = moons_embedded(64, 100, 0.1, 1)
    x, y = torch.tensor(s, dtype=torch.float32), torch.tensor(t, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    g = swgg.build_slice("linear", 100, generator=gen)
    res = swgg.dgswp(x, y, g, torch.optim.Adam(g.parameters(), lr=0.01), n_iter=300, generator=gen, rollback_on="h")
    rs = random_search_cost(s, t, 300 * 11, 1)
    assert res.h <= 0.95 * rs
    assert res.h_init > 0.95 * rs  # the initial (random) slice alone does not


# -------------------------------------------------------------------------------------- manifolds
def test_poincare_distance_matches_lorentz_formula_and_busemann_at_origin():
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(20, 2, generator=gen, dtype=torch.float64) * 0.6 - 0.3
    b = torch.rand(20, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.6
    lor = torch.arccosh((-minkowski_ip(poincare_to_lorentz(a), poincare_to_lorentz(b))).clamp_min(1 + 1e-15)) ** 2
    assert torch.allclose(swgg.poincare_dist2_pairs(a, b), lor, rtol=1e-9, atol=1e-12)
    g = swgg.BusemannSlice(2, gen)
    assert float(g(torch.zeros(1, 2, dtype=torch.float64)).detach()[0]) == pytest.approx(0.0, abs=1e-12)
    # along the geodesic towards the ideal point, B decreases by exactly the hyperbolic distance travelled
    u = g.direction.detach()[0]
    r1, r2 = 0.3, 0.7
    d12 = math.sqrt(float(swgg.poincare_dist2_pairs((r1 * u)[None], (r2 * u)[None])[0]))
    b1, b2 = g((r1 * u)[None]).detach(), g((r2 * u)[None]).detach()
    assert float(b1 - b2) == pytest.approx(d12, rel=1e-9)


def test_wrapped_normal_lies_on_hyperboloid_and_exp_map_is_geodesic():
    mu = torch.tensor([8.0, math.sqrt(63.0), 0.0], dtype=torch.float64)
    pts = wrapped_normal(mu, 0.1 * torch.eye(2), 200, torch.Generator().manual_seed(0))
    assert torch.allclose(minkowski_ip(pts, pts), torch.full((200,), -1.0, dtype=torch.float64), atol=1e-8)
    ball = lorentz_to_poincare(pts)
    assert float(ball.norm(dim=1).max()) < 1
    x = torch.tensor([[0.2, -0.1]], dtype=torch.float64)
    v = torch.tensor([[0.01, 0.02]], dtype=torch.float64)
    lam = 2 / (1 - x.pow(2).sum())
    moved = exp_poincare(v, x)
    assert math.sqrt(float(swgg.poincare_dist2_pairs(x, moved)[0])) == pytest.approx(float(lam * v.norm()), rel=1e-8)
    assert torch.allclose(exp_poincare(torch.zeros_like(x), x), x)


def test_poincare_dgswp_flow_moves_particles_towards_border_target():
    from methodlab.methods.min_swgg.flows import Flow

    x, y = hyperbolic_clouds("border", 30, 0)
    cfg = Config(task="flow", flow_space="poincare", flow_n=30, flow_iters=40, n_iter_inner=10)
    flow = Flow(cfg, x, y, 0)
    w0 = flow.w2()
    for _ in range(40):
        flow.step()
    assert torch.isfinite(flow.x).all() and float(flow.x.norm(dim=1).max()) < 1
    assert float(flow.g.direction.detach().norm()) == pytest.approx(1.0, abs=1e-9)  # stays an ideal point
    assert flow.w2() < 0.5 * w0


# --------------------------------------------------------------------------- runs, resume, serving
def test_smoke_run_reports_plan_metrics(smoke_root):
    run = smoke_run("min_swgg", smoke_root)
    m = run["metrics"]
    assert m["plan/h"] < m["plan/h_init"]
    assert m["plan/h"] >= m["plan/w2_exact"] - 1e-6
    assert m["eval/objective"] == pytest.approx(m["plan/h"] / m["plan/w2_exact"])


def _collect(cfg, checkpoint=None, stop_after=None):
    saved = {}

    class Stop(Exception):
        pass

    def report(metrics, ckpt_dir):
        if ckpt_dir is not None:
            import shutil
            import tempfile
            keep = tempfile.mkdtemp()
            shutil.copytree(ckpt_dir, keep, dirs_exist_ok=True)
            saved[metrics["step"]] = keep
        if stop_after is not None and metrics["step"] >= stop_after:
            raise Stop

    from methodlab.methods.min_swgg.train import fit
    ctx = RunContext(report_fn=report, checkpoint=checkpoint)
    try:
        out = fit(cfg, ctx)
    except Stop:
        out = ctx.history[-1]
    return out, saved


@pytest.mark.parametrize("task", ["flow", "cfm"])
def test_resume_continues_at_the_saved_step(task):
    over = {**Config.smoke, "task": task, "log_every": 10, "checkpoint_every": 10}
    if task == "flow":
        over.update(flow_iters=20)
    else:
        over.update(cfm_steps=20, cfm_init_iters=10, cfm_eval_n=64)
    cfg = Config(**over)
    full, _ = _collect(cfg)
    _, saved = _collect(cfg, stop_after=10)
    resumed, _ = _collect(cfg, checkpoint=saved[10])
    assert resumed["step"] == full["step"] == 20
    assert resumed["eval/objective"] == pytest.approx(full["eval/objective"], rel=1e-5)


@pytest.fixture(scope="module")
def cfm_checkpoint():
    cfg = Config(**{**Config.smoke, "task": "cfm", "log_every": 20, "checkpoint_every": 40})
    out, saved = _collect(cfg)
    return out, saved[max(saved)]


def test_cfm_smoke_couples_better_than_independent_and_samples(cfm_checkpoint):
    out, ck = cfm_checkpoint
    assert math.isfinite(out["cfm/w2"])
    assert out["coupling/ratio_independent"] < 0.8
    pred = Predictor.from_checkpoint(ck)
    (o,) = pred([Input(task="sample", n=5, steps=4, seed=3)])
    assert len(o.samples) == 5 and all(len(p) == 2 and all(math.isfinite(v) for v in p) for p in o.samples)
    # served schema of a cfm checkpoint: a plan of 2-D clouds or a sample request, 'task' names which
    from pydantic import TypeAdapter

    spec = TypeAdapter(pred.input_model())
    assert len(spec.json_schema()["anyOf"]) == 2
    (s2,) = pred([spec.validate_python({"task": "sample", "n": 3, "steps": 2})])
    (p2,) = pred([spec.validate_python({"task": "plan", "source": [[0.0, 1.0], [1.0, 0.0]],
                                        "target": [[2.0, 2.0], [0.0, 0.5], [1.0, 1.0]], "n_iter": 5})])
    assert len(s2.samples) == 3 and abs(sum(w for _, _, w in p2.plan) - 1) < 1e-9
    with pytest.raises(ValidationError):
        spec.validate_python({"source": [[0.0, 1.0]] * 2, "target": [[0.0, 1.0]] * 2})  # which task: required here


def test_predictor_plan_output_and_domain_errors(smoke_root):
    from pathlib import Path
    from methodlab.core.checkpoint import latest_checkpoint

    run = smoke_run("min_swgg", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    d = pred.plan_dim
    assert d == run["config"].plan_d  # the served solver is the checkpoint's: its dimension
    rng = np.random.default_rng(1)
    src, tgt = rng.normal(size=(10, d)), rng.normal(size=(10, d)) * 3
    (o,) = pred([Input(source=src.tolist(), target=tgt.tolist(), n_iter=40, with_exact=True)])
    assert sorted(o.assignment) == list(range(10))
    assert o.cost == pytest.approx(float(((src - tgt[o.assignment]) ** 2).sum(1).mean()), rel=1e-9)
    assert sorted((i, j) for i, j, _ in o.plan) == sorted(enumerate(o.assignment))
    assert o.exact_cost <= o.cost + 1e-9
    assert abs(np.linalg.norm(o.direction) - 1) < 1e-6
    # n != m: the monotone 1-D plan along the fitted direction, marginals 1/n and 1/m
    (u,) = pred([Input(source=src[:6].tolist(), target=tgt[:4].tolist(), n_iter=40, with_exact=True)])
    P = np.zeros((6, 4))
    for i, j, w in u.plan:
        P[i, j] += w
    assert np.allclose(P.sum(1), 1 / 6) and np.allclose(P.sum(0), 1 / 4) and u.assignment is None
    assert u.cost == pytest.approx(float((P * ((src[:6, None] - tgt[None, :4]) ** 2).sum(-1)).sum()), rel=1e-9)
    assert u.exact_cost <= u.cost + 1e-9
    theta = np.asarray(u.direction)
    px, py = src[:6] @ theta, tgt[:4] @ theta
    for i, j, _ in u.plan:  # monotone: no crossing pairs along the slice
        for k, m_, _ in u.plan:
            assert not (px[i] < px[k] - 1e-9 and py[j] > py[m_] + 1e-9)
    bad = [
        (dict(source=src.tolist(), target=rng.normal(size=(1023, d)).tolist()), "target"),  # lcm(10, 1023) too big
        (dict(source=src.tolist(), target=tgt[:, :3].tolist()), "target"),            # unequal d
        (dict(source=src[:, :3].tolist(), target=tgt[:, :3].tolist()), "source"),     # not the checkpoint's d
        (dict(source=src.tolist(), target=[[float("nan")] * d] + tgt[1:].tolist()), "target"),  # non-finite
        (dict(source=[[1.0, 2.0], [1.0]], target=[[0.0, 0.0], [1.0, 1.0]]), "source"),  # ragged
        (dict(source=None, target=tgt.tolist()), "source"),                            # missing set
        (dict(task="sample"), "task"),                                                 # plan checkpoint
    ]
    for kw, field in bad:
        try:
            item = Input(**kw)
        except ValidationError:
            continue  # the schema itself refuses it (-> 422 in serving)
        with pytest.raises(FieldError) as info:
            pred([item])
        assert info.value.field == f"[0].{field}"
    # the served schema is the checkpoint's: d-dimensional points, both clouds required, no 'sample' task
    from pydantic import TypeAdapter

    spec = TypeAdapter(pred.input_model())
    schema = spec.json_schema()
    assert set(schema["required"]) == {"source", "target"} and schema["properties"]["task"]["const"] == "plan"
    assert schema["properties"]["source"]["items"]["minItems"] == schema["properties"]["source"]["items"]["maxItems"] == d
    for body in ({"task": "sample"}, {"source": src[:, :3].tolist(), "target": tgt[:, :3].tolist()}):
        with pytest.raises(ValidationError):
            spec.validate_python(body)
    for kw in (dict(source=[], target=[]), dict(source=[[1e7]] * 2, target=[[0.0]] * 2), dict(n_iter=5000),
               dict(task="sample", n=5000), dict(task="sample", steps=0), dict(source=[[0.0] * 65] * 2)):
        with pytest.raises(ValidationError):
            Input(**kw)


# ---- data parallel (issue 43): cfm shards every minibatch; plan and flow refuse num_workers > 1 ------------
def test_cfm_shards_average_to_the_whole_minibatch_gradient():
    """Two ranks' cfm_loss (same generator state: the same t and noise, each its shard; B odd so the shards
    differ by one) averaged as DDP does = the one-worker loss and gradient."""
    from methodlab.methods.min_swgg.cfm import VectorField, cfm_loss

    torch.manual_seed(0)
    v = VectorField(2, 16)
    x0, x1 = torch.randn(31, 2), torch.randn(31, 2) + 1.0

    def run(ctx):
        v.zero_grad()
        loss = cfm_loss(v, x0, x1, 0.05, torch.Generator().manual_seed(3), ctx)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in v.parameters()]

    whole, g1 = run(None)
    assert torch.equal(run(RunContext())[0], whole)  # world size 1: the very same loss
    parts = [run(RunContext(rank=r, world_size=2)) for r in (0, 1)]
    assert torch.allclose((parts[0][0] + parts[1][0]) / 2, whole, rtol=1e-6)
    for a, b, g in zip(parts[0][1], parts[1][1], g1):
        assert torch.allclose((a + b) / 2, g, rtol=1e-5, atol=1e-7)


def test_plan_and_flow_refuse_data_parallel():
    from methodlab.core import ConfigError
    from methodlab.methods.min_swgg.train import fit
    from methodlab.specs.files import load_job
    from tests.conftest import REPO

    for job in ("plan.yaml", "flow.yaml"):
        with pytest.raises(ConfigError, match="num_workers"):
            load_job(str(REPO / "jobs/min_swgg" / job), overrides=["scaling.num_workers=2"])
    load_job(str(REPO / "jobs/min_swgg/cfm.yaml"), overrides=["scaling.num_workers=2"])  # cfm is data-parallel
    for task in ("plan", "flow"):  # the same tasks through the default setting `train`: refused in fit
        with pytest.raises(ConfigError, match="data-parallel"):
            fit(Config(task=task), RunContext(rank=0, world_size=2))
