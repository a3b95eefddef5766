"""agbal's round loop, top to bottom: data, density ratio (fit once: the input distributions do not change),
then per round: train the MLP on the labelled target set, log test RMSE (and, where pool labels are hidden in the
data, the surrogate's Spearman correlation with the true error), checkpoint, select the next batch.
Settings: train (= al_run: the whole loop), round (one round on a user's tables: retrain, propose the next batch,
write a checkpoint), density_ratio (fit the ratio model and report its diagnostics). Data parallel (train,
round): the MLP's mini-batches are sharded over the ranks (train_net, DDP); the ratio fit, the metrics and the
selection run on every rank alike (identical weights) and rank 0's selection is broadcast. The regressor, its training
batches, the ratio classifier and the feature sketches live on ctx.device; the tables and the selection maths are
numpy on the host (read back once per round)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.agbal import maths
from methodlab.methods.agbal.acquire import State, acquire, aux_losses, bandwidth, feature_map, prop_space
from methodlab.methods.agbal.config import Config
from methodlab.methods.agbal.data import build_task
from methodlab.methods.agbal.evaluate import auc_log, evaluate, spearman
from methodlab.methods.agbal.model import MLP, build_net, train_net

SLUG = "agbal"


def target_inputs(task) -> np.ndarray:
    """Target inputs for the ratio model and input standardisation: pool + labelled, never test."""
    return task.x_pool if task.x_lab is None else np.concatenate([task.x_pool, task.x_lab])


def labelled_xy(task, lab_ids) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(lab_ids, dtype=int)
    xs, ys = [], []
    if task.x_lab is not None:
        xs.append(task.x_lab)
        ys.append(task.y_lab)
    if len(ids):
        if task.y_pool is None:
            raise ValueError("pool rows marked labelled, but the pool has no labels")
        xs.append(task.x_pool[ids])
        ys.append(task.y_pool[ids])
    return np.concatenate(xs), np.concatenate(ys)


def fit_ratio(cfg: Config, task, device="cpu") -> tuple[maths.RatioModel, np.ndarray, dict]:
    """Density ratio at the auxiliary inputs: classifier, clip, self-normalise, ESS fallback."""
    model = maths.fit_ratio(target_inputs(task), task.x_aux, kind=cfg.ratio_model, features=cfg.ratio_features,
                            c=cfg.ratio_c, hidden=cfg.ratio_hidden, epochs=cfg.ratio_epochs, seed=cfg.seed,
                            device=device)
    raw = model.raw_ratio(task.x_aux)
    r = maths.clip_normalise(raw, cfg.ratio_clip)
    e = maths.ess(r)
    r, alpha = maths.ess_blend(r, cfg.ess_min)
    diag = {"ratio/ess": e, "ratio/alpha": alpha, "ratio/max": float(r.max()), "ratio/min": float(r.min()),
            "ratio/clipped_frac": float(np.mean((raw / raw.mean() <= cfg.ratio_clip[0])
                                                | (raw / raw.mean() >= cfg.ratio_clip[1])))}
    if task.true_ratio is not None:
        t = task.true_ratio(task.x_aux)
        t = t / t.mean()
        diag["ratio/median_rel_err"] = float(np.median(np.abs(r - t) / t))
    return model, r, diag


def train_round(cfg: Config, task, lab_ids, k: int, r_aux: np.ndarray, prev: MLP | None = None,
                ctx: RunContext | None = None) -> State:
    """Retrain the regressor of round k on the labelled set; with `ctx`, on ctx.device under its precision."""
    ctx = ctx if ctx is not None else RunContext(quiet=True)
    xt = target_inputs(task)
    x_mean, x_std = xt.mean(0), np.maximum(xt.std(0), 1e-8)
    xl, yl = labelled_xy(task, lab_ids)
    y_mean, y_std = float(yl.mean()), float(max(yl.std(), 1e-8))
    with ctx.init_module():
        net = build_net(xt.shape[1], cfg.hidden, cfg.activation, seed=cfg.seed * 1009 + k)
    if cfg.warm_start and prev is not None:
        net.load_state_dict(prev.state_dict())
    model = ctx.prepare_model(net)  # trained through `model`; the State keeps the plain module
    zx, zy, w = (xl - x_mean) / x_std, (yl - y_mean) / y_std, None
    if cfg.train_on_aux:
        zx = np.concatenate([zx, (task.x_aux - x_mean) / x_std])
        zy = np.concatenate([zy, (task.y_aux - y_mean) / y_std])
        w = np.concatenate([np.ones(len(xl)), r_aux])
    train_net(net, zx, zy, epochs=cfg.epochs, batch=cfg.train_batch, lr=cfg.lr, weight_decay=cfg.weight_decay,
              seed=cfg.seed * 7919 + k, sample_weight=w, ctx=ctx, model=model)
    st = State(net, x_mean, x_std, y_mean, y_std, task.x_aux, task.y_aux, r_aux)
    if cfg.debias_aux:  # residual of the auxiliary point nearest each labelled target point: mostly label bias
        d = maths.sq_dists(st.zx(xl), st.zx(task.x_aux))
        near = d.argmin(1)
        st.offset = float(np.median(task.y_aux[near] - st.predict(task.x_aux[near])))
    fmap = feature_map(cfg, st)
    st.h_prop = bandwidth(cfg, prop_space(cfg, fmap, st, task.x_pool), prop_space(cfg, fmap, st, task.x_aux))
    return st


def state_tensors(st: State, ratio: maths.RatioModel, x_lab: np.ndarray) -> dict:
    w = {f"net.{k}": v for k, v in st.net.state_dict().items()}
    w.update({f"ratio.{k}": v for k, v in ratio.state_dict().items()})
    t = lambda a: torch.tensor(np.array(a, dtype=np.float64), device="cpu")  # noqa: E731  (host tables)
    w.update({"aux_x": t(st.x_aux), "aux_y": t(st.y_aux), "r_aux": t(st.r_aux), "lab_x": t(x_lab),
              "x_mean": t(st.x_mean), "x_std": t(st.x_std)})
    return w


def state_extras(st: State) -> dict:
    return {"y_mean": st.y_mean, "y_std": st.y_std, "h_prop": st.h_prop, "offset": st.offset}


def round_metrics(cfg: Config, task, st: State, lab_ids, k: int, logs: list[float]) -> dict:
    m: dict = {"step": k, "round": k, "n_labeled": int(len(lab_ids) + (0 if task.x_lab is None else len(task.x_lab)))}
    if task.x_test is not None and task.y_test is not None:
        m.update(evaluate(st.predict(task.x_test), task.y_test))
        logs.append(m["eval/log_rmse"])
        m["eval/auc_log"] = auc_log(logs)
    xl, yl = labelled_xy(task, lab_ids)
    m["train/rmse"] = float(np.sqrt(np.mean((st.predict(xl) - yl) ** 2)))
    m["aux/mean_loss"] = float(aux_losses(st).mean())
    m["aux/weighted_mean_loss"] = float((st.r_aux * aux_losses(st)).mean())
    if task.y_pool is not None:  # simulation: does u(x) rank the true errors of the unlabelled pool?
        from methodlab.methods.agbal.acquire import surrogate

        rest = np.setdiff1d(np.arange(len(task.x_pool)), lab_ids)
        xr = task.x_pool[rest]
        true_sq = (st.predict(xr) - task.y_pool[rest]) ** 2
        fmap = feature_map(cfg, st)
        za = prop_space(cfg, fmap, st, task.x_aux)
        m["surrogate/spearman"] = spearman(surrogate(cfg, st, xr, weighted=True, fmap=fmap, z_aux=za), true_sq)
        m["surrogate/spearman_unweighted"] = spearman(surrogate(cfg, st, xr, weighted=False, fmap=fmap, z_aux=za),
                                                      true_sq)
        m["surrogate/h_prop"] = float(st.h_prop)
    return m


def same_on_every_rank(ctx: RunContext, selected: list[int]) -> list[int]:
    """Data parallel: rank 0's selection on every rank. The ranks hold identical weights (DDP) and run the same
    seeded numpy selection, so they agree already; the broadcast makes that a guarantee (one small collective
    per round; nothing at world size 1)."""
    if ctx.world_size <= 1:
        return selected
    ids = torch.tensor(selected, dtype=torch.int64, device=ctx.device)
    return [int(i) for i in ctx.broadcast(ids, src=0).tolist()]


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    task = build_task(cfg)
    if task.y_pool is None:
        raise ValueError("the al_run loop simulates labelling and needs pool labels; use setting 'round' for a "
                         "user's unlabelled pool")
    ratio, r_aux, rdiag = fit_ratio(cfg, task, ctx.device)
    lab = [int(i) for i in task.labeled]
    k, st, logs, trained = 0, None, [], False
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG)
        lab = [int(i) for i in ck.extras["labeled_ids"]]
        k = int(ck.state["round"])
        st = train_round_from_checkpoint(cfg, task, ck, r_aux, ctx.device)
        ctx.history[:] = list(ck.extras.get("history", []))
        logs = [h["eval/log_rmse"] for h in ctx.history if "eval/log_rmse" in h]
        trained = True
    while True:
        t0 = time.perf_counter()
        if not trained:
            st = train_round(cfg, task, lab, k, r_aux, prev=None if st is None else st.net, ctx=ctx)
            m = round_metrics(cfg, task, st, lab, k, logs)
            m.update(rdiag)
            m["time/round_s"] = time.perf_counter() - t0
            last = k >= cfg.rounds
            save = last or k % cfg.checkpoint_every == 0
            ctx.report(m, checkpoint=_writer(cfg, st, ratio, task, lab, k, ctx) if save else None)
        trained = False
        if k >= cfg.rounds:
            break
        rng = np.random.default_rng([cfg.seed, k, 17])
        cand = np.setdiff1d(np.arange(len(task.x_pool)), lab)
        xl, _ = labelled_xy(task, lab)
        b = min(cfg.batch_size, len(cand))
        acq = acquire(cfg, st, task.x_pool, xl, cand, b, cfg.strategy, rng)
        lab = sorted(lab + same_on_every_rank(ctx, acq.selected))
        k += 1
    return ctx.history[-1]


def train_round_from_checkpoint(cfg: Config, task, ck, r_aux, device="cpu") -> State:
    st = load_state(cfg, ck, device)
    st.r_aux = r_aux
    return st


def load_state(cfg: Config, ck, device="cpu") -> State:
    """The round's State with its network on `device` (the tables stay numpy)."""
    w = ck.weights
    with torch.device(device):
        net = MLP(int(w["x_mean"].numel()), cfg.hidden, cfg.activation)
    net.load_state_dict({k[4:]: v for k, v in w.items() if k.startswith("net.")})
    net.eval()
    s = ck.extras["stats"]
    return State(net, w["x_mean"].numpy(), w["x_std"].numpy(), float(s["y_mean"]), float(s["y_std"]),
                 w["aux_x"].numpy(), w["aux_y"].numpy(), w["r_aux"].numpy(), h_prop=s["h_prop"],
                 offset=float(s.get("offset", 0.0)))


