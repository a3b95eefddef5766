"""ugodit's two settings, top to bottom.

train (`ugodit.train`): M degraded measurements -> shared encoder E (+ M private decoders), Adam; checkpoint
  every `checkpoint_every` steps (E, every D_i, the current inputs z, the optimiser, the step) and resume there;
  then a test-time fit on the VALIDATION measurement (fresh decoder, E frozen) -> eval/val_psnr = eval/psnr.
reconstruct (`ugodit.reconstruct`): one test measurement with `arm` = ugodit (E from `encoder_from`, or trained
  here first when None) | aseqdip | dip | random_encoder; PSNR/SSIM curves every `log_every` iterations.
Both run on ctx.device with the run's precision (algo.py: networks, inputs, noise and k-space operators there)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import ConfigError, MissingSourceError, RunContext, load_checkpoint, save_checkpoint, seed_everything
from methodlab.methods.ugodit.algo import TrainState, curve_at, fit_measurement
from methodlab.methods.ugodit.config import Config
from methodlab.methods.ugodit.data import build_problems

SLUG = "ugodit"
NET_FIELDS = ("task", "channels", "scales", "skip_channels", "unet_widths")


def _setup(cfg: Config, ctx: RunContext) -> None:
    ctx.limit_threads(cfg.torch_threads)
    seed_everything(cfg.seed)


def encoder_weights(weights: dict) -> dict:
    return {k[len("encoder."):]: v for k, v in weights.items() if k.startswith("encoder.")}


def fit(cfg: Config, ctx: RunContext) -> dict:
    _setup(cfg, ctx)
    problems = build_problems(cfg)  # host; TrainState / fit_measurement move them to ctx.device once
    st = TrainState(cfg, problems["train"], cfg.seed, ctx)
    T = int(cfg.value("train_iterations"))
    extras_val: dict = {}
    train_seconds = 0.0
    if ctx.checkpoint is not None:
        ck = load_checkpoint(ctx.checkpoint, method=SLUG, load_torch_state=True)
        st.load(ck.weights, (ck.torch_state or {}).get("opt"), ck.state["step"], ck.extras.get("losses", []))
        ctx.history[:] = list(ck.extras.get("history", []))
        extras_val = ck.extras.get("val", {})
        train_seconds = float(ck.state.get("train_seconds", 0.0))

    def writer(final: bool):
        step, losses, hist, val, secs = st.step, list(st.losses), list(ctx.history), dict(extras_val), train_seconds

        def write(d: Path) -> None:
            save_checkpoint(d, method=SLUG, config=cfg, weights=st.state_tensors(),
                            state={"step": step, "final": final, "train_seconds": secs},
                            torch_state={"opt": st.opt.state_dict()},
                            extras={"losses": losses, "history": hist, "val": val,
                                    "problem": {"task": cfg.task, "shape": list(st.problems[0].shape),
                                                "train_images": [p.name for p in st.problems]}})
        return write

    if extras_val and st.step >= T:  # resumed a finished run: report its last metrics once more
        ctx.report(dict(ctx.history[-1]), checkpoint=writer(True))
        return ctx.history[-1]
    t0 = time.time()
    while st.step < T:
        loss = st.train_step()
        if st.step % cfg.checkpoint_every == 0 and st.step < T:
            train_seconds += time.time() - t0
            t0 = time.time()
            ctx.report({"step": st.step, "train/loss": float(loss), "train/seconds": train_seconds},
                       checkpoint=writer(False))
    train_seconds += time.time() - t0
    metrics = {"step": st.step, "train/loss": st.losses[-1] if st.losses else float("nan"),
               "train/seconds": train_seconds}
    if cfg.val_iterations > 0:
        r = fit_measurement(cfg, problems["val"], "ugodit", st.encoder.state_dict(), cfg.seed, cfg.val_iterations,
                            ctx=ctx)
        last = r["curve"][-1]
        extras_val = {"curve": r["curve"], "image": problems["val"].name}
        metrics.update({"eval/psnr": last["psnr_ema"], "eval/val_psnr": last["psnr_ema"],
                        "eval/val_ssim": last["ssim_ema"], "eval/val_psnr_last": last["psnr"],
                        "eval/val_seconds": r["seconds"], "eval/val_measurement_psnr": r["measurement_psnr_db"]})
    else:
        metrics["eval/psnr"] = float("nan")
    ctx.report(metrics, checkpoint=writer(True))
    return ctx.history[-1]


def resolve_encoder(cfg: Config) -> dict:
    """Encoder weights from `encoder_from` (a checkpoint dir, or a run folder holding checkpoints/)."""
    from methodlab.core.checkpoint import latest_checkpoint

    p = Path(cfg.encoder_from).expanduser()
    hint = f"methodlab run jobs/ugodit/train_{ {'mri_multicoil': 'mri', 'super_resolution': 'sr', 'deblur_nonlinear': 'deblur'}[cfg.task]}.yaml"
    ck_dir = p if (p / "config.json").exists() else latest_checkpoint(p / "checkpoints") or latest_checkpoint(p)
    if ck_dir is None:
        raise MissingSourceError(f"no ugodit encoder checkpoint under {cfg.encoder_from!r}; create it with `{hint}`")
    ck = load_checkpoint(ck_dir, method=SLUG)
    other = Config.model_validate(ck.config)
    bad = [f for f in NET_FIELDS if getattr(other, f) != getattr(cfg, f)]
    if bad:
        raise ConfigError(f"encoder checkpoint {ck_dir} differs in {bad} from this job", field="encoder_from")
    return encoder_weights(ck.weights)


def fit_reconstruct(cfg: Config, ctx: RunContext) -> dict:
    _setup(cfg, ctx)
    if ctx.checkpoint is not None:  # a reconstruction is written once, when complete
        ck = load_checkpoint(ctx.checkpoint, method=SLUG)
        ctx.history[:] = list(ck.extras.get("history", []))
        if ctx.history:
            ctx.report(dict(ctx.history[-1]))
            return ctx.history[-1]
    problems = build_problems(cfg)
    enc_state, train_seconds = None, 0.0
    if cfg.arm == "ugodit":
        if cfg.encoder_from:
            enc_state = resolve_encoder(cfg)
        else:
            t0 = time.time()
            st = TrainState(cfg, problems["train"], cfg.seed, ctx)
            while st.step < int(cfg.value("train_iterations")):
                st.train_step()
            enc_state, train_seconds = st.encoder.state_dict(), time.time() - t0
    p = problems["test"]

    def on_log(row: dict) -> None:
        ctx.report({"step": row["iteration"], "eval/psnr": row["psnr_ema"], "eval/ssim": row["ssim_ema"],
                    "eval/psnr_last": row["psnr"], "train/loss": row["loss"]})

    encs: list = []
    r = fit_measurement(cfg, p, cfg.arm, enc_state, cfg.seed, log_every=cfg.log_every,
                        on_log=on_log if p.gt is not None else None, keep_encoder=encs, ctx=ctx)
    from methodlab.methods.ugodit.evaluate import psnr as _psnr

    final = {"step": int(cfg.value("test_iterations")), "eval/measurement_psnr": r["measurement_psnr_db"],
             "train/loss": r["final_loss"], "eval/fit_seconds": r["seconds"], "train/seconds": train_seconds}
    if p.gt is not None:
        final.update({"eval/psnr": r["curve"][-1]["psnr_ema"], "eval/ssim": r["curve"][-1]["ssim_ema"],
                      "eval/psnr_last": r["curve"][-1]["psnr"], "eval/psnr_150": curve_at(r["curve"], 150),
                      "eval/trivial_psnr": _psnr(p.trivial, p.gt)})
    else:
        final["eval/psnr"] = float("nan")
    weights = {f"encoder.{k}": v for k, v in encs[0].state_dict().items()}
    weights.update({f"decoder0.{k}": v for k, v in r["decoder"].state_dict().items()})
    weights["reconstruction"] = torch.as_tensor(np.asarray(r["x_ema"], np.float32), device="cpu")  # host image

    def write(d: Path) -> None:
        save_checkpoint(d, method=SLUG, config=cfg, weights=weights, state={"step": final["step"], "final": True},
                        extras={"history": list(ctx.history) + [final], "curve": r["curve"]})

    ctx.report(final, checkpoint=write)
    return ctx.history[-1]
