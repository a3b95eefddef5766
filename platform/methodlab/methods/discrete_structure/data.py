"""Train / held-out 0/1 data and the ground-truth DAG (when known) from the methodlab.data sources."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from methodlab.core import ConfigError
from methodlab.data import discrete_structure_sim as sim
from methodlab.core.paths import read_path


@dataclass
class Dataset:
    names: list[str]
    x_train: np.ndarray  # (n, d) int8 0/1
    x_heldout: np.ndarray
    truth: np.ndarray | None  # d x d adjacency, row = cause
    net: sim.BinaryNet | None = None  # the generating network when it is binary (exact log-likelihoods)


def build_data(cfg) -> Dataset:
    if cfg.data == "simulate":
        net = sim.random_network(cfg.d, cfg.exp_degree, cfg.mechanism, cfg.seed, influence_min=cfg.influence_min,
                                 min_multi_parent=cfg.min_multi_parent, xor_flip=cfg.xor_flip)
        return _from_net(net, cfg)
    if cfg.data == "xor_triple":
        return _from_net(sim.xor_triple(cfg.xor_flip), cfg)
    if cfg.data == "bif":
        from methodlab.data import discrete_structure_bif as bif

        cnet = bif.load_network(cfg.network)
        try:
            x = bif.binary_data(cnet, cfg.n + cfg.n_heldout, 1_000_003 * cfg.seed + 17, cfg.binarize)
        except ValueError as err:
            raise ConfigError(str(err), field="binarize") from err
        return Dataset(cnet.names, x[:cfg.n], x[cfg.n:], cnet.adjacency())
    # file
    try:
        names, x = sim.load_table(cfg.data_path, cfg.binarize)
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err), field="data_path") from err
    rng = np.random.default_rng(cfg.seed)
    perm = rng.permutation(len(x))
    n_ho = int(round(cfg.heldout_frac * len(x)))
    truth = None
    if cfg.truth_path:
        p = read_path(cfg.truth_path, "truth_path", "an adjacency CSV (row cause, col effect) or a .bif file")
        if p.suffix in (".bif", ".gz"):
            from methodlab.data import discrete_structure_bif as bif

            cnet = bif.read_bif_file(p)
            if sorted(cnet.names) != sorted(names):
                raise ConfigError(f"BIF variables {cnet.names} differ from the data columns {names}", field="truth_path")
            idx = [cnet.names.index(v) for v in names]
            truth = cnet.adjacency()[np.ix_(idx, idx)]
        else:
            try:
                truth = sim.load_adjacency_csv(p, names)
            except ValueError as err:
                raise ConfigError(str(err), field="truth_path") from err
    return Dataset(names, x[perm[n_ho:]], x[perm[:n_ho]], truth)


def _from_net(net: sim.BinaryNet, cfg) -> Dataset:
    x = sim.sample(net, cfg.n + cfg.n_heldout, 1_000_003 * cfg.seed + 17)
    return Dataset(net.names, x[:cfg.n], x[cfg.n:], net.adjacency(), net)