def _writer(cfg: Config, st: State, ratio, task, lab, k: int, ctx: RunContext, proposal: dict | None = None):
    xl, _ = labelled_xy(task, lab)

    def write(d: Path) -> None:
        extras = {"stats": state_extras(st), "labeled_ids": list(map(int, lab)), "history": ctx.history}
        if proposal is not None:
            extras["proposal"] = proposal
        save_checkpoint(d, method=SLUG, config=cfg, weights=state_tensors(st, ratio, xl),
                        state={"step": k, "round": k, "n_labeled": len(xl),
                               "metrics": ctx.history[-1] if ctx.history else {}},
                        extras=extras)
    return write


def fit_round(cfg: Config, ctx: RunContext) -> dict:
    """One round on a user's tables (or a generator's initial labelled set): retrain on the labelled table,
    propose the next `batch_size` pool rows, write a checkpoint holding the model and the proposal."""
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    t0 = time.perf_counter()
    task = build_task(cfg)
    ratio, r_aux, rdiag = fit_ratio(cfg, task, ctx.device)
    lab = [int(i) for i in task.labeled]
    st = train_round(cfg, task, lab, 0, r_aux, ctx=ctx)
    m = round_metrics(cfg, task, st, lab, 0, [])
    m.update(rdiag)
    cand = np.setdiff1d(np.arange(len(task.x_pool)), lab)
    xl, _ = labelled_xy(task, lab)
    b = min(cfg.batch_size, len(cand))
    acq = acquire(cfg, st, task.x_pool, xl, cand, b, cfg.strategy, np.random.default_rng([cfg.seed, 0, 17]))
    acq.selected = same_on_every_rank(ctx, acq.selected)
    scores = [] if acq.u is None else [float(acq.u[i]) for i in acq.selected]
    proposal = {"selected_ids": acq.selected, "scores": scores, "n_pool": int(len(task.x_pool))}
    m["proposal/size"] = len(acq.selected)
    m["time/round_s"] = time.perf_counter() - t0
    ctx.report(m, checkpoint=_writer(cfg, st, ratio, task, lab, 0, ctx, proposal))
    if not ctx.quiet and ctx.is_main:
        print(f"agbal round: proposed pool rows {acq.selected}")
    return ctx.history[-1]


def fit_density_ratio(cfg: Config, ctx: RunContext) -> dict:
    """Fit the density-ratio model and report its diagnostics (ESS, clipping, error vs the analytic ratio)."""
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    task = build_task(cfg)
    _, r, diag = fit_ratio(cfg, task, ctx.device)
    m = {"step": 0, **diag, "ratio/n_aux": len(r), "ratio/n_target": len(target_inputs(task))}
    ctx.report(m)
    return m
