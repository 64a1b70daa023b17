# SPDX-License-Identifier: Apache-2.0
"""InternVL: each image cut into ``n`` square tiles (plus a thumbnail when ``n > 1``) by the
GotOcr2 image processor, ``image_seq_length`` ``<IMG_CONTEXT>`` tokens a tile between ``<img>``
and ``</img>``; the model reads the stacked ``(tiles, 3, H, W)`` pixels and 1-D positions.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import StackedItems, size_value

__all__ = ["Tiles"]


class Tiles(StackedItems):
    """InternVL tiles: ``tiles * image_seq_length`` tokens per image, grid rows
    ``(tiles, 1, 1)``."""

    name: ClassVar[str] = "internvl"
    #: No Megatron layout: its pixels are whole tiles, 1-D positions.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("InternVLProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "GotOcr2ImageProcessor",
        "GotOcr2ImageProcessorPil",
    )
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<IMG_CONTEXT>",
        "video_token": None,
        "vision_start_token": "<img>",
        "vision_end_token": "</img>",
    }

    def __init__(self, image_processor: Any, tokens_per_tile: int) -> None:
        size = image_processor.size
        shape = (3, size_value(size, "height"), size_value(size, "width"))
        super().__init__(image_processor, tokens_per_tile, shape)

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> Tiles:
        if not image_processor.crop_to_patches:  # InternVLProcessor asks for tiles
            image_processor = copy.copy(image_processor)
            image_processor.crop_to_patches = True
        return cls(image_processor, _image_seq_length(processor))

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), return_tensors="pt")
        tiles = torch.as_tensor(out["num_patches"]).view(-1, 1)
        return out["pixel_values"], torch.cat([tiles, torch.ones_like(tiles).repeat(1, 2)], 1)

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(tiles, 1, 1)`` by the processor's own tile rule."""
        return int(self.image_processor.get_number_of_image_patches(height, width, {})), 1, 1


def _image_seq_length(processor: Any) -> int:
    """The processor's ``image_seq_length`` (tokens per tile or image)."""
    seq = getattr(processor, "image_seq_length", None)
    if not isinstance(seq, int):
        raise ValueError(
            f"{type(processor).__name__}: no integer image_seq_length (the tokens per image "
            "or tile); pass the whole processor (AutoProcessor)."
        )
    return seq
