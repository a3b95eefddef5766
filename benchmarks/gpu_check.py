"""`make gpu-check`: every torch method on a GPU, checked and timed against the same machine's CPU.

Needs no Ray (the lent GPU machine has CUDA torch and no Ray) and no pandas: fits run in this process
through the method contract (`fit(cfg, RunContext)`), with the same device / precision / thread rules as
the local runner (`methodlab.core.device`). For each method with a torch network:

1. its smoke preset on the device, under `DeviceRecorder` (a TorchFunctionMode that records every op's
   tensor devices: an op mixing devices is a failure) and an optimiser-step hook (parameters and optimiser
   state on the device); then `torch.cuda.max_memory_allocated() > 0`, the newest checkpoint loads back on
   the CPU, and the predictor answers on the device;
2. `--steps` units (200 by default) of its `jobs/<slug>/gpu.yaml` setting, cut short by CAPS below, timed on
   the device and then on this machine's CPU with every core: units/s on each, their ratio, peak GPU memory,
   the precision used.

Then min_swgg's GPU solver against POT's exact `ot.emd` on the CPU at n = 4,096 and 16,384 (d = 100).

It prints one table and writes benchmarks/results/gpu_check.json (BENCHMARKS.md renders it as "GPU").
`--device cpu --quick` runs the same checks on the CPU on the smoke presets with a few steps: that is what
`make test` runs (tests/unit/test_gpu_check.py), so the script cannot rot on machines without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "platform"))

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from methodlab.core.device import iter_tensors  # noqa: E402

# How to cut a method's gpu.yaml setting (or smoke preset) to k units of its main loop: (unit, steps per unit,
# overrides(k)). `--steps N` runs k = max(1, N // steps per unit) units: 200 optimisation steps, or an epoch
# count of the same order where a method's loop is counted in epochs. Each entry keeps the setting's model and
# data sizes and shortens only the loop, so units/s is the setting's.
Cap = tuple[str, int, Callable[[int], dict]]
CAPS: dict[str, Cap] = {
    "agbal": ("epochs", 1, lambda k: {"rounds": 1, "epochs": k}),
    "cmcl": ("epochs", 100, lambda k: {"n_steps": 2, "epochs": k, "eval_subsets": 1}),
    "ctsketch": ("steps", 1, lambda k: {"max_steps": k, "eval_every_steps": k, "checkpoint_every": k, "log_every": k,
                                        "time_budget_s": None, "curriculum": None}),
    "discrete_structure": ("steps", 1, lambda k: {"mu_schedule": [1.0], "inner_steps": k, "last_stage_steps": k,
                                                  "check_every": k, "checkpoint_every": k, "log_every": k}),
    "face": ("align steps", 1, lambda k: {"pretrain_epochs": 1, "map_epochs": 1, "align_steps": k, "patience": None}),
    "graphrta": ("epochs", 1, lambda k: {"pretrain_epochs": k, "adapt_epochs": k, "log_every": k, "checkpoint_every": k}),
    "grokking_flatness": ("steps", 1, lambda k: {"max_steps": k, "log_every": k, "checkpoint_every": k}),
    "gyroatt": ("epochs", 100, lambda k: {"epochs": k, "checkpoint_every": 1}),
    "hier_retrieval": ("steps", 1, lambda k: {"steps": k, "finetune_steps": k, "eval_every": k, "finetune_eval_every": k}),
    "min_swgg": ("iterations", 1, lambda k: {"n_iter": k, "flow_iters": k, "cfm_steps": k, "cfm_init_iters": k,
                                             "log_every": k, "checkpoint_every": k}),
    "more_longtail": ("epochs", 100, lambda k: {"epochs": k, "log_every": 1, "checkpoint_every": 1}),
    "mtpp_threshold": ("epochs", 100, lambda k: {"max_epochs": k, "min_epochs": 1, "checkpoint_every": 1}),
    "rule_unlearning": ("RL steps", 1, lambda k: {"pretrain_epochs": 1, "rs_epochs": 1, "rl_steps": k, "log_every": k,
                                                  "checkpoint_every": k}),
    "ucan": ("steps", 1, lambda k: {"max_steps": k, "eval_every": k, "checkpoint_every": k}),
    "ugodit": ("iterations", 1, lambda k: {"train_iterations": k, "checkpoint_every": k, "log_every": k}),
    "unirl": ("steps", 1, lambda k: {"max_steps": k, "online_steps": k, "eval_every": k, "checkpoint_every": k}),
    "weakshot_keypoint": ("steps", 1, lambda k: {"stage1_steps": k, "stage2_steps": k, "log_every": k,
                                                 "checkpoint_every": k}),
}


def units(slug: str, steps: int) -> int:
    return max(1, steps // CAPS[slug][1])


class DeviceRecorder(TorchFunctionMode):
    """Records, for every torch op, the devices of its tensor arguments. An op whose tensors sit on two
    devices is a mismatch (0-dim CPU scalars excepted: PyTorch allows them with device tensors); ops whose
    tensors are all on the CPU while the run's device is a GPU are counted as host ops (some are on purpose:
    index building, numpy hand-offs)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device
        self.ops = 0
        self.host_ops = 0
        self.mismatches: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = set()
        for t in iter_tensors((args, kwargs)):
            if t.device.type == "cpu" and t.dim() == 0 and self.device.type != "cpu":
                continue
            devices.add(t.device)
        self.ops += 1
        if len(devices) > 1:
            name = getattr(func, "__name__", str(func))
            self.mismatches[name] = self.mismatches.get(name, 0) + 1
        elif devices and self.device.type != "cpu" and next(iter(devices)).type == "cpu":
            self.host_ops += 1
        return func(*args, **kwargs)


