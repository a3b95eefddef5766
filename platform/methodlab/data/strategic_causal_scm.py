"""Causal tabular data for strategic classification (methods/strategic_causal.md, Data).

- `cvd_scm_v2` (default): a documented linear SCM over cardiovascular risk factors, unit variance by
  construction (noise scales from the population covariance, in topological order); lifestyle effects are
  routed through the undesirable proxy BMI. `cvd_scm_v1`: the earlier SCM, N(0, 1) noise, kept for comparison.
- `load_tabular`: a user's CSV (feature columns + binary label) with a causal graph file (edge list
  `cause,effect,weight` or a d x d matrix, B[k, j] = effect of k on j) and a JSON of per-feature flags.
- `load_whas500` (scikit-survival) and `load_cleveland` (the UCI table inside orange3, read as a file, never
  by importing Orange): real tables, report / audit only.

Plain numpy; no network, nothing unpickled.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from methodlab.core.errors import ConfigError, MissingSourceError


@dataclass
class CausalTable:
    """Features in natural units (n x d) with their causal graph and per-feature flags.

    B[k, j] = direct effect of feature k on feature j (natural units); sign[j] = +1 if larger is better,
    -1 otherwise; y = 1 is the favourable outcome."""

    names: list[str]
    B: np.ndarray
    sign: np.ndarray
    mutable: np.ndarray
    desirable: np.ndarray
    abilities: np.ndarray
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def d(self) -> int:
        return len(self.names)


# --------------------------------------------------------------------------------------------------
# the CVD SCMs
# --------------------------------------------------------------------------------------------------
CVD_NAMES = ["exercise", "diet", "smoking", "age", "bmi", "sbp", "ldl", "glucose"]  # topological order
CVD_SIGN = {"exercise": 1, "diet": 1, "smoking": -1, "age": -1, "bmi": -1, "sbp": -1, "ldl": -1, "glucose": -1}
CVD_DESIRABLE = ("exercise", "diet", "smoking")
CVD_IMMUTABLE = ("age",)

CVD_EDGES = {
    "cvd_scm_v2": [("exercise", "bmi", -0.3), ("diet", "bmi", -0.3), ("smoking", "bmi", -0.25),
                   ("exercise", "sbp", -0.1), ("diet", "ldl", -0.2), ("smoking", "sbp", 0.2), ("age", "sbp", 0.3),
                   ("age", "ldl", 0.2), ("bmi", "sbp", 0.5), ("bmi", "glucose", 0.5), ("bmi", "ldl", 0.3)],
    "cvd_scm_v1": [("exercise", "bmi", -0.4), ("diet", "bmi", -0.3), ("diet", "ldl", -0.3), ("exercise", "sbp", -0.2),
                   ("bmi", "sbp", 0.4), ("bmi", "glucose", 0.4), ("bmi", "ldl", 0.2), ("smoking", "sbp", 0.2),
                   ("age", "sbp", 0.3), ("age", "ldl", 0.2)],
}
CVD_RISK = {
    "cvd_scm_v2": {"sbp": 0.6, "ldl": 0.5, "glucose": 0.5, "smoking": 0.4, "bmi": 0.2, "age": 0.8},
    "cvd_scm_v1": {"sbp": 0.6, "ldl": 0.5, "glucose": 0.5, "smoking": 0.7, "bmi": 0.3, "age": 0.8},
}
CVD_UNIT_VARIANCE = {"cvd_scm_v2": True, "cvd_scm_v1": False}
HIGH_RISK_QUANTILE = 0.70  # high risk = r above the 70th percentile of the training sample


def cvd_graph(scm: str) -> np.ndarray:
    """B[k, j] in natural coordinates for a named CVD SCM."""
    if scm not in CVD_EDGES:
        raise ConfigError(f"unknown SCM {scm!r}; allowed: {', '.join(CVD_EDGES)}", field="scm")
    idx = {n: i for i, n in enumerate(CVD_NAMES)}
    B = np.zeros((len(CVD_NAMES), len(CVD_NAMES)))
    for k, j, w in CVD_EDGES[scm]:
        B[idx[k], idx[j]] = w
    return B


def unit_variance_scales(B: np.ndarray) -> np.ndarray:
    """Noise scales s_j = sqrt(1 - Var(sum_k B_kj x_k)) from the population covariance, in topological order
    (B strictly upper-triangular in that order), so that every node has variance 1 exactly."""
    d = len(B)
    if np.any(np.tril(B) != 0):
        raise ValueError("B must be strictly upper-triangular (nodes in topological order)")
    cov = np.zeros((d, d))
    s = np.zeros(d)
    for j in range(d):
        b = B[:j, j]
        var_parents = float(b @ cov[:j, :j] @ b)
        if var_parents >= 1.0:
            raise ValueError(f"node {j}: its parents already explain variance {var_parents:.3f} >= 1")
        s[j] = np.sqrt(1.0 - var_parents)
        cov[j, :j] = cov[:j, :j] @ b  # Cov(x_j, x_k) for k < j
        cov[:j, j] = cov[j, :j]
        cov[j, j] = 1.0
    return s


def population_covariance(B: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Cov(x) = A diag(s^2) A^T with A = (I - B^T)^{-1}."""
    A = np.linalg.inv(np.eye(len(B)) - B.T)
    return A @ np.diag(s ** 2) @ A.T


