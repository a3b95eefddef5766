"""cmcl (DNS): the projection formula and its exactness on old pairs, projector thresholds, the running
statistics against their closed form, the recall tie rule and BWT against brute force, the smoke claims,
a frozen stub failing plasticity, the feature-file loader, resume, and the predictor's domain."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from methodlab.core import ConfigError, FieldError, RunContext
from methodlab.methods.cmcl import exactness
from methodlab.methods.cmcl.config import Config
from methodlab.methods.cmcl.evaluate import bwt, recall_at, true_ranks, zero_shot_accuracy
from methodlab.methods.cmcl.model import DNSState, Heads, dns_project, kept_share, one_sided_project, projector
from methodlab.methods.cmcl.predictor import Input, Predictor
from methodlab.methods.cmcl.train import fit, surgery
from tests.smoke import smoke_run

torch.set_num_threads(1)
D = 64


def _basis(rank, seed):
    return torch.linalg.qr(torch.randn(D, rank, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))[0]


# ------------------------------------------------------------------------------ projection maths
def test_dns_projection_kills_old_scores_and_is_not_the_two_sided_product():
    U, V = _basis(8, 0), _basis(8, 1)
    P, Pt = U @ U.T, V @ V.T
    G = torch.randn(D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    H = dns_project(G, P, Pt)
    assert torch.allclose(H, G - Pt @ G @ P)
    g = torch.Generator().manual_seed(5)
    x_old, y_old = U @ torch.randn(8, 5, dtype=torch.float64, generator=g), V @ torch.randn(8, 5, dtype=torch.float64, generator=g)
    assert (y_old.T @ H @ x_old).abs().max() < 1e-12 * (y_old.T @ G @ x_old).abs().max()
    naive = (torch.eye(D, dtype=torch.float64) - Pt) @ G @ (torch.eye(D, dtype=torch.float64) - P)
    assert (H - naive).abs().max() > 1e-1  # the naive null-space product removes far more
    # one-sided ablation: G - G P also kills old scores, but removes every old-input direction
    O = one_sided_project(G, P)
    assert (O @ x_old).abs().max() < 1e-12 and (H @ x_old).abs().max() > 1e-1


def test_kept_gradient_share_against_brute_force():
    """||projected G||_F / ||G||_F, the per-update plasticity diagnostic logged as grad/kept_*: checked against a
    column-by-column sum, its limits (no projection 1, P = P~ = I 0), DNS = one-sided when P~ = I, and that
    surgery() logs exactly these shares for the gradient it modifies."""
    U, V = _basis(8, 4), _basis(8, 5)
    P, Pt, eye = U @ U.T, V @ V.T, torch.eye(D, dtype=torch.float64)
    G = torch.randn(D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    H = G - G @ P
    brute = (sum(float(H[:, j] @ H[:, j]) for j in range(D)) / sum(float(G[:, j] @ G[:, j]) for j in range(D))) ** 0.5
    assert abs(kept_share(G, one_sided_project(G, P)) - brute) < 1e-12
    assert kept_share(G, G) == 1.0 and kept_share(G, dns_project(G, eye, eye)) < 1e-12
    assert kept_share(torch.zeros(D, D, dtype=torch.float64), torch.zeros(D, D, dtype=torch.float64)) == 1.0
    # a random G keeps about sqrt(1 - 8/64) one-sided and sqrt(1 - 64/64^2) dual-sided
    assert abs(kept_share(G, one_sided_project(G, P)) - (1 - 8 / D) ** 0.5) < 0.05
    assert kept_share(G, dns_project(G, P, Pt)) > kept_share(G, one_sided_project(G, P))
    assert abs(kept_share(G, dns_project(G, P, eye)) - kept_share(G, one_sided_project(G, P))) < 1e-12
    heads = Heads(["vision", "text"], D, torch.float64)
    heads.W["vision"].grad = G.clone()
    shares: dict = {}
    surgery(heads, "vision", {"vision": (P, Pt)}, Config(method="dns", dtype="float64"), shares)
    assert torch.allclose(heads.W["vision"].grad, dns_project(G, P, Pt))
    assert abs(shares["kept_vision"][0] - kept_share(G, dns_project(G, P, Pt))) < 1e-12
    assert shares["kept_dns_vision"] == shares["kept_vision"]
    assert abs(shares["kept_one_sided_vision"][0] - brute) < 1e-12


def test_projector_thresholds_and_float_noise():
    U = _basis(8, 3)
    S = torch.tensor([5.0, 2.0, 1.0, 0.5, 0.1, 0.05, 0.02, 0.011], dtype=torch.float64)
    Z = U @ torch.diag(S) @ U.T
    P, r = projector(Z, 0.0)
    assert r == 8 and torch.allclose(P @ P, P, atol=1e-10) and torch.allclose(P, U @ U.T, atol=1e-10)
    _, r = projector(Z, 0.04)
    assert r == 6  # strictly greater than lambda
    Pz, r0 = projector(torch.zeros(D, D, dtype=torch.float64), 0.0)
    assert r0 == 0 and Pz.abs().max() == 0
    # float32 round-off: a rank-8 moment matrix must not become rank 9+ at lambda' = 0 (the numerical-rank
    # tolerance of the matrix's own dtype, max|S| * D * eps(float32), discards the round-off directions)
    X = (torch.randn(500, 8, generator=torch.Generator().manual_seed(4)) @ U.T.float()).float()
    _, rf = projector(X.T @ X / 500, 0.0)
    assert rf == 8


def test_running_statistics_match_closed_form_with_global_counter():
    mods = ["vision", "text", "audio"]
    heads = Heads(mods, D, torch.float64)
    with torch.no_grad():
        heads.W["vision"].add_(0.1 * torch.randn(D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    g = torch.Generator().manual_seed(0)
    X1a, X1b = torch.randn(30, D, generator=g, dtype=torch.float64), torch.randn(30, D, generator=g, dtype=torch.float64)
    X2a, X2b = torch.randn(20, D, generator=g, dtype=torch.float64), torch.randn(20, D, generator=g, dtype=torch.float64)
    st = DNSState(mods, D)
    st.update(heads, "vision", "text", X1a, X1b)
    st.update(heads, "vision", "audio", X2a, X2b)
    Wv = heads.W["vision"].detach()
    # official quirk: n-bar is one global counter (30, then 50) shared by all modalities
    assert torch.allclose(st.C["vision"], (X1a.T @ X1a) / 50 + (X2a.T @ X2a) / 50)
    assert torch.allclose(st.C["audio"], (X2b.T @ X2b) / 50)  # first update of audio, yet divided by 50
    assert torch.allclose(st.C_partner["text"], Wv @ (X1a.T @ X1a / 30) @ Wv.T)
    assert torch.allclose(st.C_partner["audio"], Wv @ (X2a.T @ X2a / 50) @ Wv.T)
    assert torch.allclose(st.C_partner["vision"], (X1b.T @ X1b) / 50 + (X2b.T @ X2b) / 50)
    per = DNSState(mods, D, per_modality_counts=True)
    per.update(heads, "vision", "text", X1a, X1b)
    per.update(heads, "vision", "audio", X2a, X2b)
    assert torch.allclose(per.C["audio"], (X2b.T @ X2b) / 20)
    assert st.seen == {"vision": True, "text": True, "audio": True}


# ------------------------------------------------------------------------------ exactness (spec)
def test_exactness_dns_keeps_old_scores_vanilla_does_not():
    for kw in ({"train_bias": False}, {"project_bias": True}):
        out = exactness.run("dns", **kw)
        assert out["ratio"] <= 1e-4, (kw, out)
        assert out["rank_in"] == 8 and out["rank_partner"] == 8
    assert exactness.run("dns", train_bias=False, shared="text")["ratio"] <= 1e-4
    # a stub that skips the projection (= vanilla) fails the bar
    assert exactness.run("vanilla", train_bias=False)["ratio"] > 1e-2
    # an unprojected trainable bias shifts old scores (spec: 1.3e-3 .. 1.1e-2)
    assert exactness.run("dns")["ratio"] > 1e-4


# ------------------------------------------------------------------------------ evaluation rules
def test_recall_tie_rule_against_brute_force():
    n = 40
    assert recall_at(torch.zeros(n, n))[1] == pytest.approx(1 / n)  # constant scores: only row 0 is a "hit"
    g = torch.Generator().manual_seed(0)
    s = torch.randint(0, 4, (n, n), generator=g).double()
    r = true_ranks(s)
    for i in range(n):
        brute = sum(1 for j in range(n) if s[i, j] > s[i, i] or (s[i, j] == s[i, i] and j < i))
        assert int(r[i]) == brute
    assert recall_at(torch.eye(n))[1] == 1.0


def test_zero_shot_ties_go_to_smallest_class_and_bwt_formula():
    emb = torch.ones(3, 4)
    bank = torch.ones(5, 4)
    assert zero_shot_accuracy(emb, bank, np.array([1, 1, 1]), np.array([1, 2, 4])) == 1.0
    row = lambda *v: [{"r1": x} for x in v]  # noqa: E731
    matrix = [row(0, 0, 0), row(50, 0, 0), row(40, 60, 0), row(30, 70, 80)]
    assert bwt(matrix, "r1", 3) == pytest.approx(((30 - 50) + (70 - 60)) / 2)
    assert bwt(matrix, "r1", 1) is None


# ------------------------------------------------------------------------------ smoke (shared run)
@pytest.fixture(scope="module")
def smoke(smoke_root):
    return smoke_run("cmcl", smoke_root)


def test_smoke_claims(smoke):
    import json

    rows = [json.loads(line) for line in (Path(smoke["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["train/loss_end"] < rows[0]["train/loss_start"]  # loss decreases within step 1
    assert 0 < rows[1]["dns/rank_in_text"] < D  # projector of the shared modality after step 2
    final = smoke["metrics"]
    for key in ("eval/acc", "eval/r1", "eval/r5", "eval/r10", "eval/bwt_r1", "eval/bwt_r10", "eval/bwt_acc"):
        assert np.isfinite(final[key]), key


def test_frozen_stub_fails_plasticity():
    base = dict(Config.smoke, n_steps=1)
    live = RunContext(quiet=True)
    fit(Config(**base), live)
    frozen = RunContext(quiet=True)
    fit(Config(**{**base, "lr": 1e-12}), frozen)  # a model whose heads never move
    assert abs(frozen.history[-1]["train/loss_drop"]) < 1e-6
    assert live.history[-1]["train/loss_drop"] > 100 * abs(frozen.history[-1]["train/loss_drop"])


def test_resume_continues_at_saved_step(tmp_path):
    cfg = Config(**{**Config.smoke, "n_steps": 2})
    keep = tmp_path / "ck1"

    def report(metrics, ckpt):
        if ckpt is not None and metrics["step"] == 1:
            shutil.copytree(ckpt, keep)

    full = RunContext(quiet=True, report_fn=report)
    fit(cfg, full)
    resumed = RunContext(quiet=True, checkpoint=keep)
    fit(cfg, resumed)
    assert [h["step"] for h in resumed.history] == [1, 2]  # history restored, step 2 trained once
    for k in ("eval/r1", "eval/r10", "eval/bwt_r1"):
        assert resumed.history[-1][k] == pytest.approx(full.history[-1][k], abs=1e-9)


# ------------------------------------------------------------------------------ feature files
def _write_features(root: Path, fmt: str, dim: int = 8, bad: str | None = None):
    rng = np.random.default_rng(0)
    ds = root / "toy"
    for split, n in (("train", 40), ("test", 12)):
        (ds / split).mkdir(parents=True, exist_ok=True)
        y = rng.integers(0, 3, n)
        for m, ids in (("audio", np.arange(n)), ("text", np.arange(n + 3))):  # 3 text rows have no partner
            f = rng.standard_normal((len(ids), dim))
            if bad == "width" and m == "audio":
                f = f[:, :-1]
            if bad == "nan" and m == "text":
                f[0, 0] = np.nan
            lab = np.concatenate([y, np.zeros(len(ids) - n, int)])
            if fmt == "npz":
                arrays = {"pair_id": ids, "features": f, "label": lab}
                if bad == "column" and m == "audio":
                    arrays.pop("features")
                np.savez(ds / split / f"{m}.npz", **arrays)
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                cols = {"pair_id": pa.array(ids.astype(str)), "label": pa.array(lab)}
                if not (bad == "column" and m == "audio"):
                    cols["features"] = pa.array(f.tolist(), type=pa.list_(pa.float32(), f.shape[1]))
                pq.write_table(pa.table(cols), ds / split / f"{m}.parquet")
    np.savez(ds / "class_text.npz", names=np.array(["a", "b", "c"]), features=rng.standard_normal((3, dim)))


def _job(root, **kw):
    from methodlab.specs.files import load_job

    cfg = {"data": "features", "feature_root": str(root), "dim": 8, "steps": ["toy:text,audio"], "epochs": 1,
           "batch_size": 8, **kw}
    return load_job(None, data={"method": "cmcl", "config": cfg})


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_feature_files_run_as_a_job(tmp_path, fmt):
    _write_features(tmp_path, fmt)
    cfg = _job(tmp_path).config
    ctx = RunContext(quiet=True)
    out = fit(cfg, ctx)
    assert out["eval/pool"] == 12.0 and np.isfinite(out["eval/acc"]) and np.isfinite(out["eval/r1"])


@pytest.mark.parametrize("bad,fragment", [("width", "audio.npz: column 'features'"), ("nan", "text.npz: column 'features'"),
                                          ("column", "audio.npz: missing column 'features'")])
def test_bad_feature_files_fail_before_ray_naming_file_and_column(tmp_path, bad, fragment):
    _write_features(tmp_path, "npz", bad=bad)
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        _job(tmp_path)


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="feature_root"):
        Config(data="features", steps=["x:a,b"])
    with pytest.raises(ValidationError, match="steps"):
        Config(data="digits", steps=["pixels,nope"])
    with pytest.raises(ValidationError, match="lambda_min"):
        Config(lambda_min=-1)


# ------------------------------------------------------------------------------ predictor
def test_predictor_retrieval_classify_and_domain(smoke):
    from methodlab.core.checkpoint import latest_checkpoint

    pred = Predictor.from_checkpoint(latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints"))
    row = [1.0] + [0.0] * (D - 1)
    out = pred([Input(modality="pixels", features=[row], candidates={"modality": "text", "features": [row, row, row]},
                      top_k=3, classify=True)])[0]
    assert [h.index for h in out.topk[0]] == [0, 1, 2]  # equal scores: smaller index first
    assert out.label in pred.names and len(out.embeddings[0]) == D
    with pytest.raises(FieldError, match=r"\[0\]\.modality"):
        pred([Input(modality="smell", features=[row])])
    with pytest.raises(FieldError, match=r"\[0\]\.features"):
        pred([Input(modality="pixels", features=[row[:-1]])])
    with pytest.raises(FieldError, match=r"\[0\]\.candidates\.modality"):
        pred([Input(modality="pixels", features=[row], candidates={"modality": "smell", "features": [row]})])
    with pytest.raises(ValidationError):
        Input(modality="pixels", features=[[float("nan")] * D])
    big = pred([Input(modality="pixels", features=[[1e6] * D], candidates={"modality": "text", "features": [[-1e6] * D]})])
    assert np.isfinite(big[0].topk[0][0].score)


def test_official_hdf5_layout_with_modality_indices(tmp_path):
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(0)
    classes = ["cat", "dog"]
    labels = {}
    for split, n in (("train", 24), ("test", 10)):
        with h5py.File(tmp_path / f"toy_{split}_imagebind.h5", "w") as f:
            for i in range(n):
                sid = f"{split}{i:03d}"
                f.create_dataset(sid, data=rng.standard_normal((3, 8)))  # [n_modalities, D]: audio, text, video
                labels[sid] = classes[i % 2]
    with h5py.File(tmp_path / "toy_class_imagebind.h5", "w") as f:
        for c in classes:
            f.create_dataset(c, data=rng.standard_normal(8))
    import json

    (tmp_path / "toy_labels.json").write_text(json.dumps(labels))
    job = _job(tmp_path, feature_format="hdf5", steps=["toy:1,0"], dataset_modalities={"toy": ["audio", "text", "video"]})
    ctx = RunContext(quiet=True)
    out = fit(job.config, ctx)
    assert out["eval/pool"] == 10.0 and np.isfinite(out["eval/acc"])
    assert "dns/rank_in_text" in out and "dns/rank_in_audio" in out  # indices resolved to the dataset's names
    with pytest.raises(ConfigError, match="width 8, expected 16"):
        _job(tmp_path, feature_format="hdf5", dim=16, steps=["toy:1,0"])
