"""face (FACE): the quantiser against brute force, the gradient routes the spec names (straight-through
estimator, detached pinv, CF tables reached by L_rec and L_align), the ranking / descriptor metrics, the data
facts and loaders, GMF, the smoke run's assertions and the predictor's domain."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methodlab.core import FieldError
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.methods.face import evaluate as ev
from methodlab.methods.face.model import CF, FACE, greedy_distinct, greedy_distinct_reference, info_nce, lm_encode, norm_adj
from tests.smoke import smoke_run

torch.set_num_threads(1)


def _history(run) -> list[dict]:
    return [json.loads(line) for line in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines() if line]


# ------------------------------------------------------------------------------------------- maths
def test_greedy_distinct_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    z, C = torch.randn(7, 5, 3, generator=g), torch.randn(12, 3, generator=g)
    idx = greedy_distinct(z, C)
    for n in range(7):
        taken: list[int] = []
        for k in range(5):
            d = ((z[n, k] - C) ** 2).sum(1)
            d[taken] = math.inf
            taken.append(int(d.argmin()))
        assert idx[n].tolist() == taken
        assert len(set(taken)) == 5


def test_greedy_distinct_top_w_form_equals_slot_by_slot_masking():
    """The fast form (one distance pass, top-W candidates) picks what masking the full matrix per slot picks,
    also when every entity crowds the same few codes (hub-like inputs: a shared slot bias, small spread)."""
    g = torch.Generator().manual_seed(3)
    C = torch.randn(3000, 16, generator=g)
    for z in (torch.randn(300, 8, 16, generator=g),
              torch.randn(1, 8, 16, generator=g) * 2 + 0.05 * torch.randn(300, 8, 16, generator=g)):
        fast, ref = greedy_distinct(z, C, chunk_rows=700), greedy_distinct_reference(z, C)
        assert torch.equal(fast, ref)
        assert all(len(set(r.tolist())) == 8 for r in fast)


def test_norm_adj_is_symmetric_normalised():
    train = np.array([[0, 0], [0, 1], [1, 1], [2, 0]])
    A = norm_adj(3, 2, train).to_dense()
    dense = torch.zeros(5, 5)
    for u, i in train:
        dense[u, 3 + i] = dense[3 + i, u] = 1
    deg = dense.sum(1).clamp_min(1)
    assert torch.allclose(A, dense / deg.sqrt()[:, None] / deg.sqrt()[None, :])


def test_lightgcn_sums_layers_and_gmf_does_not_propagate():
    train = np.array([[0, 0], [1, 1], [1, 0]])
    cf = CF(2, 2, 4, 2, "lightgcn", norm_adj(2, 2, train))
    A = norm_adj(2, 2, train).to_dense()
    ego = torch.cat([cf.user_emb, cf.item_emb]).detach()
    want = ego + A @ ego + A @ A @ ego
    u, i = cf(1.0)
    assert torch.allclose(torch.cat([u, i]), want, atol=1e-6)
    gmf = CF(2, 2, 4, 2, "gmf", None)
    assert torch.equal(gmf()[0], gmf.user_emb)


def test_rank_metrics_brute_force():
    scores = torch.tensor([[0.9, 0.8, 0.1, 0.5], [0.1, 0.2, 0.3, 0.4]])
    train = np.array([[0, 0]])
    test = np.array([[0, 2], [0, 3], [1, 0]])
    m = ev.rank_metrics(scores, train, test, ks=(1, 2), prefix="t")
    # user 0 ranking (item 0 masked): 1, 3, 2 -> hits at positions 2, 3; user 1: 3, 2, 1, 0 -> hit at 4
    assert m["t/recall@1"] == pytest.approx(0.0)
    assert m["t/recall@2"] == pytest.approx((0.5 + 0.0) / 2)
    idcg = 1 + 1 / math.log2(3)
    assert m["t/ndcg@2"] == pytest.approx(((1 / math.log2(3)) / idcg + 0) / 2)


def test_info_nce_and_precision_and_random_baseline():
    g = torch.Generator().manual_seed(0)
    c = F.normalize(torch.randn(6, 8, generator=g), dim=1)
    e = F.normalize(torch.randn(6, 8, generator=g), dim=1)
    logits = c @ e.T / 0.02
    want = -(logits.diag() - logits.logsumexp(1)).mean()
    assert info_nce(c, e, 0.02).item() == pytest.approx(want.item(), rel=1e-5)
    assert ev.precision(np.array([[1, 2, 3, 4]]), [{1, 2, 9}]) == 0.5
    r = ev.random_descriptors(500, 8, 1000, 0)
    assert all(len(set(row)) == 8 for row in r)
    truth = [set(range(30))] * 500  # chance = 30 / 1000
    assert 0.5 * 0.03 <= ev.precision(r, truth) <= 2 * 0.03


def _toy_face(h=16, V=50, d=8, W=3, w=6):
    g = torch.Generator().manual_seed(1)
    fm = FACE(d, W, w, h, 12, 0.0, torch.randn(V, h, generator=g), "unit", True)
    return fm


def test_pinv_back_mapping_is_a_projection_of_the_token_embedding():
    fm = _toy_face(h=6, w=6)  # w = h: P invertible -> exact inverse
    E = fm.E_tok[:4]
    assert torch.allclose(fm.to_token_space(fm.P(E)), E, atol=1e-4)


class _FakeLM:
    """A tiny differentiable stand-in for the frozen backbone (pool = mean of a fixed linear map)."""

    def __init__(self, table):
        self.table, self.bos, self.eos, self.comma = table, 0, 1, 2
        self.lin = torch.nn.Linear(table.shape[1], table.shape[1])
        for p in self.lin.parameters():
            p.requires_grad_(False)

    def pool(self, emb, mask):
        return F.normalize(torch.tanh(self.lin(emb)).mean(1), dim=-1)


def _grads(straight_through: bool = True):
    torch.manual_seed(0)
    train = np.array([[0, 0], [0, 1], [1, 1], [2, 2], [3, 0]])
    cf = CF(4, 3, 8, 2, "lightgcn", norm_adj(4, 3, train))
    fm = _toy_face(d=8)
    lm = _FakeLM(fm.E_tok)
    eu, ei = cf(1.0)
    x = torch.cat([eu, ei])
    o = fm(x)
    z = o["z_st"] if straight_through else o["z_q"]
    c = lm_encode(lm, fm, z, [3, 4])
    e = F.normalize(torch.randn(len(x), fm.E_tok.shape[1]), dim=1)
    l_al = info_nce(c, e, 0.02)
    l_rec = F.mse_loss(o["x_hat"], x.detach())
    g_al = torch.autograd.grad(l_al, [cf.user_emb, fm.P.weight, fm.A], allow_unused=True, retain_graph=True)
    g_rec = torch.autograd.grad(l_rec, [cf.user_emb], retain_graph=True)
    return g_al, g_rec


def test_gradient_routes_of_the_straight_through_estimator():
    (g_cf, g_p, g_heads), (g_rec_cf,) = _grads(True)
    assert g_p is None or torch.count_nonzero(g_p) == 0, "P must get no gradient from L_align (detached pinv path)"
    assert g_heads is not None and torch.count_nonzero(g_heads) > 0, "L_align must reach the heads/encoder"
    assert torch.count_nonzero(g_cf) > 0, "L_align must reach the CF tables"
    assert torch.count_nonzero(g_rec_cf) > 0, "L_rec must reach the CF tables"


def test_vq_codebook_term_reaches_P_and_commitment_reaches_encoder():
    fm = _toy_face(d=8)
    o = fm(torch.randn(5, 8, generator=torch.Generator().manual_seed(0)))
    g_p, g_a = torch.autograd.grad(o["l_vq"], [fm.P.weight, fm.A])
    assert torch.count_nonzero(g_p) > 0, "the codebook term of L_vq must reach P through the gathered rows"
    assert torch.count_nonzero(g_a) > 0, "the commitment term must reach the heads"


def test_vocabulary_embeddings_never_move():
    """Issue 44: the official code (YixinRoll/FACE, encoder/FACE.py) keeps the filtered token embeddings as a
    detached buffer and trains only the linear map P; so must ours. Full align-stage steps (L_vq + L_rec + L_align
    through the straight-through LM path) with every FACE and CF parameter in Adam: E_tok, the LM's table and the
    token table the model was built from stay bit for bit, while P (the mapped codebook) moves."""
    torch.manual_seed(0)
    train = np.array([[0, 0], [0, 1], [1, 1], [2, 2], [3, 0]])
    cf = CF(4, 3, 8, 2, "lightgcn", norm_adj(4, 3, train))
    table = torch.randn(50, 16, generator=torch.Generator().manual_seed(1))
    table0 = table.clone()
    fm = FACE(8, 3, 6, 16, 12, 0.0, table, "unit", True)
    lm = _FakeLM(table)
    assert "E_tok" not in dict(fm.named_parameters()) and "E_tok" not in fm.state_dict()
    e0, c0 = fm.E_tok.clone(), fm.codebook().detach().clone()
    opt = torch.optim.Adam(list(fm.parameters()) + list(cf.parameters()), lr=1e-2)
    for _ in range(3):
        eu, ei = cf(1.0)
        x = torch.cat([eu, ei])
        o = fm(x)
        e = F.normalize(torch.randn(len(x), 16), dim=1)
        loss = o["l_vq"] + F.mse_loss(o["x_hat"], x.detach()) + info_nce(lm_encode(lm, fm, o["z_st"], [3, 4]), e, 0.02)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.equal(fm.E_tok, e0) and torch.equal(table, table0) and torch.equal(lm.table, table0)
    assert not torch.allclose(fm.codebook().detach(), c0), "P (the mapped codebook) must train"


def test_stub_without_straight_through_sends_alignment_into_P():
    (g_cf, g_p, g_heads), _ = _grads(False)
    assert g_p is not None and torch.count_nonzero(g_p) > 0
    assert g_heads is None or torch.count_nonzero(g_heads) == 0


def test_rank_shares_of_a_batch_add_up_to_the_whole_batch():
    """Data parallel: two ranks' shares of an odd-sized align-stage batch (their rows from ctx.shard, their align
    rows scored against every align row's profile) add up to the whole batch's loss terms, and the sum of their
    gradients is the whole batch's (what ctx.average_gradients of loss x world_size gives)."""
    from types import SimpleNamespace

    from methodlab.core import RunContext
    from methodlab.methods.face.config import Config
    from methodlab.methods.face.train import _sharded_step

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    train = np.array([[u, i] for u in range(6) for i in range(5) if (u + i) % 2 == 0])
    cf = CF(6, 5, 8, 2, "lightgcn", norm_adj(6, 5, train))
    fm = _toy_face(d=8)
    lm = _FakeLM(fm.E_tok)
    h = fm.E_tok.shape[1]
    B = SimpleNamespace(user_text=F.normalize(torch.randn(6, h, generator=g), dim=1),
                        item_text=F.normalize(torch.randn(5, h, generator=g), dim=1), user_prompt=[3, 4],
                        item_prompt=[4, 3])
    cfg = Config(**(Config.smoke | {"keep_rate": 1.0, "align_rows": 8, "dropout": 0.0}))
    batch = np.concatenate([train[:7], np.array([[1, 3, 4, 0, 2, 1, 4]]).T], 1)  # 7 (u, i+, i-) triples
    params = [*cf.parameters(), *fm.parameters()]

    def share(world, rank):
        ctx = RunContext(quiet=True, world_size=world, rank=rank)
        tb, _, tpos = ctx.shard(torch.as_tensor(batch), batch, np.arange(len(batch)))
        for p in params:
            p.grad = None
        out = _sharded_step(cfg, "align", ctx, cf, fm, fm, lm, B, tb, tpos, batch, np.random.default_rng(5))
        out["loss"].backward()
        return out, [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]

    (whole, g1), (a, ga), (b, gb) = share(1, 0), share(2, 0), share(2, 1)
    for k in ("loss", "l_bpr", "l_vq", "l_rec", "l_align"):
        assert float((a[k] + b[k]).detach()) == pytest.approx(float(whole[k].detach()), rel=1e-5), k
    assert float(a["l_align"]) > 0 and float(b["l_align"]) > 0  # both ranks hold align rows
    for x, y, z in zip(g1, ga, gb):
        assert torch.allclose(y + z, x, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------------- data + loaders
def test_movielens_split_and_profiles():
    from methodlab.data.face_data import movielens

    d = movielens()
    assert d.stats["users"] > 600 and d.stats["items"] > 1000
    for part in (d.train, d.val, d.test):
        assert len(np.unique(part[:, 0])) == d.n_users  # at least one of each per user
    assert d.item_profiles[0].endswith(".") and "Genres:" in d.item_profiles[0]
    assert all(p.startswith("Enjoys ") for p in d.user_profiles[:20])
    # user profiles name training titles only
    titles = d.item_titles
    u = 0
    tr = {titles[i] for i in d.train[d.train[:, 0] == u, 1]}
    named = d.user_profiles[u].split("such as ", 1)[1].rstrip(".").split("; ")
    assert set(named) <= tr


def test_pickle_free_loader(tmp_path):
    import scipy.sparse as sp

    from methodlab.data.face_data import load_rec_files

    (tmp_path / "train.csv").write_text("user,item\n0,0\n0,1\n1,2\n")
    m = sp.coo_matrix((np.ones(2), ([0, 1], [2, 0])), shape=(2, 3))
    sp.save_npz(tmp_path / "val_mat.npz", m.tocsr()); sp.save_npz(tmp_path / "tst_mat.npz", m.tocsr())
    (tmp_path / "user_profiles.jsonl").write_text('{"id": 0, "profile": "u0"}\n{"id": 1, "profile": "u1"}\n')
    (tmp_path / "item_profiles.jsonl").write_text("\n".join(json.dumps({"id": i, "profile": f"i{i}"}) for i in range(3)))
    np.save(tmp_path / "item_emb.npy", np.ones((3, 4), np.float32))
    d = load_rec_files(tmp_path, "book")
    assert (d.n_users, d.n_items) == (2, 3) and d.user_profiles == ["u0", "u1"] and d.item_emb.shape == (3, 4)
    assert sorted(map(tuple, d.val.tolist())) == [(0, 2), (1, 0)]


# ------------------------------------------------------------------------------------------- smoke
def test_smoke_assertions(smoke_root):
    run = smoke_run("face", smoke_root)
    hist = _history(run)
    for h in hist:
        for k, v in h.items():
            if k.startswith("train/"):
                assert math.isfinite(v), (k, v)
    curve = [h["align/l_align"] for h in hist if "align_step" in h]
    assert len(curve) >= 2 and curve[-1] < curve[0], f"L_align did not fall: {curve}"
    m = run["metrics"]
    assert m["align/precision_item"] > m["chance/precision_item"], "smoke descriptors at chance"


def test_descriptors_distinct_and_round_trip(smoke_root):
    from methodlab.core import load_checkpoint
    from methodlab.methods.face.predictor import Predictor

    run = smoke_run("face", smoke_root)
    ck = latest_checkpoint(Path(run["run_dir"]) / "checkpoints")
    pred = Predictor.from_checkpoint(ck)
    V = len(pred.words)
    for desc in (pred.desc_u, pred.desc_i):
        assert desc.shape[1] == run["config"].word_num
        assert all(len(set(r.tolist())) == desc.shape[1] for r in desc)
        assert desc.min() >= 0 and desc.max() < V
    examples = load_checkpoint(ck).extras["stage"]["examples"]
    for e in examples:
        table = pred.i_index if e["entity"] == "item" else pred.u_index
        desc = (pred.desc_i if e["entity"] == "item" else pred.desc_u)[table[e["id"]]]
        assert [pred.words[j] for j in desc] == e["descriptors"]


def test_predictor_domain(smoke_root):
    from methodlab.methods.face.predictor import Predictor

    run = smoke_run("face", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    Spec = pred.input_model()
    schema = Spec.model_json_schema()
    assert schema["properties"]["id"]["maximum"] == run["config"].n_users - 1
    out = pred([Spec(entity="user", id=0, k=5), Spec(entity="item", id=3, k=0)])
    assert len(out[0].items) == 5 and out[1].items == []
    train_items = set(np.flatnonzero(~torch.isfinite(pred.scores[0]).numpy()).tolist())
    assert not {it.item_id for it in out[0].items} & train_items
    assert all(np.isfinite(it.score) for it in out[0].items)
    with pytest.raises(FieldError, match="id"):
        pred([Spec(entity="item", id=run["config"].n_items + 5)])
    with pytest.raises(Exception):
        Spec(entity="user", id=0, k=101)


def test_gmf_backbone_runs(tmp_path):
    from methodlab.core import RunContext
    from methodlab.methods.face.config import Config
    from methodlab.methods.face.train import fit

    cfg = Config(**(Config.smoke | {"cf_model": "gmf", "stages": ["pretrain", "map"], "eval_items": 20,
                                    "pretrain_epochs": 1, "map_epochs": 1,
                                    "stage_dir": str(tmp_path)}))
    out = fit(cfg, RunContext(quiet=True))
    assert math.isfinite(out["map/test/recall@20"]) and (tmp_path / "stage_map" / "weights.safetensors").exists()
