"""Binary-operation tables `a op b = c (mod p)` as token sequences, the grokking testbed (Power et al.).

Each equation is `<eos> a op b = c <eos>`; tokens 0..p-1 are the residues, then one token per
operator, "=", "<eos>". The split is a seeded permutation of all valid equations: the validation
set is exactly the complement of the training set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS = ("+", "-", "*", "/", "x^2+y^2", "x^2+xy+y^2", "x^3+xy")


def apply_op(op: str, a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    a, b = a.astype(np.int64), b.astype(np.int64)
    if op == "+":
        return (a + b) % p
    if op == "-":
        return (a - b) % p
    if op == "*":
        return (a * b) % p
    if op == "/":  # a * b^{-1}; b = 0 is excluded by `valid_pairs`
        return (a * np.array([pow(int(x), p - 2, p) for x in b.ravel()]).reshape(b.shape)) % p
    if op == "x^2+y^2":
        return (a * a + b * b) % p
    if op == "x^2+xy+y^2":
        return (a * a + a * b + b * b) % p
    if op == "x^3+xy":
        return (a * a * a + a * b) % p
    raise ValueError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")


@dataclass(frozen=True)
class Vocab:
    p: int

    @property
    def op_token(self) -> int:
        return self.p

    @property
    def eq(self) -> int:
        return self.p + 1

    @property
    def eos(self) -> int:
        return self.p + 2

    @property
    def size(self) -> int:
        return self.p + 3


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, int(n**0.5) + 1))


def all_equations(p: int, op: str) -> np.ndarray:
    """[N, 7] int64 token rows `<eos> a op b = c <eos>` for every valid (a, b)."""
    v = Vocab(p)
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    a, b = a.ravel(), b.ravel()
    if op == "/":
        keep = b != 0
        a, b = a[keep], b[keep]
    c = apply_op(op, a, b, p)
    n = len(a)
    rows = np.stack([np.full(n, v.eos), a, np.full(n, v.op_token), b, np.full(n, v.eq), c, np.full(n, v.eos)], 1)
    return rows.astype(np.int64)


def split_equations(p: int, op: str, train_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rows = all_equations(p, op)
    perm = np.random.default_rng(seed).permutation(len(rows))
    n_train = int(round(train_frac * len(rows)))
    return rows[perm[:n_train]], rows[perm[n_train:]]
