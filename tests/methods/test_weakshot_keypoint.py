"""weakshot_keypoint: the spec's smoke assertions (soft-argmax inside the window, symmetric L_ct, no novel labels
read in training, PCK on known cases, K_c distinct pseudo-support peaks, keypoint-count checks), maths against
brute force, stubs that must fail, the MP-100 loader on a tiny file set, resume at the saved step, the predictor's
domain and its checkpoint-specific schema."""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from methodlab.core import FieldError, RunContext
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.methods.weakshot_keypoint.config import Config
from methodlab.methods.weakshot_keypoint.data import NovelLabelLeak, build_data
from methodlab.methods.weakshot_keypoint.evaluate import fit_assignment, pck_hits, support_copy_pck
from methodlab.methods.weakshot_keypoint.model import (NEG, cells_to_px, corr_transfer_loss, keyness_peaks,
                                                       keyness_window_loss, local_softargmax, px_to_cells, sample_at)
from methodlab.methods.weakshot_keypoint.predictor import Input, Predictor
from tests.smoke import smoke_run

torch.set_num_threads(1)
SLUG = "weakshot_keypoint"


@pytest.fixture(scope="module")
def smoke(smoke_root):
    return smoke_run(SLUG, smoke_root)


@pytest.fixture(scope="module")
def smoke_data(smoke):
    return build_data(smoke["config"])


# ------------------------------------------------------------------------------------------- smoke run
def test_smoke_runs_both_stages_and_reports_pck(smoke):
    m = smoke["metrics"]
    for k in ("eval/pck@0.05", "eval/pck@0.1", "eval/pck@0.2", "eval/val_pck@0.2"):
        assert 0.0 <= m[k] <= 1.0
    assert m["step"] == 40 and m["stage"] == 2
    ck = latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints")
    from methodlab.core import load_checkpoint

    loaded = load_checkpoint(ck, method=SLUG)
    assert any(k.startswith("ema.") for k in loaded.weights) and any(k.startswith("support.") for k in loaded.weights)


def test_training_never_reads_novel_labels(smoke_data):
    data = smoke_data
    base = data.index("base")[:3]
    for split in ("novel_train", "novel_val", "novel_test"):
        with data.training(1), pytest.raises(NovelLabelLeak):
            data.labels(data.index(split)[:1])
    with data.training(0), pytest.raises(NovelLabelLeak):  # no support labels in the no-support protocol
        data.labels(data.index("novel_support"))
    with data.training(1):
        data.labels(base)  # base labels are allowed
        data.labels(data.index("novel_support"))  # the 1-shot support is part of the protocol
    data.labels(data.index("novel_test")[:1])  # evaluation outside the guard


def test_stage2_step_reads_no_novel_label(smoke_data):
    """A stage-2 step (pseudo labels, keyness + correspondence transfer, and the naive arm) under the guard."""
    from methodlab.methods.weakshot_keypoint import train as T

    cfg = Config(**Config.smoke)
    data = smoke_data
    net = T.build_net(cfg)
    gen = torch.Generator().manual_seed(0)
    for shots in (1, 0):
        sup = T.real_supports(data) if shots else T.pseudo_supports(net, data)
        with data.training(shots):
            if shots == 0:
                with pytest.raises(NovelLabelLeak):
                    T.real_supports(data)
            pseudo = T.refresh_pseudo(net, data, sup)
            pseudo = {c: (i, p, torch.ones_like(cf)) for c, (i, p, cf) in pseudo.items()}  # all gates open
            for mode in ("transfer", "naive"):
                loss, _ = T.novel_losses(cfg.model_copy(update={"stage2_mode": mode}), net, data, sup, pseudo, 2, gen)
                loss.backward()
                assert math.isfinite(float(loss.detach()))


