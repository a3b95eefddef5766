"""Issue 22 item 3, Claim B: how much of the program does the rank-1 sketch keep, measured on Claim B's own data
(1,000 sum-16 test sequences from the digits8x8 test pool, seed 0) and not only as a Frobenius norm.
(1) per level: relative Frobenius error of the rank-1 TT sketch of a + b, ours (TT-SVD = the optimal rank 1) and the
    official construction (tt_sketch.hmt_sketch with one Gaussian column, no oversampling, best of two draws);
(2) the whole sum-16 tree fed the one-hot true digits (what a perfect net emits) and label-smoothed ones (0.9 on the
    true digit): |yhat - y| per sequence for rank 1 and rank 2;
(3) the loss landscape the net is trained on: L1 loss of the rank-1 tree under the true labelling vs every relabelling
    of the 10 digits reachable by greedy moves (reassign one digit value, or swap two), i.e. which one-hot labelling
    the rank-1 objective prefers, and that labelling's per-digit accuracy (the argmax ceiling of a one-hot net)."""
import json, sys
import numpy as np, torch
torch.set_num_threads(1)
from methodlab.methods.ctsketch.sketch import build_sketch, program_tensor
from methodlab.methods.ctsketch.tree import SumTree
from methodlab.methods.ctsketch.data import load_pools, sample_sequences

out = {}
# (1) per-level Frobenius errors
lv = []
for d in [10, 19, 37, 73]:
    T = program_tensor("sum", d)
    opt = build_sketch("sum", d, "tt", 1, 1234).rel_error
    hmt = build_sketch("sum", d, "tt_hmt", 1, 1234).rel_error
    rng = np.random.default_rng(0); e = []
    for _ in range(2000):
        q = T @ rng.standard_normal(d); q /= np.linalg.norm(q)
        e.append(np.linalg.norm(T - np.outer(q, q @ T)) / np.linalg.norm(T))
    e = np.array(e); b2 = np.minimum(e[0::2], e[1::2])
    lv.append({"d": d, "rank1_svd_relerr": opt, "rank1_hmt_seed1234_relerr": hmt,
               "hmt_best_of_two_median": float(np.median(b2)), "hmt_best_of_two_p90": float(np.quantile(b2, .9))})
out["levels"] = lv
# (2) whole tree on the claim's data
pools = load_pools("digits8x8", None, 0)
te = sample_sequences(pools.y_test, 1000, 16, "sum_N", torch.Generator().manual_seed(12345))
y = te.target.double()
trees = {r: SumTree(16, "tt", r, 1234) for r in (1, 2)}
trees["1_hmt"] = SumTree(16, "tt_hmt", 1, 1234)
def onehot(dig, smooth=0.0):
    p = torch.nn.functional.one_hot(dig, 10).double()
    return p * (1 - smooth) + smooth / 10 if smooth else p
tree_err = {}
for name, tr in trees.items():
    for sm in (0.0, 0.1):
        yh = tr(onehot(te.digits, sm).float()).double()
        tree_err[f"rank{name}_smooth{sm}"] = {"mean_abs_err": float((yh - y).abs().mean()),
                                             "per_digit_abs_err": float((yh - y).abs().mean() / 16),
                                             "corr_with_y": float(np.corrcoef(yh.numpy(), y.numpy())[0, 1]),
                                             "mean_signed_err": float((yh - y).mean())}
out["tree_on_test_sequences"] = tree_err
# (3) loss landscape over one-hot relabellings, on 1,000 training-pool sequences (what the net is fit to)
tr_seq = sample_sequences(pools.y_train, 1000, 16, "sum_N", torch.Generator().manual_seed(0))
ytr = tr_seq.target.float()
lab_freq = torch.bincount(pools.y_test, minlength=10).double() / len(pools.y_test)
def loss_of(perm, tree):
    p = torch.nn.functional.one_hot(torch.as_tensor(perm)[tr_seq.digits], 10).float()
    return float((tree(p) - ytr).abs().mean())
res = {}
for name in (1, "1_hmt", 2):
    tree = trees[name]
    ident = list(range(10)); base = loss_of(ident, tree)
    swaps = [(i, j) for i in range(10) for j in range(i + 1, 10)]
    worse = sum(loss_of([j if k == i else i if k == j else k for k in range(10)], tree) > base for i, j in swaps)
    cur, cl = ident[:], base
    while True:  # greedy descent over single reassignments and swaps
        cands = [[v if k == i else cur[k] for k in range(10)] for i in range(10) for v in range(10) if v != cur[i]]
        cands += [[cur[j] if k == i else cur[i] if k == j else cur[k] for k in range(10)] for i, j in swaps]
        ls = [loss_of(c, tree) for c in cands]
        k = int(np.argmin(ls))
        if ls[k] >= cl - 1e-9:
            break
        cur, cl = cands[k], ls[k]
    acc = float(sum(lab_freq[d] for d in range(10) if cur[d] == d))
    res[f"rank{name}"] = {"loss_true_labelling": base, "swaps_that_raise_loss": f"{worse}/45",
                          "greedy_min_labelling": cur, "greedy_min_loss": cl, "per_digit_acc_of_min": acc}
out["onehot_loss_landscape"] = res
json.dump(out, open("reports/ctsketch_issue22/rank1_same_data.json", "w"), indent=1)
print(json.dumps(out, indent=1))
