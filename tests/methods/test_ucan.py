"""ucan: the spec's smoke assertions and correctness checks (EMD against brute force, exact analytic distances
against dense samples and trimesh, ZS-N2N maths, the "a stub fails because" items, predictor, loaders, resume)."""

from __future__ import annotations

import base64
import io
import itertools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import FieldError, RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.data import ucan_meshes as M
from methodlab.data import ucan_shapes as U
from methodlab.methods.ucan import model as Mo
from methodlab.methods.ucan.config import Config
from tests.smoke import smoke_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return smoke_run("ucan", tmp_path_factory.mktemp("ucan-smoke"))


def _ckpt(run):
    return latest_checkpoint(Path(run["run_dir"]) / "checkpoints")


# ------------------------------------------------------------------ smoke (spec: Acceptance, Smoke)
def test_smoke_run_loss_finite_and_displacement_nonzero(run):
    from methodlab.methods.ucan.predictor import Predictor

    from methodlab.runners.results import read_history_jsonl

    hist = [h for h in read_history_jsonl(Path(run["run_dir"]) / "metrics.jsonl") if h["step"] > 0]
    assert hist and all(math.isfinite(h["train/loss"]) for h in hist)
    assert math.isfinite(run["metrics"]["val/p2s"])
    pred = Predictor.from_checkpoint(_ckpt(run))
    x = Predictor.example_inputs(run["config"])[0]
    out = pred([x])[0]
    assert np.asarray(out.points).shape == np.asarray(x.points).shape  # shape (and order) preserved
    assert out.displacement_norm_mean > 0  # not the identity


def test_emd_identical_zero_and_symmetric():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, generator=g), torch.randn(64, 3, generator=g)
    assert float(Mo.emd(x, x)) == 0.0
    assert float(Mo.emd(x, x[torch.randperm(64, generator=g)])) < 1e-7  # order does not matter
    assert abs(float(Mo.emd(x, y)) - float(Mo.emd(y, x))) < 1e-6


def test_ucan_loss_finite_and_differentiable():
    cfg = Config(k=8, enc_widths=[16, 16], head_widths=[16], patch_points=64, steps=2)
    net = Mo.build_net(cfg)
    g = torch.Generator().manual_seed(1)
    pa, pb = torch.randn(64, 3, generator=g) * 0.3, torch.randn(64, 3, generator=g) * 0.3
    loss, parts = Mo.ucan_loss(net, pa, pb, cfg)
    loss.backward()
    assert math.isfinite(loss.item()) and parts["dc"] > 0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters() if p.requires_grad)


def test_sphere_p2s_matches_trimesh_icosphere():
    assert U.icosphere_check(n=256, subdivisions=6) < 1e-4  # the subdivision-6 icosphere is within 7.1e-5


# ------------------------------------------------------------------ maths against brute force
def test_emd_equals_brute_force_over_all_bijections():
    rng = np.random.default_rng(3)
    for _ in range(3):
        x, y = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
        brute = min(np.linalg.norm(x - y[list(p)], axis=1).mean() for p in itertools.permutations(range(6)))
        got = float(Mo.emd(torch.as_tensor(x), torch.as_tensor(y)))
        assert abs(got - brute) < 1e-10


def test_chamfer_equals_brute_force():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=(20, 3))
    d = ((x[:, None] - y[None]) ** 2).sum(-1)
    brute = d.min(1).mean() + d.min(0).mean()
    assert abs(float(Mo.chamfer(torch.as_tensor(x), torch.as_tensor(y))) - brute) < 1e-10
    assert abs(Mo.chamfer_np(x, y) - brute) < 1e-10


def test_ellipsoid_closest_point_satisfies_optimality():
    a = np.array([1.0, 0.6, 0.3])
    rng = np.random.default_rng(5)
    q = rng.normal(size=(500, 3)) * 0.8
    x = U.ellipsoid_closest_point(a, q)
    assert np.abs(((x / a) ** 2).sum(1) - 1).max() < 1e-10  # on the surface
    normal = x / a ** 2
    cross = np.cross(q - x, normal)
    assert np.abs(cross).max() < 1e-8  # q - x parallel to the normal (stationarity)
    # global minimum: no parametric surface point is closer (dense grid, 400 x 800)
    th, ph = np.meshgrid(np.linspace(0, np.pi, 400), np.linspace(0, 2 * np.pi, 800), indexing="ij")
    s = np.stack([a[0] * np.sin(th) * np.cos(ph), a[1] * np.sin(th) * np.sin(ph), a[2] * np.cos(th)], -1).reshape(-1, 3)
    from scipy.spatial import cKDTree

    brute, _ = cKDTree(s).query(q[:100])
    exact = np.linalg.norm(q[:100] - x[:100], axis=1)
    assert (exact <= brute + 1e-9).all() and (brute - exact).max() < 5e-3


