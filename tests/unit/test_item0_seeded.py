"""Issue 42 item 0: the suite's verdicts do not depend on an unseeded draw.

The cmcl projector keeps a float32 rank-8 moment matrix at rank 8 at lambda' = 0 whatever the draw (HEAD's
`S > max(lam, rel_tol * S_max)` kept a round-off direction for draws 60 and 263), and `pytest --global-seed N`
seeds random, numpy's legacy global RNG and torch before every test, so the suite can be run under several seeds
to find tests whose verdict depends on a draw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
D = 64


def test_cmcl_projector_rank_is_8_for_every_draw_at_lambda_zero():
    from methodlab.methods.cmcl.model import projector

    U = torch.linalg.qr(torch.randn(D, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))[0]
    seeds = list(range(40, 90)) + [263]  # 60 and 263 came out rank 9 on HEAD
    ranks = {}
    for s in seeds:
        X = (torch.randn(500, 8, generator=torch.Generator().manual_seed(s)) @ U.T.float()).float()
        ranks[s] = projector(X.T @ X / 500, 0.0)[1]
    assert {s: r for s, r in ranks.items() if r != 8} == {}


_PROBE = '''
import json, os, random
import numpy as np
import torch


def _dump(name):
    with open(os.path.join(os.environ["ITEM0_OUT"], name + ".json"), "w") as f:
        json.dump([random.random(), float(np.random.rand()), torch.rand(3).tolist()], f)
    torch.rand(5), np.random.rand(5), random.random()  # move every RNG on: the next test must not see it


def test_a():
    _dump("a")


def test_b():
    _dump("b")
'''


def _probe(tmp_path: Path, *args: str) -> tuple[list, list]:
    (tmp_path / "test_probe_item0.py").write_text(_PROBE)
    env = {**os.environ, "ITEM0_OUT": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_probe_item0.py"), *args],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return tuple(json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")


def test_global_seed_option_seeds_random_numpy_and_torch_before_each_test(tmp_path):
    import random

    import numpy as np

    a, b = _probe(tmp_path, "--global-seed", "5")
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    want = [random.random(), float(np.random.rand()), torch.rand(3).tolist()]
    assert a == b == want
    # without the option nothing is seeded: consecutive tests see different draws
    a, b = _probe(tmp_path)
    assert a != b
