"""rule_unlearning stages, top to bottom: the tiny GPT pretrained once on the synthetic corpus (cached under a hash
of corpus + model config), Rejection Steering (refusal SFT, also the KL reference), ReBO with GRPO (or
REINFORCE++), and the baselines (GA, NPO, RS-only) in the same code path. Settings:
train / rebo_grpo (the whole pipeline), pretrain_tiny_lm, rs_sft, eval, baseline."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
from pathlib import Path

import torch

from methodlab.core import RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.rule_unlearning import grpo
from methodlab.methods.rule_unlearning.config import Config
from methodlab.methods.rule_unlearning.data import Splits, build_splits, pretrain_pairs, rs_examples
from methodlab.methods.rule_unlearning.evaluate import complete, evaluate
from methodlab.methods.rule_unlearning.model import (build_model, device_of, lm_loss, load_weights, n_params, pack,
                                                     token_logprobs, weights)
from methodlab.methods.rule_unlearning.rewards import reward

SLUG = "rule_unlearning"
CORPUS_VERSION = "1"


# ------------------------------------------------------------------------------------------ helpers
def _new_model(cfg: Config, tok, ctx: RunContext) -> torch.nn.Module:
    """A fresh model (tiny GPT or SmolLM2) with its parameters on ctx.device. SmolLM2: a fresh copy of
    SmolLM2-135M-Instruct (pretrained; loaded on the CPU once per process, the copy moved to ctx.device)."""
    with ctx.init_module():
        if getattr(cfg, "backbone", "tiny") == "smollm2":
            from methodlab.methods.rule_unlearning.hf_backbone import load_smollm2

            return load_smollm2(ctx.device)[0]
        return build_model(cfg, len(tok), tok.pad, device=ctx.device)


def _batch(tok, pairs: list[tuple[str, str]], loss_on: str = "response", device=None):
    """ids, target mask (response tokens + <eos>, or every token after <bos>), packed on the host and moved to
    `device` once."""
    prompts = [tok.prompt_ids(p) for p, _ in pairs]
    resps = [tok.encode(r) + [tok.eos] for _, r in pairs]
    ids, mask, P = pack(prompts, resps, tok.pad, device)
    if loss_on == "all":
        mask = (ids != tok.pad) & (ids != tok.bos)
    return ids, mask


def _lr(step: int, total: int, lr: float, warmup: int = 0, floor: float = 0.1) -> float:
    if warmup and step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def _agree(ctx: RunContext, flag: bool) -> bool:
    """Rank 0's decision on every rank (a wall-clock cap or an early stop must end every rank's loop at the same
    step, or DDP's next gradient all-reduce waits forever); the flag itself at world size 1."""
    if ctx.world_size <= 1:
        return flag
    return bool(ctx.broadcast(torch.tensor([float(flag)], dtype=torch.float32, device=ctx.device))[0] > 0)


def _global_mean(ctx: RunContext, value) -> float:
    """The mean over the ranks of a per-rank value (a loss already weighted by its shard's share of the global
    batch, so the mean is the global batch's loss); the value itself at world size 1."""
    if ctx.world_size <= 1:
        return float(value)
    return float(ctx.all_reduce(torch.tensor([float(value)], dtype=torch.float32, device=ctx.device))[0])


def teacher_forced_em(model, tok, pairs, batch: int = 64) -> float:
    """Share of pairs whose whole response (+ <eos>) is the argmax at every position given the gold prefix: the
    same as greedy exact match, in one forward pass."""
    was = model.training
    model.eval()
    hits = 0
    dev = device_of(model)
    with torch.no_grad():
        for s in range(0, len(pairs), batch):
            ids, mask = _batch(tok, pairs[s:s + batch], device=dev)
            pred = model(ids)[:, :-1].argmax(-1)
            ok = (pred == ids[:, 1:]) | ~mask[:, 1:]
            hits += int(ok.all(1).sum())
    model.train(was)
    return hits / max(1, len(pairs))