@pytest.mark.parametrize("family", ["torus", "capsule", "rounded_box", "capped_cylinder", "ellipsoid"])
def test_exact_distance_against_dense_surface_samples(family):
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(6)
    sh = U.make_shape(family, "test", rng)
    dense = U.sample_surface(sh, 80_000, rng)
    assert U.distance(sh, dense).max() < 1e-9  # samples lie on the exact surface
    r = np.linalg.norm(dense, axis=1).max()
    assert 0.97 < r <= 1.0 + 1e-9  # unit bounding sphere
    q = dense[:200] + 0.05 * rng.normal(size=(200, 3))
    exact = U.distance(sh, q)
    brute, _ = cKDTree(dense).query(q)
    assert (exact <= brute + 1e-9).all() and (brute - exact).max() < 1.5e-2
    cp = U.closest_point(sh, q)
    assert np.abs(np.linalg.norm(q - cp, axis=1) - exact).max() < 1e-8


def test_knn_mean_smoothing_closed_form():
    x = np.array([[0.0, 0, 0], [1, 0, 0], [10, 0, 0], [11, 0, 0]])
    out = Mo.knn_mean_smoothing(x, 2, 1)
    assert np.allclose(out[:, 0], [0.5, 0.5, 10.5, 10.5])
    assert np.allclose(Mo.knn_mean_smoothing(x, 1, 3), x)  # k = 1 is the identity


def test_zsn2n_downsamplers_and_dc_term():
    y = torch.arange(16.0).reshape(1, 1, 4, 4)
    d1, d2 = Mo.pair_downsample(y)
    assert torch.allclose(d1[0, 0], torch.tensor([[2.5, 4.5], [10.5, 12.5]]))  # (top-right + bottom-left) / 2
    assert torch.allclose(d2[0, 0], torch.tensor([[2.5, 4.5], [10.5, 12.5]]))  # (top-left + bottom-right) / 2
    torch.manual_seed(0)
    f = Mo.ZSN2N(1, 8)
    y = torch.rand(1, 1, 8, 8)
    with_dc, p1 = Mo.zsn2n_loss(f, y, True, 2.0)
    without, p0 = Mo.zsn2n_loss(f, y, False)
    fd1, fd2 = (f(d) for d in Mo.pair_downsample(y))
    assert abs(p1["dc"] - ((fd1 - fd2) ** 2).mean().item()) < 1e-7
    assert abs((with_dc - without).item() - 2.0 * p1["dc"]) < 1e-6  # an image arm ignoring L_DC would differ


# ------------------------------------------------------------------ the stubs fail
def test_stubs_fail_the_bars():
    rng = np.random.default_rng(7)
    sh = U.make_shape("torus", "test", rng)
    clean = U.sample_surface(sh, 2000, rng)
    noisy = clean + 0.02 * rng.normal(size=clean.shape)
    p2s = lambda x: U.distance(sh, x).mean()  # noqa: E731
    assert p2s(noisy) / p2s(noisy) == 1.0 > 0.6  # returning the input: ratio 1.0 fails Claim 1
    assert p2s(0.9 * noisy) > 2 * p2s(noisy)  # shrinking towards the centroid moves a torus off its surface
    smooth = [p2s(Mo.knn_mean_smoothing(noisy, 16, i)) for i in (1, 2, 3)]
    assert min(smooth) < p2s(noisy)  # the baseline is a real one (it does denoise) ...
    assert min(smooth) > 0.3 * p2s(noisy)  # ... but keeps a floor a returned-smoothing stub cannot beat by 0.9x


