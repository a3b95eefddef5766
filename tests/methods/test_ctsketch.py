"""ctsketch maths against brute force, the spec's "a stub fails because" checks, and the smoke run."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from methodlab.core import ConfigError, FieldError
from methodlab.methods.ctsketch.config import Config
from methodlab.methods.ctsketch.sketch import Sketch, build_sketch, program_tensor
from methodlab.methods.ctsketch.tree import (MaxTree, SumTree, cdf_max_dist, conv_sum_dist, exact_joint_dist,
                                             indecater_loss, level_dims)
from tests.smoke import smoke_run


def _rand_dists(*shape, seed=0, temp=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * temp, -1)


def test_level_dims():
    assert level_dims(3) == [10, 19, 37, 73]


@pytest.mark.parametrize("d", [10, 19])
def test_rank2_tt_level_equals_brute_force(d):
    """Each level's rank-2 TT contraction equals sum_{a,b} (a + b) P[a] Q[b], for all d x d basis pairs too."""
    sk = build_sketch("sum", d, "tt", 2, 1234)
    assert sk.rel_error < 1e-4
    eye = torch.eye(d)
    P, Q = eye[:, None, :].expand(d, d, d), eye[None, :, :].expand(d, d, d)
    got = sk.contract(P, Q)  # [d, d]: every pair (a, b) as one-hot inputs
    ref = torch.arange(d)[:, None] + torch.arange(d)[None, :]
    assert (got - ref).abs().max() < 1e-4
    P, Q = _rand_dists(64, d, seed=1), _rand_dists(64, d, seed=2)
    ref = torch.einsum("ab,na,nb->n", torch.from_numpy(program_tensor("sum", d)).float(), P, Q)
    assert (sk.contract(P, Q) - ref).abs().max() < 1e-4


def test_random_cores_fail_brute_force():
    """A fake sketch (random cores) is caught by the same check."""
    rng = np.random.default_rng(0)
    fake = Sketch("tt", (10, 10), {"G1": rng.normal(size=(1, 10, 2)), "G2": rng.normal(size=(2, 10, 1))})
    eye = torch.eye(10)
    got = fake.contract(eye[:, None, :].expand(10, 10, 10), eye[None, :, :].expand(10, 10, 10))
    ref = torch.arange(10)[:, None] + torch.arange(10)[None, :]
    assert (got - ref).abs().max() > 1.0


def test_rank1_is_a_bad_sketch_and_big_levels_stay_exact():
    assert build_sketch("sum", 10, "tt", 1, 1234).rel_error > 0.05  # Claim B's broken variant
    big = build_sketch("sum", 1153, "tt", 2, 1234)  # level 7 of sum-256: randomized range finder path
    assert big.rel_error < 1e-4


def test_official_hmt_construction_rank2_exact_rank1_not_better_than_svd():
    """tt_hmt (the official tt_sketch.hmt_sketch: r Gaussian columns, no oversampling, best of two draws) is exact
    at rank 2 (a + b has matrix rank 2) and, at rank 1, never beats TT-SVD (Eckart-Young), yet stays monotone: both
    rank-1 sketches keep the order of the digits (issue 22, Claim B)."""
    for d in (10, 37):
        assert build_sketch("sum", d, "tt_hmt", 2, 1234).rel_error < 1e-6
        hmt, svd = build_sketch("sum", d, "tt_hmt", 1, 1234), build_sketch("sum", d, "tt", 1, 1234)
        assert hmt.rel_error >= svd.rel_error - 1e-12
        for sk in (hmt, svd):
            t = sk.dense()
            assert (np.diff(t, axis=0) > 0).all() and (np.diff(t, axis=1) > 0).all()
    eye = torch.eye(10)
    sk = build_sketch("max", 10, "tt_hmt", 10, 1234)
    assert sk.rel_error < 1e-6
    got = sk.contract(eye[:, None, :].expand(10, 10, 10), eye[None, :, :].expand(10, 10, 10))
    assert torch.allclose(got, torch.from_numpy(program_tensor("max", 10)).float(), atol=1e-5)


@pytest.mark.parametrize("method", ["cp", "tucker"])
def test_other_decompositions_are_exact_at_rank2(method):
    assert build_sketch("sum", 19, method, 2, 1234).rel_error < 1e-4


def test_sketch_error_bound_holds():
    """|T x p - T_hat x p| <= ||T - T_hat||_F for probability vectors (the spec's error bound)."""
    sk = build_sketch("sum", 19, "tt", 1, 1234)
    T = program_tensor("sum", 19)
    bound = np.linalg.norm(T - sk.dense())
    P, Q = _rand_dists(256, 19, seed=3), _rand_dists(256, 19, seed=4)
    exact = torch.einsum("ab,na,nb->n", torch.from_numpy(T).float(), P, Q)
    assert float((sk.contract(P, Q) - exact).abs().max()) <= bound + 1e-4


