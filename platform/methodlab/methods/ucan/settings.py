"""ucan's other settings: denoise (file in, file out), upsample (jitter-densify + denoise), image_denoise
(zero-shot ZS-N2N with / without L_DC per image) and eval (analytic shapes / real meshes / PUNet test split)."""

from __future__ import annotations

import base64
import io
import time
from pathlib import Path

import numpy as np
import torch

from methodlab.core import ConfigError, RunContext, load_checkpoint, save_checkpoint
from methodlab.core.checkpoint import latest_checkpoint
from methodlab.core.errors import MissingSourceError
from methodlab.core.paths import read_path
from methodlab.methods.ucan.config import Config
from methodlab.methods.ucan.evaluate import evaluate
from methodlab.methods.ucan.model import build_net, denoise_cloud, fit_zsn2n, knn_mean_smoothing, psnr

SLUG = "ucan"


def load_model(path: str | Path, device=None):
    """A ucan point-cloud checkpoint dir (or a run folder: its newest checkpoint) -> (net in eval mode on `device`
    (None: CPU), Config)."""
    p = read_path(path, "checkpoint_path", "a ucan checkpoint directory or a run folder",
                  "train one with `methodlab run jobs/ucan/train_analytic.yaml --local` first")
    if not (p / "config.json").exists():
        found = latest_checkpoint(p)
        if found is None:
            raise ConfigError(f"no ucan checkpoint under {path!r}; train one with `methodlab run "
                              "jobs/ucan/train_analytic.yaml --local` first", field="checkpoint_path")
        p = found
    ck = load_checkpoint(p, method=SLUG)
    if ck.state.get("task", "pointcloud") != "pointcloud":
        raise ConfigError(f"{p} is a {ck.state.get('task')} checkpoint, not a point-cloud model", field="checkpoint_path")
    cfg = Config.model_validate(ck.config)
    with torch.device(device if device is not None else "cpu"):
        net = build_net(cfg)
    net.load_state_dict(ck.weights)
    return net.eval(), cfg


def _need(cfg: Config, name: str) -> str:
    value = getattr(cfg, name)
    if not value:
        raise ConfigError(f"this setting needs {name}", field=name)
    return value


def _out_path(cfg: Config, suffix: str, ctx: RunContext) -> Path:
    """Where a result goes: output_path (relative: inside the run folder), else <run folder>/<input stem>_<suffix>.xyz."""
    if cfg.output_path:
        return ctx.write_path(cfg.output_path)
    return ctx.write_path(f"{Path(cfg.input_path).stem}_{suffix}.xyz")


def _input_points(cfg: Config):
    from methodlab.data.ucan_meshes import load_points

    return load_points(read_path(cfg.input_path, "input_path", "a point cloud file (.xyz/.txt/.off/.ply/.npy)"))


def fit_denoise(cfg: Config, ctx: RunContext) -> dict:
    """One cloud file of any size in, the denoised cloud out (same order and scale; written by rank 0)."""
    from methodlab.data.ucan_meshes import save_points

    ctx.limit_threads(cfg.torch_threads)
    pts = _input_points(cfg)
    net, tcfg = load_model(_need(cfg, "checkpoint_path"), ctx.device)
    steps = min(cfg.infer_steps or tcfg.steps, tcfg.steps)
    t0 = time.perf_counter()
    out = denoise_cloud(net, pts, steps, cfg.eval_patch_size)
    path = _out_path(cfg, "ucan", ctx)
    if ctx.is_main:  # one writer
        save_points(path, out)
    metrics = {"step": 0, "denoise/n_points": len(pts), "denoise/displacement_mean": float(np.linalg.norm(out - pts, axis=1).mean()),
               "denoise/seconds": time.perf_counter() - t0, "denoise/output": str(path)}
    ctx.report(metrics)
    return metrics