def test_lambda_dc_changes_training():
    """Same seed, same data: lambda_DC = 0 and 1 give different weights after 2 steps (a no-op L_DC would not)."""
    from methodlab.methods.ucan.train import fit

    base = dict(families=["sphere"], n_train_per_family=1, n_points=128, observations=2, max_steps=2, k=8,
                enc_widths=[16, 16], head_widths=[16], patch_points=64, patch_pairs=1, eval_every=100,
                eval_at_start=False, eval_sets=["val"], checkpoint_every=100, lr=1e-2)
    ws = []
    for lam in (0.0, 1.0):
        got = {}
        ctx = RunContext(quiet=True, report_fn=lambda m, d: d is not None and got.setdefault("w", _weights(d)))
        fit(Config(**base, lambda_dc=lam), ctx)
        ws.append(got["w"])
    diff = max(float((ws[0][k] - ws[1][k]).abs().max()) for k in ws[0])
    assert diff > 1e-6


def test_cosine_schedule_changes_training():
    """lr_schedule=cosine (a development-seed recipe candidate) really decays the step size."""
    from methodlab.methods.ucan.train import fit

    base = dict(families=["sphere"], n_train_per_family=1, n_points=128, observations=2, max_steps=3, k=8,
                enc_widths=[16, 16], head_widths=[16], patch_points=64, patch_pairs=1, eval_every=100,
                eval_at_start=False, eval_sets=["val"], checkpoint_every=100, lr=1e-2)
    ws = []
    for sched in ("constant", "cosine"):
        got = {}
        ctx = RunContext(quiet=True, report_fn=lambda m, d: d is not None and got.setdefault("w", _weights(d)))
        fit(Config(**base, lr_schedule=sched), ctx)
        ws.append(got["w"])
    assert max(float((ws[0][k] - ws[1][k]).abs().max()) for k in ws[0]) > 1e-6


def test_reproduction_study_runs_the_job_files_and_picks_the_smoothing_on_validation():
    """The study's point-cloud arms run jobs/ucan/train_analytic*.yaml with one recipe (lr, schedule, steps) for every
    arm, and the k-NN baseline's iteration count is chosen on the validation shapes, never the test shapes."""
    import yaml

    from methodlab.methods.ucan import reproduce as R
    from methodlab.reproduce.report import Results

    st = R.study()
    st.check()
    root = Path(__file__).resolve().parents[2]
    pcs = [st.arm(a) for a in ("ucan", "nodc", "1step")]
    recipes = {(c["lr"], c.get("lr_schedule", "constant"), c["max_steps"])
               for c in (yaml.safe_load((root / a.job).read_text())["config"] for a in pcs)}
    assert len(recipes) == 1 and all(a.full == pcs[0].full and a.quick == pcs[0].quick for a in pcs)
    # validation favours 2 iterations, the test shapes 1: the baseline is the 2-iteration test figure
    val, test = {1: 0.009, 2: 0.007, 3: 0.008}, {1: 0.005, 2: 0.006, 3: 0.007}
    runs = {f"knn{i}": {"0": {"final": {"val/p2s": val[i], "test/p2s": test[i]}}} for i in (1, 2, 3)}
    runs["ucan"] = {"0": {"final": {"test/p2s": 0.0054}}}
    res = Results({"runs": runs, "tasks": {}, "quick": True}, st)
    assert R.knn_choice(res) == 2
    claim = next(c for c in st.claims if c.id == "1b")
    assert claim.value(res, 0) == pytest.approx(0.0054 / 0.006)


def _weights(d):
    from safetensors.torch import load_file

    return load_file(str(Path(d) / "weights.safetensors"))


def test_resume_continues_at_saved_step(tmp_path):
    from methodlab.methods.ucan.train import fit

    base = dict(families=["sphere"], n_train_per_family=1, n_points=128, observations=2, k=8, enc_widths=[16, 16],
                head_widths=[16], patch_points=64, patch_pairs=1, eval_every=2, checkpoint_every=2,
                eval_at_start=False, eval_sets=["val"], lr=1e-2)
    saved = {}

    def keep(m, d):
        if d is not None:
            shutil.copytree(d, tmp_path / f"s{m['step']}", dirs_exist_ok=True)
            saved[m["step"]] = tmp_path / f"s{m['step']}"
    fit(Config(**base, max_steps=4), RunContext(quiet=True, report_fn=keep))
    ctx = RunContext(quiet=True, checkpoint=saved[2], report_fn=keep)
    fit(Config(**base, max_steps=4), ctx)
    assert [h["step"] for h in ctx.history] == [2, 4]  # history kept, training went on from step 2
    w_full, w_res = _weights(tmp_path / "s4"), _weights(saved[4])
    assert all(torch.equal(w_full[k], w_res[k]) for k in w_full)


