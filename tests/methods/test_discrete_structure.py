"""discrete_structure: the spec's correctness checks (acyclicity functions, Moebius expansion, MVB refit recovers
CPTs, thresholding, CPDAG equivalence, influence check, packaged BIF offline), the XOR stub check, resume, the
real-format loader and the served schema. Shares the session smoke run with the conformance test."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import FieldError, RunContext
from methodlab.data import discrete_structure_sim as sim
from methodlab.methods.discrete_structure import graphs, learner
from methodlab.methods.discrete_structure import model as M
from methodlab.methods.discrete_structure.config import Config
from tests.smoke import smoke_run

SLUG = "discrete_structure"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return smoke_run(SLUG, tmp_path_factory.getbasetemp() / "smoke")


def _latest(run):
    from methodlab.core.checkpoint import latest_checkpoint

    return latest_checkpoint(Path(run["run_dir"]) / "checkpoints")


def test_h_is_zero_iff_dag():
    rng = np.random.default_rng(0)
    for t in range(10):
        A = sim.random_dag(6, 2.0, rng)
        W = torch.as_tensor(A * rng.uniform(0.5, 2.0, A.shape))
        assert abs(M.h_notears(W).item()) < 1e-9
        assert abs(M.h_dagma(W).item()) < 1e-9 or not torch.isfinite(M.h_dagma(W))
        Ws = torch.as_tensor(A * rng.uniform(0.1, 0.3, A.shape))  # inside DAGMA's domain
        assert abs(M.h_dagma(Ws).item()) < 1e-9
        C = A.copy()
        i, j = np.argwhere(A)[0] if A.any() else (0, 1)
        C[j, i] = 1  # a 2-cycle
        Wc = torch.as_tensor(C * 0.3)
        assert M.h_notears(Wc).item() > 1e-4 and M.h_dagma(Wc).item() > 1e-4


def test_moebius_reproduces_random_cpt_exactly():
    rng = np.random.default_rng(1)
    for k in (1, 2, 3, 4):
        cpt = rng.uniform(0.02, 0.98, 2 ** k)
        beta = M.moebius(cpt, k)
        # through the MVB features: logit P(1 | x) = beta_0 + sum_{S} beta_S x^S
        cfgs = sim.configs(k)
        subs = M.subsets_up_to(k, k)
        phi = M.design(cfgs, subs).numpy()
        bit = {s: sum(1 << i for i in s) for s in subs}
        lg = beta[0] + phi @ np.array([beta[bit[s]] for s in subs])
        p = 1 / (1 + np.exp(-lg))
        assert np.max(np.abs(p - cpt)) < 1e-8
        assert np.max(np.abs(M.moebius_logit(beta, k) - M.logit(cpt))) < 1e-8


def test_full_model_with_known_order_recovers_cpts():
    net = sim.random_network(4, 2.0, "random_cpt", seed=3)
    x = sim.sample(net, 20000, seed=4)
    order = sim.topological_order(net.adjacency())
    full = np.zeros((4, 4), dtype=int)
    for a in range(4):
        for b in range(a + 1, 4):
            full[order[a], order[b]] = 1  # complete DAG in the true order: every predecessor a candidate parent
    subs, mask, B, b = learner.refit(x, full, K=3, steps=300, l2=0.0)
    states = ((np.arange(16)[:, None] >> np.arange(4)) & 1).astype(np.int8)
    z = (M.design(states, subs) @ B + b).numpy()
    counts = {tuple(r): c for r, c in zip(*np.unique(x, axis=0, return_counts=True))}
    worst = 0.0
    for s, row in enumerate(states):
        for j in range(4):
            pa = net.parents[j]
            idx = sum(int(row[p]) << i for i, p in enumerate(pa))
            pred = [order[a] for a in range(order.index(j))]
            seen = sum(c for r, c in counts.items() if all(r[q] == row[q] for q in pred))
            if seen >= 300:
                worst = max(worst, abs(1 / (1 + np.exp(-z[s, j])) - net.cpt[j][idx]))
    assert worst < 0.03, worst


def test_threshold_output_is_acyclic():
    rng = np.random.default_rng(2)
    for _ in range(20):
        W = rng.uniform(0, 1, (7, 7))
        A = M.threshold_to_dag(W, 0.3)
        assert sim.is_dag(A) and A.sum() > 0 and not np.any(A[W <= 0.3])


def test_cpdag_of_markov_equivalent_dags_is_identical():
    chain = np.zeros((3, 3), int)
    chain[0, 1] = chain[1, 2] = 1  # a -> b -> c
    rev = np.zeros((3, 3), int)
    rev[2, 1] = rev[1, 0] = 1  # a <- b <- c
    fork = np.zeros((3, 3), int)
    fork[1, 0] = fork[1, 2] = 1  # a <- b -> c
    collider = np.zeros((3, 3), int)
    collider[0, 1] = collider[2, 1] = 1  # a -> b <- c
    assert np.array_equal(graphs.cpdag(chain), graphs.cpdag(rev)) and np.array_equal(graphs.cpdag(chain), graphs.cpdag(fork))
    assert graphs.shd_cpdag(graphs.cpdag(chain), graphs.cpdag(rev)) == 0
    # the stub that scores against the DAG instead of the CPDAG is flagged: it counts 2 errors for an equivalent DAG
    assert sum(graphs.edge_type(chain, i, j) != graphs.edge_type(rev, i, j) for i in range(3) for j in range(i + 1, 3)) == 2
    assert graphs.shd_cpdag(graphs.cpdag(chain), graphs.cpdag(collider)) == 2
    assert len(graphs.mec_dags(graphs.cpdag(chain))) == 3 and len(graphs.mec_dags(graphs.cpdag(collider))) == 1
    # a random DAG: every member of its class has the same CPDAG
    A = sim.random_dag(6, 2.0, np.random.default_rng(5))
    C = graphs.cpdag(A)
    members = graphs.mec_dags(C)
    assert any(np.array_equal(m, A) for m in members)
    assert all(np.array_equal(graphs.cpdag(m), C) for m in members)


def test_influence_check():
    weak = np.array([0.30, 0.31, 0.60, 0.61])  # parent 0 (bit 0) moves P by 0.01 in both contexts
    assert graphs is not None and not sim.passes_influence(weak, 2, 0.05)
    xor = sim.draw_cpt("xor", 2, np.random.default_rng(0), 0.1)
    assert sim.passes_influence(xor, 2, 0.05)  # conditional (not marginal) influence: 0.8 for both parents
    # a pure-interaction parent has zero marginal influence but passes the conditional check
    assert np.allclose(sim.conditional_influence(xor, 2), 0.8)
    with pytest.raises(ValueError, match="conditional-influence"):
        sim.random_network(5, 3.0, "random_cpt", seed=0, influence_min=0.99, max_tries=3)


def test_bif_reader_offline(monkeypatch):
    pytest.importorskip("pgmpy")
    from methodlab.data import discrete_structure_bif as bif

    def no_net(*a, **k):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "create_connection", no_net)
    monkeypatch.setattr(socket.socket, "connect", no_net)
    net = bif.load_network("asia")
    assert len(net.names) == 8 and int(net.adjacency().sum()) == 8 and set(net.cards) == {2}
    x = bif.binary_data(net, 2000, 0)
    assert x.shape == (2000, 8) and set(np.unique(x)) <= {0, 1}
    sachs = bif.load_network("sachs")
    with pytest.raises(ValueError, match="binarize"):
        bif.binary_data(sachs, 10, 0)
    assert bif.binary_data(sachs, 10, 0, "first_state_vs_rest").shape == (10, 11)


def test_table_loader(tmp_path):
    import pandas as pd

    pd.DataFrame({"a": [0, 1, 1], "b": [1, 0, 1]}).to_csv(tmp_path / "ok.csv", index=False)
    names, x = sim.load_table(tmp_path / "ok.csv")
    assert names == ["a", "b"] and x.tolist() == [[0, 1], [1, 0], [1, 1]]
    pd.DataFrame({"a": [0, 1, 1], "colour": ["r", "g", "b"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="colour"):
        sim.load_table(tmp_path / "bad.parquet")
    names, x = sim.load_table(tmp_path / "bad.parquet", "first_state_vs_rest")
    assert x[:, 1].tolist() == [1, 1, 0]  # 'b' is the first state in sorted order


# In-process fits narrow torch to one thread (the old config default): tiny float64 steps, where extra threads
# on a shared CPU only add synchronisation.
FAST = dict(data="xor_triple", n=5000, n_heldout=5000, mu_schedule=[1.0, 0.1, 0.01], inner_steps=600,
            last_stage_steps=600, lr=3e-2, check_every=100, log_every=300, checkpoint_every=600, torch_threads=1)


def test_xor_triple_general_vs_logistic():
    """Claim B in miniature: K=2 finds a 2-edge v-structure at ~1.711 nats; the K=1 stub stays near 2.079."""
    from methodlab.methods.discrete_structure.train import fit

    out2 = fit(Config(K=2, **FAST), RunContext(quiet=True))
    assert out2["eval/n_edges"] == 2 and out2["eval/heldout_nll"] <= 1.73
    out1 = fit(Config(K=1, **FAST), RunContext(quiet=True))
    assert out1["eval/heldout_nll"] >= 2.0


@pytest.mark.parametrize("domain", ["restart", "dagma_linear"])
def test_resume_continues_at_saved_step(tmp_path, domain):
    from methodlab.methods.discrete_structure.train import fit

    cfg = Config(K=2, dagma_domain=domain, **FAST)
    saved = []

    def keep(metrics, ck):
        if ck is not None and metrics["step"] == 600 and not saved:
            import shutil

            shutil.copytree(ck, tmp_path / "ck")
            saved.append(metrics["step"])

    full = fit(cfg, RunContext(quiet=True, report_fn=keep))
    assert saved == [600]
    ctx = RunContext(quiet=True, checkpoint=tmp_path / "ck")
    resumed = fit(cfg, ctx)
    steps = [h["step"] for h in ctx.history]  # restored history up to 600, then the continuation only
    assert steps == sorted(steps) and steps.count(300) == 1 and resumed["step"] == full["step"]
    assert resumed["eval/heldout_nll"] == pytest.approx(full["eval/heldout_nll"], abs=1e-6)
    assert ("eval/domain_retries" in resumed) == (domain == "dagma_linear")


def test_smoke_and_predictor(smoke):
    from pydantic import TypeAdapter, ValidationError

    from methodlab.methods.discrete_structure.predictor import Input, Predictor

    m = smoke["metrics"]
    assert np.isfinite(m["eval/shd_cpdag"]) and m["eval/shd_cpdag"] <= 6
    pred = Predictor.from_checkpoint(_latest(smoke))
    assert sim.is_dag(pred.dag)
    names = pred.names
    ta = TypeAdapter(pred.input_model())
    s, c, ll = pred([ta.validate_python({"query": "structure"}),
                     ta.validate_python({"query": "conditional", "node": names[0], "evidence": {names[1]: 1}}),
                     ta.validate_python({"query": "loglik", "rows": [[0] * len(names), [1] * len(names)]})])
    assert s.variables == names and len(s.weights) == len(names)
    assert 0.0 <= c.p_one <= 1.0 and len(ll.loglik) == 2 and all(v < 0 for v in ll.loglik)
    # exact enumeration: the joint table is normalised, and the marginal equals the evidence-free conditional
    assert np.exp(pred.table()).sum() == pytest.approx(1.0, abs=1e-9)
    for bad in ({"query": "conditional", "node": "nope"},
                {"query": "conditional", "node": names[0], "evidence": {names[1]: 2}},
                {"query": "loglik", "rows": [[0] * (len(names) - 1)]},
                {"query": "loglik", "rows": [[0, 1, 2, 0][:len(names)] + [0] * (len(names) - 4)]}):
        with pytest.raises(ValidationError):
            ta.validate_python(bad)
    with pytest.raises(FieldError):  # the generic Input goes through the predictor's own checks
        pred([Input(query="loglik", rows=[[0, 1]])])
    with pytest.raises(FieldError):
        pred([Input(query="conditional", node="nope")])
    json_schema = ta.json_schema()
    assert "Conditional" in str(json_schema) and "discriminator" in json_schema


def test_pc_and_ges_baselines_same_path():
    pytest.importorskip("causallearn")
    from methodlab.methods.discrete_structure.train import fit

    for m in ("pc", "ges"):
        out = fit(Config(model=m, data="bif", network="cancer", n=2000, n_heldout=500, torch_threads=1),
                  RunContext(quiet=True))
        assert np.isfinite(out["eval/shd_cpdag"]) and np.isfinite(out["eval/heldout_nll"])


def test_options_two_stage_notears_restarts_run():
    """The spec's options share the fit path: BiNOTEARS two-stage, NOTEARS augmented Lagrangian, multi-start."""
    from methodlab.methods.discrete_structure.train import fit

    base = {**Config.smoke, "log_every": 100_000, "checkpoint_every": 100_000, "report_objective": False,
            "torch_threads": 1}
    for extra in ({"two_stage": "on"}, {"acyclicity": "notears", "inner_steps": 300, "max_outer": 5}, {"restarts": 2}):
        out = fit(Config(**{**base, **extra}), RunContext(quiet=True))
        assert np.isfinite(out["eval/shd_cpdag"]) and np.isfinite(out["eval/heldout_nll"]), extra
    with pytest.raises(ValueError, match="at most 2 nodes"):
        Config(d=4, min_multi_parent=3)


