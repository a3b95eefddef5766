"""fit(cfg, ctx): the three FACE stages (pretrain CF -> map -> align) in one loop, checkpointing each stage.

Data parallel (world_size > 1): every rank draws the same epoch of triples and the same align rows (one numpy
sampler, seeded as on one worker), takes its rows of each global batch with ctx.shard and weights its loss terms by
its share of the batch (each term is the rank's part of the whole batch's mean: BPR, L_vq and L_rec per triple row,
L_align per align row against the profile embeddings of ALL the batch's align rows, which every rank holds). The
gradients of the stage's parameter set are averaged with ctx.average_gradients, so the run follows the 1-worker
trajectory up to float summation order (and dropout, drawn per rank). Reported losses are the whole batch's."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import load_checkpoint, save_checkpoint
from methodlab.core.seeding import seed_everything
from methodlab.methods.face import evaluate as ev
from methodlab.methods.face.backbone import backbone_on
from methodlab.core.paths import read_path
from methodlab.methods.face.config import Config
from methodlab.methods.face.data import Bundle, build
from methodlab.methods.face.model import CF, FACE, bpr_loss, info_nce, info_nce_part, lm_encode, norm_adj

ORDER = ["pretrain", "map", "align"]
INIT_WHAT = "a FACE checkpoint folder (a stage_* folder of a run's stage_dir, or a checkpoint_* folder)"
INIT_HINT = "run `methodlab run jobs/face/synthetic.yaml` first (it writes results/face-synthetic/stages/stage_*) or fix the path"


def build_models(cfg: Config, B: Bundle, table: torch.Tensor):
    """CF and FACE on the device of `table` (the frozen token embeddings): the adjacency is built there and the
    parameters are created there (callers with a RunContext also build under ctx.init_module())."""
    rec = B.rec
    dev = table.device
    with torch.device(dev):
        cf = CF(rec.n_users, rec.n_items, cfg.embedding_size, cfg.layer_num, cfg.cf_model,
                norm_adj(rec.n_users, rec.n_items, rec.train, dev) if cfg.cf_model == "lightgcn" else None)
        fm = FACE(cfg.embedding_size, cfg.word_num, cfg.word_dim, table.shape[1], cfg.ffn_dim, cfg.dropout, table,
                  cfg.codebook_init, cfg.normalize_input)
    return cf, fm


def sample_triples(train: np.ndarray, n_items: int, seen: set, rng: np.random.Generator) -> np.ndarray:
    """(u, i+, i-) for every training pair, negatives resampled while (u, i-) is a training interaction."""
    neg = rng.integers(0, n_items, size=len(train))
    for r in range(len(train)):
        tries = 0
        while (int(train[r, 0]), int(neg[r])) in seen and tries < 50:
            neg[r] = rng.integers(0, n_items); tries += 1
    out = np.concatenate([train, neg[:, None]], 1)
    return out[rng.permutation(len(out))]


def _average_grads(params, ctx) -> None:
    """Data-parallel: average gradients of the CF tables and FACE modules over the ranks (one float32 bucket on
    ctx.device; the backbone is frozen, not reduced). A parameter without a gradient on a rank (an empty share of a
    batch) takes part with zeros, so every rank reduces the same set."""
    if ctx.world_size <= 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    ctx.average_gradients(params)


def _global(values: dict, ctx) -> dict:
    """The whole global batch's values from the ranks' shares (their sum, one collective); as given on one worker."""
    if ctx.world_size <= 1 or not values:
        return values
    keys = list(values)
    total = ctx.all_reduce(torch.stack([torch.as_tensor(values[k], device=ctx.device).float().reshape(())
                                        for k in keys]), op="sum")
    return dict(zip(keys, total.unbind()))


def _local_align(upos, uu, ipos, ii, n_glob: int, n_loc: int, tpos: np.ndarray):
    """This rank's align rows of a global batch: the align rows (positions in the global batch's x = [u; p; q], n_glob
    triples) whose triple this rank holds (`tpos`: the global triple index of each local row, from ctx.shard).
    Returns (local x positions, index into the user rows / item rows of the align list) for users and items."""
    loc = np.full(n_glob, -1)
    loc[np.asarray(tpos)] = np.arange(n_loc)

    def pick(pos):
        part, t = np.divmod(np.asarray(pos), n_glob)
        at = loc[t]
        keep = np.flatnonzero(at >= 0)
        return part[keep] * n_loc + at[keep], keep
    (ux, uk), (ix, ik) = pick(upos), pick(ipos)
    return ux, uk, ix, ik


def align_rows(trip, n_rows: int | str, rng: np.random.Generator):
    """Distinct users and distinct items of the batch (half each); returns row positions in X and entity ids.
    `trip` is the batch's host copy (numpy, or a CPU tensor)."""
    trip = np.asarray(trip)
    B = len(trip)
    u = trip[:, 0]; it = np.concatenate([trip[:, 1], trip[:, 2]])
    uu, upos = np.unique(u, return_index=True)
    ii, ipos = np.unique(it, return_index=True)
    if n_rows != "all":
        nu = min(len(uu), int(n_rows) // 2); ni = min(len(ii), int(n_rows) - int(n_rows) // 2)
        su = rng.choice(len(uu), size=nu, replace=False); si = rng.choice(len(ii), size=ni, replace=False)
        uu, upos, ii, ipos = uu[su], upos[su], ii[si], ipos[si]
    return upos, uu, B + ipos, ii


def weights_of(cf: CF, fm: FACE) -> dict:
    w = {f"cf.{k}": v for k, v in cf.state_dict().items()}
    w |= {f"face.{k}": v for k, v in fm.state_dict().items()}
    with torch.no_grad():
        w["codebook_mapped"] = fm.codebook().detach()
    return w


def load_weights(cf: CF, fm: FACE, weights: dict, face_too: bool = True) -> bool:
    """Non-strict: CF tables always; FACE weights only if present and of the same shapes. Returns FACE loaded."""
    cf.load_state_dict({k[3:]: v for k, v in weights.items() if k.startswith("cf.")})
    fw = {k[5:]: v for k, v in weights.items() if k.startswith("face.")}
    own = fm.state_dict()
    if face_too and fw and set(fw) == set(own) and all(fw[k].shape == own[k].shape for k in own):
        fm.load_state_dict(fw)
        return True
    return False


@torch.no_grad()
def evaluate_stage(cfg: Config, stage: str, cf: CF, fm: FACE, B: Bundle, bb, with_face: bool,
                   cache: dict | None = None) -> tuple[dict, dict]:
    rec = B.rec
    cf.eval(); fm.eval()
    eu, ei = cf(1.0)
    scores = eu @ ei.T
    m = ev.rank_metrics(scores, rec.train, rec.test, cfg.topk, prefix=f"{stage}/test")
    m |= ev.rank_metrics(scores, rec.train, rec.val, [20], prefix=f"{stage}/val")
    extra: dict = {}
    if with_face:
        du = fm.descriptors(eu).cpu().numpy(); di = fm.descriptors(ei).cpu().numpy()
        x = torch.cat([eu, ei])
        x_hat = torch.cat([fm(x[s:s + 1024])["x_hat"] for s in range(0, len(x), 1024)])
        cos, const = ev.recon_cosine(x, x_hat)
        V = len(B.words)
        m |= {f"{stage}/recon_cos": cos, f"{stage}/recon_cos_const": const,
              f"{stage}/codebook_usage": len(np.unique(np.r_[du.ravel(), di.ravel()])) / V}
        rnd_i = ev.random_descriptors(len(di), cfg.word_num, V, cfg.eval_seed)
        rnd_u = ev.random_descriptors(len(du), cfg.word_num, V, cfg.eval_seed + 1)
        if rec.concept_words is not None:
            gi, gu = ev.ground_truth(rec, "item"), ev.ground_truth(rec, "user")
            m |= {f"{stage}/precision_item": ev.precision(di, gi), f"{stage}/precision_user": ev.precision(du, gu),
                  "random/precision_item": ev.precision(rnd_i, gi), "random/precision_user": ev.precision(rnd_u, gu),
                  "chance/precision_item": float(np.mean([len(g) for g in gi]) / V),
                  "chance/precision_user": float(np.mean([len(g) for g in gu]) / V)}
        if cfg.eval_items > 0 and rec.n_items >= 2:
            args = (min(cfg.eval_items, rec.n_items), min(cfg.eval_candidates, rec.n_items), cfg.eval_seed)
            m[f"{stage}/hit@10"] = ev.text_retrieval(bb, B.words, di, B.item_text, rec.item_noun, *args)
            cache = {} if cache is None else cache
            if "random/hit@10" not in cache:
                cache["random/hit@10"] = ev.text_retrieval(bb, B.words, rnd_i, B.item_text, rec.item_noun, *args)
            m["random/hit@10"] = cache["random/hit@10"]
        ex_items = np.random.default_rng(cfg.eval_seed).choice(rec.n_items, size=min(5, rec.n_items), replace=False)
        ex_users = np.random.default_rng(cfg.eval_seed).choice(rec.n_users, size=min(5, rec.n_users), replace=False)
        extra["examples"] = (
            [{"entity": "item", "id": int(rec.item_ids[i]), "profile": rec.item_profiles[i],
              "descriptors": [B.words[j] for j in di[i]]} for i in ex_items]
            + [{"entity": "user", "id": int(rec.user_ids[u]), "profile": rec.user_profiles[u],
                "descriptors": [B.words[j] for j in du[u]]} for u in ex_users])
    cf.train(); fm.train()
    return m, extra


@torch.no_grad()
def val_recall(cf: CF, rec) -> float:
    cf.eval()
    eu, ei = cf(1.0)
    cf.train()
    return ev.rank_metrics(eu @ ei.T, rec.train, rec.val, [20], prefix="v")["v/recall@20"]


def fit(cfg: Config, ctx) -> dict:
    if cfg.init_from and ctx.checkpoint is None:  # before the backbone and data: a missing folder is one line
        read_path(cfg.init_from, "init_from", INIT_WHAT, INIT_HINT)
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    dev = ctx.device
    t_start = time.perf_counter()
    bb = backbone_on(cfg.backbone, dev)  # the frozen LM (model and vocabulary table) on ctx.device
    B = build(cfg, dev)
    rec = B.rec
    table = bb.table[torch.as_tensor(B.token_ids, dtype=torch.long, device=dev)]
    with ctx.init_module():
        cf, fm = build_models(cfg, B, table)
    # ddp=False: the data parallelism is the gradient all-reduce below (CF and FACE are two modules with
    # stage-dependent parameter sets, not one DDP model). prepare_model places them and, under scaling.compile,
    # compiles the two training forwards (cf_fwd, fm_fwd); evaluation and checkpoints use the plain modules.
    cf_fwd, fm_fwd = ctx.prepare_model(cf, ddp=False), ctx.prepare_model(fm, ddp=False)
    rng = np.random.default_rng(cfg.seed)
    seen = set(map(tuple, rec.train.tolist()))
    stage_start, resume_step, summary = 0, 0, {}
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method="face")
        load_weights(cf, fm, ck.weights)
        done = ck.state.get("stage", "pretrain")
        summary = dict(ck.state.get("summary", {}))
        if ck.state.get("stage_complete", True):
            stage_start = cfg.stages.index(done) + 1 if done in cfg.stages else 0
        else:
            stage_start, resume_step = cfg.stages.index(done), int(ck.state.get("step_in_stage", 0))
        rng = np.random.default_rng(cfg.seed + 7919 * (1 + int(ck.state.get("step", 0))))
    elif cfg.init_from:
        ck = load_checkpoint(read_path(cfg.init_from, "init_from", INIT_WHAT, INIT_HINT), method="face")
        load_weights(cf, fm, ck.weights, face_too=cfg.stages[0] == "align")
    timings: dict = dict(summary.get("timings", {}))
    gstep = int(summary.get("step", 0))
    params_cf = list(cf.parameters()); params_face = list(fm.parameters())
    last: dict = {}
    timings.setdefault("setup_s", time.perf_counter() - t_start)  # backbone load, codebook filter, data, profile encoding
    rand_hit: dict = {}  # the random-token Hit@10 does not depend on the stage: computed once per run

    def write(stage: str, complete: bool, step_in_stage: int, extra: dict):
        def writer(d: Path):
            save_checkpoint(d, method="face", config=cfg, weights=weights_of(cf, fm),
                            state={"step": gstep, "stage": stage, "stage_complete": complete,
                                   "step_in_stage": step_in_stage, "summary": {"step": gstep, "timings": timings,
                                               **{k: v for k, v in summary.items() if isinstance(v, float)}}},
                            extras=_extras(B, stage, extra))
        return writer

    for stage in cfg.stages[stage_start:]:
        t0 = time.perf_counter()
        if stage == "pretrain":
            opt = torch.optim.Adam(params_cf, lr=cfg.lr, weight_decay=2 * cfg.reg_weight)
            max_epochs, patience, fixed_steps = cfg.pretrain_epochs, cfg.pretrain_patience, None
        else:
            opt = torch.optim.Adam([{"params": params_face, "lr": cfg.lr, "weight_decay": 0.0},
                                    {"params": params_cf, "lr": cfg.lr / 10, "weight_decay": 2 * cfg.reg_weight}])
            if stage == "map":
                max_epochs, patience, fixed_steps = cfg.map_epochs, cfg.patience, None
            else:
                max_epochs, patience, fixed_steps = cfg.align_epochs, cfg.patience, cfg.align_steps
        best, best_state, bad, step_in_stage = -1.0, None, 0, resume_step
        resume_step = 0
        align_log: list[torch.Tensor] = []  # L_align per step, on the device (read at report time)
        nonfinite = torch.zeros((), dtype=torch.bool, device=dev)  # any non-finite loss since the last check
        epoch = 0
        stop = False
        while not stop:
            if fixed_steps is None and (epoch >= max_epochs):
                break
            if fixed_steps is not None and step_in_stage >= fixed_steps:
                break
            trip_host = sample_triples(rec.train, rec.n_items, seen, rng)  # numpy negatives (the data recipe), then
            trip = torch.as_tensor(trip_host, device=dev)  # moved to the device once per epoch
            for start in range(0, len(trip_host), cfg.batch_size):
                gb_host = trip_host[start:start + cfg.batch_size]  # the global batch: the same on every rank
                n_glob = len(gb_host)
                # this rank's rows of it (all of them on one worker); tpos: their positions in the global batch
                tb, tb_host, tpos = ctx.shard(trip[start:start + cfg.batch_size], gb_host, np.arange(n_glob))
                if ctx.world_size > 1:  # this rank's part of the whole batch's loss (see _sharded_step)
                    logs = _sharded_step(cfg, stage, ctx, cf_fwd, fm_fwd, fm, bb, B, tb, tpos, gb_host, rng)
                    loss = logs.pop("loss")
                    if stage == "align":
                        align_log.append(logs["l_align"])
                        del align_log[:-cfg.log_every]
                else:  # one worker: the whole batch (the reference path)
                    with ctx.autocast():
                        eu, ei = cf_fwd(cfg.keep_rate)
                        u, p, q = eu[tb[:, 0]], ei[tb[:, 1]], ei[tb[:, 2]]
                        loss = bpr_loss(u.float(), p.float(), q.float())
                        logs = {"l_bpr": loss.detach()}
                        if stage != "pretrain":
                            x = torch.cat([u, p, q])
                            o = fm_fwd(x)
                            l_rec = torch.nn.functional.mse_loss(o["x_hat"].float(), x.detach().float())
                            loss = loss + cfg.vq_weight * o["l_vq"].float() + cfg.recons_weight * l_rec
                            logs |= {"l_vq": o["l_vq"].detach(), "l_rec": l_rec.detach()}
                            if stage == "align":
                                upos, uu, ipos, ii = align_rows(tb_host, cfg.align_rows, rng)
                                ix = lambda a: torch.as_tensor(a, dtype=torch.long, device=dev)  # noqa: E731
                                c = torch.cat([lm_encode(bb, fm, o["z_st"][ix(upos)], B.user_prompt),
                                               lm_encode(bb, fm, o["z_st"][ix(ipos)], B.item_prompt)])
                                e = torch.cat([B.user_text[ix(uu)], B.item_text[ix(ii)]])
                                l_al = info_nce(c.float(), e, cfg.temperature)
                                loss = loss + cfg.align_weight * l_al
                                logs["l_align"] = l_al.detach()
                                align_log.append(l_al.detach())
                                del align_log[:-cfg.log_every]  # only the report window is read
                nonfinite |= ~torch.isfinite(loss.detach())  # checked when the loop reads scalars (no per-step sync)
                opt.zero_grad(set_to_none=True)
                if ctx.world_size > 1:
                    if loss.requires_grad:  # an empty share of the batch has no graph: zeros in the mean
                        ctx.backward(loss * ctx.world_size)  # x world_size: undone by the mean over the ranks
                    _average_grads(params_cf + (params_face if stage != "pretrain" else []), ctx)
                else:
                    ctx.backward(loss)
                ctx.optimizer_step(opt)
                gstep += 1; step_in_stage += 1
                last = logs
                if stage == "align" and fixed_steps is not None:
                    if step_in_stage % cfg.log_every == 0 or step_in_stage == fixed_steps:
                        _check_finite(nonfinite, stage, gstep, ctx)
                        m = _step_metrics(cfg, cf, fm, B, stage, step_in_stage, gstep, align_log, logs, ctx)
                        ck = write(stage, False, step_in_stage, {}) if step_in_stage < fixed_steps else None
                        ctx.report(m, checkpoint=ck)
                    if step_in_stage >= fixed_steps:
                        break
            epoch += 1
            _check_finite(nonfinite, stage, gstep, ctx)
            if fixed_steps is None:
                vr = val_recall(cf, rec)
                ctx.report({"step": gstep, "epoch": epoch, "stage": stage, "val/recall@20": vr,
                            **{f"train/{k}": v for k, v in _global(last, ctx).items()}})
                if vr > best:
                    best, bad = vr, 0
                    best_state = (copy.deepcopy(cf.state_dict()), copy.deepcopy(fm.state_dict()))
                else:
                    bad += 1
                if patience is not None and bad >= patience:
                    stop = True
        if best_state is not None and patience is not None:
            cf.load_state_dict(best_state[0]); fm.load_state_dict(best_state[1])
        timings[f"{stage}_s"] = time.perf_counter() - t0
        timings[f"{stage}_epochs"] = epoch
        t_eval = time.perf_counter()
        m, extra = evaluate_stage(cfg, stage, cf, fm, B, bb, with_face=stage != "pretrain", cache=rand_hit)
        if stage == "pretrain":
            m |= ev.rank_metrics(ev.popularity_scores(rec.train, rec.n_users, rec.n_items), rec.train, rec.test,
                                 cfg.topk, prefix="popularity/test")
        timings[f"{stage}_eval_s"] = time.perf_counter() - t_eval
        summary |= m
        if extra.get("examples"):
            summary[f"examples_{stage}"] = extra["examples"]
        summary["timings"] = timings
        report = {"step": gstep, "epoch": epoch, "stage": stage, "val/recall@20": m[f"{stage}/val/recall@20"],
                  **{f"train/{k}": v for k, v in _global(last, ctx).items()},  # the stage's last step
                  **summary, **{f"time/{k}": v for k, v in timings.items()}}
        report = {k: v for k, v in report.items() if k != "timings" and not k.startswith("examples_")}
        writer = write(stage, True, step_in_stage, extra)
        ctx.report(report, checkpoint=writer)
        if cfg.stage_dir and ctx.is_main:  # relative: inside the run folder, never the working directory
            writer(ctx.write_path(cfg.stage_dir) / f"stage_{stage}")
    out = {k: v for k, v in summary.items() if k != "timings"}
    last_stage = cfg.stages[-1]
    out["step"] = gstep
    out["val/recall@20"] = float(summary.get(f"{last_stage}/val/recall@20", float("nan")))
    out |= {f"time/{k}": v for k, v in timings.items()}
    out["time/total_s"] = time.perf_counter() - t_start
    return out


