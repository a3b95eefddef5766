"""Serve a weakshot_keypoint checkpoint: a query image plus either a support (image + keypoints) or the id of a
novel class stored in the checkpoint (its labelled support, or its keyness pseudo-support when the checkpoint was
trained with support_shots 0) -> predicted keypoints in query-image pixels with confidences.

Images are base64 PNG/JPEG strings or H x W x 3 grids of integers 0..255, sides 16..512 px. The bbox crop
(default: the whole image) is resized to the checkpoint's input side. Both or neither of support / class_id, an
unknown class, sides out of range, a bbox outside the image, a support without a visible keypoint or with a
keypoint outside its image answer 422 naming the field."""

from __future__ import annotations

import base64
import io
import math
from typing import Annotated, Union

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from methodlab.core import FieldError, load_checkpoint
from methodlab.core.images import decode_b64_image
from methodlab.methods.weakshot_keypoint.config import Config

MIN_SIDE, MAX_SIDE, MAX_KPS = 16, 512, 68
Channel = Annotated[int, Field(ge=0, le=255)]
Pixel = Annotated[list[Channel], Field(min_length=3, max_length=3)]
Grid = Annotated[list[Annotated[list[Pixel], Field(min_length=MIN_SIDE, max_length=MAX_SIDE)]],
                 Field(min_length=MIN_SIDE, max_length=MAX_SIDE)]
ImageIn = Union[Annotated[str, Field(min_length=8, max_length=6_000_000, description="base64 PNG or JPEG")], Grid]
Coord = Annotated[float, Field(ge=0, le=4096)]
Keypoint = Annotated[list[float], Field(min_length=3, max_length=3, description="[x, y, v], v in {0, 1, 2}")]
BBox = Annotated[list[Coord], Field(min_length=4, max_length=4, description="[x, y, w, h] in image pixels")]


class SupportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    image: ImageIn = Field(..., description="Support image: base64 PNG/JPEG or H x W x 3 grid of 0..255, sides 16..512.")
    bbox: BBox | None = Field(None, description="Support box; default the whole image.")
    keypoints: list[Keypoint] = Field(..., min_length=1, max_length=MAX_KPS,
                                      description="1..68 keypoints [x, y, v] in support-image pixels; at least one v > 0.")


class Input(BaseModel):
    """A query image and exactly one of `support` / `class_id`."""

    model_config = ConfigDict(extra="forbid")
    image: ImageIn = Field(..., description="Query image: base64 PNG/JPEG or H x W x 3 grid of 0..255, sides 16..512.")
    bbox: BBox | None = Field(None, description="Query box [x, y, w, h]; default the whole image.")
    support: SupportIn | None = Field(None, description="A labelled support of the query's class.")
    class_id: str | None = Field(None, max_length=64, description="A novel class stored in the checkpoint.")


class Output(BaseModel):
    keypoints: list[list[float]] = Field(description="[x, y, score] per keypoint, query-image pixels.")
    names: list[str]
    support_shots: int


def decode_image(value, where: str) -> np.ndarray:
    """base64 PNG/JPEG or grid -> (H, W, 3) uint8, sides checked."""
    if isinstance(value, str):
        arr = decode_b64_image(value, where, formats=("PNG", "JPEG"), mode="RGB", min_side=MIN_SIDE, max_side=MAX_SIDE)
    else:
        w0 = len(value[0]) if value else 0
        if any(len(r) != w0 for r in value):
            raise FieldError(where, "ragged pixel grid: every row needs the same number of pixels")
        arr = np.asarray(value, dtype=np.uint8).reshape(len(value), w0, 3)
    h, w = arr.shape[:2]
    if not (MIN_SIDE <= h <= MAX_SIDE and MIN_SIDE <= w <= MAX_SIDE):
        raise FieldError(where, f"image sides must be {MIN_SIDE}..{MAX_SIDE} px, got {w}x{h}")
    return arr


def check_bbox(bbox, w: int, h: int, where: str) -> tuple[float, float, float, float]:
    if bbox is None:
        return 0.0, 0.0, float(w), float(h)
    x, y, bw, bh = (float(v) for v in bbox)
    if bw < 1 or bh < 1 or x + bw > w + 1e-6 or y + bh > h + 1e-6:
        raise FieldError(where, f"bbox must lie inside the {w}x{h} image with w, h >= 1")
    return x, y, bw, bh