def test_s_schedule_per_stage_and_true_order():
    """The DAGMA path uses one s per stage (the preset's decreasing 1/.9/.8/.7, last value repeated), and the
    diagnostics' true topological order puts every parent before its child."""
    from methodlab.methods.discrete_structure.diagnostics import true_order

    cfg = Config(s_schedule=[1.0, 0.9, 0.8, 0.7], inner_steps=7, last_stage_steps=11)
    assert [(s, n) for _, s, n in learner._stage_plan(cfg)] == [(1.0, 7), (0.9, 7), (0.8, 7), (0.7, 11)]
    assert [s for _, s, _ in learner._stage_plan(Config(s_schedule=[1.0, 0.9]))] == [1.0, 0.9, 0.9, 0.9]
    rng = np.random.default_rng(3)
    for _ in range(5):
        A = sim.random_dag(7, 2.0, rng)
        pos = {v: i for i, v in enumerate(true_order(A))}
        assert sorted(pos) == list(range(7))
        assert all(pos[int(k)] < pos[int(j)] for k, j in zip(*np.nonzero(A)))


def test_dagma_linear_domain_rule_is_exact_and_keeps_the_path_inside():
    """Issue 44: dagma_domain=dagma_linear is the official DagmaLinear domain handling. Its test is exact: two
    disjoint 2-cycles with W o W entries 1.21 (spectral radius 1.21 > s = 1) pass the default rule (det > 0,
    h >= 0) but are outside the M-matrix domain. A path at a large lr backtracks / retries under the official
    rule and ends inside the domain of its last s; the default stays 'restart'."""
    W = torch.zeros(4, 4, dtype=torch.float64)
    W[0, 1] = W[1, 0] = W[2, 3] = W[3, 2] = 1.1
    h = M.h_dagma(W)
    assert torch.isfinite(h) and h.item() >= 0  # what the default rule accepts
    assert not learner.in_m_domain(W, 1.0)
    assert learner.in_m_domain(W * 0.5, 1.0) and not learner.in_m_domain(W * 0.5, 0.2)
    assert Config().dagma_domain == "restart"
    from methodlab.methods.discrete_structure import train
    from methodlab.methods.discrete_structure.data import build_data

    cfg = Config(d=5, n=2000, n_heldout=200, K=2, mu_schedule=[1.0, 0.1, 0.01], s_schedule=[1.0, 0.8], seed=3,
                 inner_steps=150, last_stage_steps=150, lr=0.5, check_every=50, dagma_domain="dagma_linear")
    prob = train._problem(cfg, build_data(cfg).x_train, None)
    st = learner.run_dagma(prob, cfg, learner.new_state(prob, cfg.lr))
    assert st.done and st.backtracks > 0 and st.retries > 0
    assert st.lr == cfg.lr and st.s is None  # the next stage starts at the configured lr and the plan's s
    assert learner.in_m_domain(M.group_weights(st.B * prob.mask, prob.mem, prob.scale), 0.8)


def test_reproduction_study_plans_and_renders_the_committed_report(tmp_path):
    """The reproduction is a harness study: it loads, checks, plans a non-empty --quick run, and `--render-only`
    redraws the committed reports/discrete_structure.md byte for byte from reports/discrete_structure.json."""
    import shutil

    from methodlab.methods.discrete_structure.reproduce import study
    from methodlab.reproduce import harness
    from methodlab.reproduce.run import reproduce

    st = study()
    st.check()
    pending = harness.plan(st, tmp_path / "runs", mode="quick")
    assert pending and {p.arm for p in pending} >= {"A-random_cpt-mvb", "B-xor-K2", "B-xor-K1"}
    reports = Path(__file__).resolve().parents[2] / "reports"
    out = tmp_path / "reports"
    out.mkdir()
    shutil.copy(reports / f"{SLUG}.json", out / f"{SLUG}.json")
    reproduce(st, out_dir=out, render_only=True, log=lambda m: None)
    assert (out / f"{SLUG}.md").read_text() == (reports / f"{SLUG}.md").read_text()
