# SPDX-License-Identifier: Apache-2.0
"""GLM-4.1V, GLM-4.5V and GLM-4.6V (``Glm4vProcessor``, ``Glm46VProcessor``): Qwen-VL-style
patch rows and 3-row mRoPE positions, with GLM's own image tokens and resize rule.

Per image the processor writes ``<|begin_of_image|>`` then ``t * h * w // merge**2``
``<|image|>`` tokens then ``<|end_of_image|>``; the model's ``get_rope_index`` gives an image the
positions Qwen2-VL gives it (per document, as packs build them). Sizes follow GLM's
``smart_resize(num_frames, height, width, temporal_factor, factor, min_pixels, max_pixels)``,
which rounds up images smaller than one merged patch (Qwen's rule takes other arguments). A
40x70 image with patch 14, merge 2, at most 28*28*9 pixels: grid ``(1, 4, 2)``, pixel rows
``(8, 1176)``, 2 ``<|image|>`` tokens. Videos are refused: GLM lays each frame out as
``<|begin_of_image|>...<|end_of_image|>`` followed by its timestamp inside
``<|begin_of_video|>...<|end_of_video|>``, a layout no encoder here makes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from energon_pack.encoding._families._qwen_vl import PatchGrids

__all__ = ["Glm46vPatchGrids", "Glm4vPatchGrids"]


class Glm4vPatchGrids(PatchGrids):
    """GLM-4.1V / GLM-4.5V processors (``Glm4vProcessor``, ``Glm4vImageProcessor``)."""

    name: ClassVar[str] = "glm-4v"
    #: No Megatron layout checked against GLM's models (own tokens, rope index).
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("Glm4vProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "Glm4vImageProcessor",
        "Glm4vImageProcessorPil",
    )
    videos: ClassVar[bool] = False
    #: Its template writes ``<|begin_of_image|><|image|><|end_of_image|>`` per image item.
    chat_media: ClassVar[str] = "{start}{token}{end}"
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<|image|>",
        "video_token": None,
        "vision_start_token": "<|begin_of_image|>",
        "vision_end_token": "<|end_of_image|>",
    }

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        """``(1, h, w)`` patch grid of a ``width x height`` image, by GLM's rule (an image is
        resized as ``temporal_patch_size`` frames, as the processor does)."""
        t = self.temporal_patch_size
        rh, rw = self.rule(  # type: ignore[misc]
            num_frames=t,
            height=height,
            width=width,
            temporal_factor=t,
            factor=self.patch_size * self.merge_size,
            min_pixels=self.min_pixels,
            max_pixels=self.max_pixels,
        )
        return 1, rh // self.patch_size, rw // self.patch_size

    def timestamps_videos(self, video_processor: Any) -> bool:
        """No videos through this family: False."""
        return False


class Glm46vPatchGrids(Glm4vPatchGrids):
    """GLM-4.6V processors (``Glm46VProcessor``, ``Glm46VImageProcessor``): GLM-4.1V's layout."""

    name: ClassVar[str] = "glm-4.6v"
    #: No Megatron layout checked against GLM's models (own tokens, rope index).
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("Glm46VProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "Glm46VImageProcessor",
        "Glm46VImageProcessorPil",
    )