def test_rank_shares_of_a_step_add_up_to_the_whole_step(smoke_data):
    """Data parallel: two ranks' shares of a step (odd numbers of base and novel pairs, every gate open) add up to
    the whole step's loss, and the sum of their gradients is its gradient (BatchNorm in eval mode here: every image
    on its own; the training-mode statistics are synchronised over the ranks in a real run)."""
    from methodlab.core import RunContext
    from methodlab.methods.weakshot_keypoint import train as T

    cfg = Config(**{**Config.smoke, "batch_pairs": 7, "novel_pairs": 5})
    data = smoke_data
    torch.manual_seed(0)
    net = T.build_net(cfg).eval()
    by_class = {c: data.index("base", c) for c in data.base_classes}
    sup = T.real_supports(data)
    with data.training(1):
        pseudo = T.refresh_pseudo(net, data, sup)
    pseudo = {c: (i, p, torch.rand(cf.shape, generator=torch.Generator().manual_seed(1)))
              for c, (i, p, cf) in pseudo.items()}

    def share(world, rank):
        ctx = RunContext(quiet=True, world_size=world, rank=rank)
        gen = torch.Generator().manual_seed(3)
        net.zero_grad(set_to_none=True)
        with data.training(1):
            l_base, _ = T.base_step(cfg, net, data, by_class, gen, ctx)
            l_nov, parts = T.novel_losses(cfg, net, data, sup, pseudo, cfg.novel_pairs, gen, ctx=ctx)
        loss = l_base + l_nov
        loss.backward()
        return float(loss.detach()), parts, [torch.zeros_like(p) if p.grad is None else p.grad.clone()
                                              for p in net.parameters()]

    (whole, pw, g1), (a, pa, ga), (b, pb, gb) = share(1, 0), share(2, 0), share(2, 1)
    assert a + b == pytest.approx(whole, rel=1e-5)
    assert float(pw["train/gate_frac"]) > 0 and float(pa["train/gate_frac"]) == float(pw["train/gate_frac"])
    for k in ("train/l_kt", "train/l_ct", "train/l_cs"):
        assert float(pa[k] + pb[k]) == pytest.approx(float(pw[k]), rel=1e-4, abs=1e-7), k
    num = sum(((y + z - x) ** 2).sum() for x, y, z in zip(g1, ga, gb)).sqrt()
    assert float(num / sum((x ** 2).sum() for x in g1).sqrt()) < 1e-5


# ------------------------------------------------------------------------------------------- maths
def test_cells_pixels_one_helper():
    p = torch.tensor([[3.0, 5.0]])
    assert torch.equal(cells_to_px(torch.tensor([[0.0, 0.0]]), 2), torch.tensor([[1.0, 1.0]]))  # cell (0,0) -> (0.5 s)
    assert torch.equal(cells_to_px(torch.tensor([[4.0, 2.0]]), 2), torch.tensor([[9.0, 5.0]]))  # (j+.5)s, (i+.5)s
    assert torch.allclose(cells_to_px(px_to_cells(p, 4), 4), p)


def test_local_softargmax_inside_window_and_brute_force():
    g = torch.Generator().manual_seed(0)
    score = torch.randn(3, 16, 16, generator=g) * 3
    centers = torch.tensor([[[0.2, 0.4], [15.0, 15.0], [7.6, 3.2]]] * 3)
    r = 5
    q = local_softargmax(score, centers, r, 0.1)
    c = centers.round()
    assert ((q - c).abs() <= (r - 1) / 2 + 1e-5).all()  # inside the window
    assert (q >= 0).all() and (q <= 15).all()  # never leaves the map (-inf padding at borders)
    b, k = 1, 2  # brute force for one entry
    cx, cy = int(c[b, k, 0]), int(c[b, k, 1])
    num, den = torch.zeros(2), 0.0
    for y in range(cy - 2, cy + 3):
        for x in range(cx - 2, cx + 3):
            if 0 <= x < 16 and 0 <= y < 16:
                e = math.exp(float(score[b, y, x]) / 0.1 - float(score[b].max()) / 0.1)
                num += e * torch.tensor([x, y], dtype=torch.float32)
                den += e
    assert torch.allclose(q[b, k], num / den, atol=1e-4)


def test_keyness_window_loss_targets_the_keypoint_cell():
    g = torch.Generator().manual_seed(0)
    kps = torch.tensor([[[3.0, 4.0], [0.0, 15.0]]])
    vis = torch.tensor([[True, True]])
    spike = torch.zeros(1, 16, 16)
    spike[0, 4, 3] = spike[0, 15, 0] = 50.0
    loss, n = keyness_window_loss(spike, kps, vis, 7, g)
    assert n == 2 and float(loss) < 1e-6  # a head peaked at the keypoints is optimal in every window
    flat = torch.zeros(1, 16, 16)
    loss_flat, _ = keyness_window_loss(flat, kps[:, :1], vis[:, :1], 7, torch.Generator().manual_seed(1))
    # uniform logits: CE = log(#valid cells of the window) <= log 49
    assert 0 < float(loss_flat) <= math.log(49) + 1e-5