# ------------------------------------------------------------------ predictor
def test_point_predictor_is_scale_equivariant_and_checks_domain(run):
    from methodlab.methods.ucan.predictor import Predictor

    pred = Predictor.from_checkpoint(_ckpt(run))
    x = Predictor.example_inputs(run["config"])[0]
    Input = pred.input_model()
    a = np.asarray(x.points)
    o1 = np.asarray(pred([Input(points=a.tolist(), steps=1)])[0].points)
    o2 = np.asarray(pred([Input(points=(3.0 * a + 7.0).tolist(), steps=1)])[0].points)
    assert np.allclose(o2, 3.0 * o1 + 7.0, atol=1e-4)
    schema = Input.model_json_schema()
    assert schema["properties"]["steps"]["maximum"] == run["config"].steps
    assert "points" in schema["required"]
    with pytest.raises(FieldError):
        pred([Predictor.Input(image="abc")])  # no points
    with pytest.raises(Exception):
        Input(points=[[0.0, 0.0]] * 20)  # a point that is not 3 numbers
    with pytest.raises(Exception):
        Input(points=[[0.0, 0.0, 0.0]] * 16_385)
    same = pred([Input(points=[[1.0, 2.0, 3.0]] * 16)])[0]  # degenerate cloud: finite answer
    assert np.isfinite(np.asarray(same.points)).all()


def test_image_predictor_round_trip(tmp_path):
    from PIL import Image

    from methodlab.core import save_checkpoint
    from methodlab.methods.ucan.predictor import Predictor

    d = save_checkpoint(tmp_path / "img", method="ucan", config=Config(image_channels=8),
                        weights={"image_config_only": torch.zeros(1)}, state={"task": "image"})
    pred = Predictor.from_checkpoint(d)
    buf = io.BytesIO()
    Image.fromarray((np.random.default_rng(0).random((16, 18)) * 255).astype(np.uint8)).save(buf, format="PNG")
    Input = pred.input_model()
    out = pred([Input(image=base64.b64encode(buf.getvalue()).decode(), iterations=3)])[0]
    with Image.open(io.BytesIO(base64.b64decode(out.image))) as im:
        assert im.size == (18, 16)
    assert math.isfinite(out.final_loss) and out.iterations == 3
    for bad in ("!!!notbase64", base64.b64encode(b"not a png").decode()):
        with pytest.raises(FieldError):
            pred([Input(image=bad, iterations=1)])
    buf = io.BytesIO()
    Image.fromarray(np.zeros((15, 16), dtype=np.uint8)).save(buf, format="PNG")  # odd side
    with pytest.raises(FieldError):
        pred([Input(image=base64.b64encode(buf.getvalue()).decode(), iterations=1)])


# ------------------------------------------------------------------ loaders and data
def test_loaders_round_trip(tmp_path):
    pts = np.random.default_rng(8).normal(size=(50, 3))
    for ext in (".xyz", ".npy", ".ply"):
        p = M.save_points(tmp_path / f"c{ext}", pts)
        assert np.allclose(M.load_points(p), pts, atol=1e-6)
    (tmp_path / "m.off").write_text("OFF\n4 2 0\n0 0 0\n1 0 0\n0 1 0\n1 1 0\n3 0 1 2\n3 1 3 2\n")
    v, f = M.parse_off((tmp_path / "m.off").read_text())
    assert v.shape == (4, 3) and f.tolist() == [[0, 1, 2], [1, 3, 2]]
    assert np.allclose(M.point_to_mesh(np.array([[0.5, 0.5, 0.3]]), v, f), 0.3)
    root = tmp_path / "PUNet"
    (root / "pointclouds/test/10000_poisson").mkdir(parents=True)
    (root / "meshes/test").mkdir(parents=True)
    np.savetxt(root / "pointclouds/test/10000_poisson/sq.xyz", pts)
    shutil.copy(tmp_path / "m.off", root / "meshes/test/sq.off")
    files = M.punet_files(root, "test", 10000)
    assert files[0][0] == "sq" and files[0][2] is not None
    with pytest.raises(ValueError):
        np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
        M.load_points(tmp_path / "obj.npy")  # object arrays are never unpickled