def _sample_cvd(rng: np.random.Generator, n: int, B: np.ndarray, s: np.ndarray, risk: np.ndarray) -> tuple:
    """Nodes in topological order (x_j = sum_k B_kj x_k + s_j u_j), then the risk noise eps."""
    d = len(B)
    x = np.zeros((n, d))
    for j in range(d):
        x[:, j] = x[:, :j] @ B[:j, j] + s[j] * rng.standard_normal(n)
    eps = rng.standard_normal(n)
    return x, x @ risk + eps


def cvd_scm(scm: str = "cvd_scm_v2", n: int = 5000, seed: int = 0, n_test: int | None = None) -> CausalTable:
    """Training then test sample from one `numpy.random.default_rng(seed)`; label 1 = low risk (favourable):
    r at or below the 70th percentile of the training sample (the same cut on the test sample)."""
    B = cvd_graph(scm)
    d = len(CVD_NAMES)
    s = unit_variance_scales(B) if CVD_UNIT_VARIANCE[scm] else np.ones(d)
    risk = np.array([CVD_RISK[scm].get(nm, 0.0) for nm in CVD_NAMES])
    rng = np.random.default_rng(seed)
    x_tr, r_tr = _sample_cvd(rng, n, B, s, risk)
    x_te, r_te = _sample_cvd(rng, n if n_test is None else n_test, B, s, risk)
    cut = float(np.quantile(r_tr, HIGH_RISK_QUANTILE))
    y_tr, y_te = (r_tr <= cut).astype(np.int64), (r_te <= cut).astype(np.int64)
    return CausalTable(
        names=list(CVD_NAMES), B=B, sign=np.array([CVD_SIGN[nm] for nm in CVD_NAMES], float),
        mutable=np.array([nm not in CVD_IMMUTABLE for nm in CVD_NAMES]),
        desirable=np.array([nm in CVD_DESIRABLE for nm in CVD_NAMES]), abilities=np.ones(d),
        x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
        info={"source": scm, "noise_scales": s.tolist(), "risk_cut": cut, "risk_coefficients": risk.tolist()})


# --------------------------------------------------------------------------------------------------
# a user's table + graph + flags
# --------------------------------------------------------------------------------------------------
def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        raise ConfigError(f"{path}: needs a header row and at least one data row", field="data_path")
    return [c.strip() for c in rows[0]], rows[1:]