def sft(model, tok, pairs, *, lr: float, epochs: int, batch: int, seed: int, ctx: RunContext, warmup: int = 0,
        weight_decay: float = 0.0, loss_on: str = "response", max_s: float | None = None, stop=None,
        eval_every: int = 0) -> dict:
    """Plain SFT (cross-entropy on response tokens), AdamW, warm-up + cosine; data parallel over ranks (each rank
    its shard of the same global batch). `stop(model) -> bool` checked every eval_every epochs."""
    net = ctx.prepare_model(model)
    model = ctx.unwrap(net)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    per_epoch = math.ceil(len(pairs) / batch)
    total, step, t0, epoch, last = epochs * per_epoch, 0, time.perf_counter(), 0, None
    stop_checked = False  # whether `stop` saw the final weights (no training after its last call)
    g = torch.Generator(device="cpu").manual_seed(seed)  # the data order: host-side index lists (same on every rank)
    out_of_time = lambda: max_s is not None and _agree(ctx, time.perf_counter() - t0 > max_s)  # noqa: E731
    model.train()
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(len(pairs), generator=g, device="cpu").tolist()
        for k in range(per_epoch):
            glob = perm[k * batch:(k + 1) * batch]  # the global batch; this rank's shard (all of it on one worker)
            idx = ctx.shard(glob)
            if not glob:
                continue
            ids, mask = _batch(tok, [pairs[i] for i in (idx or glob[:1])], loss_on, ctx.device)
            for group in opt.param_groups:
                group["lr"] = _lr(step, total, lr, warmup)
            with ctx.autocast():
                loss = lm_loss(net, ids, mask)
            if ctx.world_size > 1:  # weight the shard's token mean by its share of the global batch's target tokens:
                # DDP's mean over the ranks is then the whole batch's token mean (shards differ in tokens)
                n_all = int(_batch(tok, [pairs[i] for i in glob], loss_on)[1].sum())
                loss = loss * (mask.sum() * (ctx.world_size / max(1, n_all))) if idx else loss * 0.0
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            ctx.clip_grad_norm_(model.parameters(), 1.0, opt)
            ctx.optimizer_step(opt)
            step += 1
            last = loss.detach()  # read once, at the end
            if out_of_time():
                break
        stop_checked = False
        if stop is not None and eval_every and (epoch % eval_every == 0 or epoch == epochs):
            stop_checked = True
            if _agree(ctx, stop(model)):
                break
        if out_of_time():
            break
    return {"epochs": epoch, "steps": step, "seconds": time.perf_counter() - t0,
            "loss": _global_mean(ctx, last) if last is not None else float("nan"), "stop_checked": stop_checked}


# ------------------------------------------------------------------------------------------ stage 0
def cache_dir(cfg: Config) -> Path:
    from methodlab.data.cache import data_dir

    root = cfg.cache_dir or str(data_dir())
    return Path(root) / SLUG


