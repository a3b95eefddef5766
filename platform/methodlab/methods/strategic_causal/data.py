"""Build the strategic-classification problem of a config: data in improvement coordinates, the true C, flags."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from methodlab.core.errors import ConfigError
from methodlab.data.strategic_causal_scm import CausalTable, cvd_scm, load_cleveland, load_tabular
from methodlab.methods.strategic_causal.config import Config
from methodlab.methods.strategic_causal.model import contribution_matrix, improvement_graph


@dataclass
class Problem:
    names: list[str]
    sign: np.ndarray  # +1 larger is better, -1 otherwise (x~ = sign * x)
    B: np.ndarray  # natural coordinates
    B_tilde: np.ndarray  # improvement coordinates
    C: np.ndarray  # true contribution matrix (I - B~^T)^{-1}
    mutable: np.ndarray
    desirable: np.ndarray
    abilities: np.ndarray
    X_train: np.ndarray  # x~
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def d(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        return self.names.index(name)


def load_table(cfg: Config) -> CausalTable:
    if cfg.scm in ("cvd_scm_v2", "cvd_scm_v1"):
        return cvd_scm(cfg.scm, cfg.n, cfg.seed)
    if cfg.scm == "cleveland":
        return load_cleveland(cfg.seed, cfg.test_fraction)
    return load_tabular(cfg.data_path, cfg.label_column, cfg.graph_path, cfg.flags_path, cfg.test_fraction,
                        cfg.seed, cfg.favourable_label)


def build_problem(cfg: Config) -> Problem:
    t = load_table(cfg)
    a = np.array(t.abilities, float)
    for name, v in cfg.abilities.items():
        if name not in t.names:
            raise ConfigError(f"unknown feature {name!r}; known: {', '.join(t.names)}", field="config.abilities")
        a[t.names.index(name)] = v
    for label, keys in (("weights", cfg.weights or {}), ("uncertain_features", cfg.uncertain_features or [])):
        bad = sorted(set(keys) - set(t.names))
        if bad:
            raise ConfigError(f"unknown feature(s) {bad}; known: {', '.join(t.names)}", field=f"config.{label}")
    Bt = improvement_graph(t.B, t.sign)
    return Problem(names=list(t.names), sign=np.asarray(t.sign, float), B=np.asarray(t.B, float), B_tilde=Bt,
                   C=contribution_matrix(Bt), mutable=np.asarray(t.mutable, bool),
                   desirable=np.asarray(t.desirable, bool), abilities=a,
                   X_train=t.x_train * t.sign, y_train=np.asarray(t.y_train), X_test=t.x_test * t.sign,
                   y_test=np.asarray(t.y_test), info=t.info)


def given_classifier(cfg: Config, prob: Problem) -> tuple[np.ndarray, float]:
    """cfg.weights (natural coordinates, by name; missing names 0) -> (w~, b) with score w~^T x~ + b."""
    w_nat = np.array([float((cfg.weights or {}).get(n, 0.0)) for n in prob.names])
    return w_nat * prob.sign, -float(cfg.threshold)
