"""A trivial method registered only by the harness tests, written as a package into a temp folder (so a change
to its code can be made and seen): `fit` walks a loss down for `steps` steps with a checkpoint every step."""

from __future__ import annotations

import sys
from pathlib import Path

TOY = '''
from methodlab.core.method import MethodSpec

SPEC = MethodSpec(slug="toy", title="Toy", paper="none", config="toypkg.train:Config", fit="toypkg.train:fit",
                  predictor="toypkg.train:Predictor", cpu_only="a toy", precisions=("fp32",))
'''
TRAIN = '''
import json
import time
from pathlib import Path

from methodlab.core.checkpoint import load_checkpoint, save_checkpoint
from methodlab.core.method import MethodConfig

GAIN = 1.0  # edited by a test: a code change


class Config(MethodConfig):
    primary_metric = "loss"
    mode = "min"
    steps: int = 4
    rate: float = 0.5
    sleep_s: float = 0.0
    init_from: str | None = None


class Predictor:
    pass


def fit(cfg, ctx):
    start, loss = 0, 10.0 + cfg.seed
    if cfg.init_from:
        loss = load_checkpoint(cfg.init_from, method="toy").state["loss"] / 2
    if ctx.checkpoint is not None:
        state = load_checkpoint(ctx.checkpoint, method="toy").state
        start, loss = state["step"], state["loss"]
    for step in range(start + 1, cfg.steps + 1):
        time.sleep(cfg.sleep_s)
        loss = loss * (1 - cfg.rate) * GAIN

        def write(d, step=step, loss=loss):
            save_checkpoint(d, method="toy", config=cfg, weights={}, state={"step": step, "loss": loss})
        ctx.report({"step": step, "loss": loss}, checkpoint=write)
    return {"loss": loss}
'''


def install(root: Path) -> Path:
    """Write toypkg/ under root, put root on sys.path, register `toy`; returns the package folder."""
    pkg = root / "toypkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(TOY)
    (pkg / "train.py").write_text(TRAIN)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return pkg


def job(**config) -> dict:
    return {"method": "toy", "config": dict(config), "scaling": {"cpus_per_worker": 1}}