def _sharded_step(cfg: Config, stage: str, ctx, cf_fwd, fm_fwd, fm: FACE, bb, B: Bundle, tb: torch.Tensor, tpos,
                  gb_host: np.ndarray, rng: np.random.Generator) -> dict:
    """One rank's share of a global batch's loss (world_size > 1): each term is this rank's part of the whole
    batch's mean (its rows' sum over the global count), so the ranks' parts add up to the 1-worker loss and the mean
    of their gradients x world_size is its gradient. The align rows are drawn from the GLOBAL batch by the shared
    sampler (the same draws as on one worker); this rank encodes those whose triple it holds and scores them
    against the profile embeddings of all of them (one-directional InfoNCE: the negatives are constants).
    Returns {"loss": the part to backward (x world_size by the caller), and the detached parts (l_bpr, ...)}."""
    dev = ctx.device
    n_glob, n_loc = len(gb_host), len(tb)
    align = stage == "align"
    if align:  # the shared sampler's draw, on every rank alike (before any early return)
        upos, uu, ipos, ii = align_rows(gb_host, cfg.align_rows, rng)
    keys = ["l_bpr"] + (["l_vq", "l_rec"] if stage != "pretrain" else []) + (["l_align"] if align else [])
    zero = torch.zeros((), device=dev)
    if n_loc == 0:  # a global batch smaller than the world: this rank holds none of it
        return {"loss": zero, **{k: zero for k in keys}}
    share = n_loc / n_glob
    with ctx.autocast():
        eu, ei = cf_fwd(cfg.keep_rate)
        u, p, q = eu[tb[:, 0]], ei[tb[:, 1]], ei[tb[:, 2]]
        l_bpr = bpr_loss(u.float(), p.float(), q.float())
        loss = share * l_bpr
        logs = {"l_bpr": share * l_bpr.detach()}
        if stage != "pretrain":
            x = torch.cat([u, p, q])
            o = fm_fwd(x)
            l_rec = torch.nn.functional.mse_loss(o["x_hat"].float(), x.detach().float())
            loss = loss + share * (cfg.vq_weight * o["l_vq"].float() + cfg.recons_weight * l_rec)
            logs |= {"l_vq": share * o["l_vq"].detach().float(), "l_rec": share * l_rec.detach()}
        if align:
            ux, uk, ix, ik = _local_align(upos, uu, ipos, ii, n_glob, n_loc, tpos)
            e = torch.cat([B.user_text[torch.as_tensor(uu, dtype=torch.long, device=dev)],
                           B.item_text[torch.as_tensor(ii, dtype=torch.long, device=dev)]])  # every align row's
            l_al = zero
            if len(ux) + len(ix):
                ix_ = lambda a: torch.as_tensor(a, dtype=torch.long, device=dev)  # noqa: E731
                c = torch.cat([lm_encode(bb, fm, o["z_st"][ix_(ux)], B.user_prompt),
                               lm_encode(bb, fm, o["z_st"][ix_(ix)], B.item_prompt)])
                target = ix_(np.concatenate([uk, len(uu) + ik]))  # the rows' places in the global align list
                l_al = info_nce_part(c.float(), e, target, cfg.temperature, len(e))
            loss = loss + cfg.align_weight * l_al
            logs["l_align"] = l_al.detach()
    return {"loss": loss, **logs}