def upsample(net, points: np.ndarray, steps: int, ratio: int, jitter: float, patch_size: int, rng) -> np.ndarray:
    """Upsampling by denoising: ratio jittered copies of every point (jitter std relative to the unit bounding
    radius), then the denoiser pulls them onto the surface."""
    x = np.asarray(points, dtype=np.float64)
    centre = x.mean(0)
    radius = float(np.linalg.norm(x - centre, axis=1).max()) or 1.0
    xn = (x - centre) / radius
    dense = np.repeat(xn, ratio, axis=0) + jitter * rng.normal(size=(len(xn) * ratio, 3))
    out = denoise_cloud(net, dense, steps, patch_size, normalise=False)
    return out * radius + centre


def fit_upsample(cfg: Config, ctx: RunContext) -> dict:
    from methodlab.data.ucan_meshes import save_points

    ctx.limit_threads(cfg.torch_threads)
    pts = _input_points(cfg)
    net, tcfg = load_model(_need(cfg, "checkpoint_path"), ctx.device)
    out = upsample(net, pts, min(cfg.infer_steps or tcfg.steps, tcfg.steps), cfg.upsample_ratio, cfg.upsample_jitter,
                   cfg.eval_patch_size, np.random.default_rng(cfg.seed))
    path = _out_path(cfg, f"x{cfg.upsample_ratio}", ctx)
    if ctx.is_main:  # one writer
        save_points(path, out)
    metrics = {"step": 0, "upsample/n_in": len(pts), "upsample/n_out": len(out), "upsample/output": str(path)}
    ctx.report(metrics)
    return metrics


# ------------------------------------------------------------------ images
def camera_crop(crop: int | None) -> np.ndarray:
    """skimage.data.camera() (512 x 512, shipped in the wheel) scaled to [0,1]; centre crop of side `crop`
    (128 -> rows and columns 192-319)."""
    from skimage import data as skdata

    img = skdata.camera().astype(np.float64) / 255.0
    if crop:
        lo = (img.shape[0] - crop) // 2
        img = img[lo:lo + crop, lo:lo + crop]
    return img


