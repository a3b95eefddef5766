"""Linear GBT with diffusion priors: generalising comparison-based preference learning while staying monotone
(NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.monotone_gbt"

SPEC = MethodSpec(
    slug="monotone_gbt",
    title="LGBT-D: linear generalized Bradley-Terry with a graph-diffusion prior, with a monotonicity test",
    paper="Linear GBT with Diffusion Priors: Generalizing while preserving monotonicity in comparison-based preference "
          "learning models. NeurIPS 2025. arXiv 2506.08616",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"gbt.fit": f"{_PKG}.train:fit", "gbt.sweep_synthetic": f"{_PKG}.settings:sweep_synthetic",
              "gbt.monotonicity_map": f"{_PKG}.settings:monotonicity_map",
              "gbt.monotonicity_check": f"{_PKG}.settings:monotonicity_check", "gbt.cv_real": f"{_PKG}.settings:cv_real"},
    family="preference",
    cpu_only="numpy / scipy by nature: a strictly convex MAP fit by L-BFGS / Newton on small float64 matrices and "
             "eigenvalue tests of Laplacians, with no torch network to put on a GPU",
    precisions=("fp32",),
    precision_note="no torch network: the fits and the monotonicity tests are numpy float64, so autocast has "
                   "nothing to act on",
    no_compile="no torch module to compile (numpy / scipy)",
    single_worker="numpy / scipy: one strictly convex MAP fit by L-BFGS / Newton, no gradient steps to average",
)
