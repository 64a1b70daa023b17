# SPDX-License-Identifier: Apache-2.0
"""Gemma 3: one ``(3, S, S)`` image each (pan-and-scan refused), ``image_seq_length`` soft
tokens laid out after the chat template as ``Gemma3Processor`` does
(``\\n\\n<start_of_image><image_soft_token>*n<end_of_image>\\n\\n``), ``token_type_ids`` 1 on
them (bidirectional images), 1-D positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import StackedItems, size_value

__all__ = ["Images"]


class Images(StackedItems):
    """Gemma 3 images (see the module docstring)."""

    name: ClassVar[str] = "gemma3"
    #: No Megatron layout: its image tokens attend both ways.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("Gemma3Processor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "Gemma3ImageProcessor",
        "Gemma3ImageProcessorPil",
    )
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<image_soft_token>",
        "video_token": None,
        "vision_start_token": "<start_of_image>",
        "vision_end_token": "<end_of_image>",
    }
    text_layout: ClassVar[str | None] = "\n\n{}\n\n"
    chat_media: ClassVar[str] = "{start}"
    token_types: ClassVar[str | None] = "image_tokens"

    def __init__(self, image_processor: Any, tokens_per_image: int) -> None:
        if getattr(image_processor, "do_pan_and_scan", False):
            raise ValueError(
                f"{type(image_processor).__name__}: do_pan_and_scan=True is not supported (the "
                "number of crops and the text around them depend on each image); set "
                "do_pan_and_scan=False, Gemma3Processor's own default."
            )
        size = image_processor.size
        shape = (3, size_value(size, "height"), size_value(size, "width"))
        super().__init__(image_processor, tokens_per_image, shape)

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> Images:
        return cls(image_processor, processor.image_seq_length)

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), do_pan_and_scan=False, return_tensors="pt")
        return out["pixel_values"], torch.ones(len(images), 3, dtype=torch.int64)
