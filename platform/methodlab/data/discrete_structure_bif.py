"""bnlearn networks that ship inside the pgmpy wheel (`pgmpy/utils/example_models/<name>.bif.gz`), read with
`BIFReader(string=...)` (never the hub-downloading `load_model`), plus a seeded numpy ancestral sampler of the
categorical CPTs. Binary networks (asia, cancer, earthquake) map state index 0/1 to the values 0/1; other
networks only with binarize='first_state_vs_rest' (state 0 -> 0, any other state -> 1), ground truth = the
original DAG. Users' own BIF files go through `read_bif_file`."""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from methodlab.core import MissingSourceError

PIP = 'pip install "pgmpy>=1.1.2,<1.3"'


@dataclass
class CategoricalNet:
    names: list[str]
    parents: list[list[int]]
    cards: list[int]
    states: list[list[str]]
    tables: list[np.ndarray]  # node j: (card_j, prod card_parents) with the parents' configuration in C order

    def adjacency(self) -> np.ndarray:
        d = len(self.names)
        a = np.zeros((d, d), dtype=np.int64)
        for j, pa in enumerate(self.parents):
            a[pa, j] = 1
        return a


def example_models_dir() -> Path:
    spec = importlib.util.find_spec("pgmpy")
    if spec is None or not spec.submodule_search_locations:
        raise MissingSourceError(f"pgmpy is not installed: {PIP}")
    return Path(spec.submodule_search_locations[0]) / "utils" / "example_models"


def bif_text(name: str) -> str:
    path = example_models_dir() / f"{name}.bif.gz"
    if not path.exists():
        raise MissingSourceError(f"{path} not found (network {name!r}): {PIP}")
    return gzip.decompress(path.read_bytes()).decode("utf-8")


def parse_bif(text: str) -> CategoricalNet:
    try:
        from pgmpy.readwrite import BIFReader
    except ImportError as err:  # pragma: no cover - depends on the install
        raise MissingSourceError(f"pgmpy is not installed: {PIP}") from err
    model = BIFReader(string=text).get_model()
    names = [str(v) for v in model.nodes()]
    index = {v: i for i, v in enumerate(names)}
    parents, cards, states, tables = [], [], [], []
    for v in names:
        cpd = model.get_cpds(v)
        pa = [str(p) for p in cpd.variables[1:]]
        parents.append([index[p] for p in pa])
        cards.append(int(cpd.variable_card))
        states.append([str(s) for s in cpd.state_names[v]])
        tables.append(np.asarray(cpd.get_values(), dtype=float).reshape(int(cpd.variable_card), -1))
    return CategoricalNet(names, parents, cards, states, tables)


def load_network(name: str) -> CategoricalNet:
    """A packaged bnlearn network by name (asia, cancer, earthquake, sachs, survey, alarm, ...)."""
    return parse_bif(bif_text(name))


def read_bif_file(path: str | Path) -> CategoricalNet:
    path = Path(path)
    raw = path.read_bytes()
    return parse_bif(gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode())


def sample_states(net: CategoricalNet, n: int, seed: int) -> np.ndarray:
    """n x d state indices by ancestral sampling from the CPTs."""
    from methodlab.data.discrete_structure_sim import topological_order

    rng = np.random.default_rng(seed)
    x = np.zeros((n, len(net.names)), dtype=np.int64)
    for j in topological_order(net.adjacency()):
        pa = net.parents[j]
        idx = np.zeros(n, dtype=np.int64)
        for p in pa:  # C order: the first parent varies slowest
            idx = idx * net.cards[p] + x[:, p]
        probs = net.tables[j][:, idx].T  # (n, card)
        cum = np.cumsum(probs, 1)
        u = rng.random(n)[:, None] * cum[:, -1:]
        x[:, j] = np.minimum((u > cum).sum(1), net.cards[j] - 1)
    return x


def binary_data(net: CategoricalNet, n: int, seed: int, binarize: str = "none") -> np.ndarray:
    """Samples as 0/1: binary nodes keep their state index; non-binary nodes need binarize='first_state_vs_rest'."""
    bad = [v for v, c in zip(net.names, net.cards) if c != 2]
    if bad and binarize != "first_state_vs_rest":
        raise ValueError(f"variable {bad[0]!r} has {net.cards[net.names.index(bad[0])]} states; "
                         "set binarize: first_state_vs_rest (state 0 vs the rest)")
    return (sample_states(net, n, seed) != 0).astype(np.int8)
