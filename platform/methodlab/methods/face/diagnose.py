"""Probes behind the report's diagnosis of the failing claims (development seed 10 only; never reported seeds).

python -m methodlab.methods.face.diagnose [--map-ckpt DIR] [--align-steps 200] [--out reports]

1. synthetic, seed 10, the reproduction's CPU preset: pretrain + map (or an existing stage_map checkpoint).
2. Hubness of the quantiser at the map checkpoint: distinct tokens per slot, the most frequent tokens, the spread of
   z_e across entities within a slot against its distance to the nearest code, and the same z_e quantised with
   counterfactual rules (cosine; slot-centred) -- diagnostics only, the spec's rule (squared L2 on P(E_tok)) is kept.
3. Alignment signal: the items' ground-truth concept words fed through the align stage's input path (P, then
   pinv(P): the token embedding projected onto P's w-dim row space) against the text path (the full token
   embedding), as profile retrieval Hit@10 among 100 candidates; also with a fresh P of w = 128 and 256.
4. Align from the map checkpoint for --align-steps steps (align_rows 64): precision every 10 steps.
5. MovieLens, Claim 4's text path with oracle descriptors: codebook words taken from each item's own profile
   (title and genre words), padded with random codebook words to W -- the Hit@10 that W codebook words can reach.
Writes <out>/face_diagnosis.json (numbers and the report's lines). A CPU development script: everything here is
built on the host (device="cpu"), one torch thread, as the numbers in the report were measured."""

from __future__ import annotations

import argparse
import collections
import json
import re
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from methodlab.methods.face import evaluate as ev
from methodlab.methods.face.model import FACE, greedy_distinct, lm_encode

SEED = 10


def _cfg(data: str, **over):
    from methodlab.methods.face.config import Config
    from methodlab.methods.face.reproduce import CPU, DATASETS

    return Config(**{**CPU, **DATASETS[data], "seed": SEED, "torch_threads": 1, **over})


def _load(ck_dir: str):
    from methodlab.core import load_checkpoint
    from methodlab.methods.face.backbone import load_backbone
    from methodlab.methods.face.config import Config
    from methodlab.methods.face.data import build
    from methodlab.methods.face.train import build_models, load_weights

    ck = load_checkpoint(ck_dir, method="face")
    cfg = Config.model_validate(ck.config)
    bb = load_backbone(cfg.backbone); B = build(cfg)
    table = bb.table[torch.as_tensor(B.token_ids, device="cpu")]
    cf, fm = build_models(cfg, B, table); load_weights(cf, fm, ck.weights)
    cf.eval(); fm.eval()
    return cfg, bb, B, table, cf, fm


def _hit10(B, c: torch.Tensor, items: np.ndarray, n_items: int) -> float:
    r = np.random.default_rng(0); h = 0
    for k, i in enumerate(items):
        others = r.choice(np.delete(np.arange(n_items), i), size=min(99, n_items - 1), replace=False)
        s = B.item_text[torch.as_tensor(np.r_[i, others], device="cpu")] @ c[k]
        h += int((s[1:] > s[0]).sum()) < 10
    return h / len(items)


class _Identity:
    @staticmethod
    def to_token_space(z):
        return z


