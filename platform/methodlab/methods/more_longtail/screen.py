"""Recipe screen of more_longtail on the development seeds (10, 11, 12): CE and LA, each the matched control
(low-rank split, alpha = 0), MORE and (for some recipes) the plain network, every fit through the method's own
`fit` with the acceptance job (jobs/more_longtail/digits_lt.yaml) plus one recipe's overrides, the same overrides
for every arm. Selection signal: the balanced VALIDATION split (never the test split). Results are appended to
reports/more_longtail_screen.jsonl (one record per fit; re-running skips the fits already there) and rendered by
`methodlab reproduce more_longtail` as the "Recipe screen" section.

    PYTHONPATH=platform python -m methodlab.methods.more_longtail.screen [recipe ...]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

DEV_SEEDS = (10, 11, 12)
OUT = Path("reports/more_longtail_screen.jsonl")
JOB = "jobs/more_longtail/digits_lt.yaml"
KEEP = ("eval/balanced_acc", "eval/acc_many", "eval/acc_medium", "eval/acc_few", "val/balanced_acc", "val/acc_few",
        "train/loss_task", "eval/disc_many", "eval/disc_few", "eval/gen_balanced_acc", "train/lowrank_rel")
# name -> (overrides of the job config, arms). `more` overrides merge into the job's `more` block.
_OLD = {"more": {"a_init": "kaiming_sqrt5"}, "augment": "none"}  # the first implementation's recipe, pinned
_CIFAR = {"lr": 0.1, "weight_decay": 2e-4, "batch_size": 128, "epochs": 200, "warmup_epochs": 5, "lr_schedule": "step",
          "lr_milestones": [160, 180]}
RECIPES: dict[str, tuple[dict, tuple[str, ...]]] = {
    "base": (_OLD, ("control", "more")),
    "kaiming0": ({"more": {"a_init": "kaiming"}, "augment": "none"}, ("control", "more")),
    "shift1": ({"more": {"a_init": "kaiming_sqrt5"}, "augment": "shift"}, ("plain", "control", "more")),
    "wd5e-3": ({**_OLD, "weight_decay": 5e-3}, ("control", "more")),
    "k0_shift1": ({"more": {"a_init": "kaiming"}, "augment": "shift"}, ("control", "more")),
    "k0_wd5e-3": ({"more": {"a_init": "kaiming"}, "augment": "none", "weight_decay": 5e-3}, ("control", "more")),
    "cifarproto": ({**_CIFAR, "more": {"a_init": "kaiming"}, "augment": "shift"}, ("control", "more")),
}
LABELS = {
    "base": "first implementation (A init a = sqrt(5), no augmentation)",
    "kaiming0": "A He-uniform (a = 0)",
    "shift1": "+/-1 px shift augmentation",
    "wd5e-3": "weight decay 5e-3",
    "k0_shift1": "A He-uniform + shift augmentation",
    "k0_wd5e-3": "A He-uniform + weight decay 5e-3",
    "cifarproto": "A He-uniform + shift + the CIFAR-LT optimiser (lr 0.1, wd 2e-4, bs 128, 200 ep, warm-up 5, "
                  "x0.1 at 160/180)",
}


def _config(base: dict, name: str, loss: str, arm: str, seed: int) -> dict:
    over, _ = RECIPES[name]
    over = dict(over)
    more = {**base["more"], **over.pop("more", {}), "enabled": arm != "plain", "alpha_zero_control": arm == "control"}
    return {**base, **over, "seed": seed, "base_loss": loss, "more": more, "log_every": 1000}


def load(path: Path = OUT) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run(names=None, losses=("ce", "la"), seeds=DEV_SEEDS, path: Path = OUT, log=print) -> list[dict]:
    from methodlab.core import RunContext
    from methodlab.core.device import set_threads
    from methodlab.methods.more_longtail.config import Config
    from methodlab.methods.more_longtail.train import fit
    from methodlab.specs.files import load_job

    set_threads(1)  # this process is the runner here: the screen's one thread per fit
    base = load_job(JOB).config.model_dump(mode="json")
    done = {r["key"] for r in load(path)}
    for name in names or list(RECIPES):
        for seed in seeds:
            for loss in losses:
                for arm in RECIPES[name][1]:
                    cfg = _config(base, name, loss, arm, seed)
                    key = json.dumps({"name": name, **cfg}, sort_keys=True)
                    if key in done:
                        continue
                    t0 = time.perf_counter()
                    f = fit(Config(**cfg), RunContext(quiet=True))
                    r = {"key": key, "name": name, "seed": seed, "loss": loss, "arm": arm,
                         "wall": time.perf_counter() - t0, **{k: f.get(k) for k in KEEP}}
                    with open(path, "a") as fh:
                        fh.write(json.dumps(r) + "\n")
                    done.add(key)
                    log(f"{name} seed {seed} {loss}/{arm}: test {100 * r['eval/balanced_acc']:.1f} "
                        f"val {100 * r['val/balanced_acc']:.1f} ({r['wall']:.1f} s)")
    return load(path)


def summary(rs: list[dict]) -> list[dict]:
    """Per recipe and loss: control / MORE (/ plain) means, MORE - control on test and on validation."""
    out = []
    names = [n for n in RECIPES if any(r["name"] == n for r in rs)]
    for name in names + [n for n in dict.fromkeys(r["name"] for r in rs) if n not in RECIPES]:
        for loss in ("ce", "la"):
            by = {}
            for r in rs:
                if r["name"] == name and r["loss"] == loss:
                    by.setdefault(r["arm"], {})[r["seed"]] = r
            if "control" not in by or "more" not in by:
                continue
            seeds = sorted(set(by["control"]) & set(by["more"]))
            g = lambda arm, k: np.array([100 * float(by[arm][s][k]) for s in seeds if s in by.get(arm, {})])  # noqa: E731
            row = {"name": name, "loss": loss, "n": len(seeds)}
            for arm in ("plain", "control", "more"):
                if arm in by:
                    row[arm] = {k: float(g(arm, k).mean()) for k in ("eval/balanced_acc", "eval/acc_few", "val/balanced_acc",
                                                                     "val/acc_few")}
            for k, lab in (("eval/balanced_acc", "d_test"), ("eval/acc_few", "d_test_few"), ("val/balanced_acc", "d_val"),
                           ("val/acc_few", "d_val_few")):
                row[lab] = float((g("more", k) - g("control", k)).mean())
            row["loss_task"] = float(g("more", "train/loss_task").mean()) / 100
            row["disc_few_more"] = float(g("more", "eval/disc_few").mean()) / 100
            row["disc_few_control"] = float(g("control", "eval/disc_few").mean()) / 100
            out.append(row)
    return out


if __name__ == "__main__":
    run(sys.argv[1:] or None)
