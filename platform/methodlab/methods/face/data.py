"""Build one FACE dataset: interactions, codebook (filtered LM vocabulary), profile embeddings (cached)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from methodlab.data.face_data import RecData, load_rec_files, movielens, synthetic
from methodlab.methods.face.backbone import PROMPTS, backbone_on, codebook, load_backbone
from methodlab.methods.face.config import Config

_MEM: dict = {}


@dataclass
class Bundle:
    rec: RecData
    token_ids: list[int]  # codebook rows -> backbone vocabulary ids
    words: list[str]
    user_text: torch.Tensor  # (n_users, h) normalised profile embeddings, on the run's device
    item_text: torch.Tensor
    user_prompt: list[int]
    item_prompt: list[int]


def _cache_dir() -> Path:
    from methodlab.data.cache import cache_dir

    root = cache_dir("face")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _encode_cached(bb, texts: list[str], tag: str) -> torch.Tensor:
    """Profile embeddings (encoded by `bb` on its device), kept on the host in memory and on disk."""
    key = hashlib.sha256(("\n".join(texts) + "|" + bb.name).encode()).hexdigest()[:20]
    if key in _MEM:
        return _MEM[key]
    path = _cache_dir() / f"{tag}-{key}.npy"
    if path.exists():
        arr = torch.from_numpy(np.load(path, allow_pickle=False))
    else:
        arr = bb.encode_texts(texts).cpu()
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, arr.numpy()); os.replace(tmp, path)
    _MEM[key] = arr
    return arr


def build(cfg: Config, device=None) -> Bundle:
    """The dataset, codebook and profile embeddings; the embeddings on `device` (None: CPU), encoded there by the
    backbone's copy on that device."""
    bb = load_backbone(cfg.backbone)  # host copy: tokenizer, codebook rows for the synthetic generator
    enc = backbone_on(cfg.backbone, device)
    ids, words = codebook(cfg.backbone, cfg.codebook_size)
    if cfg.data == "synthetic":
        key = ("syn", cfg.backbone, cfg.codebook_size, cfg.n_users, cfg.n_items, cfg.n_concepts, cfg.per_user, cfg.beta, cfg.data_seed)
        if key not in _MEM:
            _MEM[key] = synthetic(bb.table[ids].numpy(), words, n_users=cfg.n_users, n_items=cfg.n_items,
                                  n_concepts=cfg.n_concepts, per_user=cfg.per_user, beta=cfg.beta, seed=cfg.data_seed)
        rec = _MEM[key]
    elif cfg.data == "movielens":
        if "ml" not in _MEM:
            _MEM["ml"] = movielens()
        rec = _MEM["ml"]
    else:
        from methodlab.core.paths import read_path

        root = read_path(cfg.data_root, "data_root", "a folder of {train,val,test}.csv or {trn,val,tst}_mat.npz "
                         "and {user,item}_profiles.jsonl")
        rec = load_rec_files(root, cfg.item_noun)
    ut = torch.from_numpy(rec.user_emb) if rec.user_emb is not None else _encode_cached(enc, rec.user_profiles, "user")
    it = torch.from_numpy(rec.item_emb) if rec.item_emb is not None else _encode_cached(enc, rec.item_profiles, "item")
    ut, it = ut.to(enc.device), it.to(enc.device)  # moved once
    ut = torch.nn.functional.normalize(ut.float(), dim=-1); it = torch.nn.functional.normalize(it.float(), dim=-1)
    return Bundle(rec, ids, words, ut, it, bb.ids(PROMPTS["user"]), bb.ids(PROMPTS["item"].format(noun=rec.item_noun)))
