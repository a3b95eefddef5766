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
    reproduce=f"{_PKG}.reproduce:study",
    settings={"riemann": f"{_PKG}.riemann:fit_riemann", "evaluate": f"{_PKG}.evaluate:fit_evaluate"},
    precisions=("fp32",),
    precision_note="gyroatt's geometry is float64 by design (E2R covariances, eigh / logm / expm / Cholesky of SPD "
                   "tokens, Grassmann and Karcher maps with Daleckii-Krein backwards); 'fp32' runs that maths "
                   "unchanged (float64 tokens, a float32 CNN front end and classifier). Autocast leaves float64 alone "
                   "but would build the covariances from bf16 / fp16 front-end features (8-11 bit mantissas), blurring "
                   "the small eigenvalues that logm and the eigen-gap backwards amplify",
    single_worker_settings={
        "riemann": "pyriemann / scikit-learn baselines (OAS covariances, tangent space + logistic regression or MDM): "
                   "one numpy fit with no gradient steps to average; run subjects or classifiers side by side as "
                   "Tune trials",
        "evaluate": "scores one checkpoint on one data set (a forward pass, no training): nothing to average; run "
                    "checkpoints or data sets side by side as Tune trials",
    },
)