def pretrain_key(cfg: Config) -> str:
    from methodlab.data.rule_unlearning_corpus import build_vocab

    keys = ("n_authors", "unknown_frac", "data_seed", "n_layers", "d_model", "n_heads", "context", "pretrain_lr",
            "pretrain_epochs", "pretrain_batch", "pretrain_target_em", "pretrain_loss", "pretrain_seed")
    extra = {"backbone": cfg.backbone} if cfg.backbone != "tiny" else {}  # tiny keys unchanged (existing caches stay valid)
    blob = json.dumps({"v": CORPUS_VERSION, "vocab": build_vocab(), **{k: getattr(cfg, k) for k in keys}, **extra},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrain(cfg: Config, sp: Splits, ctx: RunContext) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(cfg.pretrain_seed)
    model = _new_model(cfg, sp.tok, ctx)
    pairs = pretrain_pairs(sp.corpus)
    facts = [(q.prompt, q.answer) for q in sp.corpus.qa]
    em = {"v": 0.0}

    def stop(m) -> bool:
        em["v"] = teacher_forced_em(m, sp.tok, facts)
        return em["v"] >= cfg.pretrain_target_em

    info = sft(model, sp.tok, pairs, lr=cfg.pretrain_lr, epochs=cfg.pretrain_epochs, batch=cfg.pretrain_batch,
               seed=cfg.pretrain_seed, ctx=ctx, loss_on=cfg.pretrain_loss, max_s=cfg.pretrain_max_s, stop=stop,
               eval_every=5 if cfg.backbone == "tiny" else 1, weight_decay=0.01)
    if not info["stop_checked"]:
        em["v"] = teacher_forced_em(model, sp.tok, facts)
    return model.eval(), {"pretrain/qa_em": em["v"], "pretrain/epochs": info["epochs"],
                          "pretrain/seconds": info["seconds"], "pretrain/params": n_params(model),
                          "pretrain/tokens_per_epoch": sum(len(sp.tok.pair_ids(p, a)[0]) for p, a in pairs),
                          "pretrain/cached": 0.0}


def base_model(cfg: Config, sp: Splits, ctx: RunContext) -> tuple[torch.nn.Module, dict]:
    """The shared base: loaded from the cache when present, else pretrained (and cached by rank 0)."""
    d = cache_dir(cfg) / pretrain_key(cfg)
    if cfg.pretrain_cache and (d / "manifest.json").exists():
        ck = load_checkpoint(d, method=SLUG)
        model = _new_model(cfg, sp.tok, ctx)
        load_weights(model, ck.weights)
        return model.eval(), {**ck.state.get("pretrain", {}), "pretrain/cached": 1.0}
    model, info = pretrain(cfg, sp, ctx)
    if cfg.pretrain_cache and ctx.is_main:
        save_checkpoint(d, method=SLUG, config=cfg, weights=weights(model), state={"pretrain": info, "step": 0},
                        extras={"vocab": sp.tok.vocab})
    return model, info


def base_eval(cfg: Config, sp: Splits, base, write: bool = True) -> dict:
    """Evaluation of the base model (cached beside it when the cache is on: it depends on the splits only; written
    when `write`: rank 0 only in a data-parallel run)."""
    keys = ("forget_frac", "retain_eval_prompts", "n_forget", "n_neighbours", "max_new_tokens", "answer_rouge")
    k = hashlib.sha256(json.dumps({"p": cfg.refusal_patterns, **{x: getattr(cfg, x) for x in keys}},
                                  sort_keys=True).encode()).hexdigest()[:12]
    f = cache_dir(cfg) / pretrain_key(cfg) / f"base_eval_{k}.json"
    if cfg.pretrain_cache and f.exists():
        return json.loads(f.read_text())
    out = {k2.replace("eval/", "base/"): v for k2, v in evaluate(base, sp, cfg).items()}
    if write and cfg.pretrain_cache and f.parent.exists():
        tmp = f.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(out))
        os.replace(tmp, f)
    return out


# ------------------------------------------------------------------------------------------ stage 1
def rejection_steering(cfg: Config, sp: Splits, base, ctx: RunContext) -> tuple[torch.nn.Module, dict]:
    model = copy.deepcopy(base)
    pairs = rs_examples(sp, cfg, cfg.seed)
    torch.manual_seed(cfg.seed)
    info = sft(model, sp.tok, pairs, lr=cfg.rs_lr, epochs=cfg.rs_epochs, batch=cfg.rs_batch, seed=cfg.seed, ctx=ctx,
               warmup=cfg.rs_warmup)
    return model.eval(), {"rs/seconds": info["seconds"], "rs/steps": info["steps"], "rs/loss": info["loss"],
                          "rs/examples": len(pairs)}


# ------------------------------------------------------------------------------------------ stage 2
def rl_prompts(cfg: Config, sp: Splits, base) -> list[dict]:
    """D_f (reject: the target name and the fact that must not leak) and D_b (normal: reference answers)."""
    out = [{"prompt": q.prompt, "kind": "reject", "answer": q.answer, "target": q.name} for q in sp.forget_train]
    refs = [q.answer for q in sp.boundary]
    if cfg.boundary_reference == "base_greedy":
        refs = complete(base, sp.tok, [q.prompt for q in sp.boundary], cfg.max_new_tokens)
    out += [{"prompt": q.prompt, "kind": "normal", "answer": r, "target": q.name} for q, r in zip(sp.boundary, refs)]
    return out