@torch.no_grad()
def hubness(ck_dir: str) -> dict:
    cfg, bb, B, table, cf, fm = _load(ck_dir)
    rec = B.rec; gi = ev.ground_truth(rec, "item"); V = len(B.words); W = cfg.word_num
    _, ei = cf(1.0); z = fm.encode(ei); C = fm.codebook()
    idx = greedy_distinct(z, C).numpy()
    cnt = collections.Counter(idx.ravel().tolist())
    zc = z - z.mean(0, keepdim=True)
    d_near = torch.cdist(z.reshape(-1, z.shape[-1]), C).min(1).values
    g = torch.Generator().manual_seed(0)
    sub = C[torch.randperm(V, generator=g, device="cpu")[:1000]]; dd = torch.cdist(sub, C); dd[dd < 1e-6] = float("inf")
    xn = F.normalize(ei, dim=-1)
    out = {"precision_item": ev.precision(idx, gi), "usage": len(np.unique(idx)) / V,
           "distinct_tokens_per_slot": [int(len(np.unique(idx[:, k]))) for k in range(W)],
           "top_tokens": [[B.words[j], int(c)] for j, c in cnt.most_common(8)],
           "top_token_slot": {B.words[j]: int(np.bincount(np.where(idx == j)[1], minlength=W).argmax()) for j, _ in cnt.most_common(5)},
           "cf_item_mean_pairwise_cos": float((xn @ xn.T).mean()),
           "z_norm": z.norm(dim=-1).mean().item(), "code_norm": C.norm(dim=-1).mean().item(),
           "z_spread_within_slot": zc.norm(dim=-1).mean().item(),
           "z_slot_means_spread": (z.mean(0) - z.mean((0, 1))).norm(dim=-1).mean().item(),
           "z_to_nearest_code": d_near.mean().item(), "codebook_nn_spacing": dd.min(1).values.mean().item()}
    idx_cos = greedy_distinct(F.normalize(z, dim=-1), F.normalize(C, dim=-1)).numpy()
    idx_cen = greedy_distinct(zc / zc.std() * C.std() + C.mean(0), C).numpy()
    out |= {"precision_cosine_rule": ev.precision(idx_cos, gi), "usage_cosine_rule": len(np.unique(idx_cos)) / V,
            "precision_slot_centred": ev.precision(idx_cen, gi), "usage_slot_centred": len(np.unique(idx_cen)) / V,
            "chance": float(np.mean([len(x) for x in gi]) / V)}
    # alignment signal through the training-time input path, with the ground-truth words of 200 items
    rng = np.random.default_rng(0)
    items = rng.choice(rec.n_items, size=200, replace=False)
    words = np.stack([rng.choice(sorted(gi[i]), size=W, replace=len(gi[i]) < W) for i in items])
    enc = lambda model, zq: torch.cat([lm_encode(bb, model, zq[s:s + 50], B.item_prompt) for s in range(0, len(zq), 50)])
    out["gt_words_hit10_train_path"] = _hit10(B, enc(fm, C[torch.as_tensor(words, device="cpu")]), items, rec.n_items)
    out["gt_words_hit10_full_tokens"] = _hit10(B, enc(_Identity, table[torch.as_tensor(words, device="cpu")]), items, rec.n_items)
    rnd = np.stack([rng.choice(V, size=W, replace=False) for _ in items])
    out["random_words_hit10_full_tokens"] = _hit10(B, enc(_Identity, table[torch.as_tensor(rnd, device="cpu")]), items, rec.n_items)
    out["learned_words_hit10_train_path"] = _hit10(B, enc(fm, C[torch.as_tensor(idx[items], device="cpu")]), items, rec.n_items)
    for wd in (128, 256):
        torch.manual_seed(0)
        f2 = FACE(cfg.embedding_size, W, wd, table.shape[1], 2 * wd, 0.0, table, cfg.codebook_init, cfg.normalize_input)
        out[f"gt_words_hit10_train_path_fresh_P_w{wd}"] = _hit10(B, enc(f2, f2.codebook()[torch.as_tensor(words, device="cpu")]), items, rec.n_items)
    return out