def _to_float(value: str, where: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is not a number") from None
    if not np.isfinite(v):
        raise ConfigError(f"{where}: non-finite value {value!r}")
    return v


def read_graph(path: str | Path, names: list[str]) -> np.ndarray:
    """Edge list `cause,effect,weight` (header optional; names must be feature columns) or a d x d numeric
    matrix (rows = causes, columns = effects, in the order of the feature columns, optional header row)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: graph file not found", field="graph_path")
    with open(path, newline="") as fh:
        rows = [[c.strip() for c in r] for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    idx = {n: i for i, n in enumerate(names)}
    d = len(names)
    B = np.zeros((d, d))
    has_header = bool(rows) and [c.lower() for c in rows[0][:2]] == ["cause", "effect"]
    body = rows[1:] if has_header else rows
    edge_list = has_header or (bool(body) and all(len(r) == 3 and not _is_number(r[0]) and not _is_number(r[1])
                                                  for r in body))
    if edge_list:
        for r, (c, e, w) in enumerate(body):
            for nm in (c, e):
                if nm not in idx:
                    raise ConfigError(f"{path}: row {r + 1}: unknown feature {nm!r}; known: {', '.join(names)}",
                                      field="graph_path")
            if c == e:
                raise ConfigError(f"{path}: row {r + 1}: self-loop on {c!r}", field="graph_path")
            B[idx[c], idx[e]] = _to_float(w, f"{path}: row {r + 1}")
    else:
        body = rows[1:] if rows and rows[0] and not _is_number(rows[0][0]) else rows
        if len(body) != d or any(len(r) != d for r in body):
            raise ConfigError(f"{path}: a graph matrix must be {d} x {d} (one row/column per feature)", field="graph_path")
        B = np.array([[_to_float(v, f"{path}: row {i + 1}") for v in r] for i, r in enumerate(body)])
        if np.any(np.diag(B) != 0):
            raise ConfigError(f"{path}: the diagonal must be 0 (no self-loops)", field="graph_path")
    check_dag(B, names, str(path))
    return B


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def check_dag(B: np.ndarray, names: list[str], where: str = "graph") -> None:
    """Refuse a cyclic graph (C = (I - B^T)^{-1} would not be the total effect of a DAG)."""
    adj = (B != 0).astype(int)
    indeg = adj.sum(0)
    order, stack = [], [j for j in range(len(B)) if indeg[j] == 0]
    while stack:
        k = stack.pop()
        order.append(k)
        for j in np.flatnonzero(adj[k]):
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(int(j))
    if len(order) != len(B):
        cyc = [names[j] for j in range(len(B)) if j not in order]
        raise ConfigError(f"{where}: the graph has a cycle through {', '.join(cyc)}", field="graph_path")


def read_flags(path: str | Path | None, names: list[str]) -> dict[str, np.ndarray]:
    """JSON {"<feature>": {"ability": 1.0, "sign": 1, "mutable": true, "desirable": false}, ...}; missing
    features / keys take ability 1, sign +1, mutable true, desirable false."""
    d = len(names)
    out = {"abilities": np.ones(d), "sign": np.ones(d), "mutable": np.ones(d, bool), "desirable": np.zeros(d, bool)}
    if path is None:
        return out
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: flags file not found", field="flags_path")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise ConfigError(f"{path}: not JSON ({err})", field="flags_path") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a JSON object by feature name expected", field="flags_path")
    for nm, spec in data.items():
        if nm not in names:
            raise ConfigError(f"{path}: unknown feature {nm!r}; known: {', '.join(names)}", field="flags_path")
        if not isinstance(spec, dict) or set(spec) - {"ability", "sign", "mutable", "desirable"}:
            raise ConfigError(f"{path}: {nm}: keys are ability, sign, mutable, desirable", field="flags_path")
        j = names.index(nm)
        if "ability" in spec:
            a = spec["ability"]
            if not isinstance(a, (int, float)) or not np.isfinite(a) or a <= 0:
                raise ConfigError(f"{path}: {nm}.ability must be a finite number > 0", field="flags_path")
            out["abilities"][j] = float(a)
        if "sign" in spec:
            if spec["sign"] not in (1, -1):
                raise ConfigError(f"{path}: {nm}.sign must be +1 or -1", field="flags_path")
            out["sign"][j] = float(spec["sign"])
        for key in ("mutable", "desirable"):
            if key in spec:
                if not isinstance(spec[key], bool):
                    raise ConfigError(f"{path}: {nm}.{key} must be true or false", field="flags_path")
                out[key][j] = spec[key]
    return out


def load_tabular(data_path: str | Path, label_column: str, graph_path: str | Path | None = None,
                 flags_path: str | Path | None = None, test_fraction: float = 0.5, seed: int = 0,
                 favourable_label: str = "1") -> CausalTable:
    """A user's CSV: every column but `label_column` is a numeric feature; label `favourable_label` = 1, any
    other value 0. Without a graph file C = I (no causal effects). Random train/test split by `seed`."""
    path = Path(data_path)
    if not path.is_file():
        raise ConfigError(f"{path}: data file not found", field="data_path")
    header, rows = _read_csv(path)
    if label_column not in header:
        raise ConfigError(f"{path}: no label column {label_column!r}; columns: {', '.join(header)}", field="label_column")
    li = header.index(label_column)
    names = [h for i, h in enumerate(header) if i != li]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: duplicate column names", field="data_path")
    x = np.array([[_to_float(v, f"{path}: row {r + 2}, column {names[k]!r}")
                   for k, v in enumerate(c for i, c in enumerate(row) if i != li)] for r, row in enumerate(rows)])
    if x.shape[1] != len(names):
        raise ConfigError(f"{path}: rows must have {len(header)} columns", field="data_path")
    y = np.array([1 if row[li].strip() == favourable_label else 0 for row in rows])
    if len(np.unique(y)) < 2:
        raise ConfigError(f"{path}: the label must take both values (favourable {favourable_label!r} and other)",
                          field="label_column")
    B = read_graph(graph_path, names) if graph_path else np.zeros((len(names), len(names)))
    flags = read_flags(flags_path, names)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(x))
    n_te = max(1, int(round(test_fraction * len(x))))
    te, tr = perm[:n_te], perm[n_te:]
    if len(tr) < 2:
        raise ConfigError(f"{path}: too few rows for a train/test split", field="data_path")
    return CausalTable(names=names, B=B, sign=flags["sign"], mutable=flags["mutable"], desirable=flags["desirable"],
                       abilities=flags["abilities"], x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te],
                       info={"source": str(path)})


# --------------------------------------------------------------------------------------------------
# real tables (report / audit only)
# --------------------------------------------------------------------------------------------------
def _package_dir(pkg: str, hint: str) -> Path:
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSourceError(hint)
    return Path(list(spec.submodule_search_locations)[0])


def load_whas500() -> dict[str, np.ndarray]:
    """WHAS500 (scikit-survival): age, bmi and sysbp columns as float arrays (500 patients)."""
    try:
        from sksurv.datasets import load_whas500 as _load
    except ImportError:
        raise MissingSourceError("WHAS500 needs scikit-survival: pip install scikit-survival") from None
    X, _ = _load()
    return {c: X[c].to_numpy(dtype=float) for c in ("age", "bmi", "sysbp")}


CLEVELAND_MUTABLE = ("rest SBP", "cholesterol", "fasting blood sugar > 120", "max HR", "exerc ind ang", "ST by exercise")
# larger is better for the individual (lower disease risk): +1; every clinical risk marker: -1
CLEVELAND_SIGN = {"max HR": 1}


def load_cleveland(seed: int = 0, test_fraction: float = 0.5) -> CausalTable:
    """UCI Cleveland (Orange/datasets/heart_disease.tab, 3 header rows), read as a file. Numeric columns as is,
    discrete ones one-hot (first level dropped), rows with '?' dropped, numeric columns standardised on the
    training split; label 1 = no narrowing (favourable). No causal graph is claimed (B = 0, C = I)."""
    path = _package_dir("Orange", "the Cleveland table needs orange3: pip install --no-deps orange3") \
        / "datasets" / "heart_disease.tab"
    if not path.is_file():
        raise MissingSourceError(f"{path} missing: pip install --no-deps orange3")
    lines = path.read_text().splitlines()
    header, types = lines[0].split("\t"), lines[1].split("\t")
    rows = [ln.split("\t") for ln in lines[3:] if ln.strip()]
    rows = [r for r in rows if len(r) == len(header) and "?" not in [c.strip() for c in r]]
    target = header.index("diameter narrowing")
    cols: list[np.ndarray] = []
    names: list[str] = []
    numeric: list[bool] = []
    for i, (h, t) in enumerate(zip(header, types)):
        if i == target:
            continue
        vals = [r[i].strip() for r in rows]
        if t.strip() == "c" or all(_is_number(v) for v in vals) and h != "gender":
            cols.append(np.array([float(v) for v in vals]))
            names.append(h)
            numeric.append(t.strip() == "c")
        else:
            levels = sorted(set(vals))
            for lev in levels[1:]:
                cols.append(np.array([float(v == lev) for v in vals]))
                names.append(f"{h}={lev}")
                numeric.append(False)
    x = np.stack(cols, 1)
    y = np.array([1 if r[target].strip() == "0" else 0 for r in rows])
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(x))
    n_te = int(round(test_fraction * len(x)))
    te, tr = perm[:n_te], perm[n_te:]
    mu, sd = x[tr].mean(0), x[tr].std(0)
    num = np.array(numeric)
    x = x.copy()
    x[:, num] = (x[:, num] - mu[num]) / np.where(sd[num] > 0, sd[num], 1.0)
    d = len(names)
    mutable = np.array([nm in CLEVELAND_MUTABLE for nm in names])
    sign = np.array([float(CLEVELAND_SIGN.get(nm, -1)) for nm in names])
    return CausalTable(names=names, B=np.zeros((d, d)), sign=sign, mutable=mutable, desirable=np.zeros(d, bool),
                       abilities=np.ones(d), x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te],
                       info={"source": str(path), "rows": len(rows), "standardised": [n for n, u in zip(names, numeric) if u]})
