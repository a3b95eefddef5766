"""DGSWP / differentiable min-SWGG: optimal slices for sliced OT plans (Chapel, Tavenard, Vaiter; NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.min_swgg"

SPEC = MethodSpec(
    slug="min_swgg",
    title="DGSWP: differentiable min-SWGG slices for OT plans, gradient flows and sliced-OT flow matching",
    paper="Chapel, Tavenard, Vaiter. Differentiable Generalized Sliced Wasserstein Plans. NeurIPS 2025. arXiv 2505.22049",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"plan": f"{_PKG}.train:fit_plan", "flow": f"{_PKG}.train:fit_flow", "cfm": f"{_PKG}.train:fit_cfm"},
    family="ot",
    precisions=("fp32",),
    precision_note="DGSWP's plans are sorts of 1-D projections and its Stein gradient averages differences "
                   "h(theta + eps Z) - h(theta) of mean matched costs: half precision reorders near-ties and "
                   "swamps those differences; the Poincare flow is float64",
    # cfm trains the vector field data-parallel (each rank a shard of every minibatch, DDP); plan and flow
    # optimise one slice / one particle cloud as a whole, with no network and no minibatch to split
    single_worker_settings={
        "plan": "one DGSWP solve on two whole point clouds: no network, no minibatch to split",
        "flow": "one gradient flow of a whole particle cloud (a DGSWP slice re-fit per step): no network, no "
                "minibatch to split",
    },
)
