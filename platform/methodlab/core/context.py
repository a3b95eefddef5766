"""RunContext: all a method's `fit` sees of the runtime (local process, Ray Train worker, Tune trial).

The runner owns device, precision, compilation, threads and distribution (the Lightning Fabric shape);
a method's loop stays plain PyTorch:

    with ctx.init_module():                    # parameters are created on ctx.device
        model = build_model(cfg)
    opt = make_optimizer(model)
    if ctx.checkpoint: opt.load_state_dict(...)  # after the model is on its device: state follows the params
    model = ctx.prepare_model(model)           # on ctx.device; DDP when world_size > 1; torch.compile if asked
    for batch in ...:                          # batches built on ctx.device
        with ctx.autocast():
            loss = model(batch)
        ctx.backward(loss)                     # GradScaler under fp16
        ctx.clip_grad_norm_(model.parameters(), 1.0, opt)   # unscales first under fp16
        ctx.optimizer_step(opt)
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from methodlab.core import faults
from methodlab.core.device import PRECISIONS

CheckpointWriter = Callable[[Path], None]
ReportFn = Callable[[dict, Optional[Path]], None]


@dataclass
class RunContext:
    """`report(metrics, checkpoint=writer)`: the writer fills a fresh directory (rank 0 only);
    the runner persists it atomically. `checkpoint` is the directory to resume from, or None."""

    rank: int = 0
    world_size: int = 1
    device: Any = None  # a torch.device after construction (None or a string is converted)
    seed: int = 0
    checkpoint: Path | None = None
    report_fn: ReportFn | None = None
    prepare_model_fn: Callable[[Any], Any] | None = None
    prepare_loader_fn: Callable[[Any], Any] | None = None
    history: list[dict] = field(default_factory=list)
    quiet: bool = False
    precision: str = "fp32"
    compile: bool = False
    # The run's own folder: files a method writes beside its checkpoints (exports, side outputs, stage caches)
    # go here, resolved from relative paths, never against the working directory. None: no run folder (a
    # bare fit() call); write_path() then uses a fresh temporary folder.
    run_dir: Path | None = None

    def __post_init__(self) -> None:
        import torch

        self.device = torch.device(self.device if self.device is not None else "cpu")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}; allowed: {', '.join(PRECISIONS)}")
        self._scaler = None
        if self.precision == "fp16":
            self._scaler = torch.amp.GradScaler(self.device.type)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def report(self, metrics: dict, checkpoint: CheckpointWriter | None = None) -> None:
        faults.on_report(metrics, self.rank, len(self.history))  # no-op unless METHODLAB_FAULT_* is set
        clean = {k: _scalar(v) for k, v in metrics.items()}
        self.history.append(clean)
        tmp = None
        try:
            if checkpoint is not None and self.is_main:
                tmp = Path(tempfile.mkdtemp(prefix="methodlab-ckpt-"))
                checkpoint(tmp)
            if self.report_fn is not None:
                self.report_fn(clean, tmp)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def progress(self, iterable=None, total: int | None = None, desc: str = "working", unit: str = "item"):
        """`for x in ctx.progress(xs, desc="rollouts"):` a bar with rate and time left on a terminal, a line
        every few seconds in a log or Ray job; silent under --quiet and on every rank but 0. Without an
        iterable, loops over range(total)."""
        from methodlab.core.progress import track

        items = range(total) if iterable is None else iterable
        return track(items, desc, total=total, quiet=self.quiet or not self.is_main, unit=unit)

    def write_path(self, path: str | Path) -> Path:
        """Where a method writes `path`: relative paths resolve inside the run folder (created on demand);
        absolute paths stay as given (the user named them)."""
        path = Path(path).expanduser()
        if path.is_absolute():
            return path
        if self.run_dir is None:
            self.run_dir = Path(tempfile.mkdtemp(prefix="methodlab-run-"))
        return Path(self.run_dir) / path

    # ---- device -------------------------------------------------------------------------------------
    def init_module(self):
        """`with ctx.init_module(): model = Net(...)`: tensors created inside land on ctx.device (Fabric's
        init_module). Only for building modules: data and index tensors name their device explicitly."""
        return self.device

    def to_device(self, obj: Any, non_blocking: bool = False) -> Any:
        """Every tensor of a nested dict / list / tuple moved to ctx.device."""
        from methodlab.core.device import to_device

        return to_device(obj, self.device, non_blocking)

    def generator(self, seed: int | None = None):
        """A torch.Generator on ctx.device (random draws for batches and noise happen where they are used)."""
        import torch

        g = torch.Generator(device=self.device)
        return g.manual_seed(self.seed if seed is None else int(seed))

    def prepare_model(self, model, ddp: bool = True):
        """The model on ctx.device (every world size), DDP-wrapped when world_size > 1, compiled when the
        job asks for it. Optimisers built over the model before this call keep working (parameters move
        in place). ddp=False: move and compile only, for a method that averages its gradients with
        ctx.all_reduce itself (several forwards per step, say)."""
        model = model.to(self.device)
        if ddp and self.prepare_model_fn and self.world_size > 1:
            model = self.prepare_model_fn(model)
        if self.compile:
            import torch

            model = torch.compile(model)
        return model

    @staticmethod
    def unwrap(model):
        """The plain module behind torch.compile and DDP wrappers (for state_dict, attributes)."""
        model = getattr(model, "_orig_mod", model)
        return getattr(model, "module", model)

    def prepare_loader(self, loader):
        return self.prepare_loader_fn(loader) if self.prepare_loader_fn and self.world_size > 1 else loader

    # ---- precision ----------------------------------------------------------------------------------
    def autocast(self):
        """Mixed precision around the forward (bf16 / fp16 from scaling.precision); a no-op for fp32."""
        import contextlib

        import torch

        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def backward(self, loss) -> None:
        """loss.backward(), through the GradScaler under fp16."""
        if self._scaler is not None:
            self._scaler.scale(loss).backward()
        else:
            loss.backward()

    def clip_grad_norm_(self, parameters, max_norm: float, optimizer=None):
        """Clip gradients by norm; under fp16 the gradients are unscaled first (pass the optimizer)."""
        import torch

        if self._scaler is not None and optimizer is not None:
            self._scaler.unscale_(optimizer)
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def optimizer_step(self, optimizer) -> None:
        """optimizer.step(), through the GradScaler under fp16 (skips the step on inf/NaN gradients)."""
        if self._scaler is not None:
            self._scaler.step(optimizer)
            self._scaler.update()
        else:
            optimizer.step()

    # ---- threads ------------------------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        import torch

        return torch.get_num_threads()

    def limit_threads(self, n: int | None) -> int:
        """A method config may narrow the runner's thread count (never widen it); returns the count in force."""
        import torch

        if n and n < torch.get_num_threads():
            torch.set_num_threads(int(n))
        return torch.get_num_threads()

    # ---- collectives (data parallel) ----------------------------------------------------------------
    def all_reduce(self, tensor, op: str = "mean"):
        """Sum or mean of `tensor` over the ranks, in place, on ctx.device (the one collective helper)."""
        if self.world_size <= 1:
            return tensor
        _check_collective(tensor, self.device)
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        if op == "mean":
            tensor.div_(self.world_size)
        return tensor

    def broadcast(self, tensor, src: int = 0):
        """Rank `src`'s `tensor` on every rank, in place, on ctx.device."""
        if self.world_size <= 1:
            return tensor
        _check_collective(tensor, self.device)
        import torch.distributed as dist

        dist.broadcast(tensor, src=src)
        return tensor

    def average_(self, tensors) -> None:
        """Mean over the ranks of every tensor in `tensors`, in place, as one float32 bucket on ctx.device (one
        collective per call, however many tensors). For methods that average gradients (or BatchNorm buffers)
        themselves instead of through DDP; `None` entries (parameters without a gradient) are skipped."""
        ts = [t for t in tensors if t is not None]
        if self.world_size <= 1 or not ts:
            return
        import torch

        flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in ts])
        self.all_reduce(flat, op="mean")
        offset = 0
        for t in ts:
            n = t.numel()
            t.detach().copy_(flat[offset:offset + n].view_as(t))
            offset += n

    def average_gradients(self, parameters) -> None:
        """DDP's gradient mean for methods that cannot take a DDP wrapper (stage-dependent parameter sets,
        hand-written steps): call after backward, before clipping and the optimiser step."""
        self.average_([p.grad for p in parameters])

    def broadcast_(self, tensors, src: int = 0) -> None:
        """Rank `src`'s values of every tensor in `tensors` on every rank, in place (an identical start): one
        collective per dtype, each over a flat bucket on ctx.device (float64 is refused, as by every collective)."""
        if self.world_size <= 1:
            return
        import torch

        by_dtype: dict = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t.detach())
        for ts in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in ts])
            self.broadcast(flat, src)
            offset = 0
            for t in ts:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()

    def shard(self, *batches):
        """This rank's part of a global batch (rank-strided: batch[rank::world_size]); the whole batch at world
        size 1. Every rank draws the same global batch (same seed), takes its shard and, with gradients
        averaged over the ranks, follows the 1-worker trajectory. Several aligned batches (inputs, targets)
        are split alike: `x, y = ctx.shard(x, y)`. Works on tensors, arrays and lists; the first batch names
        the samples (the sample probe of the data-parallel tests records it)."""
        parts = tuple(b if self.world_size <= 1 else b[self.rank::self.world_size] for b in batches)
        faults.on_shard(parts[0], self.rank, self.world_size)  # no-op unless the sample probe is on (tests)
        return parts[0] if len(parts) == 1 else parts

def _check_collective(tensor, device) -> None:
    import torch

    if tensor.device != device:
        raise RuntimeError(f"collective on a tensor on {tensor.device}; the run's device is {device}")
    if tensor.dtype == torch.float64:
        raise RuntimeError("collective on a float64 tensor: NCCL builds may not reduce float64; use float32")


def _scalar(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
