"""U-CAN: unsupervised point-cloud denoising with consistency-aware Noise2Noise matching (Zhou et al., NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.ucan"

SPEC = MethodSpec(
    slug="ucan",
    title="U-CAN: unsupervised point-cloud denoising with consistency-aware Noise2Noise (EMD) matching",
    paper="Zhou, Shi, Song, Fang, Liu, Han. U-CAN: Unsupervised Point Cloud Denoising with Consistency-Aware "
          "Noise2Noise Matching. NeurIPS 2025. arXiv 2510.25210",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"denoise": f"{_PKG}.settings:fit_denoise", "upsample": f"{_PKG}.settings:fit_upsample",
              "image_denoise": f"{_PKG}.settings:fit_image", "eval": f"{_PKG}.settings:fit_eval"},
    family="pointcloud",
    single_worker_settings={
        "denoise": "one cloud in, one cloud out: no training to split",
        "upsample": "one cloud in, one cloud out: no training to split",
        "eval": "scores one checkpoint on the evaluation shapes: no training to split",
        "image_denoise": "a zero-shot fit on the one noisy image: every step trains on the whole image (its two "
                         "downsampled halves), so there is no batch to shard"},
)