def shuffled_pick(n: int, batch: int, seed: int, step: int) -> list[int]:
    """The official sampler (RandomSampler + drop_last over the whole RL file): step's slice of the permutation of
    its pass; n // batch slices per pass, a new seeded permutation each pass (resume-safe: a function of step)."""
    if batch > n:
        from methodlab.core import ConfigError

        raise ConfigError(f"rl_sampling=shuffled: prompts_per_step={batch} exceeds the {n} RL prompts (D_f + D_b); "
                          "drop_last would leave no batch", field="prompts_per_step")
    per_pass = n // batch
    g = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + 500_009 + step // per_pass)
    j = step % per_pass
    return torch.randperm(n, generator=g, device="cpu")[j * batch:(j + 1) * batch].tolist()


def sample_prompts(cfg: Config, records: list[dict], step: int, ctx: RunContext) -> list[dict]:
    """prompts_per_step records (stratified: forget_share of them forget prompts, drawn with replacement; shuffled:
    the official code's slices of a permutation of all records): the same global draw on every rank (seeded by
    step), this rank's shard of it (ctx.shard on the record indices; all on one worker)."""
    if cfg.rl_sampling == "shuffled":
        return [records[i] for i in ctx.shard(shuffled_pick(len(records), cfg.prompts_per_step, cfg.seed, step))]
    g = torch.Generator(device="cpu").manual_seed(cfg.seed * 1_000_003 + step)  # a host-side choice of records
    f = [i for i, r in enumerate(records) if r["kind"] == "reject"]
    b = [i for i, r in enumerate(records) if r["kind"] == "normal"]
    n_f = min(cfg.prompts_per_step, max(1, round(cfg.forget_share * cfg.prompts_per_step))) if b else cfg.prompts_per_step
    pick = [f[i] for i in torch.randint(len(f), (n_f,), generator=g, device="cpu").tolist()]
    if b and cfg.prompts_per_step - n_f > 0:
        pick += [b[i] for i in torch.randint(len(b), (cfg.prompts_per_step - n_f,), generator=g, device="cpu").tolist()]
    return [records[i] for i in ctx.shard(pick)]


