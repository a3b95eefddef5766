"""Issue 22 item 3, Claim D: what the sum tree's L1 loss can see of one image. For N = 16 and N = 1024 (TT rank 2,
sigma floor 4), inputs = peaked distributions (0.9 on a random digit, rest spread evenly; 16 sequences): the gradient
g_k = d yhat / d p_i[k] for every image i, and the share of it that is NOT affine in k (1 - R^2 of the least-squares
fit g_k ~ a + b k, pooled over images). If g is affine, yhat depends on p_i only through E_p_i[digit]: moving the
mass of a '5' from a {4, 6} mixture onto 5 keeps E = 5 and changes neither yhat nor the loss (first order), so
nothing in the loss separates that class once its mean is right. Also the same for the exact convolution NLL."""
import json
import torch
torch.set_num_threads(1)
from methodlab.methods.ctsketch.tree import SumTree, conv_sum_dist
out = {}
for n in (16, 1024):
    g = torch.Generator().manual_seed(0)
    dig = torch.randint(0, 10, (16, n), generator=g)
    p = torch.full((16, n, 10), 0.1 / 9).scatter(2, dig[..., None], 0.9).requires_grad_(True)
    tree = SumTree(n, "tt", 2, 1234, 4.0)
    tree(p).sum().backward()
    G = p.grad.reshape(-1, 10).double()
    k = torch.arange(10, dtype=torch.float64)
    X = torch.stack([torch.ones(10, dtype=torch.float64), k], 1)
    coef = torch.linalg.lstsq(X, G.T).solution  # [2, M]
    resid = G.T - X @ coef
    nonaff = float((resid ** 2).sum() / ((G - G.mean(1, keepdim=True)) ** 2).sum())
    # the mixture test: a '5' as 0.5/0.5 on {4, 6} vs one-hot 5, rest of the sequence peaked as above
    q = p.detach().clone()
    q[:, 0] = 0.0; q[:, 0, 4] = 0.5; q[:, 0, 6] = 0.5
    r = p.detach().clone(); r[:, 0] = 0.0; r[:, 0, 5] = 1.0
    out[f"N={n}"] = {"non_affine_share_of_grad_variance": nonaff, "slope_mean": float(coef[1].mean()),
                     "yhat_change_mixture46_vs_onehot5": float((tree(q) - tree(r)).abs().max())}
    if n == 16:  # exact convolution NLL for contrast: the full distribution, not only its mean
        tgt = dig.sum(1)
        def nll(x):
            d = conv_sum_dist(x)
            return -torch.log(d.gather(1, tgt[:, None]).clamp_min(1e-12)).squeeze(1)
        out[f"N={n}"]["exactconv_nll_change_mixture46_vs_onehot5"] = float((nll(q) - nll(r)).abs().max())
json.dump(out, open("reports/ctsketch_issue22/mean_only_gradient.json", "w"), indent=1)
print(json.dumps(out, indent=1))
