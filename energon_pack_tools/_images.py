# SPDX-License-Identifier: Apache-2.0
"""Offline image fixtures: a small Qwen2-VL image processor (patch 14, merge 2, at most
112x112 pixels: a 64x48 PNG becomes 4 image tokens) and deterministic PNG bytes.
"""

from __future__ import annotations

import io
import random
from typing import Any

__all__ = ["corrupt_png_bytes", "make_image_processor", "random_png_bytes"]


def make_image_processor(
    *,
    min_pixels: int = 28 * 28,
    max_pixels: int = 112 * 112,
    patch_size: int = 14,
    merge_size: int = 2,
) -> Any:
    """A Qwen2-VL image processor built offline (the PIL backend when torchvision is absent)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
                Qwen2VLImageProcessorPil as Processor,
            )
        except ImportError:  # older transformers: one class
            from transformers import Qwen2VLImageProcessor as Processor
    return Processor(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch_size, merge_size=merge_size
    )


def random_png_bytes(width: int, height: int, *, seed: int = 0) -> bytes:
    """PNG bytes of a ``width x height`` RGB image of seeded random pixels."""
    from PIL import Image

    rng = random.Random(seed)
    data = rng.randbytes(width * height * 3)
    buf = io.BytesIO()
    Image.frombytes("RGB", (width, height), data).save(buf, format="PNG")
    return buf.getvalue()


def corrupt_png_bytes() -> bytes:
    """Bytes that start like a PNG but cannot be decoded (for error-handling tests)."""
    return b"\x89PNG\r\n\x1a\n" + b"this is not an image" * 4