def _check_finite(flag: torch.Tensor, stage: str, gstep: int, ctx=None) -> None:
    """Raise if any loss since the stage began was non-finite (read where the loop reads scalars anyway); with
    several ranks, on every rank if on any (one collective), so no rank is left waiting at the next one."""
    if ctx is not None and ctx.world_size > 1:
        flag = ctx.all_reduce(flag.float().reshape(1).to(ctx.device), op="sum") > 0
    if bool(flag):
        raise FloatingPointError(f"{stage}: non-finite loss at or before step {gstep}")


def _step_metrics(cfg, cf, fm, B, stage, step_in_stage, gstep, align_log, logs, ctx=None) -> dict:
    rec = B.rec
    recent = torch.stack(align_log[-cfg.log_every:]).tolist()  # the one read of the window's L_align values
    l_align = float(np.mean(recent))
    if ctx is not None and ctx.world_size > 1:  # the ranks' shares of the window mean: their sum is the whole batch's
        l_align = float(_global({"a": l_align}, ctx)["a"])
        logs = _global(logs, ctx)
    m = {"step": gstep, "align_step": step_in_stage, "stage": stage, "val/recall@20": val_recall(cf, rec),
         "align/l_align": l_align, **{f"train/{k}": float(v) for k, v in logs.items()}}
    if rec.concept_words is not None:
        with torch.no_grad():
            fm.eval()
            _, ei = cf(1.0)
            di = fm.descriptors(ei).cpu().numpy()
            fm.train()
        m["align/precision_item"] = ev.precision(di, ev.ground_truth(rec, "item"))
    return m


