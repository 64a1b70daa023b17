# SPDX-License-Identifier: Apache-2.0
"""PaddleOCR-VL (``PaddleOCRVLProcessor``): Qwen-VL's grids, token rule (``t * h * w //
merge**2``) and 3-row mRoPE positions, with pixels as whole patches ``(patches, 3, 14, 14)``
in row-major patch order (not Qwen's flattened rows of merged groups).

A 40x70 image with patch 14, merge 2, 784..7056 pixels: grid ``(1, 4, 2)``, pixels
``(8, 3, 14, 14)``, 2 ``<|IMAGE_PLACEHOLDER|>`` tokens between ``<|IMAGE_START|>`` and
``<|IMAGE_END|>``. The batch gives the model ``image_grid_thw`` with them (its grids are patch
grids, not tile counts). Videos: none (the processor has no video input).
"""

from __future__ import annotations

from typing import Any, ClassVar

from energon_pack.encoding._families._qwen_vl import PatchGrids

__all__ = ["WholePatchGrids"]


class WholePatchGrids(PatchGrids):
    """PaddleOCR-VL processors (``PaddleOCRVLProcessor``, ``PaddleOCRVLImageProcessor``)."""

    name: ClassVar[str] = "paddleocr-vl"
    #: No Megatron layout: its pixels are whole patches.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("PaddleOCRVLProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "PaddleOCRVLImageProcessor",
        "PaddleOCRVLImageProcessorPil",
    )
    videos: ClassVar[bool] = False
    #: Its template writes ``<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>`` per image item
    #: (a user turn's images before its text).
    chat_media: ClassVar[str] = "{start}{token}{end}"
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<|IMAGE_PLACEHOLDER|>",
        "video_token": None,
        "vision_start_token": "<|IMAGE_START|>",
        "vision_end_token": "<|IMAGE_END|>",
    }

    @property
    def item_shape(self) -> tuple[int, ...]:
        """One patch: ``(3 * temporal_patch_size, patch_size, patch_size)`` (``(3, 14, 14)``)."""
        return (3 * self.temporal_patch_size, self.patch_size, self.patch_size)

    def timestamps_videos(self, video_processor: Any) -> bool:
        """No videos through this family: False."""
        return False