def rl_step(cfg: Config, tok, policy, net, ref, opt, prompts: list[dict], gen: torch.Generator,
            ctx: RunContext) -> dict:
    """One ReBO step: n rollouts per prompt (groups kept together), verifiable rewards, advantages, PPO update(s)
    with the k3 KL to the reference (GRPO) or a KL-shaped reward with batch normalisation (REINFORCE++).
    Rollouts, log-probs and the update run on the policy's device (`gen` lives there); the rewards are Python
    string checks on the decoded completions (one read back per step). Returned stats are tensors or floats,
    read when reported.
    Data parallel: each rank rolls out its shard of the step's prompts with its own rank-seeded `gen` (rollouts are
    independent samples, so per-rank seeds are legitimate; the prompts per step add up to the 1-worker batch). Groups
    stay whole on one rank (GRPO's group baseline is local); the token-mean losses are weighted by the shard's share
    of the global batch's response tokens (DDP's mean is then the whole batch's token mean), REINFORCE++ takes its
    baseline and scale over the global batch, and the returned stats are those of the global batch."""
    from methodlab.methods.rule_unlearning.model import generate

    n = cfg.group_size
    prompt_ids = [tok.prompt_ids(p["prompt"]) for p in prompts for _ in range(n)]
    ids, mask, P = generate(policy, prompt_ids, cfg.max_new_tokens, tok.eos, tok.pad, cfg.temperature, gen)
    texts = [tok.decode(row) for row in ids[:, P:].tolist()]
    recs = [p for p in prompts for _ in range(n)]
    kw = dict(variant=cfg.reward_variant, rouge_threshold=cfg.rouge_threshold, require_no_answer=cfg.require_no_answer,
              leak_threshold=cfg.answer_rouge, patterns=tuple(cfg.refusal_patterns))
    R_host = torch.tensor([reward(r["kind"], t, answer=r["answer"], target=r["target"], **kw) for r, t in zip(recs, texts)],
                          device="cpu")  # rewards come from host strings: their statistics are read here, no sync
    R = R_host.to(ids.device)
    with torch.no_grad(), ctx.autocast():
        old = token_logprobs(policy, ids)
        ref_lp = token_logprobs(ref, ids)
    fmask = mask.float()
    dp = ctx.world_size > 1
    if cfg.rl_algo == "grpo":
        adv = grpo.group_advantages(R, n)
        if dp:
            n_tok = ctx.all_reduce(fmask.sum().reshape(1), op="sum")[0]
    else:
        kl_seq = ((old - ref_lp) * fmask).sum(1)
        shaped = R - cfg.kl_coef * kl_seq
        if dp:  # the global batch's baseline and scale (sum, sum of squares, count), and its response tokens
            r = shaped.float()
            tot = ctx.all_reduce(torch.stack([fmask.sum(), r.sum(), (r * r).sum()]), op="sum")
            n_tok, cnt = tot[0], cfg.prompts_per_step * n  # the global batch's rollouts (known on the host)
            mu = tot[1] / cnt
            sd = ((tot[2] - cnt * mu * mu).clamp_min(0) / max(1, cnt - 1)).sqrt()  # unbiased, as torch.std
            adv = (r - mu) / (sd + 1e-6) if cnt > 1 else torch.zeros_like(r)
        else:
            adv = grpo.batch_advantages(shaped)
    share = fmask.sum() * ctx.world_size / n_tok.clamp_min(1) if dp else None
    policy.train()
    stats = {}
    for _ in range(cfg.ppo_epochs):
        with ctx.autocast():
            logp = token_logprobs(net, ids)  # float32 (token_logprobs upcasts the logits)
        pl, info = grpo.policy_loss(logp, old, adv, fmask, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
        kl = grpo.masked_mean(grpo.k3(logp, ref_lp), fmask)
        loss = pl + cfg.kl_coef * kl if cfg.rl_algo == "grpo" else pl
        if dp:  # token means weighted by the shard's share of the global batch's response tokens
            loss, kl, info["clip_frac"] = loss * share, kl * share, info["clip_frac"] * share
        opt.zero_grad(set_to_none=True)
        ctx.backward(loss)
        gn = ctx.clip_grad_norm_(policy.parameters(), cfg.grad_clip, opt)
        ctx.optimizer_step(opt)
        stats = {"rl/loss": loss.detach(), "rl/kl": kl.detach(), "rl/clip_frac": info["clip_frac"], "rl/grad_norm": gn.detach()}
    policy.eval()
    is_f = torch.tensor([r["kind"] == "reject" for r in recs], device="cpu")
    adv_g = adv.view(-1, n)
    if dp:
        return {**stats, **_global_rl_stats(ctx, stats, R_host, is_f, n, adv_g, fmask, cfg.rl_algo == "grpo")}
    return {**stats, "rl/reward": float(R_host.mean()),
            "rl/reward_forget": float(R_host[is_f].mean()) if is_f.any() else float("nan"),
            "rl/reward_boundary": float(R_host[~is_f].mean()) if (~is_f).any() else float("nan"),
            "rl/informative_groups": grpo.informative_groups(R_host, n),
            "rl/adv_group_mean_abs": adv_g.mean(1).abs().max().detach() if cfg.rl_algo == "grpo" else float("nan"),
            "rl/response_tokens": fmask.sum(1).mean()}


def _global_rl_stats(ctx: RunContext, stats: dict, R_host, is_f, n: int, adv_g, fmask, grpo_adv: bool) -> dict:
    """One step's stats over the global batch (data parallel): one float32 all-reduce of the ranks' sums and
    counts; the largest |group mean advantage| through a one-hot slot per rank. The grad norm is the same on every
    rank already (taken after DDP's gradient mean)."""
    R = R_host.float()
    groups = R.view(-1, n)
    host = [float(R.sum()), float(R.numel()), float(R[is_f].sum()), float(is_f.sum()), float(R[~is_f].sum()),
            float((~is_f).sum()), float(((groups.max(1).values - groups.min(1).values) > 1e-9).sum()),
            float(groups.shape[0])]
    slot = torch.zeros(ctx.world_size, dtype=torch.float32, device=ctx.device)
    if grpo_adv:
        slot[ctx.rank] = adv_g.mean(1).abs().max().detach().float()
    dev_part = torch.stack([stats["rl/loss"].float(), stats["rl/kl"].float(), stats["rl/clip_frac"].float(),
                            fmask.sum().float(), torch.tensor(float(fmask.shape[0]), device=fmask.device)])
    v = torch.cat([dev_part.to(ctx.device), torch.tensor(host, dtype=torch.float32, device=ctx.device), slot])
    t = ctx.all_reduce(v, op="sum").tolist()
    w = ctx.world_size
    div = lambda a, b: a / b if b else float("nan")  # noqa: E731
    return {"rl/loss": t[0] / w, "rl/kl": t[1] / w, "rl/clip_frac": t[2] / w,
            "rl/response_tokens": div(t[3], t[4]), "rl/reward": div(t[5], t[6]), "rl/reward_forget": div(t[7], t[8]),
            "rl/reward_boundary": div(t[9], t[10]), "rl/informative_groups": div(t[11], t[12]),
            "rl/adv_group_mean_abs": max(t[13:]) if grpo_adv else float("nan")}


def _writer(cfg, policy, ref, opt, step, ctx, extras, label="rule"):
    def write(d: Path) -> None:
        w = weights(policy)
        if ref is not None:
            w.update(weights(ref, "ref."))
        save_checkpoint(d, method=SLUG, config=cfg, weights=w,
                        torch_state={"optimizer": opt.state_dict()} if opt is not None else None,
                        state={"step": step, "label": label, "metrics": ctx.history[-1] if ctx.history else {}},
                        extras={**extras, "history": ctx.history})
    return write


def _load_policy(path: str | Path, cfg: Config, tok, ctx: RunContext) -> tuple[torch.nn.Module, dict]:
    ck = load_checkpoint(path, method=SLUG)
    model = _new_model(cfg, tok, ctx)
    load_weights(model, {k: v for k, v in ck.weights.items() if not k.startswith("ref.")})
    return model.eval(), ck.state


def _prelude(cfg: Config, ctx: RunContext):
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    sp = build_splits(cfg)
    if cfg.backbone == "smollm2":  # optional showcase: same corpus and splits, SmolLM2's own tokenizer
        from methodlab.methods.rule_unlearning.hf_backbone import load_smollm2

        sp.tok = load_smollm2()[1]
    base, pinfo = base_model(cfg, sp, ctx)
    extras = {"vocab": sp.tok.vocab, "targets": sp.target_names(),
              "neighbours": [sp.corpus.authors[i].name for i in sp.neighbour_ids], "pretrain": pinfo}
    return sp, base, pinfo, extras


def fit(cfg: Config, ctx: RunContext) -> dict:
    """Pretrained base (cached) -> Rejection Steering (the reference) -> ReBO GRPO; evaluation at log steps."""
    sp, base, pinfo, extras = _prelude(cfg, ctx)
    t0 = time.perf_counter()
    step = 0
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        policy = _new_model(cfg, sp.tok, ctx)
        ref = _new_model(cfg, sp.tok, ctx)
        load_weights(policy, {k: v for k, v in ck.weights.items() if not k.startswith("ref.")})
        load_weights(ref, {k[4:]: v for k, v in ck.weights.items() if k.startswith("ref.")})
        step = int(ck.state["step"])
        ctx.history[:] = list(ck.extras.get("history", []))
        rinfo = dict(ck.extras.get("rs", {}))
        bev = dict(ck.extras.get("base_eval", {}))
    else:
        if cfg.init_checkpoint:
            ref, _ = _load_policy(cfg.init_checkpoint, cfg, sp.tok, ctx)
            rinfo = {"rs/from": 1.0}
        else:
            ref, rinfo = rejection_steering(cfg, sp, base, ctx)
        policy = copy.deepcopy(ref)
        bev = base_eval(cfg, sp, base, write=ctx.is_main)
    for p in ref.parameters():
        p.requires_grad_(False)
    ref.eval()
    extras.update(rs=rinfo, base_eval=bev)
    policy = policy.to(ctx.device)  # on its device before the optimiser (restored state follows the parameters)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.rl_lr, weight_decay=cfg.weight_decay)
    if ctx.checkpoint is not None and ck.torch_state:
        opt.load_state_dict(ck.torch_state["optimizer"])
    net = ctx.prepare_model(policy)
    records = rl_prompts(cfg, sp, base)
    if cfg.rl_steps > step and cfg.prompts_per_step < ctx.world_size:
        from methodlab.core import ConfigError

        raise ConfigError(f"prompts_per_step={cfg.prompts_per_step} gives some of the {ctx.world_size} workers no "
                          "prompt: use at least one prompt per worker", field="prompts_per_step")
    # rollout sampling: each rank samples its own rollouts (independent samples: rank-dependent seeds are legitimate)
    gen = torch.Generator(device=ctx.device).manual_seed(cfg.seed * 7919 + ctx.rank + 1)
    if ctx.checkpoint is not None:
        gen.manual_seed(cfg.seed * 7919 + ctx.rank + 1 + 104729 * step)
    if step == 0:
        m0 = {"step": 0, **evaluate(policy, sp, cfg), **bev, **pinfo, **rinfo, "rl/seconds": 0.0}
        ctx.report({**m0, **{k.replace("eval/", "rs_eval/"): v for k, v in m0.items() if k.startswith("eval/")}})
    rl_s = 0.0
    first_kl = float(ctx.history[-1].get("rl/kl_first_update", float("nan"))) if ctx.history else float("nan")
    while step < cfg.rl_steps:
        ts = time.perf_counter()
        prompts = sample_prompts(cfg, records, step, ctx)
        stats = rl_step(cfg, sp.tok, policy, net, ref, opt, prompts, gen, ctx)
        if step == 0:
            first_kl = stats["rl/kl"]  # the first update's KL: 0, the policy starts as the reference
        stats["rl/kl_first_update"] = first_kl
        rl_s += time.perf_counter() - ts
        step += 1
        done = step >= cfg.rl_steps
        if step % cfg.log_every == 0 or done:
            # the RS summary rides along every report, as the base evaluation does
            m = {"step": step, **stats, **evaluate(policy, sp, cfg), **bev, **rinfo, "rl/seconds": rl_s,
                 "wall/seconds": time.perf_counter() - t0}
            save = done or step % cfg.checkpoint_every == 0
            ctx.report(m, checkpoint=_writer(cfg, policy, ref, opt, step, ctx, extras) if save else None)
    if not ctx.history or ctx.history[-1].get("step") != step or "eval/boundary_score" not in ctx.history[-1]:
        m = {"step": step, **evaluate(policy, sp, cfg), **bev}
        ctx.report(m, checkpoint=_writer(cfg, policy, ref, opt, step, ctx, extras))
    return ctx.history[-1]


# ------------------------------------------------------------------------------------------ other settings
def fit_pretrain(cfg: Config, ctx: RunContext) -> dict:
    """Pretrain (or load the cached) tiny LM; reports QA exact match and the base evaluation."""
    sp, base, pinfo, extras = _prelude(cfg, ctx)
    m = {"step": 0, **pinfo, **evaluate(base, sp, cfg)}
    ctx.report(m, checkpoint=_writer(cfg, base, None, None, 0, ctx, extras, "base"))
    return ctx.history[-1]


def fit_rs(cfg: Config, ctx: RunContext) -> dict:
    """Stage 1 only: Rejection Steering from the base (this checkpoint is also RULE's KL reference)."""
    sp, base, pinfo, extras = _prelude(cfg, ctx)
    rs, rinfo = rejection_steering(cfg, sp, base, ctx)
    m = {"step": rinfo["rs/steps"], "epoch": cfg.rs_epochs, **rinfo, **evaluate(rs, sp, cfg),
         **base_eval(cfg, sp, base, write=ctx.is_main)}
    ctx.report(m, checkpoint=_writer(cfg, rs, None, None, rinfo["rs/steps"], ctx, extras, "rs"))
    return ctx.history[-1]


def fit_eval(cfg: Config, ctx: RunContext) -> dict:
    """Evaluate `init_checkpoint` (or the base when None) on forget / neighbour / retain."""
    sp, base, pinfo, extras = _prelude(cfg, ctx)
    model = _load_policy(cfg.init_checkpoint, cfg, sp.tok, ctx)[0] if cfg.init_checkpoint else base
    m = {"step": 0, **evaluate(model, sp, cfg), **base_eval(cfg, sp, base, write=ctx.is_main)}
    ctx.report(m, checkpoint=_writer(cfg, model, None, None, 0, ctx, extras, "eval"))
    return ctx.history[-1]


def fit_baseline(cfg: Config, ctx: RunContext) -> dict:
    """GA (ascent on forget-train answers), NPO (beta, reference = base) or RT (= RS only), same data and base."""
    sp, base, pinfo, extras = _prelude(cfg, ctx)
    bev = base_eval(cfg, sp, base, write=ctx.is_main)
    if cfg.baseline == "rt":
        model, info = rejection_steering(cfg, sp, base, ctx)
        steps = info["rs/steps"]
    else:
        model = copy.deepcopy(base).train()
        ref = copy.deepcopy(base).eval()
        net = ctx.prepare_model(model)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.baseline_lr, weight_decay=0.0)
        pairs = [(q.prompt, q.answer) for q in sp.forget_train]
        g = torch.Generator(device="cpu").manual_seed(cfg.seed)  # host-side batch indices
        t0, steps, loss = time.perf_counter(), 0, torch.tensor(0.0, device=ctx.device)
        # the wall-clock cap is rank 0's decision on every rank (all ranks stop at the same step under DDP)
        while steps < cfg.baseline_steps and _agree(ctx, time.perf_counter() - t0 < cfg.baseline_max_s):
            # the global batch (the same draw on every rank) and this rank's shard of it (all of it on one worker)
            glob = torch.randint(len(pairs), (cfg.baseline_batch,), generator=g, device="cpu").tolist()
            idx = ctx.shard(glob)
            ids, mask = _batch(sp.tok, [pairs[i] for i in (idx or glob[:1])], device=ctx.device)
            with ctx.autocast():
                if cfg.baseline == "ga":
                    loss = -lm_loss(net, ids, mask)
                else:
                    lp = (token_logprobs(net, ids) * mask).sum(1)
                    with torch.no_grad():
                        lr_ = (token_logprobs(ref, ids) * mask).sum(1)
                    loss = -(2.0 / cfg.npo_beta) * torch.nn.functional.logsigmoid(-cfg.npo_beta * (lp - lr_)).mean()
            if ctx.world_size > 1:  # the shard's mean weighted by its share of the global batch (GA: target tokens,
                # NPO: sequences), so DDP's mean over the ranks is the whole batch's loss and gradient
                if cfg.baseline == "ga":
                    n_all = int(_batch(sp.tok, [pairs[i] for i in glob])[1].sum())
                    share = mask.sum() * (ctx.world_size / max(1, n_all))
                else:
                    share = len(idx) * ctx.world_size / len(glob)
                loss = loss * share if idx else loss * 0.0
            opt.zero_grad(set_to_none=True)
            ctx.backward(loss)
            ctx.clip_grad_norm_(model.parameters(), 1.0, opt)
            ctx.optimizer_step(opt)
            steps += 1
        info = {"baseline/seconds": time.perf_counter() - t0, "baseline/loss": _global_mean(ctx, loss.detach())}
        model.eval()
    m = {"step": steps, **info, **evaluate(model, sp, cfg), **bev}
    ctx.report(m, checkpoint=_writer(cfg, model, None, None, steps, ctx, extras, cfg.baseline))
    return ctx.history[-1]
