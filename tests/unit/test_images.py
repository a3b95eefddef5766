"""core.images.decode_b64_image: the one decoder every image endpoint uses. Each bad input must be a
FieldError naming the field (422), never another exception (500)."""

import base64
import io

import numpy as np
import pytest
from PIL import Image

from methodlab.core import FieldError
from methodlab.core.images import decode_b64_image


def b64(arr: np.ndarray, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt)
    return base64.b64encode(buf.getvalue()).decode()


RGB = (np.arange(20 * 30 * 3) % 256).astype(np.uint8).reshape(20, 30, 3)
GRAY = (np.arange(20 * 30) % 256).astype(np.uint8).reshape(20, 30)


def test_png_round_trips_exactly_in_each_mode():
    assert np.array_equal(decode_b64_image(b64(RGB), "image"), RGB)
    assert np.array_equal(decode_b64_image(b64(GRAY), "image", mode="L"), GRAY)
    assert decode_b64_image(b64(GRAY), "image", mode="auto").shape == (20, 30)
    assert decode_b64_image(b64(RGB), "image", mode="auto").shape == (20, 30, 3)
    assert decode_b64_image("data:image/png;base64," + b64(RGB), "image").shape == (20, 30, 3)


@pytest.mark.parametrize("data, kwargs, says", [
    ("not base64!!", {}, "base64"),
    (base64.b64encode(b"hello world, not an image").decode(), {}, "readable"),
    (b64(RGB)[: len(b64(RGB)) // 2], {}, None),  # truncated: bad padding or unreadable, either is a 422
    (b64(RGB, "JPEG"), {}, "PNG"),
    (b64(RGB), {"max_side": 25}, "sides"),
    (b64(RGB), {"min_side": 21}, "sides"),
])
def test_bad_input_is_a_field_error_naming_the_field(data, kwargs, says):
    with pytest.raises(FieldError) as e:
        decode_b64_image(data, "[3].image", **kwargs)
    assert e.value.field == "[3].image"
    if says:
        assert says in e.value.message


def test_jpeg_accepted_when_allowed():
    assert decode_b64_image(b64(RGB, "JPEG"), "image", formats=("PNG", "JPEG")).shape == (20, 30, 3)


def test_decompression_bomb_is_a_field_error(monkeypatch):
    # PIL refuses images over 2 x MAX_IMAGE_PIXELS at open(); that must be a 422 too, not a 500
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(FieldError):
        decode_b64_image(b64(RGB), "image")
