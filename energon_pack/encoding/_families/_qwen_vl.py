# SPDX-License-Identifier: Apache-2.0
"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL: patch rows, ``(t, h, w)`` grids, ``smart_resize`` sizes,
``t * h * w // merge**2`` placeholder tokens, 3-row mRoPE positions, videos.

A 64x48 image with patch 14, merge 2, at most 112x112 pixels: grid ``(1, 4, 4)``, pixel rows
``(16, 1176)``, 4 ``<|image_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import size_value, transformers_class

__all__ = ["PatchGrids"]


class PatchGrids:
    """Qwen2-VL-style processors: patch rows, ``(t, h, w)`` grids, ``smart_resize`` sizes."""

    name: ClassVar[str] = "qwen2-vl"
    #: Megatron's VLM micro-batch is its layout: patch rows, grids, 3-row mRoPE.
    megatron_layout: ClassVar[str | None] = "mrope_patch_rows"
    processors: ClassVar[tuple[str, ...]] = (
        "Qwen2VLProcessor",
        "Qwen2_5_VLProcessor",
        "Qwen3VLProcessor",
    )
    image_processors: ClassVar[tuple[str, ...]] = (
        "Qwen2VLImageProcessor",
        "Qwen2VLImageProcessorPil",
    )
    needs_processor: ClassVar[bool] = False
    text_layout: ClassVar[str | None] = None
    chat_media: ClassVar[str] = "{start}{token}{end}"
    token_types: ClassVar[str | None] = None
    prefix_lm: ClassVar[bool] = False
    moe_token_types: ClassVar[bool] = False
    videos: ClassVar[bool] = True
    mrope: ClassVar[bool] = True
    mrope_layout: ClassVar[str] = "qwen"
    image_sizes: ClassVar[bool] = False
    per_document: ClassVar[bool] = False
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_start_token": "<|vision_start|>",
        "vision_end_token": "<|vision_end|>",
    }

    def __init__(self, image_processor: Any) -> None:
        self.image_processor = image_processor
        p = image_processor
        self.merge_size = int(getattr(p, "merge_size", 2))
        self.patch_size = int(getattr(p, "patch_size", 14))
        self.temporal_patch_size = int(getattr(p, "temporal_patch_size", 2))
        #: ``smart_resize(height, width, factor, min_pixels, max_pixels)`` of its module, or None.
        self.rule = next(
            (
                getattr(sys.modules.get(c.__module__), "smart_resize", None)
                for c in type(p).__mro__
                if hasattr(sys.modules.get(c.__module__), "smart_resize")
            ),
            None,
        )
        size = getattr(p, "size", None) or {}
        self.min_pixels = size_value(size, "shortest_edge")
        self.max_pixels = size_value(size, "longest_edge")

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> PatchGrids:
        return cls(image_processor)

    @property
    def item_shape(self) -> tuple[int, ...]:
        """One pixel row: ``(3 * temporal_patch_size * patch_size**2,)`` (1176)."""
        return (3 * self.temporal_patch_size * self.patch_size**2,)

    @property
    def can_plan(self) -> bool:
        """Whether grids follow from sizes (``smart_resize``, ``do_resize``, pixel bounds)."""
        known = self.min_pixels is not None and self.max_pixels is not None
        return (
            self.rule is not None and known and bool(getattr(self.image_processor, "do_resize", 0))
        )

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Placeholder tokens per grid row: ``t * h * w // merge**2``."""
        return (grid.view(-1, 3).prod(dim=1) // self.merge_size**2).tolist()

    def timestamps_videos(self, video_processor: Any) -> bool:
        """Qwen3-VL's video processor (exact class) stamps each temporal patch with its time."""
        return transformers_class(video_processor) == "Qwen3VLVideoProcessor"

    def grids(self, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """The grids of one document's images of these ``(width, height)`` sizes."""
        return [self.plan(w, h) for w, h in sizes]

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        """``(pixel_values, grid)`` of PIL images through the processor."""
        out = self.image_processor(images=list(images), return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1, h, w)`` patch grid of a ``width x height`` image (needs :attr:`can_plan`)."""
        factor = self.patch_size * self.merge_size
        rh, rw = self.rule(  # type: ignore[misc]
            height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return 1, rh // self.patch_size, rw // self.patch_size
