# SPDX-License-Identifier: Apache-2.0
"""Ernie-4.5-VL-MoE (``Ernie4_5_VLMoeProcessor``): Qwen-VL-style patch rows without a temporal
patch (rows of ``3 * patch**2``: 588), ``t * h * w // merge**2`` placeholder tokens, 3-row
mRoPE positions, and ``moe_mm_token_type_ids``: its MoE layers send each image token, and the
``<|IMAGE_START|>`` / ``<|IMAGE_END|>`` around it, to the vision experts.

Without ``moe_mm_token_type_ids`` those tokens take the text experts, so each document brings
them from the encoder (1 on its image tokens and their start/end, as the processor's
``create_moe_mm_token_type_ids``) and ``hf_kwargs(impl, config=model)`` passes them on (and
refuses a batch without them). A 40x70 image with patch 14, merge 2, at most 28*28*9 pixels:
grid ``(1, 4, 2)``, pixel rows ``(8, 588)``, 2 ``<|IMAGE_PLACEHOLDER|>`` tokens between
``<|IMAGE_START|>`` and ``<|IMAGE_END|>``. Videos are refused (its video processor merges
temporal patches after the grid and stamps frames with a font: another layout).
"""

from __future__ import annotations

from typing import Any, ClassVar

from energon_pack.encoding._families._qwen_vl import PatchGrids

__all__ = ["ErniePatchGrids"]


class ErniePatchGrids(PatchGrids):
    """Ernie-4.5-VL-MoE processors (``Ernie4_5_VLMoeProcessor``, its image processor)."""

    name: ClassVar[str] = "ernie-4.5-vl"
    #: No Megatron layout: its experts read moe_mm_token_type_ids.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("Ernie4_5_VLMoeProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "Ernie4_5_VLMoeImageProcessor",
        "Ernie4_5_VLMoeImageProcessorPil",
    )
    videos: ClassVar[bool] = False
    moe_token_types: ClassVar[bool] = True
    #: Its template writes ``Picture N:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>`` per
    #: image item (``Picture N:`` stays text).
    chat_media: ClassVar[str] = "{start}{token}{end}"
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<|IMAGE_PLACEHOLDER|>",
        "video_token": None,
        "vision_start_token": "<|IMAGE_START|>",
        "vision_end_token": "<|IMAGE_END|>",
    }

    def timestamps_videos(self, video_processor: Any) -> bool:
        """No videos through this family: False."""
        return False
