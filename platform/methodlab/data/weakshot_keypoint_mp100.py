"""MP-100 loader (COCO keypoint JSON, `mp100_split{1..5}_{train,val,test}.json` + an image root) in the array
layout of `weakshot_keypoint_synth.generate`, for users who have the files (nothing is downloaded).

Roles (weak-shot use of MP-100, spec Data (P)): the categories of the `train` file are base (labelled); those of
the `test` file are novel. Novel images are split per category by `novel_unlabeled_source`:
`test_half` (default) puts the first half of each novel category's images (by image id) into novel_train (labels
hidden from training), the next 10 % into novel_val and the rest into novel_test, whose first fully visible
instance becomes the category's support. Each annotation's keypoint count is checked against its category."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from methodlab.core.errors import MissingSourceError
from methodlab.data.weakshot_keypoint_synth import SPLIT_IDS

MP100_K_MAX = 68


def check_annotation_counts(coco: dict) -> None:
    """Every annotation has len(keypoints) == 3 * len(category keypoint names); raises naming the annotation."""
    cats = {c["id"]: c for c in coco.get("categories", [])}
    for a in coco.get("annotations", []):
        cat = cats.get(a.get("category_id"))
        if cat is None:
            raise ValueError(f"annotation {a.get('id')}: unknown category_id {a.get('category_id')}")
        want = 3 * len(cat.get("keypoints", []))
        if len(a.get("keypoints", [])) != want:
            raise ValueError(f"annotation {a.get('id')}: {len(a.get('keypoints', []))} keypoint values, category "
                             f"{cat['id']} ({cat.get('name')}) needs {want} (3 x {len(cat.get('keypoints', []))})")


def _find(data_root: Path, name: str) -> Path:
    for p in (data_root / name, data_root / "annotations" / name):
        if p.exists():
            return p
    raise MissingSourceError(f"MP-100 file {name} not found under {data_root} (or its annotations/ folder); "
                             "get MP-100 from its authors and set data_root")


def _crop(img: np.ndarray, bbox, kps: np.ndarray, size: int, margin: float = 0.1):
    """Square crop around bbox (with margin), resized to size x size; keypoints and bbox mapped."""
    from PIL import Image

    x, y, w, h = bbox
    side = max(w, h) * (1 + 2 * margin)
    cx, cy = x + w / 2, y + h / 2
    x0, y0 = cx - side / 2, cy - side / 2
    pil = Image.fromarray(img).convert("RGB")
    crop = pil.transform((size, size), Image.Transform.EXTENT, (x0, y0, x0 + side, y0 + side), Image.Resampling.BILINEAR)
    s = size / side
    k = kps.copy()
    k[:, :2] = (kps[:, :2] - [x0, y0]) * s
    return np.asarray(crop, np.uint8), k, np.array([(x - x0) * s, (y - y0) * s, w * s, h * s], np.float32)


def load_mp100(data_root: str | Path, split: int = 1, size: int = 256, max_per_category: int | None = None,
               novel_unlabeled_source: str = "test_half") -> dict:
    from PIL import Image

    data_root = Path(data_root)
    files = {part: json.loads(_find(data_root, f"mp100_split{split}_{part}.json").read_text()) for part in ("train", "test")}
    for coco in files.values():
        check_annotation_counts(coco)
    rows = {"image": [], "keypoints": [], "vis": [], "bbox": [], "cls": [], "split": [], "kcount": []}
    k_of_class: dict[int, int] = {}
    base, novel = [], []
    for part, coco in files.items():
        cats = {c["id"]: c for c in coco["categories"]}
        imgs = {i["id"]: i for i in coco["images"]}
        by_cat: dict[int, list] = {}
        for a in sorted(coco["annotations"], key=lambda a: (a["image_id"], a["id"])):
            by_cat.setdefault(a["category_id"], []).append(a)
        for cid, anns in sorted(by_cat.items()):
            k_of_class[cid] = len(cats[cid]["keypoints"])
            (base if part == "train" else novel).append(cid)
            anns = anns[:max_per_category] if max_per_category else anns
            n = len(anns)
            for i, a in enumerate(anns):
                if part == "train":
                    sp = "base"
                elif novel_unlabeled_source == "test_half":
                    sp = "novel_train" if i < n // 2 else ("novel_val" if i < n // 2 + max(1, n // 10) else "novel_test")
                else:
                    raise ValueError(f"unknown novel_unlabeled_source {novel_unlabeled_source!r}")
                path = data_root / "images" / imgs[a["image_id"]]["file_name"]
                if not path.exists():
                    path = data_root / imgs[a["image_id"]]["file_name"]
                img = np.asarray(Image.open(path).convert("RGB"))
                kp = np.array(a["keypoints"], np.float32).reshape(-1, 3)
                im, kp, bb = _crop(img, a["bbox"], kp, size)
                kk = np.zeros((MP100_K_MAX, 2), np.float32)
                vv = np.zeros(MP100_K_MAX, np.int64)
                kk[:len(kp)], vv[:len(kp)] = kp[:, :2], kp[:, 2].astype(np.int64)
                for name, val in (("image", im), ("keypoints", kk), ("vis", vv), ("bbox", bb), ("cls", cid),
                                  ("split", SPLIT_IDS[sp]), ("kcount", len(kp))):
                    rows[name].append(val)
    out = {k: np.stack(v) if k in ("image", "keypoints", "vis", "bbox") else np.array(v) for k, v in rows.items()}
    for c in novel:  # the support: the first novel_test instance of the category with the most visible keypoints
        idx = np.nonzero((out["cls"] == c) & (out["split"] == SPLIT_IDS["novel_test"]))[0]
        if len(idx):
            best = idx[np.argmax((out["vis"][idx] > 0).sum(1))]
            out["split"][best] = SPLIT_IDS["novel_support"]
    out["k_of_class"] = k_of_class
    out["base_classes"] = np.array(sorted(set(base)))
    out["novel_classes"] = np.array(sorted(set(novel)))
    return out