def test_max4_tree_equals_brute_force():
    """Rank-10 TT of 1[max(a,b)=y] chained through both levels = P(max = y) over all 10^4 combinations."""
    tree = MaxTree(4, "tt", 10, 1234)
    assert tree.sketch.rel_error < 1e-6 and not tree.lossy
    p = _rand_dists(8, 4, 10, seed=5, temp=2.0).double()
    brute = torch.zeros(8, 10, dtype=torch.float64)
    for combo in itertools.product(range(10), repeat=4):
        pr = p[:, 0, combo[0]] * p[:, 1, combo[1]] * p[:, 2, combo[2]] * p[:, 3, combo[3]]
        brute[:, max(combo)] += pr
    got = tree(p.float()).double()
    assert (got - brute).abs().max() < 1e-5
    assert (exact_joint_dist(p, "max_N") - brute).abs().max() < 1e-9
    assert (cdf_max_dist(p) - brute).abs().max() < 1e-9


def test_conv_and_joint_sum_agree():
    p = _rand_dists(4, 4, 10, seed=6).double()
    joint = exact_joint_dist(p, "sum_N")
    assert joint.shape == (4, 37)
    assert (conv_sum_dist(p) - joint).abs().max() < 1e-9


def test_sum_tree_near_brute_force_with_documented_bias():
    """The whole N=4 tree passes through the truncated Gaussian re-discretisation, so it matches the exact expected
    sum only approximately: diffuse inputs within 0.05, and mu = 0 is re-encoded with mean 0.84 at sigma 4 on {0..18}."""
    tree = SumTree(4, "tt", 2, 1234)
    p = _rand_dists(32, 4, 10, seed=7, temp=0.5)
    exact = (p * torch.arange(10)).sum((1, 2))
    assert (tree(p) - exact).abs().max() < 0.05
    q = tree.discretize(torch.zeros(1, 1), torch.full((1, 1, 10), 0.9), 19)  # max(P) = 0.9: sigma = floor 4
    assert abs(float((q * torch.arange(19)).sum()) - 0.84) < 0.01


def test_sigma_is_batch_wide_with_floor():
    tree = SumTree(4, "tt", 2, 1234)
    mu = torch.tensor([[5.0]])
    wide = tree.discretize(mu, torch.full((1, 1, 10), 0.05), 19)  # 1 / 0.05 = 20 > floor 4
    sharp = tree.discretize(mu, torch.full((1, 1, 10), 0.9), 19)  # floor 4
    ref = torch.softmax(-(torch.arange(19.0) - 5) ** 2 / 4, 0)
    assert torch.allclose(sharp[0, 0], ref, atol=1e-6)
    assert wide[0, 0].max() < sharp[0, 0].max()


def test_gradients_reach_the_network_inputs():
    """Detaching the contraction from the network would give zero gradients: the input distributions keep theirs."""
    logits = torch.randn(4, 16, 10, generator=torch.Generator().manual_seed(0), requires_grad=True)
    y = SumTree(16, "tt", 2, 1234)(torch.softmax(logits, -1))
    (y - 50).abs().mean().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_indecater_gradient_prefers_the_true_digits():
    probs = torch.full((1, 2, 10), 0.1, requires_grad=True)
    loss = indecater_loss(probs, torch.tensor([18]), "sum_N", 50, torch.Generator().manual_seed(0))
    loss.backward()
    assert probs.grad[0, :, 9].mean() < probs.grad[0, :, :9].mean()  # pushes up digit 9 (9 + 9 = 18)


def test_bad_config_names_the_field():
    from methodlab.specs.files import method_config

    with pytest.raises(ConfigError) as info:
        method_config("ctsketch", {"algorithm": "exact", "N": 16})
    assert "4e16" in str(info.value)
    with pytest.raises(ConfigError):
        method_config("ctsketch", {"N": 12})


