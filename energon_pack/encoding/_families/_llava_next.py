# SPDX-License-Identifier: Apache-2.0
"""LLaVA-NeXT and LLaVA-OneVision: anyres patches.

LLaVA-NeXT: each image as its resized base view plus the crop-size patches of its best
pinpoint resolution, ``(patches, 3, S, S)``; its tokens by the processor's own rule
(``replace_image_token``) from its size; the model reads ``image_sizes``. LLaVA-OneVision
(``per_document``): the images of a document with several are its base view only (padded
square), ``num_image_tokens + 1`` tokens each; the model reads ``batch_num_images``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import StackedItems, size_value

__all__ = ["Anyres", "AnyresDocuments"]


class Anyres(StackedItems):
    """LLaVA-NeXT (see the module docstring)."""

    name: ClassVar[str] = "llava-next"
    #: No Megatron layout: anyres patches with image_sizes.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("LlavaNextProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "LlavaNextImageProcessor",
        "LlavaNextImageProcessorPil",
    )
    image_sizes: ClassVar[bool] = True
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }

    def __init__(self, processor: Any) -> None:
        from PIL import Image

        self.processor = processor
        ip = processor.image_processor
        size, crop = ip.size, getattr(ip, "crop_size", None) or {}
        self.side = (  # the patch side, as the image processor's _preprocess picks it
            size_value(crop, "height")
            or size_value(size, "height")
            or size_value(size, "shortest_edge")
        )
        super().__init__(ip, 0, ())
        probe = self._process([Image.new("RGB", (self.side, self.side))])["pixel_values"]
        self.item_shape = tuple(probe.shape[-3:])

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> Anyres:
        return cls(processor)

    def _process(self, images: Sequence[Any]) -> Any:
        group = [list(images)] if self.per_document else list(images)
        return self.image_processor(images=group, return_tensors="pt")

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Per image of one document, the image tokens its processor puts in the text."""
        inputs = {
            "image_sizes": [[h, w] for w, h in sizes],
            "pixel_values": [[torch.empty(self.item_shape)]],
            "batch_num_images": [len(sizes)],
        }
        each = len(self.processor.image_token)
        return [
            len(self.processor.replace_image_token(inputs, i)) // each for i in range(len(sizes))
        ]

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        """The processor's ``(images, max_patches, 3, S, S)`` unpadded to rows per image."""
        pixels = self._process(images)["pixel_values"]
        grid = torch.tensor(self.grids([im.size for im in images]), dtype=torch.int64)
        if pixels.shape[1] != int(grid[:, 0].max()):  # the patch rule is not the processor's
            raise ValueError(f"{type(self.image_processor).__name__}: unexpected patch counts")
        return torch.cat([p[:n] for p, n in zip(pixels, grid[:, 0].tolist())]), grid

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        if self.per_document and len(sizes) > 1:
            return [(1, 1, 1)] * len(sizes)
        return [self.plan(w, h) for w, h in sizes]

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1 + patches, 1, 1)``: the base view and the patches of the best resolution."""
        from transformers.image_processing_utils import select_best_resolution

        pinpoints = self.image_processor.image_grid_pinpoints
        h, w = select_best_resolution((height, width), pinpoints)
        return 1 + -(-h // self.side) * -(-w // self.side), 1, 1


class AnyresDocuments(Anyres):
    """LLaVA-OneVision (see the module docstring)."""

    name: ClassVar[str] = "llava-onevision"
    #: No Megatron layout: anyres patches with image_sizes.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("LlavaOnevisionProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "LlavaOnevisionImageProcessor",
        "LlavaOnevisionImageProcessorPil",
    )
    per_document: ClassVar[bool] = True
