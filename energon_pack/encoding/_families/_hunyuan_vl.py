# SPDX-License-Identifier: Apache-2.0
"""HunYuan-VL (``HunYuanVLProcessor``; HunyuanOCR, HY-V4-VL): patch rows of ``3 * patch**2``
(768 floats, no temporal patch), a newline token after each row of merged patches, and
HunYuan's XD-RoPE positions (``mrope_layout = "xdrope"``).

Per image the processor writes ``h/m * (w/m + 1)`` image tokens, plus 2 when its
``cat_extra_token`` (default) is set, between the tokenizer's image start and end tokens: not
Qwen's ``h * w / m**2`` (a 1024x1024 image at patch 16: 32 x 33 + 2 = 1058 tokens, not 1024). A
40x70 image at patch 16, merge 2, 1024..9216 pixels: grid ``(1, 4, 2)``, rows ``(8, 768)``, 6
tokens. Positions (:func:`~energon_pack.attention.xdrope_position_ids`): 4 rows per document
(1-D position, then width, height, image index on each image's grid tokens), which both 3- and
4-axis models read as ``get_rope_index`` gives them for the document alone. Videos: none (the
processor has no video input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._qwen_vl import PatchGrids

__all__ = ["RowNewlineGrids"]


class RowNewlineGrids(PatchGrids):
    """HunYuan-VL processors (``HunYuanVLProcessor``, ``HunYuanVLImageProcessor``)."""

    name: ClassVar[str] = "hunyuan-vl"
    #: No Megatron layout: its positions are 4-row XD-RoPE.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("HunYuanVLProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "HunYuanVLImageProcessor",
        "HunYuanVLImageProcessorPil",
    )
    #: The token rule's ``+ 2`` is the processor's (``cat_extra_token``).
    needs_processor: ClassVar[bool] = True
    videos: ClassVar[bool] = False
    mrope_layout: ClassVar[str] = "xdrope"
    #: Its template writes the image token between the image start and end tokens (the
    #: processor refuses a prompt without them).
    chat_media: ClassVar[str] = "{start}{token}{end}"
    #: The tokenizer's named tokens (``tokenizer.image_token`` ...) replace these when the
    #: family is built from the processor.
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": "<image_start>",
        "vision_end_token": "<image_end>",
    }

    def __init__(self, image_processor: Any, extra_tokens: int = 2) -> None:
        super().__init__(image_processor)
        #: Tokens added to each image's grid tokens (2 with ``cat_extra_token``, else 0).
        self.extra_tokens = int(extra_tokens)

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> RowNewlineGrids:
        family = cls(image_processor, 2 if getattr(processor, "cat_extra_token", True) else 0)
        tok = getattr(processor, "tokenizer", None)
        named = ("image_token", "image_start_token", "image_end_token")
        if tok is not None and all(getattr(tok, n, None) for n in named):
            family.default_tokens = {  # type: ignore[misc]
                "image_token": tok.image_token,
                "video_token": None,
                "vision_start_token": tok.image_start_token,
                "vision_end_token": tok.image_end_token,
            }
        return family

    def tokens(self, grid: torch.Tensor, sizes: Sequence[tuple[int, int]] = ()) -> list[int]:
        """``h/m * (w/m + 1) + extra`` per image (the processor's ``replace_image_token``)."""
        g = grid.view(-1, 3)
        m = self.merge_size
        return ((g[:, 1] // m) * (g[:, 2] // m + 1) + self.extra_tokens).tolist()

    def timestamps_videos(self, video_processor: Any) -> bool:
        """No videos through this family: False."""
        return False