class OptimizerWatch:
    """A global optimiser-step hook: parameters and (non-scalar) optimiser state must be on the run's device."""

    def __init__(self, device: torch.device):
        self.device, self.steps, self.off = device, 0, []
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._hook)

    def _hook(self, opt, args, kwargs):
        self.steps += 1
        if len(self.off) > 5:
            return
        for group in opt.param_groups:
            for p in group["params"]:
                if p.device != self.device:
                    self.off.append(f"{type(opt).__name__} parameter on {p.device}")
                for k, v in opt.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor) and v.dim() > 0 and v.device != self.device:
                        self.off.append(f"{type(opt).__name__} state {k!r} on {v.device}")

    def close(self):
        self.handle.remove()


def gpu_yaml_config(slug: str) -> tuple[dict, dict]:
    """(config overrides, scaling) of jobs/<slug>/gpu.yaml."""
    import yaml

    path = ROOT / "jobs" / slug / "gpu.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("config") or {}, data.get("scaling") or {}


def fit_once(slug: str, overrides: dict, device: torch.device, precision: str, workdir: Path,
             threads: int, checks: bool) -> dict:
    """One fit of `slug` in this process: the local runner's contract without its run folder machinery."""
    from methodlab.core import RunContext
    from methodlab.core.device import set_threads
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    cfg = spec.config_cls().model_validate(overrides)
    ckpts = workdir / "checkpoints"
    reports = []

    def report(metrics: dict, ckpt_dir: Path | None) -> None:
        reports.append(metrics)
        if ckpt_dir is not None:
            dst = ckpts / f"checkpoint_{len(reports):06d}"
            shutil.copytree(ckpt_dir, dst)

    ctx = RunContext(device=device, precision=precision, seed=cfg.seed, report_fn=report, quiet=True)
    before = set_threads(threads)
    recorder = DeviceRecorder(device) if checks else None
    watch = OptimizerWatch(device) if checks else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    try:
        if recorder is not None:
            with recorder:
                spec.fit_fn("train")(cfg, ctx)
        else:
            spec.fit_fn("train")(cfg, ctx)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
    finally:
        if watch is not None:
            watch.close()
        set_threads(before)
    out = {"wall_s": wall, "reports": len(reports), "config": cfg,
           "peak_gpu_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0,
           "checkpoint": max(ckpts.glob("checkpoint_*"), default=None) if ckpts.exists() else None}
    if checks:
        out.update(ops=recorder.ops, host_ops=recorder.host_ops, mismatches=recorder.mismatches,
                   optimizer_steps=watch.steps, optimizer_off_device=watch.off[:5])
    return out


def check_checkpoint_and_predictor(slug: str, run: dict, device: torch.device) -> dict:
    from methodlab.core import load_checkpoint
    from methodlab.core.registry import get_spec

    ckpt = run["checkpoint"]
    if ckpt is None:
        return {"checkpoint_on_cpu": False, "predictor_ok": False, "problem": "no checkpoint written"}
    loaded = load_checkpoint(ckpt, method=slug, load_torch_state=True)
    on_cpu = all(t.device.type == "cpu" for t in loaded.weights.values())
    cls = get_spec(slug).predictor_cls()
    pred = cls.from_checkpoint(ckpt, device=device)
    inputs = cls.example_inputs(run["config"]) if hasattr(cls, "example_inputs") else [cls.Input()]
    recorder = DeviceRecorder(device)
    with recorder:
        outs = pred(inputs)
    ok = len(outs) == len(inputs) and not recorder.mismatches
    return {"checkpoint_on_cpu": on_cpu, "predictor_ok": ok, "predictor_ops": recorder.ops,
            "predictor_mismatches": recorder.mismatches}


