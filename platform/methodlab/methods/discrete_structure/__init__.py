"""Differentiable Structure Learning and Causal Discovery for General Binary Data (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.discrete_structure"

SPEC = MethodSpec(
    slug="discrete_structure",
    title="General binary structure learning: multivariate-Bernoulli conditionals, quasi-MCP, DAGMA path, CPDAG scoring",
    paper="Deng, Aragam. NeurIPS 2025. arXiv 2509.21658",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"simulate": f"{_PKG}.simulate:fit_simulate",
              "benchmark": f"{_PKG}.benchmark:fit_benchmark",
              "equivalence_class": f"{_PKG}.train:fit_equivalence_class"},
    family="causal",
    # GPU-capable (the design, the path and Adam's state live on ctx.device); speed on a GPU is not measured yet
    precisions=("fp32",),
    precision_note="the learner is float64 throughout (DAGMA's log-det with its M-matrix domain test, NOTEARS' "
                   "matrix exponential, a 1e-6 relative convergence test): half precision cannot carry it, and "
                   "autocast leaves float64 ops untouched anyway",
    no_compile="no torch module: the path optimises raw float64 tensors (B, b) with host-side branches per step "
               "(domain restarts, stage switches, convergence checks) and L-BFGS refits",
    single_worker="a full-batch path on the whole n x d design (DAGMA stages, L-BFGS refits, a 1e-6 relative "
                  "convergence test): no minibatches to shard, and each rank would repeat the whole fit",
)