def test_shape_sets_follow_the_spec():
    sets = U.shape_sets(0, 4)
    assert len(sets["train"]) == 20 and {s.family for s in sets["train"]} == set(U.TRAIN_FAMILIES)
    assert len(sets["val"]) == 10 and len(sets["test"]) == 10
    fams = [s.family for s in sets["test"]]
    assert fams.count("capped_cylinder") == 2 and all(fams.count(f) == 2 for f in ("ellipsoid", "torus", "capsule", "rounded_box"))
    tor_train = [s.params[1] for s in sets["train"] if s.family == "torus"]
    tor_test = [s.params[1] for s in sets["test"] if s.family == "torus"]
    assert max(tor_train) < min(tor_test)  # held-out parameters


# ------------------------------------------------------------------ the other settings (denoise / upsample / eval / image)
def test_denoise_upsample_eval_and_image_settings(run, tmp_path):
    from methodlab.methods.ucan.settings import fit_denoise, fit_eval, fit_image, fit_upsample

    pts = np.random.default_rng(9).normal(size=(300, 3))
    src = M.save_points(tmp_path / "in.xyz", pts)
    ck = str(Path(run["run_dir"]) / "checkpoints")  # a run folder: its newest checkpoint is used
    m = fit_denoise(Config(checkpoint_path=ck, input_path=str(src), output_path=str(tmp_path / "out.npy"),
                           eval_patch_size=128), RunContext(quiet=True))
    assert M.load_points(tmp_path / "out.npy").shape == (300, 3) and m["denoise/displacement_mean"] > 0
    fit_upsample(Config(checkpoint_path=ck, input_path=str(src), output_path=str(tmp_path / "up.xyz"),
                        upsample_ratio=2), RunContext(quiet=True))
    assert M.load_points(tmp_path / "up.xyz").shape == (600, 3)
    ev = fit_eval(Config(eval_method="knn_mean", k=4, n_points=256, patch_points=128), RunContext(quiet=True))
    noisy = fit_eval(Config(eval_method="identity", n_points=256, patch_points=128, render_family="torus"),
                     RunContext(quiet=True))
    assert ev["test/p2s"] < noisy["test/p2s"] and "test/p2s/capped_cylinder" in ev
    # the report's rendering rides along as float16 base64 (identity: output = input; distances exact to ~1e-3)
    from methodlab.methods.ucan.settings import unpack_f16

    pts, d = unpack_f16(noisy["render/noisy"], 3), unpack_f16(noisy["render/d_noisy"])
    assert pts.shape == (256, 3) and noisy["render/out"] == noisy["render/noisy"] and d.shape == (256,)
    assert noisy["render/name"].startswith("torus") and np.allclose(d, U.distance(
        next(s for s in U.shape_sets(0, 4)["test"] if s.family == "torus"), pts), atol=2e-3)
    ctx = RunContext(quiet=True)
    img = fit_image(Config(image_crop=32, image_iters=5, image_channels=8, image_decay_every=3), ctx)
    assert math.isfinite(img["image/psnr"]) and img["step"] == 5


# ------------------------------------------------------------------ devices, ranks, precision (issue 40)
def test_side_files_are_written_by_rank_zero_only(run, tmp_path):
    from methodlab.methods.ucan.settings import fit_denoise, fit_image

    src = M.save_points(tmp_path / "in.xyz", np.random.default_rng(9).normal(size=(64, 3)))
    ck = str(Path(run["run_dir"]) / "checkpoints")
    for rank in (1, 0):  # no collective in these settings: a fake rank 1 needs no process group
        ctx = RunContext(quiet=True, rank=rank, world_size=2)
        fit_denoise(Config(checkpoint_path=ck, input_path=str(src), output_path=str(tmp_path / f"d{rank}.npy"),
                           eval_patch_size=128), ctx)
        fit_image(Config(image_crop=32, image_iters=2, image_channels=8, output_path=str(tmp_path / f"i{rank}.png")),
                  ctx)
    assert (tmp_path / "d0.npy").exists() and (tmp_path / "i0.png").exists()
    assert not (tmp_path / "d1.npy").exists() and not (tmp_path / "i1.png").exists()