def check_method(slug: str, device: torch.device, steps: int, quick: bool, workroot: Path) -> dict:
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    smoke = dict(spec.config_cls().smoke)
    unit, _, cap = CAPS[slug]
    k = units(slug, steps)
    row: dict[str, Any] = {"method": slug, "unit": unit}
    if quick:  # the smoke preset cut to a few units: the checks, not the speed
        precision = "fp32"
        smoke_overrides = {**smoke, **cap(k)}
    else:
        smoke_overrides = smoke
        precision = "fp32"
    run = fit_once(slug, smoke_overrides, device, precision, workroot / f"{slug}-smoke", os.cpu_count() or 1, True)
    row.update({"smoke_wall_s": round(run["wall_s"], 2), "ops": run["ops"], "host_ops": run["host_ops"],
                "mismatches": run["mismatches"], "optimizer_steps": run["optimizer_steps"],
                "optimizer_off_device": run["optimizer_off_device"], "peak_gpu_mib_smoke": round(run["peak_gpu_mib"], 1)})
    row.update(check_checkpoint_and_predictor(slug, run, device))
    problems = []
    if run["mismatches"]:
        problems.append(f"ops mixing devices: {run['mismatches']}")
    if run["optimizer_off_device"]:
        problems.append(f"optimiser off device: {run['optimizer_off_device']}")
    if device.type == "cuda" and run["peak_gpu_mib"] <= 0:
        problems.append("no GPU memory allocated")
    if not row["checkpoint_on_cpu"]:
        problems.append("checkpoint does not load on the CPU")
    if not row["predictor_ok"]:
        problems.append(f"predictor failed on {device}: {row.get('predictor_mismatches')}")
    if not quick:  # the gpu.yaml setting cut to `steps` units, on the device and on this machine's CPU
        config, scaling = gpu_yaml_config(slug)
        precision = scaling.get("precision", "fp32")
        overrides = {**config, **cap(k)}
        row["precision"] = precision
        from methodlab.core.errors import MissingSourceError

        try:
            dev = fit_once(slug, overrides, device, precision, workroot / f"{slug}-dev",
                           int(scaling.get("cpus_per_worker", 1)), False)
        except MissingSourceError as err:  # a gpu.yaml on real data this machine does not have: said, not failed
            row["timed"] = f"not run: {err}"
            row["problems"], row["ok"] = problems, not problems
            return row
        cpu = fit_once(slug, overrides, torch.device("cpu"), "fp32" if precision == "fp16" else precision,
                       workroot / f"{slug}-cpu", os.cpu_count() or 1, False)
        row.update({f"{unit}/s {device.type}": round(k / dev["wall_s"], 3), f"{unit}/s cpu": round(k / cpu["wall_s"], 3),
                    "ratio": round(cpu["wall_s"] / dev["wall_s"], 2), "peak_gpu_mib": round(dev["peak_gpu_mib"], 1),
                    "units": k})
    else:
        row["precision"] = precision
    row["problems"] = problems
    row["ok"] = not problems
    return row


def swgg_vs_emd(device: torch.device, sizes: list[int], d: int = 100) -> list[dict]:
    """min-SWGG's solver on `device` against POT's exact ot.emd on the CPU, same points (uniform weights)."""
    import numpy as np
    import ot

    from methodlab.methods.min_swgg import swgg

    rows = []
    for n in sizes:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((n, d)).astype(np.float32)
        y = (rng.standard_normal((n, d)) + 1.0).astype(np.float32)
        xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        # the plan-quality settings of benchmarks/min_swgg_scaling.py: linear slice, 300 iterations, N = 10,
        # eps = 0.05, Adam 0.01, roll-back on h
        with torch.device(device):
            g = swgg.build_slice("linear", d, generator=torch.Generator(device=device).manual_seed(0))
        opt = torch.optim.Adam(g.parameters(), lr=0.01)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        swgg.dgswp(xt, yt, g, opt, n_iter=300, eps=0.05, n_samples=10, rollback=True, rollback_on="h",
                   generator=torch.Generator(device=device).manual_seed(1))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t_swgg = time.perf_counter() - t0
        row = {"n": n, "d": d, "min_swgg_s": round(t_swgg, 4), "device": device.type}
        if n <= 16_384:
            a = np.full(n, 1.0 / n)
            t0 = time.perf_counter()
            ot.emd(a, a, ot.dist(x.astype(np.float64), y.astype(np.float64)), numItermax=10_000_000)
            row["emd_cpu_s"] = round(time.perf_counter() - t0, 4)
            row["speedup"] = round(row["emd_cpu_s"] / t_swgg, 1)
        rows.append(row)
    return rows


