"""`make ddp-check`: every data-parallel method as N processes of torch.distributed (gloo), no Ray.

The lent GPU machine has one GPU and no Ray, and NCCL refuses two ranks on one GPU; gloo takes CUDA tensors,
so N processes sharing that GPU through gloo catch what NCCL would on a real multi-GPU run: a CPU tensor in
a collective, a batch left on the host, a float64 reduction (the collective probe of core/faults.py wraps
torch.distributed in every rank). On a CPU-only machine `--device cpu` runs the same processes on the CPU.

For each method with a case in tests/reliability/data_parallel/ (the data-parallel test's job and
overrides): one process (world size 1), then `--world` processes, with the case's smoke job; the case's
curve keys are compared report by report with the case's tolerance, and each rank's `ctx.shard` output
(sample probe) must add up to the 1-process batches. One line per method, a JSON file with the figures.

    python benchmarks/ddp_check.py --device cuda --out benchmarks/results/ddp_check.json
    python benchmarks/ddp_check.py --device cpu --methods grokking_flatness   # what `make test` runs
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "platform"), str(ROOT)]

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def cases() -> dict:
    folder = ROOT / "tests" / "reliability" / "data_parallel"
    return {p.stem: importlib.import_module(f"tests.reliability.data_parallel.{p.stem}").CASE
            for p in sorted(folder.glob("*.py")) if p.stem != "__init__"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, slug: str, device: str, out: str) -> None:
    """One rank: gloo process group, the method's fit with a RunContext wired as a Train worker's."""
    import torch.distributed as dist

    from methodlab.core import RunContext, faults
    from methodlab.core.device import set_threads
    from methodlab.core.registry import get_spec
    from methodlab.specs.files import load_job

    set_threads(1)
    case = cases()[slug]
    loaded = load_job(str(ROOT / case.job), overrides=[*case.over, "scaling.cpus_per_worker=1"], smoke=True)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

    def ddp(model):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)

    rows: list[dict] = []
    run_dir = Path(out) / f"rank{rank}"
    ctx = RunContext(rank=rank, world_size=world, device=dev, seed=loaded.config.seed, quiet=True,
                     report_fn=lambda m, _ckpt: rows.append(m), run_dir=run_dir, prepare_model_fn=ddp)
    faults.install_collective_guard(dev, rank)
    t0 = time.perf_counter()
    get_spec(loaded.job.method).fit_fn(loaded.job.setting)(loaded.config, ctx)
    wall = time.perf_counter() - t0
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        Path(out, "rows.json").write_text(json.dumps({"rows": rows, "wall_s": wall}, default=float))


def run(slug: str, world: int, device: str, folder: Path) -> dict:
    """`world` processes of one method; returns rank 0's reports, the wall time and the probes' records."""
    from methodlab.core import faults

    folder.mkdir(parents=True, exist_ok=True)
    os.environ[faults.SAMPLE_LOG] = str(folder / "samples")
    os.environ[faults.COLLECTIVE_LOG] = str(folder / "collectives")
    try:
        mp.start_processes(_rank, args=(world, _free_port(), slug, device, str(folder)), nprocs=world,
                           start_method="spawn", join=True)
    finally:
        os.environ.pop(faults.SAMPLE_LOG, None)
        os.environ.pop(faults.COLLECTIVE_LOG, None)
    out = json.loads((folder / "rows.json").read_text())
    out["samples"] = faults.read_probe(folder / "samples", "samples")
    out["collectives"] = faults.read_probe(folder / "collectives", "collectives")
    return out


def _key(v):
    return tuple(_key(x) for x in v) if isinstance(v, list) else v


def compare(case, one: dict, many: dict, world: int) -> list[str]:
    """What differs between the 1-process and the `world`-process run (empty: they agree)."""
    problems = []
    a_rows, b_rows = one["rows"], many["rows"]
    if len(a_rows) != len(b_rows) or not a_rows:
        return [f"{len(a_rows)} reports on 1 process, {len(b_rows)} on {world}"]
    pairs = [(a_rows[-1], b_rows[-1])] if case.final_only else list(zip(a_rows, b_rows))
    for a, b in pairs:
        for k in case.curve:
            tol = case.rel * abs(a[k]) + case.abs
            if abs(b[k] - a[k]) > tol:
                problems.append(f"{k} at report {a.get('step', '?')}: {a[k]:.6g} vs {b[k]:.6g} (tolerance {tol:.3g})")
    single, ranks = one["samples"].get(0, []), many["samples"]
    if sorted(ranks) != list(range(world)):
        problems.append(f"sample probe saw ranks {sorted(ranks)}")
    elif case.same_batches:
        for i, parts in enumerate(zip(single, *(ranks[r] for r in range(world)))):
            s, shards = parts[0], parts[1:]
            if sum((Counter(map(_key, p["idx"])) for p in shards), Counter()) != Counter(map(_key, s["idx"])):
                problems.append(f"batch {i}: the ranks' shards are not the 1-process batch")
                break
    bad = [r for rs in many["collectives"].values() for r in rs if r["bad"]]
    if bad:
        problems.append(f"collectives off the device or float64: {bad[:3]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cuda (every rank on this machine's one GPU, gloo) or cpu")
    ap.add_argument("--world", type=int, default=2, help="processes (ranks)")
    ap.add_argument("--methods", default="", help="comma-separated slugs (default: every data-parallel method)")
    ap.add_argument("--out", default=str(HERE / "results" / "ddp_check.json"))
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here (use --device cpu)", file=sys.stderr)
        return 2
    known = cases()
    slugs = [s for s in args.methods.split(",") if s] or sorted(known)
    unknown = [s for s in slugs if s not in known]
    if unknown:
        print(f"--methods: no data-parallel case for {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    results, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as tmp:
        for slug in slugs:
            row = {"method": slug, "device": args.device, "world": args.world}
            try:
                one = run(slug, 1, args.device, Path(tmp) / slug / "one")
                many = run(slug, args.world, args.device, Path(tmp) / slug / "many")
                row["problems"] = compare(known[slug], one, many, args.world)
                row.update(wall_one_s=round(one["wall_s"], 2), wall_many_s=round(many["wall_s"], 2),
                           python_collectives=dict(Counter(r["op"] for rs in many["collectives"].values() for r in rs)))
            except Exception:  # noqa: BLE001 - one method's crash is its row, the others still run
                row["problems"] = ["crashed: " + traceback.format_exc().strip().splitlines()[-1]]
            row["ok"] = not row["problems"]
            failed += not row["ok"]
            results.append(row)
            print(f"{slug:20s} {'ok' if row['ok'] else 'FAIL'}  {'; '.join(row['problems'])[:300]}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"torch": torch.__version__, "device": args.device,
                                          "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
                                          "rows": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