def _extras(B: Bundle, stage: str, extra: dict) -> dict:
    rec = B.rec
    return {"vocab": {"words": B.words, "token_ids": B.token_ids},
            "entities": {"user_ids": rec.user_ids.tolist(), "item_ids": rec.item_ids.tolist(),
                         "titles": rec.item_titles, "item_noun": rec.item_noun, "stats": rec.stats,
                         "train": rec.train.tolist()},
            "stage": {"stage": stage, **extra}}


def explain(cfg: Config, ctx) -> dict:
    """face.explain: a checkpoint in (init_from), descriptors.jsonl with every user's and item's W words out, in
    the run folder (or stage_dir: relative, inside the run folder)."""
    from methodlab.methods.face.predictor import Predictor

    src = read_path(cfg.init_from, "init_from", INIT_WHAT, INIT_HINT)
    pred = Predictor.from_checkpoint(src, device=ctx.device)
    out_dir = ctx.write_path(cfg.stage_dir or ".")
    path = out_dir / "descriptors.jsonl"
    if ctx.is_main:  # one writer: every rank computes the same descriptors
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for kind, ids, desc in (("user", pred.user_ids, pred.desc_u), ("item", pred.item_ids, pred.desc_i)):
                for r, i in enumerate(ids):
                    f.write(json.dumps({"entity": kind, "id": int(i), "descriptors": [pred.words[j] for j in desc[r]]}) + "\n")
    m = {"step": 0, "val/recall@20": float(pred.state.get("summary", {}).get("val/recall@20", 0.0) or 0.0),
         "entities": len(pred.user_ids) + len(pred.item_ids)}
    ctx.report(m)
    return m | {"descriptors": str(path)}
