"""GyroAtt: Towards a General Attention Framework on Gyrovector Spaces for Matrix Manifolds (NeurIPS 2025)."""

from methodlab.core.method import MethodSpec

_PKG = "methodlab.methods.gyroatt"

SPEC = MethodSpec(
    slug="gyroatt",
    title="GyroAtt: gyro attention on SPD, SPSD and Grassmann manifolds for EEG",
    paper="Wang, Hu, Song, Wu, Sebe, Chen. NeurIPS 2025. OpenReview lovTDtbsdZ",
    config=f"{_PKG}.config:Config",
    fit=f"{_PKG}.train:fit",
    predictor=f"{_PKG}.predictor:Predictor",
    reproduce=f"{_PKG}.reproduce:main",
    settings={"riemann": f"{_PKG}.riemann:fit_riemann", "evaluate": f"{_PKG}.evaluate:fit_evaluate"},
)