@torch.no_grad()
def movielens_oracle(W: int = 8) -> dict:
    """Claim 4's text path with descriptors copied from the item's own profile (an upper bound for W codebook words)."""
    from methodlab.methods.face.backbone import load_backbone
    from methodlab.methods.face.data import build

    cfg = _cfg("movielens")
    bb = load_backbone(cfg.backbone); B = build(cfg); rec = B.rec
    pos = {w: j for j, w in enumerate(B.words)}
    rng = np.random.default_rng(0)
    desc = []
    n_from_profile = []
    for p in rec.item_profiles:
        own = list(dict.fromkeys(pos[t] for t in re.findall(r"[a-z]+", p.lower()) if t in pos))[:W]
        n_from_profile.append(len(own))
        pad = [j for j in rng.permutation(len(B.words))[: 3 * W] if j not in own][: W - len(own)]
        desc.append(own + pad)
    desc = np.asarray(desc)
    args = (min(cfg.eval_items, rec.n_items), min(cfg.eval_candidates, rec.n_items), cfg.eval_seed)
    return {"oracle_profile_words_hit10": ev.text_retrieval(bb, B.words, desc, B.item_text, rec.item_noun, *args),
            "oracle_mean_profile_words": float(np.mean(n_from_profile))}


def movielens_long_pretrain(epochs: int = 150) -> dict:
    """Claim 4b's popularity floor: LightGCN alone (stage 0) with the epoch cap raised from 40 to `epochs`."""
    from methodlab.core import RunContext
    from methodlab.methods.face.train import fit

    out = {}
    for cap in (40, epochs):
        r = fit(_cfg("movielens", stages=["pretrain"], pretrain_epochs=cap), RunContext(quiet=True))
        out[f"cap{cap}"] = {"epochs_run": r["time/pretrain_epochs"], "recall@20": r["pretrain/test/recall@20"],
                            "popularity": r["popularity/test/recall@20"], "pretrain_s": r["time/pretrain_s"]}
    return out


def align_curve(map_ckpt: str, steps: int) -> dict:
    from methodlab.core import RunContext
    from methodlab.methods.face.train import fit

    t = time.perf_counter()
    ctx = RunContext(quiet=True)
    out = fit(_cfg("synthetic", stages=["align"], init_from=map_ckpt, align_steps=steps, eval_items=2), ctx)
    curve = [(h["align_step"], h.get("align/precision_item"), h["align/l_align"]) for h in ctx.history if "align_step" in h]
    return {"curve": curve, "final_precision": out.get("align/precision_item"), "usage": out.get("align/codebook_usage"),
            "align_s": out.get("time/align_s"), "wall_s": time.perf_counter() - t}


