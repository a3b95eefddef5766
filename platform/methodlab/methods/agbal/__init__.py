"""AGBAL: deep batch active learning for regression guided by density-ratio-weighted auxiliary losses (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.agbal"

SPEC = MethodSpec(
    slug="agbal",
    title="AGBAL: batch active learning for regression with imperfect auxiliary data as an uncertainty surrogate",
    paper="Enhancing Deep Batch Active Learning for Regression with Imperfect Data Guided Selection. NeurIPS 2025 "
          "(OpenReview i5rApSWC9E); framework of Holzmueller et al., JMLR 2023 (bmdal_reg)",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:study",
    settings={"density_ratio": f"{_PKG}.train:fit_density_ratio", "round": f"{_PKG}.train:fit_round"},
    family="al",
    # train / round shard the regressor's mini-batches over the ranks (DDP); density_ratio is one full-batch fit
    single_worker_settings={"density_ratio": "one full-batch L-BFGS fit of the density-ratio classifier, no "
                            "mini-batches to shard: every rank would repeat the same fit"},
)