def torch_methods() -> list[str]:
    from methodlab.core.registry import get_spec, method_slugs

    return [s for s in method_slugs() if get_spec(s).cpu_only is None]


def render(rows: list[dict], device: torch.device) -> str:
    lines = [f"{'method':20} {'unit':12} {'dev/s':>9} {'cpu/s':>9} {'ratio':>6} {'peak MiB':>9} {'prec':5} ok"]
    for r in rows:
        dev = r.get(f"{r['unit']}/s {device.type}", "-")
        cpu = r.get(f"{r['unit']}/s cpu", "-")
        lines.append(f"{r['method']:20} {r['unit']:12} {dev!s:>9} {cpu!s:>9} {r.get('ratio', '-')!s:>6} "
                     f"{r.get('peak_gpu_mib', r.get('peak_gpu_mib_smoke', 0))!s:>9} {r.get('precision', '-'):5} "
                     f"{'yes' if r['ok'] else 'NO: ' + '; '.join(r['problems'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python benchmarks/gpu_check.py --device cpu --quick")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--steps", type=int, default=None, help="units per timed run (default 200; --quick: 2)")
    ap.add_argument("--quick", action="store_true", help="smoke presets cut to a few steps, checks only (no timing)")
    ap.add_argument("--methods", default="", help="comma-separated subset (default: every torch method)")
    ap.add_argument("--swgg-sizes", default="4096,16384", help="n for min_swgg vs ot.emd ('' to skip)")
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_check.json"))
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"error: --device cuda but torch {torch.__version__} sees no GPU (use --device cpu)", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    steps = args.steps or (2 if args.quick else 200)
    methods = [m for m in args.methods.split(",") if m] or torch_methods()
    unknown = sorted(set(methods) - set(CAPS))
    if unknown:
        print(f"error: no CAPS entry for {unknown} (add one in benchmarks/gpu_check.py)", file=sys.stderr)
        return 2
    rows = []
    workroot = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    t_all = time.perf_counter()
    try:
        for slug in methods:
            t0 = time.perf_counter()
            try:
                row = check_method(slug, device, steps, args.quick, workroot)
            except Exception as err:  # one method's failure is a row, not the end of the check
                row = {"method": slug, "unit": CAPS[slug][0], "ok": False,
                       "problems": [f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"],
                       "traceback": traceback.format_exc()[-2000:]}
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(f"{slug}: {'ok' if row['ok'] else 'FAILED ' + '; '.join(row['problems'])} ({row['wall_s']} s)", flush=True)
        swgg_rows = swgg_vs_emd(device, [int(s) for s in args.swgg_sizes.split(",") if s]) if args.swgg_sizes else []
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    print(render(rows, device))
    for r in swgg_rows:
        print(f"min_swgg n={r['n']} d={r['d']}: {r['min_swgg_s']} s on {r['device']}; ot.emd on CPU "
              f"{r.get('emd_cpu_s', '-')} s; speed-up {r.get('speedup', '-')}x")
    card = torch.cuda.get_device_name(0) if device.type == "cuda" else "no GPU (CPU run)"
    result = {"name": "gpu_check", "title": "GPU", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{card}, {os.cpu_count()} CPUs, {platform.machine()}",
              "versions": f"python {platform.python_version()}, torch {torch.__version__}",
              "device": card,
              "quick": args.quick, "steps": steps, "torch": torch.__version__, "cpu_count": os.cpu_count(),
              "rows": [{k: v for k, v in r.items() if k not in ("traceback",)} for r in rows],
              "swgg": swgg_rows, "wall_s": round(time.perf_counter() - t_all, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    failed = [r["method"] for r in rows if not r["ok"]]
    if failed:
        for r in rows:
            if not r["ok"] and r.get("traceback"):
                print(f"--- {r['method']}\n{r['traceback']}", file=sys.stderr)
        print(f"gpu-check: {len(failed)} of {len(rows)} methods failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"gpu-check: {len(rows)} methods ok on {device} in {result['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