def test_corr_transfer_loss_is_symmetric():
    g = torch.Generator().manual_seed(0)
    p_i, p_j, v_j, u_i = (torch.rand(2, 5, 2, generator=g) * 10 for _ in range(4))
    w = torch.rand(2, 5, generator=g)
    m = torch.rand(2, 5, generator=g) > 0.3
    a = corr_transfer_loss(p_i, p_j, v_j, u_i, w, m.float())
    b = corr_transfer_loss(p_j, p_i, u_i, v_j, w, m.float())  # swap the roles of I and J
    assert torch.allclose(a, b)
    brute = sum(float(w[x, k]) * (float((p_j[x, k] - v_j[x, k]).abs().sum()) + float((p_i[x, k] - u_i[x, k]).abs().sum()))
                for x in range(2) for k in range(5) if m[x, k]) / max(int(m.sum()), 1)
    assert float(a) == pytest.approx(brute, rel=1e-5)
    p_j.requires_grad_(True)
    v_j.requires_grad_(True)
    corr_transfer_loss(p_i, p_j, v_j, u_i, w, m.float()).backward()
    assert v_j.grad is None  # stop-gradient on the targets


def test_sample_at_reads_cell_centres():
    f = torch.arange(2 * 4 * 5, dtype=torch.float32).reshape(1, 2, 4, 5)
    got = sample_at(f, torch.tensor([[[3.0, 2.0], [0.0, 0.0]]]))
    assert torch.allclose(got[0, 0], f[0, :, 2, 3]) and torch.allclose(got[0, 1], f[0, :, 0, 0])


def test_pck_known_cases():
    gt = torch.tensor([[[10.0, 10.0], [20.0, 30.0]]])
    vis = torch.tensor([[True, True]])
    bbox = torch.tensor([[0.0, 0.0, 40.0, 20.0]])  # max(w, h) = 40
    assert pck_hits(gt.clone(), gt, vis, bbox, 0.2) == (2, 2)  # perfect -> 1.0
    shifted = gt + torch.tensor([0.3 * 40, 0.0])
    assert pck_hits(shifted, gt, vis, bbox, 0.2) == (0, 2)  # shifted by 0.3 x bbox -> 0.0
    assert pck_hits(gt + torch.tensor([7.9, 0.0]), gt, vis, bbox, 0.2) == (2, 2)  # 7.9 < 0.2 * 40
    assert pck_hits(gt, gt, torch.tensor([[True, False]]), bbox, 0.2) == (1, 1)  # invisible keypoints do not count


def test_pseudo_support_has_kc_distinct_peaks(smoke, smoke_data):
    from methodlab.methods.weakshot_keypoint import train as T

    net = T.build_net(smoke["config"])
    sup = T.pseudo_supports(net, smoke_data)
    for c, (_, kps, val) in sup.items():
        kc = smoke_data.k_of_class[c]
        assert kps.shape == (kc, 2) and val.all()
        assert len({tuple(p) for p in kps.tolist()}) == kc
    k = torch.zeros(8, 8)
    k[2, 2] = 5
    k[2, 3] = 4.9  # a plateau next to the max is suppressed: distinct local maxima
    k[6, 6] = 3
    peaks = keyness_peaks(k, 2)
    assert peaks.tolist() == [[2.0, 2.0], [6.0, 6.0]]


def test_assignment_recovers_a_permutation():
    g = torch.Generator().manual_seed(0)
    gt = torch.rand(10, 4, 2, generator=g) * 50
    perm = [2, 0, 3, 1]  # pred[:, a] is keypoint b for perm[b] = a
    pred = torch.zeros_like(gt)
    for b, a in enumerate(perm):
        pred[:, a] = gt[:, b] + 0.5
    got = fit_assignment(pred, gt, torch.ones(10, 4, dtype=torch.bool), torch.tensor([[0, 0, 50.0, 50.0]] * 10))
    assert got == perm


# ------------------------------------------------------------------------------------------- data checks
def test_generator_keypoint_count_check():
    from methodlab.data.weakshot_keypoint_synth import check_keypoint_counts, make_template

    ks = {c: make_template(c).n_keypoints for c in range(16)}
    assert all(6 <= k <= 12 for k in ks.values())
    check_keypoint_counts(np.array([0, 1]), np.array([ks[0], ks[1]]), ks)
    with pytest.raises(ValueError, match="instance 1 of class 1"):
        check_keypoint_counts(np.array([0, 1]), np.array([ks[0], ks[1] + 1]), ks)