def crop_resize(img: np.ndarray, box, size: int) -> torch.Tensor:
    """The bbox crop resized to size x size, uint8 (S, S, 3), on the host (request decoding)."""
    x, y, bw, bh = box
    t = torch.from_numpy(np.array(img, copy=True)).permute(2, 0, 1).float()[None]
    h, w = img.shape[:2]
    theta = torch.tensor([[[bw / w, 0, (2 * x + bw) / w - 1], [0, bh / h, (2 * y + bh) / h - 1]]], dtype=torch.float32,
                         device="cpu")
    grid = F.affine_grid(theta, (1, 3, size, size), align_corners=False)
    out = F.grid_sample(t, grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8)


class Predictor:
    Input = Input
    Output = Output

    def __init__(self, cfg: Config, net, size: int, supports: dict, support_shots: int):
        self.cfg, self.net, self.size, self.supports, self.shots = cfg, net.eval(), size, supports, support_shots
        self.device = next(net.parameters()).device

    @classmethod
    def from_checkpoint(cls, directory, device=None) -> "Predictor":
        """The network and stored supports on `device` (a str or torch.device; None: CPU)."""
        from methodlab.methods.weakshot_keypoint.train import build_net, supports_from_weights

        device = torch.device(device if device is not None else "cpu")
        ck = load_checkpoint(directory, method="weakshot_keypoint")
        cfg = Config.model_validate(ck.config)
        with device:
            net = build_net(cfg)
        net.load_state_dict({n[4:]: v for n, v in ck.weights.items() if n.startswith("net.")})
        sup = {f"class_{c}": v for c, v in supports_from_weights(ck.weights, device).items()}
        return cls(cfg, net, int(ck.state.get("image_size", cfg.image_size)), sup, int(ck.state.get("support_shots", 1)))

    def input_model(self) -> type[BaseModel]:
        """This checkpoint's request schema: the two request forms a client can always send (query as an S x S x 3
        grid, S = the checkpoint's input side; class_id one of the stored classes, or a support grid with 1..68
        visible keypoints inside it). The validator is the generic Input (base64 PNG/JPEG, other sides 16..512,
        bbox, v = 0 are accepted too)."""
        s = self.size
        grid = {"type": "array", "minItems": s, "maxItems": s,
                "items": {"type": "array", "minItems": s, "maxItems": s,
                          "items": {"type": "array", "minItems": 3, "maxItems": 3,
                                    "items": {"type": "integer", "minimum": 0, "maximum": 255}}}}
        # [x, y, v] (draft 2020-12 prefixItems); `items` (the elements after the prefix: none) also makes a tool
        # that ignores prefixItems generate a valid keypoint
        kp = {"type": "array", "minItems": 3, "maxItems": 3,
              "prefixItems": [{"type": "number", "minimum": 0, "maximum": s},
                              {"type": "number", "minimum": 0, "maximum": s}, {"type": "integer", "enum": [1, 2]}],
              "items": {"type": "integer", "minimum": 1, "maximum": 2}}
        classes = sorted(self.supports)
        desc = (f"Query image as a {s}x{s}x3 grid of 0..255 (this checkpoint's input side; a base64 PNG/JPEG string or "
                f"any side 16..512 is accepted too, with an optional bbox [x, y, w, h] inside the image) and exactly "
                f"one of: class_id (one of {classes}), or support = {{image, keypoints: 1..68 [x, y, v] inside the "
                "support image, at least one with v > 0}}. Both or neither, or conditions above violated: 422.")
        by_class = {"type": "object", "additionalProperties": False, "required": ["image", "class_id"],
                    "properties": {"image": grid, "class_id": {"type": "string", "enum": classes}}}
        by_support = {"type": "object", "additionalProperties": False, "required": ["image", "support"],
                      "properties": {"image": grid, "support": {
                          "type": "object", "additionalProperties": False, "required": ["image", "keypoints"],
                          "properties": {"image": grid, "keypoints": {"type": "array", "minItems": 1, "maxItems": MAX_KPS,
                                                                      "items": kp}}}}}
        schema = {"title": "Input", "description": desc, "anyOf": [by_class, by_support] if classes else [by_support]}

        def replace(js: dict) -> None:
            js.clear()
            js.update(schema)

        return type("Input", (Input,), {"__doc__": desc, "model_config": ConfigDict(extra="forbid", json_schema_extra=replace)})

    @staticmethod
    def example_inputs(cfg: Config) -> list[Input]:
        from methodlab.methods.weakshot_keypoint.data import build_data

        data = build_data(cfg)
        c = data.novel_classes[0]
        q = data.index("novel_test", c)[0]
        s = data.index("novel_support", c)[0]
        kps, vis, _ = data.labels(s[None])
        kc = data.k_of_class[c]
        kp = [[float(x), float(y), 2 if v else 0] for (x, y), v in zip(kps[0, :kc].tolist(), vis[0, :kc].tolist())]
        buf = io.BytesIO()
        from PIL import Image

        Image.fromarray(data.images[q].numpy()).save(buf, format="PNG")
        png = base64.b64encode(buf.getvalue()).decode()
        return [Input(image=data.images[q].tolist(), class_id=f"class_{c}"),
                Input(image=png, support=SupportIn(image=data.images[s].tolist(), keypoints=kp))]

    def _prepare(self, i: int, item):
        where = f"[{i}]"
        has_s, has_c = item.support is not None, item.class_id is not None
        if has_s == has_c:
            raise FieldError(f"{where}.support", "give exactly one of support and class_id")
        img = decode_image(item.image, f"{where}.image")
        box = check_bbox(item.bbox, img.shape[1], img.shape[0], f"{where}.bbox")
        q = crop_resize(img, box, self.size)
        if has_c:
            if item.class_id not in self.supports:
                raise FieldError(f"{where}.class_id", f"unknown class; this checkpoint stores {sorted(self.supports)}")
            s_img, s_kps, s_val = self.supports[item.class_id]
            names = [f"{'kp' if self.shots else 'pseudo_kp'}{j}" for j in range(len(s_kps))]
            return q, (s_img, s_kps, s_val), box, names
        sup = item.support
        simg = decode_image(sup.image, f"{where}.support.image")
        sh, sw = simg.shape[:2]
        sbox = check_bbox(sup.bbox, sw, sh, f"{where}.support.bbox")
        kp = np.asarray(sup.keypoints, dtype=np.float64).reshape(-1, 3)
        if not np.isfinite(kp).all():
            raise FieldError(f"{where}.support.keypoints", "keypoints must be finite")
        if not np.isin(kp[:, 2], (0, 1, 2)).all():
            raise FieldError(f"{where}.support.keypoints", "visibility v must be 0, 1 or 2")
        if not (kp[:, 2] > 0).any():
            raise FieldError(f"{where}.support.keypoints", "at least one keypoint must be visible (v > 0)")
        vis = kp[:, 2] > 0
        if ((kp[vis, 0] < 0) | (kp[vis, 0] > sw) | (kp[vis, 1] < 0) | (kp[vis, 1] > sh)).any():
            raise FieldError(f"{where}.support.keypoints", f"visible keypoints must lie inside the {sw}x{sh} support image")
        x0, y0, bw, bh = sbox
        mapped = np.stack([(kp[:, 0] - x0) * self.size / bw, (kp[:, 1] - y0) * self.size / bh], -1)
        s_img = crop_resize(simg, sbox, self.size)
        s_kps, s_val = torch.tensor(mapped, dtype=torch.float32, device="cpu"), torch.tensor(vis, device="cpu")
        return q, (s_img, s_kps, s_val), box, \
            [f"kp{j}" for j in range(len(kp))]

    @torch.no_grad()
    def _one(self, q, support, box, names) -> Output:
        q = q.to(self.device)  # the request's tensors move to the predictor's device once
        s_img, s_kps, s_val = (t.to(self.device) for t in support)
        net = self.net
        f_s, f_q = net.features(s_img[None]), net.features(q[None])
        logits = net.match(f_s, s_kps[None], s_val[None].bool(), f_q)
        h, w = f_q.shape[-2:]
        pos, conf = net.decode(torch.nan_to_num(logits), h, w)
        from methodlab.methods.weakshot_keypoint.model import cells_to_px

        px = cells_to_px(pos, net.stride)[0]
        x0, y0, bw, bh = box
        out = []
        for (x, y), c in zip(px.tolist(), conf[0].tolist()):
            vals = [x0 + x * bw / self.size, y0 + y * bh / self.size, c]
            out.append([float(v) if math.isfinite(v) else 0.0 for v in vals])
        return Output(keypoints=out, names=names, support_shots=self.shots)

    def __call__(self, inputs: list) -> list[Output]:
        prepared = [self._prepare(i, item) for i, item in enumerate(inputs)]
        return [self._one(*p) for p in prepared]