def test_smoke_trains_sum4(smoke_root):
    run = smoke_run("ctsketch", smoke_root)
    hist = [json.loads(l) for l in (Path(run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    losses = [h["train/loss"] for h in hist if "train/loss" in h]
    assert losses[-1] <= 0.7 * losses[0], losses  # >= 30 % decrease over 300 steps
    assert hist[-1]["sketch/rel_err_max"] < 1e-4


def test_predictor_pads_and_rejects_wrong_size(smoke_root):
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.methods.ctsketch.predictor import Input, Predictor

    run = smoke_run("ctsketch", smoke_root)
    pred = Predictor.from_checkpoint(latest_checkpoint(Path(run["run_dir"]) / "checkpoints"))
    imgs = torch.rand(3, 64, generator=torch.Generator().manual_seed(0)).tolist()
    out = pred([Input(images=imgs)])[0]
    assert out.program_output == sum(out.digits)
    exp = sum(float((torch.tensor(p) * torch.arange(10)).sum()) for p in out.digit_probs)
    assert abs(out.expected_output_sketch - exp) < 0.6  # 3 digits + one zero pad through the N=4 tree
    mx = pred([Input(images=imgs, program="max")])[0]
    assert mx.program_output == max(mx.digits) and abs(sum(mx.output_probs) - 1) < 1e-4
    with pytest.raises(FieldError) as info:
        pred([Input(images=[[0.5] * 784])])
    assert "images[0]" in info.value.field


def test_resume_continues_at_saved_step(tmp_path):
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    data = {"method": "ctsketch"}
    job = lambda steps: load_job(None, data=data, smoke=True, overrides=[  # noqa: E731
        f"max_steps={steps}", "checkpoint_every=50", "log_every=50", "eval_every_steps=50"])
    full = run_local(job(100), "full", str(tmp_path), quiet=True)
    run_local(job(50), "split", str(tmp_path), quiet=True)
    resumed = run_local(job(100), "split", str(tmp_path), quiet=True)
    lines = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [50, 100]  # no step repeated from 0
    assert resumed["metrics"]["train/loss"] == pytest.approx(full["metrics"]["train/loss"], rel=1e-4)
    assert resumed["metrics"]["val/digit_acc"] == pytest.approx(full["metrics"]["val/digit_acc"], abs=1e-6)


def test_pools_are_disjoint_and_idx_loader_reads_gz(tmp_path):
    import gzip
    import struct

    from methodlab.data.ctsketch_mnist import idx_mnist_pools, stratified_split

    y = np.repeat(np.arange(10), 50)
    tr, te = stratified_split(y, 10, seed=0)
    assert not set(tr) & set(te) and len(te) == 100 and np.bincount(y[te]).tolist() == [10] * 10
    imgs = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labs = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    for split in ("train", "t10k"):
        with gzip.open(tmp_path / f"{split}-images-idx3-ubyte.gz", "wb") as fh:
            fh.write(bytes([0, 0, 8, 3]) + struct.pack(">III", 5, 28, 28) + imgs.tobytes())
        with open(tmp_path / f"{split}-labels-idx1-ubyte", "wb") as fh:
            fh.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + labs.tobytes())
    xtr, ytr, xte, yte = idx_mnist_pools(tmp_path)
    assert xtr.shape == (5, 28, 28) and ytr.tolist() == [3, 1, 4, 1, 5]
    assert np.allclose(xtr * 255, imgs)


def test_broken_sketch_keeps_rank_and_norm_but_not_the_program():
    """Claim B's control (revised spec): the rank-2 sketch with its last axis permuted (seed 0) has the same rank
    and Frobenius norm as the exact one, reads the second operand through the permutation, and is far off a + b."""
    from methodlab.methods.ctsketch.sketch import broken

    for d in (10, 19):
        sk = build_sketch("sum", d, "tt", 2, 1234)
        bad = broken(sk, 0)
        assert np.linalg.norm(bad.dense()) == pytest.approx(np.linalg.norm(sk.dense()))
        assert np.linalg.matrix_rank(bad.dense(), tol=1e-6) == 2
        perm = np.random.default_rng(0).permutation(d)
        assert np.allclose(bad.dense(), program_tensor("sum", d)[:, perm], atol=1e-6)
        assert bad.rel_error > 0.1 and sk.rel_error < 1e-4
    tree = SumTree(4, "tt", 2, 1234, broken_seed=0)
    assert all(e > 0.1 for e in tree.rel_errors)
    with pytest.raises(ConfigError):
        from methodlab.specs.files import load_job

        load_job(None, data={"method": "ctsketch"}, smoke=True, overrides=["task=max_N", "broken_sketch_seed=0"])


def test_control_runs_the_reference_runs_number_of_last_stage_steps(tmp_path):
    """Claim D's control: `stage_steps_from` = the curriculum run's checkpoint; the control's last stage then runs
    exactly that run's number of steps, whatever its own time budget (it has none)."""
    from methodlab.core.checkpoint import latest_checkpoint
    from methodlab.runners.local import run_local
    from methodlab.specs.files import load_job

    base = ["N=4", "curriculum=[{N: 2, max_steps: 20}, {N: 4}]", "max_steps=null", "time_budget_s=1.0",
            "eval_every_steps=1000000", "log_every=1000000", "checkpoint_every=1000000"]
    ref = run_local(load_job(None, data={"method": "ctsketch"}, smoke=True, overrides=base), "ref", str(tmp_path),
                    quiet=True)
    ck = latest_checkpoint(tmp_path / "ref" / "checkpoints")
    ctl = run_local(load_job(None, data={"method": "ctsketch"}, smoke=True, overrides=[
        *base, "shuffle_targets=true", f"stage_steps_from={ck}"]), "ctl", str(tmp_path), quiet=True)
    assert ref["metrics"]["step"] > 20 and ctl["metrics"]["step"] == ref["metrics"]["step"]
    assert ctl["metrics"]["stage0/steps"] == ref["metrics"]["stage0/steps"] == 20
    assert ctl["metrics"]["stage0/digit_acc"] == pytest.approx(ref["metrics"]["stage0/digit_acc"])