def test_data_parallel_goes_through_the_context_collectives(monkeypatch):
    """Rank-0 broadcast of the initial weights and the gradient mean: ctx.broadcast / ctx.all_reduce on float32
    tensors of ctx.device (the process group is faked: one rank's values)."""
    import torch.distributed as dist

    from methodlab.methods.ucan.train import fit

    calls = []
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None: calls.append(("all_reduce", t.dtype, t.device)))
    monkeypatch.setattr(dist, "broadcast", lambda t, src=0: calls.append(("broadcast", t.dtype, t.device)))
    base = dict(families=["sphere"], n_train_per_family=1, n_points=128, observations=2, max_steps=2, k=8,
                enc_widths=[16, 16], head_widths=[16], patch_points=64, patch_pairs=1, eval_every=100,
                eval_at_start=False, eval_sets=["val"], checkpoint_every=100)
    fit(Config(**base), RunContext(quiet=True, world_size=2, device=torch.device("cpu")))
    assert {c[0] for c in calls} == {"all_reduce", "broadcast"}
    assert all(c[1] == torch.float32 and c[2] == torch.device("cpu") for c in calls)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_and_image_fit_take_mixed_precision(precision):
    from methodlab.methods.ucan.settings import fit_image
    from methodlab.methods.ucan.train import fit

    base = dict(families=["sphere"], n_train_per_family=1, n_points=128, observations=2, max_steps=2, k=8,
                enc_widths=[16, 16], head_widths=[16], patch_points=64, patch_pairs=1, eval_every=2,
                eval_at_start=False, eval_sets=["val"], checkpoint_every=100)
    out = fit(Config(**base), RunContext(quiet=True, precision=precision))
    assert math.isfinite(out["train/loss"]) and math.isfinite(out["val/p2s"])
    img = fit_image(Config(image_crop=32, image_iters=3, image_channels=8), RunContext(quiet=True, precision=precision))
    assert math.isfinite(img["image/final_loss"])


def test_shared_scan_sampling_draws_one_clean_sample_and_k_noises():
    """scan_sampling=shared (issue 44 item 10): the K training scans of a shape differ by their noise only (their
    mean is the clean sample up to noise / sqrt(K)); fresh scans are different surface samples."""
    from methodlab.methods.ucan.config import Config
    from methodlab.methods.ucan.data import build_data

    kw = dict(families=["sphere"], n_train_per_family=1, n_points=256, observations=4, noise=0.02, patch_points=128,
              k=16)
    shared = build_data(Config(**kw, scan_sampling="shared")).train[0]
    fresh = build_data(Config(**kw)).train[0]
    assert shared.shape == fresh.shape == (4, 256, 3)
    d_shared = np.abs(shared[0] - shared[1]).mean()
    d_fresh = np.abs(fresh[0] - fresh[1]).mean()
    assert d_shared < 0.04 < d_fresh  # noise differences (~2 x 0.02 x 0.8) vs different points on the sphere


def test_claim1_table_reads_the_spec_step_arm_on_both_seed_sets():
    """Issue 44 (iii): the '400 steps' rows of the point-count table are the ucan-400 arm (the spec's step count),
    dev seeds and reported seeds apart, with 1a / 1b's ratios against the same denominators as the claims."""
    from methodlab.methods.ucan import diagnostics as D
    from methodlab.methods.ucan.reproduce import study
    from methodlab.reproduce.report import Results
    from methodlab.reproduce.tables import fmt

    final = lambda p: {"final": {"test/p2s": p, "val/p2s": p, "test/cd": 1e-4}}  # noqa: E731
    runs = {"noisy": {"0": final(0.02)}, **{f"knn{i}": {"0": final(0.01 * i)} for i in (1, 2, 3)},
            "ucan-400": {str(s): final(v) for s, v in ((0, 0.011), (1, 0.012), (2, 0.013))}}
    res = Results({"runs": runs, "tasks": {}, "recipes": {}, "quick": False, "mode": "default"}, study())
    rows = [r for r in D._claim1_rows(res) if "400 steps" in r[0]]
    assert [r[2] for r in rows] == ["10, 11, 12", "0, 1, 2"] and rows[0][3] == "not run"
    assert rows[1][5] == fmt(0.012 / 0.02, 3) and rows[1][7] == fmt(0.012 / 0.01, 3)  # knn1: lowest val P2S
