"""Decoding images that arrive in a request as base64 text. One function, so every endpoint that takes an
image rejects the same bad input the same way: a 422 naming the field, never a 500, and never a pixel buffer
decoded before its size is checked (PIL reads the size from the header, so a 60k x 60k "decompression bomb"
is refused without allocating it)."""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np

from methodlab.core.errors import FieldError

_MODES = ("RGB", "L", "auto")


def decode_b64_image(
    data: str,
    field: str,
    *,
    formats: tuple[str, ...] = ("PNG",),
    mode: str = "RGB",
    min_side: int = 1,
    max_side: int = 4096,
) -> np.ndarray:
    """base64 image (a `data:` URL prefix is allowed) -> uint8 array, (H, W, 3) for RGB or (H, W) for L.

    `formats`: PIL format names accepted (e.g. ("PNG",) or ("PNG", "JPEG")).
    `mode`: "RGB", "L", or "auto" (colour stays RGB, grayscale stays L).
    Raises FieldError(field, ...) for bad base64, another format, sides outside [min_side, max_side],
    or bytes PIL cannot decode."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    from PIL import Image, UnidentifiedImageError

    if data.startswith("data:"):
        data = data.split(",", 1)[-1]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise FieldError(field, "not valid base64") from None
    allowed = "/".join(formats)
    try:
        with Image.open(io.BytesIO(raw)) as im:
            if im.format not in formats:
                raise FieldError(field, f"a {allowed} image is required, got {im.format}")
            w, h = im.size
            if not (min_side <= w <= max_side and min_side <= h <= max_side):
                raise FieldError(field, f"image sides must be {min_side}..{max_side} px, got {w}x{h}")
            target = mode if mode != "auto" else ("RGB" if im.mode in ("RGB", "RGBA", "P", "CMYK", "YCbCr") else "L")
            arr = np.asarray(im.convert(target), dtype=np.uint8)
    except FieldError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        raise FieldError(field, f"not a readable {allowed} image") from None
    return arr
