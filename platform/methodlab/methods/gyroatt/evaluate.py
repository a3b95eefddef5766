"""Loss / accuracy / balanced accuracy on a split, and the attention diagnostics of Claim 3."""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def predict(model, x: torch.Tensor, chunk: int = 256):
    was = model.training
    model.eval()
    logits, attns = [], []
    for i in range(0, len(x), chunk):
        lg, a = model(x[i:i + chunk], return_attention=True)
        logits.append(lg)
        if a is not None:
            attns.append(a)
    model.train(was)
    return torch.cat(logits), (torch.cat(attns) if attns else None)


def balanced_accuracy(pred: torch.Tensor, y: torch.Tensor) -> float:
    recalls = [(pred[y == c] == c).float().mean() for c in torch.unique(y)]
    return float(torch.stack(recalls).mean())


def evaluate_split(model, x, y) -> dict[str, float]:
    logits, _ = predict(model, x)
    pred = logits.argmax(-1)
    return {"loss": float(F.cross_entropy(logits, y)), "accuracy": float((pred == y).float().mean()),
            "balanced_accuracy": balanced_accuracy(pred, y)}


def evaluate(model, data, splits=("train", "val", "test")) -> dict[str, float]:
    out = {}
    for s in splits:
        for k, v in evaluate_split(model, getattr(data, f"x_{s}"), getattr(data, f"y_{s}")).items():
            out[f"{s}/{k}"] = v
    return out


@torch.no_grad()
def permutation_error(model, x: torch.Tensor, n: int = 64) -> float:
    """Max |A(tokens with segments permuted) - A(tokens) permuted| over the first n trials and the non-identity
    permutations of the m segments (every one for m <= 4, else a shift and the reversal): Claim 3's check that the
    attention weights follow the tokens (<= 1e-6)."""
    import itertools

    was = model.training
    model.eval()
    s = model.tokens(x[:n])
    enc = model.geom.encode if model.cfg.arch == "gyroatt" else (lambda t: t)
    m = s.shape[1]
    perms = [list(p) for p in itertools.permutations(range(m))][1:] if m <= 4 else \
        [[(i + 1) % m for i in range(m)], list(range(m))[::-1]]
    _, a = model.att(enc(s))
    worst = 0.0
    for perm in perms:
        p = torch.tensor(perm, device=s.device)
        _, ap = model.att(enc(s[:, p]))
        worst = max(worst, float((ap - a[:, p][:, :, p]).abs().max()))
    model.train(was)
    return worst


def attention_stats(model, data) -> dict[str, float]:
    """Mean attention each output token gives the evidence segment (x m: 1.0 = the uniform share), the standard
    deviation of the attention weights over test trials (Claim 3: > 1e-3) and the permutation error (Claim 3:
    <= 1e-6, `permutation_error`)."""
    _, attn = predict(model, data.x_test)
    if attn is None:
        return {}
    out = {"attn/std_over_trials": float(attn.std(0).mean()), "attn/perm_error": permutation_error(model, data.x_test)}
    seg = data.seg_test
    if seg is not None and (seg >= 0).all():
        m = attn.shape[-1]
        idx = seg.view(-1, 1, 1).expand(-1, m, 1)
        out["attn/evidence_weight_x_m"] = float(attn.gather(-1, idx).mean() * m)
    return out


def fit_evaluate(cfg, ctx) -> dict:
    """Setting 'evaluate': score the checkpoint `cfg.eval_checkpoint` (its best-validation-loss weights and
    network config) on the data this job's config describes (generator or real-format loader)."""
    from methodlab.core.errors import ConfigError
    from methodlab.methods.gyroatt.data import build_data
    from methodlab.methods.gyroatt.predictor import Predictor

    from methodlab.core.checkpoint import CONFIG_FILE, latest_checkpoint
    from methodlab.core.paths import read_path

    path = read_path(cfg.eval_checkpoint, "eval_checkpoint", "a gyroatt checkpoint directory or a run folder",
                     "train one first: `methodlab run jobs/gyroatt/acceptance.yaml --local`")
    if not (path / CONFIG_FILE).is_file():  # a run folder (or checkpoints root): its newest checkpoint
        found = latest_checkpoint(path)
        if found is None:
            raise ConfigError(f"{cfg.eval_checkpoint}: no gyroatt checkpoint in this folder", field="config.eval_checkpoint")
        path = found
    ctx.limit_threads(cfg.torch_threads)
    pred = Predictor.from_checkpoint(path, device=ctx.device)
    data = build_data(cfg, device=ctx.device)
    want = int(pred.state["n_channels"])
    if data.n_channels != want:
        raise ConfigError(f"data have {data.n_channels} channels, the checkpoint expects {want}", field="data_path")
    metrics = {"epoch": 0, "step": 0, **evaluate(pred.model, data, ("val", "test")),
               **attention_stats(pred.model, data)}
    ctx.report(metrics)
    return metrics