def even(img: np.ndarray) -> np.ndarray:
    return img[: img.shape[0] // 2 * 2, : img.shape[1] // 2 * 2]


def read_image(path: str | Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("L" if im.mode in ("L", "I", "I;16", "1", "P", "LA") else "RGB"), dtype=np.float64)
    return arr / 255.0


def png_b64(img: np.ndarray) -> str:
    from PIL import Image

    arr = np.clip(np.round(np.asarray(img) * 255.0), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def image_task(cfg: Config):
    """(noisy, clean or None): a user's noisy image, or the camera crop plus Gaussian noise (data seed)."""
    if cfg.image_path:
        img = even(read_image(read_path(cfg.image_path, "image_path", "an image file (PNG/JPEG)")))
        if cfg.image_crop:
            h, w = img.shape[:2]
            c = min(cfg.image_crop, h, w) // 2 * 2
            img = img[(h - c) // 2:(h - c) // 2 + c, (w - c) // 2:(w - c) // 2 + c]
        return img, None
    clean = even(camera_crop(cfg.image_crop))
    rng = np.random.default_rng([cfg.data_seed, 29])
    return clean + cfg.image_sigma / 255.0 * rng.normal(size=clean.shape), clean


def fit_image(cfg: Config, ctx: RunContext) -> dict:
    """Zero-shot: fit the tiny CNN on the one noisy image; report PSNR when the clean image is known; write a
    config-only checkpoint (what serve/ucan_image.yaml serves: the settings of the per-request fit). The fit runs
    on ctx.device with the run's precision; only rank 0 writes output_path."""
    ctx.limit_threads(cfg.torch_threads)
    noisy, clean = image_task(cfg)
    t0 = time.perf_counter()
    reports = []
    log_every = max(1, cfg.image_iters // 10)
    out, info = fit_zsn2n(noisy, cfg.image_iters, cfg.consistency, cfg.image_lr, cfg.image_decay_every,
                          cfg.image_channels, cfg.image_lambda_dc, cfg.seed, clean, log_every, reports.append, ctx=ctx)
    metrics = {"step": cfg.image_iters, "image/final_loss": info["loss"], "image/seconds": time.perf_counter() - t0}
    if clean is not None:
        metrics["image/psnr"] = psnr(out, clean)
        metrics["image/psnr_noisy"] = psnr(noisy, clean)
    for r in reports[:-1]:
        ctx.report({"step": r["iter"], "image/loss": r["loss"], **({"image/psnr": r["psnr"]} if "psnr" in r else {})})
    if cfg.output_path and ctx.is_main:
        from PIL import Image

        path = ctx.write_path(cfg.output_path)  # relative: inside the run folder
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(np.round(out * 255), 0, 255).astype(np.uint8)).save(path)

    def write(d: Path) -> None:
        save_checkpoint(d, method=SLUG, config=cfg, weights={"image_config_only": torch.zeros(1, device="cpu")},
                        state={"step": cfg.image_iters, "final": True, "task": "image", "metrics": metrics})
    ctx.report(metrics, checkpoint=write)
    return metrics


# ------------------------------------------------------------------ eval
def denoiser_for(cfg: Config, device=None):
    """The function a noisy cloud (unit sphere) goes through: the model (on `device`), k-NN smoothing or the
    identity."""
    if cfg.eval_method == "identity":
        return lambda x: x, cfg.steps
    if cfg.eval_method == "knn_mean":
        return (lambda x: knn_mean_smoothing(x, cfg.k, cfg.smoothing_iters)), 0
    net, tcfg = load_model(_need(cfg, "checkpoint_path"), device)
    steps = min(cfg.infer_steps or tcfg.steps, tcfg.steps)
    return (lambda x: denoise_cloud(net, x, steps, cfg.eval_patch_size, normalise=False)), steps


def _f16(a: np.ndarray) -> str:
    return base64.b64encode(np.asarray(a, dtype=np.float16).tobytes()).decode("ascii")


def unpack_f16(s: str, cols: int = 0) -> np.ndarray:
    """The inverse of the render/* encoding: float16 values back as float64 ([n, cols] when cols)."""
    a = np.frombuffer(base64.b64decode(s), dtype=np.float16).astype(np.float64)
    return a.reshape(-1, cols) if cols else a


def render_item(fn, item) -> dict:
    """One analytic test shape before and after `fn`: points and exact distances to the true surface as base64
    float16 strings (compact enough for a report's JSON), plus the item's name."""
    from methodlab.data.ucan_shapes import distance

    out = np.asarray(fn(item.noisy), dtype=np.float64)
    return {"render/name": item.name, "render/noisy": _f16(item.noisy), "render/out": _f16(out),
            "render/d_noisy": _f16(distance(item.shape, item.noisy)), "render/d_out": _f16(distance(item.shape, out))}


def fit_eval(cfg: Config, ctx: RunContext) -> dict:
    from methodlab.methods.ucan import data as D

    ctx.limit_threads(cfg.torch_threads)
    fn, _ = denoiser_for(cfg, ctx.device)
    metrics: dict = {"step": 0}
    if cfg.eval_set == "analytic":
        test = D.analytic_eval_set(cfg, "test")
        agg, _ = evaluate(fn, test, "test")
        metrics.update(agg)
        if cfg.render_family is not None:
            metrics.update(render_item(fn, next(i for i in test if i.family == cfg.render_family)))
        agg, _ = evaluate(fn, D.analytic_eval_set(cfg, "val"), "val")
        metrics.update(agg)
    else:
        for noise in cfg.eval_noise_levels:
            tag = f"{round(noise * 100, 2):g}pct"
            if cfg.eval_set == "meshes":
                items = []
                for name in cfg.meshes:
                    try:
                        items += D.mesh_eval_set(cfg.model_copy(update={"meshes": [name]}), noise)
                    except MissingSourceError as err:
                        metrics[f"skipped/{name}"] = str(err)
            else:
                items = D.punet_eval_set(cfg, noise)
            agg, rows = evaluate(fn, items, f"{cfg.eval_set}/{tag}")
            metrics.update(agg)
            for r in rows:
                for key in ("cd", "p2m"):
                    if key in r:
                        metrics[f"{cfg.eval_set}/{tag}/{r['name']}/{key}"] = r[key]
    ctx.report(metrics)
    return metrics
