"""PC (chi-square tests) and GES (BDeu score) from causal-learn, on the same data, returning a CPDAG, plus a
DAG extension of a (possibly inconsistent) CPDAG so the same refit / log-likelihood / serving path applies."""

from __future__ import annotations

import contextlib
import io

import numpy as np

from methodlab.core import MissingSourceError
from methodlab.methods.discrete_structure import graphs

PIP = "pip install causal-learn"


def run_pc(x: np.ndarray, alpha: float) -> np.ndarray:
    try:
        from causallearn.search.ConstraintBased.PC import pc
    except ImportError as err:
        raise MissingSourceError(f"causal-learn is not installed: {PIP}") from err
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cg = pc(np.asarray(x, dtype=float), alpha=alpha, indep_test="chisq", show_progress=False)
    return graphs.from_causallearn(cg.G.graph)


def run_ges(x: np.ndarray) -> np.ndarray:
    try:
        from causallearn.search.ScoreBased.GES import ges
    except ImportError as err:
        raise MissingSourceError(f"causal-learn is not installed: {PIP}") from err
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rec = ges(np.asarray(x, dtype=float), score_func="local_score_BDeu")
    return graphs.from_causallearn(rec["G"].graph)


def dag_extension(C: np.ndarray) -> np.ndarray:
    """A DAG inside C: directed edges kept (a cycle among them loses its edges by order), undirected edges
    oriented along a topological order of the directed part."""
    from methodlab.methods.discrete_structure.model import threshold_to_dag
    from methodlab.data.discrete_structure_sim import topological_order

    C = (np.asarray(C) != 0).astype(np.int64)
    directed = C * (1 - C.T)
    D = threshold_to_dag(directed.astype(float), 0.5)
    order = topological_order(D)
    pos = {v: i for i, v in enumerate(order)}
    A = D.copy()
    d = len(C)
    for i in range(d):
        for j in range(i + 1, d):
            if C[i, j] and C[j, i]:
                if pos[i] < pos[j]:
                    A[i, j] = 1
                else:
                    A[j, i] = 1
    return A
