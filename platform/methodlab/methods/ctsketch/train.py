"""ctsketch fit, top to bottom: sketches built once per level (timed apart), then Adam on the perception net
only, through the sketched tree (or a baseline's loss), over one stage or a size curriculum. Stops on steps,
epochs or training wall time (evaluations excluded); evaluates every eval_every_steps / eval_every_s and at each
stage switch; keeps the best-validation weights; checkpoints resume at the saved step (batch order and sequences
are functions of (seed, stage, epoch), so nothing else needs saving)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.ctsketch.config import Config
from methodlab.methods.ctsketch.data import build_sequences, load_pools, sample_sequences
from methodlab.methods.ctsketch.evaluate import evaluate, n4_sequences
from methodlab.methods.ctsketch.model import build_net, digit_probs
from methodlab.methods.ctsketch.tree import make_tree, sequence_loss

SLUG = "ctsketch"


def _as(cfg: Config, algorithm: str) -> Config:
    """Settings baseline.* pin the algorithm (the checkpoint's config.json then names it)."""
    from pydantic import ValidationError

    from methodlab.core import ConfigError

    if cfg.algorithm == algorithm:
        return cfg
    try:
        return Config.model_validate({**cfg.model_dump(), "algorithm": algorithm})
    except ValidationError as err:
        raise ConfigError(err.errors()[0]["msg"], field="config.algorithm") from None


def fit_exact(cfg: Config, ctx: RunContext) -> dict:
    return fit(_as(cfg, "exact"), ctx)


def fit_exact_conv(cfg: Config, ctx: RunContext) -> dict:
    return fit(_as(cfg, "exact_conv"), ctx)


def fit_indecater(cfg: Config, ctx: RunContext) -> dict:
    return fit(_as(cfg, "indecater"), ctx)


def select_key(cfg: Config, n: int) -> str:
    """Model selection (spec): best val task accuracy for sum with N <= 16, else val per-digit accuracy."""
    return "val/task_acc" if cfg.task == "sum_N" and n <= 16 else "val/digit_acc"


def _tree(cfg: Config, n: int, ctx: RunContext | None = None):
    if cfg.algorithm != "ctsketch":
        return None  # the baselines compute their own output distributions
    progress = ctx.progress if ctx is not None else (lambda items, **_: items)
    device = ctx.device if ctx is not None else None
    return make_tree(cfg.task, n, cfg.method, cfg.sketch_rank, cfg.sketch_seed, cfg.sigma_floor, progress, device,
                     cfg.broken_sketch_seed)


def fit_sketch_only(cfg: Config, ctx: RunContext) -> dict:
    """Setting `sketch_only`: build the sketches of every level, report their relative errors and build time."""
    ctx.limit_threads(cfg.torch_threads)
    t0 = time.perf_counter()
    tree = make_tree(cfg.task, cfg.N, cfg.method, cfg.sketch_rank, cfg.sketch_seed, cfg.sigma_floor, ctx.progress,
                     ctx.device, cfg.broken_sketch_seed)
    build = time.perf_counter() - t0
    errs = tree.rel_errors
    m = {"step": 0, "sketch/build_s": build, "sketch/rel_err_max": max(errs), "val/digit_acc": float("nan"),
         **{f"sketch/rel_err_l{l}": e for l, e in enumerate(errs)}}
    weights = {f"sketch.l{l}.{k}": torch.from_numpy(v.copy())  # host copies of the numpy cores (checkpoint)
               for l, sk in enumerate(getattr(tree, "sketches", [getattr(tree, "sketch", None)])) for k, v in sk.parts.items()}

    def write(d: Path) -> None:
        save_checkpoint(d, method=SLUG, config=cfg, weights=weights, state={"step": 0, "final": True, "metrics": m,
                                                                            "sketch_only": True})
    ctx.report(m, checkpoint=write)
    return m


def _agree_across_ranks(flags: list[bool], ctx: RunContext) -> list[bool]:
    """Each rank measures its own training time, so a time budget or a timed evaluation could fire on one rank
    and not on another: a rank that stops alone leaves the others waiting in the gradient all-reduce, and a
    report (a barrier in Ray Train) on one rank only hangs the run. Any rank's flag counts for all."""
    if ctx.world_size == 1:
        return flags
    t = torch.tensor([float(f) for f in flags], dtype=torch.float32, device=ctx.device)
    ctx.all_reduce(t, op="sum")  # logical OR: set on any rank <=> sum > 0
    return [x > 0.0 for x in t.tolist()]


def fit(cfg: Config, ctx: RunContext) -> dict:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    pools = load_pools(cfg.dataset, cfg.data_root, cfg.split_seed, device=ctx.device)
    with ctx.init_module():
        net = build_net(cfg.net_kind, pools.side)
    model = ctx.prepare_model(net)
    net = ctx.unwrap(model)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    stages = cfg.stages()
    spe = [max(1, math.ceil(cfg.n_train_seq / cfg.batch_size)) for _ in stages]  # steps per epoch
    bounds, start = [], 0  # [start, end) in global steps per stage
    for i, st in enumerate(stages):
        last = i == len(stages) - 1
        length = st.max_steps if st.max_steps is not None else (None if (cfg.curriculum and cfg.time_budget_s) else cfg.epochs * spe[i])
        end = math.inf if length is None else start + length
        if last and cfg.max_steps is not None:
            end = min(end, cfg.max_steps)
        bounds.append((start, end))
        start = end
    budget_s = cfg.time_budget_s
    if cfg.stage_steps_from:  # a control: the last stage runs as many steps as the reference run's did
        budget_s = None
        ref = int(load_checkpoint(cfg.stage_steps_from, method=SLUG).state["step"])
        if ref <= bounds[-1][0]:
            from methodlab.core import ConfigError

            raise ConfigError(f"{cfg.stage_steps_from}: that run stopped at step {ref}, before this run's last "
                              f"stage starts (step {bounds[-1][0]})", field="config.stage_steps_from")
        bounds[-1] = (bounds[-1][0], ref)
    step, train_s, best, best_w, last_eval = 0, 0.0, None, None, {}
    stage_log: list[dict] = []
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        net.load_state_dict({k[4:]: v for k, v in ck.weights.items() if k.startswith("net.")})
        if any(k.startswith("best.") for k in ck.weights):
            best_w = {k[5:]: v for k, v in ck.weights.items() if k.startswith("best.")}
        opt.load_state_dict(ck.torch_state["optimizer"])
        step, train_s = int(ck.state["step"]), float(ck.state["train_s"])
        best, last_eval, stage_log = ck.state.get("best"), ck.state.get("last_eval", {}), ck.state.get("stages", [])
        ctx.history[:] = list(ck.extras.get("history", []))

    n4 = n4_sequences(cfg, pools.y_test)  # on the pools' device, as every sequence set
    trees, seq_cache, sketch_s = {}, {}, 0.0

    def stage_data(i: int):
        n = stages[i].N
        nonlocal sketch_s
        if n not in trees:
            t0 = time.perf_counter()
            trees[n] = _tree(cfg, n, ctx)
            sketch_s += time.perf_counter() - t0
        if i not in seq_cache:
            seq_cache[i] = build_sequences(cfg, pools, n, stage=i)
        return trees[n], seq_cache[i]

    def do_eval(i: int) -> dict:
        tree, seqs = stage_data(i)
        t0 = time.perf_counter()
        m = evaluate(cfg, net, pools, seqs, tree, n4)
        m["time/eval_s"] = time.perf_counter() - t0
        return m

    gen = torch.Generator(device=ctx.device)  # batch order, fresh sequences and IndeCateR samples, where they are used
    loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)  # summed on the device (float64, as the
    # Python float sum it replaces); read at report time only
    loss_n, next_eval_t = 0, (cfg.eval_every_s or math.inf)
    if cfg.eval_every_s:
        next_eval_t = (math.floor(train_s / cfg.eval_every_s) + 1) * cfg.eval_every_s
    while True:
        i = next((k for k, (a, b) in enumerate(bounds) if a <= step < b), None)
        budget_out = budget_s is not None and train_s >= budget_s
        if i is None or budget_out:
            break
        tree, seqs = stage_data(i)
        a = bounds[i][0]
        if step == a and i > 0 and not any(s.get("stage") == i - 1 for s in stage_log):
            m = do_eval(i - 1)  # at the switch: after stage i-1, before the first step of stage i
            stage_log.append({"stage": i - 1, "N": stages[i - 1].N, "steps": step - bounds[i - 1][0],
                              "train_s": train_s, **{k: v for k, v in m.items() if not k.startswith("eval/class_top")}})
        # ---- batch: fixed permutation per (seed, stage, epoch), or fresh sequences per step
        t0 = time.perf_counter()
        if cfg.fresh_sequences:
            gen.manual_seed(cfg.seed * 7_919 + step)
            s = sample_sequences(pools.y_train, cfg.batch_size, stages[i].N, cfg.task, gen)
            idx, target = s.idx, s.target
        else:
            e, pos = divmod(step - a, spe[i])
            gen.manual_seed(cfg.seed * 1_000_003 + i * 10_007 + e)
            perm = torch.randperm(cfg.n_train_seq, generator=gen, device=ctx.device)
            perm = perm[pos * cfg.batch_size:(pos + 1) * cfg.batch_size]
            idx, target = seqs["train"].idx[perm], seqs["train"].target[perm]
        idx, target = ctx.shard(idx, target)  # this rank's rows of the global batch (all of it on one worker)
        with ctx.autocast():  # the perception net; probabilities come out in float32
            probs = digit_probs(model, pools.x_train, idx, cfg.distinct_images)
        loss = sequence_loss(cfg, tree, probs, target, gen)  # the tree and the loss in float32
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        ctx.optimizer_step(opt)
        step += 1
        train_s += time.perf_counter() - t0
        loss_sum, loss_n = loss_sum + loss.detach().double(), loss_n + 1
        done = step >= bounds[-1][1] or (budget_s is not None and train_s >= budget_s)
        timed = cfg.eval_every_s is not None and train_s >= next_eval_t
        if budget_s is not None or cfg.eval_every_s is not None:  # step-only decisions agree already
            done, timed = _agree_across_ranks([done, timed], ctx)
        evaluate_now = step % cfg.eval_every_steps == 0 or timed or done
        if not (evaluate_now or step % cfg.log_every == 0):
            continue
        if timed:
            next_eval_t = (math.floor(train_s / cfg.eval_every_s) + 1) * cfg.eval_every_s
        mean_loss = float(loss_sum) / max(1, loss_n)  # the one read of the window's losses
        if ctx.world_size > 1:  # the whole batch's loss (the mean of the ranks' shard means), as on one worker
            mean_loss = float(ctx.all_reduce(torch.tensor([mean_loss], dtype=torch.float32, device=ctx.device)))
        if not math.isfinite(mean_loss):  # any non-finite step loss makes the window's sum non-finite
            raise FloatingPointError(f"non-finite loss {mean_loss} in steps {step - loss_n + 1}..{step} "
                                     f"(stage N={stages[i].N})")
        m = {"step": step, "epoch": (step - a) / spe[i], "stage": i, "N": stages[i].N,
             "train/loss": mean_loss, "time/train_s": train_s, "time/sketch_s": sketch_s,
             "sketch/rel_err_max": max(tree.rel_errors) if tree is not None else float("nan")}
        loss_sum, loss_n = torch.zeros((), dtype=torch.float64, device=ctx.device), 0
        if evaluate_now:
            last_eval = do_eval(i)
            key = select_key(cfg, stages[i].N)
            # selection only within the last stage: an earlier stage's N answers a different question
            if i == len(stages) - 1 and (best is None or last_eval[key] > best["value"]):
                best = {"value": last_eval[key], "step": step,
                        "metrics": {k: v for k, v in last_eval.items() if not k.startswith("eval/class")}}
                best_w = {k: v.detach().clone() for k, v in net.state_dict().items()}
        m.update(last_eval)
        m.setdefault("val/digit_acc", float("nan"))
        if best is not None:
            m.update({f"best/{k}": v for k, v in best["metrics"].items()})
            m["best/step"] = best["step"]
        if done:
            m["stages"] = len(stage_log) + 1
            for s in stage_log:
                for k in ("eval/digit_acc", "eval/e", "train_s", "steps"):
                    if k in s:
                        m[f"stage{s['stage']}/{k.split('/')[-1]}"] = s[k]
                for k in s:  # per-class accuracy and mean expected digit at the switch (issue 22, Claim D)
                    if k.startswith(("eval/class_acc_", "eval/class_mean_")):
                        m[f"stage{s['stage']}/{k.split('/')[-1]}"] = s[k]
        writer = None
        if done or step % cfg.checkpoint_every == 0 or (evaluate_now and cfg.eval_every_s):
            state = {"step": step, "train_s": train_s, "final": done, "best": best, "last_eval": last_eval,
                     "stages": stage_log, "side": pools.side, "metrics": m}
            w = {f"net.{k}": v for k, v in net.state_dict().items()}
            if best_w is not None:
                w.update({f"best.{k}": v for k, v in best_w.items()})
            tstate = {"optimizer": opt.state_dict()}

            def writer(d: Path, w=w, state=state, tstate=tstate) -> None:
                save_checkpoint(d, method=SLUG, config=cfg, weights=w, torch_state=tstate, state=state,
                                extras={"history": ctx.history})
        ctx.report(m, checkpoint=writer)
        if done:
            break
    return ctx.history[-1] if ctx.history else {}
