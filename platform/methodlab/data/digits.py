"""scikit-learn's bundled 8x8 digits (1,797 real images): the fast 'standard classifier' fixture."""

from __future__ import annotations

import numpy as np


def load_digits_split(seed: int = 0, test_frac: float = 0.25, train_subset: int | None = None):
    """Stratified split; features scaled to [0, 1]. Returns (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_frac, stratify=y, random_state=seed)
    if train_subset is not None and train_subset < len(xtr):
        xtr, _, ytr, _ = train_test_split(xtr, ytr, train_size=train_subset, stratify=ytr, random_state=seed)
    return xtr, ytr, xte, yte