def lines(d: dict) -> list[str]:
    h, a, m, c = d.get("hub", {}), d.get("align", {}), d.get("movielens", {}), d.get("cf", {})
    L = []
    if h:
        L += [f"- Quantiser hubness (map checkpoint): {h['usage'] * 100:.1f} % of the codebook used by the 800 items; "
              f"distinct tokens per slot {h['distinct_tokens_per_slot']}; most frequent {h['top_tokens'][:5]} "
              f"(each hub sits in one slot: {h['top_token_slot']}). Within a slot, z_e moves {h['z_spread_within_slot']:.2f} "
              f"(L2 from the slot mean) across items while the slot means are {h['z_slot_means_spread']:.2f} apart and the "
              f"nearest code is {h['z_to_nearest_code']:.2f} away (codebook NN spacing {h['codebook_nn_spacing']:.2f}); the CF "
              f"item embeddings have mean pairwise cosine {h['cf_item_mean_pairwise_cos']:.2f}. So a slot's z_e of all items "
              "falls into the Voronoi cells of a handful of codes, which the map stage's codebook term (0.75, through P) has "
              "pulled onto the z_e clouds (z_e sits closer to its code than codes sit to each other): VQ codebook collapse "
              "per slot, not a wrong metric. The rule is the spec's and the official code's (squared L2 to the mapped, filtered codebook, greedy "
              "distinct; unit test against brute force).",
              f"- Counterfactual rules on the same z_e (diagnostic only): cosine nearest token precision "
              f"{h['precision_cosine_rule']:.4f} (usage {h['usage_cosine_rule'] * 100:.1f} %), slot-centred z_e precision "
              f"{h['precision_slot_centred']:.4f} (usage {h['usage_slot_centred'] * 100:.1f} %), spec rule {h['precision_item']:.4f}; "
              f"chance {h['chance']:.4f}. Spreading the tokens alone does not make them the concept words.",
              f"- Alignment signal: the items' ground-truth concept words retrieve their own profile (Hit@10 of 100) "
              f"{h['gt_words_hit10_full_tokens']:.2f} as full token embeddings (random words {h['random_words_hit10_full_tokens']:.2f}), "
              f"but {h['gt_words_hit10_train_path']:.2f} through the align stage's input path at w = 32 (pinv(P) P projects the "
              f"384-d token embedding onto 32 dims); with a fresh P of w = 128 / 256: {h['gt_words_hit10_train_path_fresh_P_w128']:.2f} / "
              f"{h['gt_words_hit10_train_path_fresh_P_w256']:.2f}. The learned descriptors through the train path: "
              f"{h['learned_words_hit10_train_path']:.2f}."]
    if a:
        pts = ", ".join(f"{s}: {p:.4f}" for s, p, _ in a["curve"] if p is not None and (s % 20 == 0 or s == a["curve"][-1][0]))
        L.append(f"- Longer alignment (from the same map checkpoint, align_rows 64): precision by align step {pts}; "
                 f"final codebook usage {a['usage'] * 100:.1f} %; {a['align_s']:.0f} s of align training.")
    if m:
        L.append(f"- Claim 4 ceiling of the text path: W = 8 codebook words copied from each movie's own profile (title and "
                 f"genre words, {m['oracle_mean_profile_words']:.1f} on average, padded with random codebook words) reach "
                 f"Hit@10 {m['oracle_profile_words_hit10']:.3f} (chance 0.10), so the 0.30 bar is reachable by the text path "
                 "in principle; the learned descriptors are far from it.")
    if c:
        k = sorted(c, key=lambda x: int(x[3:]))
        L.append("- Claim 4b's floor on LightGCN alone (MovieLens, stage 0): " + "; ".join(
            f"epoch cap {x[3:]}: {c[x]['epochs_run']} epochs run, Recall@20 {c[x]['recall@20']:.4f} = "
            f"{c[x]['recall@20'] / c[x]['popularity']:.2f} x popularity ({c[x]['popularity']:.4f})" for x in k) + ".")
    return L


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser()
    ap.add_argument("--map-ckpt", default=None)
    ap.add_argument("--align-steps", type=int, default=200)
    ap.add_argument("--out", default="reports")
    ap.add_argument("--parts", default="hub,align,movielens")
    a = ap.parse_args(argv)
    from methodlab.core.device import set_threads

    set_threads(1)  # one thread, as before (the fits below also get torch_threads=1 through _cfg)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    path = out / "face_diagnosis.json"
    d = json.loads(path.read_text()) if path.exists() else {}
    map_ckpt = a.map_ckpt
    if map_ckpt is None:
        from methodlab.core import RunContext
        from methodlab.methods.face.train import fit

        sd = Path("results/face-diagnose").resolve()  # absolute: a relative stage_dir lands in the run folder
        fit(_cfg("synthetic", stages=["pretrain", "map"], stage_dir=str(sd)), RunContext(quiet=True))
        map_ckpt = str((sd / "stage_map").resolve())
    parts = a.parts.split(",")
    if "hub" in parts:
        d["hub"] = hubness(map_ckpt)
    if "movielens" in parts:
        d["movielens"] = movielens_oracle()
    if "align" in parts:
        d["align"] = align_curve(map_ckpt, a.align_steps)
    if "cf" in parts:
        d["cf"] = movielens_long_pretrain()
    d["seed"] = SEED
    d["lines"] = lines(d)
    path.write_text(json.dumps(d, indent=1, default=float))
    print("\n".join(d["lines"]))
    return path


if __name__ == "__main__":
    main()