def _write_mp100(root: Path, bad: bool = False):
    from PIL import Image

    (root / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    cats = [{"id": 1, "name": "a", "supercategory": "s", "keypoints": ["p", "q"], "skeleton": []},
            {"id": 2, "name": "b", "supercategory": "s", "keypoints": ["p", "q", "r"], "skeleton": []}]
    for part, cat in (("train", cats[0]), ("val", cats[0]), ("test", cats[1])):
        images, anns = [], []
        for i in range(6):
            name = f"{part}{i}.png"
            Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(root / "images" / name)
            images.append({"id": i, "file_name": name, "width": 50, "height": 40})
            k = len(cat["keypoints"])
            kp = [v for j in range(k) for v in (10.0 + j, 12.0 + j, 2)]
            if bad and part == "test" and i == 3:
                kp = kp[:-3]
            anns.append({"id": 100 + i, "image_id": i, "category_id": cat["id"], "bbox": [5, 5, 30, 25],
                         "keypoints": kp, "num_keypoints": k})
        (root / f"mp100_split1_{part}.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                                     "categories": [cat]}))


def test_mp100_loader_and_annotation_count_check(tmp_path):
    from methodlab.data.weakshot_keypoint_mp100 import load_mp100

    _write_mp100(tmp_path / "ok")
    d = load_mp100(tmp_path / "ok", 1, size=32)
    assert d["image"].shape[1:] == (32, 32, 3) and d["k_of_class"] == {1: 2, 2: 3}
    assert list(d["base_classes"]) == [1] and list(d["novel_classes"]) == [2]
    assert set(d["split"][d["cls"] == 2].tolist()) == {1, 2, 3, 4}  # novel: unlabeled, val, test, support
    _write_mp100(tmp_path / "bad", bad=True)
    with pytest.raises(ValueError, match="annotation 103"):
        load_mp100(tmp_path / "bad", 1, size=32)


# ------------------------------------------------------------------------------------------- stubs fail
def test_stubs_fail_pck_and_sanity(smoke_data):
    """Mean-shape predictions and the support copy fall short of a perfect predictor under articulation; a random
    keyness score is at chance in the sanity check's windows."""
    from methodlab.methods.weakshot_keypoint.evaluate import _topk_hits

    data = smoke_data
    c = data.novel_classes[0]
    kc = data.k_of_class[c]
    gt, vis, bbox = data.labels(data.index("novel_test", c))
    gt, vis = gt[:, :kc], vis[:, :kc]
    mean_shape = gt.mean(0, keepdim=True).expand_as(gt)
    hit, n = pck_hits(mean_shape, gt, vis, bbox, 0.05)
    assert hit / n < 0.5
    assert support_copy_pck(data, {})["eval/pck@0.05"] < 0.5
    g = torch.Generator().manual_seed(0)
    kps = torch.rand(400, 3, 2, generator=g) * 15
    hits, chance = _topk_hits(torch.randn(400, 16, 16, generator=g), kps, torch.ones(400, 3, dtype=torch.bool), 5, g)
    assert abs(float(hits.mean()) - float(chance.mean())) < 0.05


def test_eval_stage_reports_the_sanity_checks_when_asked(smoke):
    """stage eval + sanity_checks (the base-only arm of the reproduction): the sanity/* metrics of the heads come
    back with the PCK figures, each a share in [0, 1]; without the flag none is reported."""
    from methodlab.methods.weakshot_keypoint.train import fit

    ck = latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints")
    cfg = smoke["config"].model_copy(update={"stage": "eval", "init_from": str(ck), "sanity_checks": True})
    out = fit(cfg, RunContext(quiet=True))
    for k in ("keyness_top3", "keyness_chance", "harris_top3", "corr_top1", "identity_copy", "corr_chance"):
        assert 0.0 <= out[f"sanity/{k}"] <= 1.0
    assert out["sanity/keyness_n"] > 0 and out["sanity/corr_n"] > 0 and 0.0 <= out["eval/pck@0.2"] <= 1.0
    quiet = fit(cfg.model_copy(update={"sanity_checks": False}), RunContext(quiet=True))
    assert not any(k.startswith("sanity/") for k in quiet)


# ------------------------------------------------------------------------------------------- resume
def test_resume_continues_at_the_saved_step(smoke):
    from methodlab.methods.weakshot_keypoint.train import fit

    ck = latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints")
    cfg = smoke["config"].model_copy(update={"stage2_steps": 25, "log_every": 5})
    ctx = RunContext(checkpoint=ck, quiet=True)
    out = fit(cfg, ctx)
    new = [h for h in ctx.history if h["step"] > 40]
    assert new and new[0]["step"] == 45 and out["step"] == 45


# ------------------------------------------------------------------------------------------- serving
@pytest.fixture(scope="module")
def predictor(smoke):
    return Predictor.from_checkpoint(latest_checkpoint(Path(smoke["run_dir"]) / "checkpoints"))


def _png(arr) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(arr, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_predictor_answers_and_rejects(predictor, smoke):
    ex = Predictor.example_inputs(smoke["config"])
    outs = predictor(ex)
    k = len(outs[0].keypoints)
    assert k == len(outs[0].names) and all(len(p) == 3 and all(math.isfinite(v) for v in p) for p in outs[0].keypoints)
    sup = ex[1].support
    img = np.zeros((40, 30, 3), np.uint8)
    bad = [
        Input(image=_png(img), support=sup, class_id=ex[0].class_id),  # both
        Input(image=_png(img)),  # neither
        Input(image=_png(np.zeros((10, 30, 3), np.uint8)), class_id=ex[0].class_id),  # side < 16
        Input(image="bm90IGFuIGltYWdl", class_id=ex[0].class_id),  # not an image
        Input(image=_png(img), class_id="class_999"),  # unknown class
        Input(image=_png(img), bbox=[20, 0, 20, 10], class_id=ex[0].class_id),  # bbox outside the image
        Input(image=_png(img), support=sup.model_copy(update={"keypoints": [[1.0, 1.0, 0.0]]})),  # none visible
        Input(image=_png(img), support=sup.model_copy(update={"keypoints": [[500.0, 1.0, 2.0]]})),  # outside
    ]
    for item in bad:
        with pytest.raises(FieldError):
            predictor([item])
    out = predictor([Input(image=_png(img), bbox=[2, 3, 20, 30], support=sup.model_copy(update={"keypoints": [[3, 4, 2]]}))])
    x, y, _ = out[0].keypoints[0]
    assert 2 <= x <= 22 and 3 <= y <= 33  # inside the query bbox, in query-image pixels


def test_specialised_schema_requests_are_answered(predictor):
    from pydantic import TypeAdapter

    from tests.ray.test_schema_property import sample

    model = predictor.input_model()
    schema = TypeAdapter(model).json_schema()
    assert "anyOf" in schema and "class_id" in json.dumps(schema)
    rng = np.random.default_rng(0)
    for _ in range(12):
        body = sample(schema, rng)
        item = TypeAdapter(model).validate_python(body)
        out = predictor([item])[0]
        assert all(math.isfinite(v) for p in out.keypoints for v in p)


# ------------------------------------------------------------------------------------------- devices (issue 40)
def test_data_parallel_goes_through_the_context_collectives(monkeypatch):
    """Rank-0 broadcast, the synchronised BatchNorm statistics and the mean of gradients after every step:
    ctx.broadcast / ctx.all_reduce on float32 tensors of ctx.device (the process group is faked: one rank's values)."""
    import torch.distributed as dist

    from methodlab.methods.weakshot_keypoint.train import fit

    calls = []
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None: calls.append(("all_reduce", t.dtype, t.device)))
    monkeypatch.setattr(dist, "broadcast", lambda t, src=0: calls.append(("broadcast", t.dtype, t.device)))
    cfg = Config(**{**Config.smoke, "stage1_steps": 2, "stage2_steps": 2, "log_every": 2, "checkpoint_every": 2})
    fit(cfg, RunContext(quiet=True, world_size=2, device=torch.device("cpu")))
    assert {c[0] for c in calls} == {"all_reduce", "broadcast"}
    assert all(c[1] == torch.float32 and c[2] == torch.device("cpu") for c in calls)


def test_data_pool_moves_once_and_bookkeeping_stays_on_the_host(smoke_data):
    data = smoke_data.to(torch.device("cpu"))
    idx = data.index("base")[:3]
    assert idx.device.type == "cpu" and data.split.device.type == "cpu"
    assert torch.equal(data.take(idx), smoke_data.images[idx])
    kps, vis, _ = data.labels(idx.tolist())
    assert torch.equal(kps, smoke_data.labels(idx)[0]) and vis.dtype == torch.bool
    with data.training(1), pytest.raises(NovelLabelLeak):  # the guard survives the move
        data.labels(data.index("novel_test")[:1])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_both_stages_take_mixed_precision(precision):
    from methodlab.methods.weakshot_keypoint.train import fit

    cfg = Config(**{**Config.smoke, "stage1_steps": 2, "stage2_steps": 2, "log_every": 2, "checkpoint_every": 2})
    out = fit(cfg, RunContext(quiet=True, precision=precision))
    assert math.isfinite(out["train/loss"]) and 0.0 <= out["eval/pck@0.2"] <= 1.0
