# SPDX-License-Identifier: Apache-2.0
"""PaliGemma: ``image_seq_length`` ``<image>`` tokens per image, then BOS, the prompt and a
newline (the bidirectional prefix, ``token_type_ids`` 0), then the answer and EOS (1), as
``PaliGemmaProcessor(text=prompt, images, suffix=answer)`` lays them out; one SigLIP
``(3, S, S)`` image each; positions from 1 per document (``hf_kwargs`` adds the offset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import StackedItems, size_value

__all__ = ["PrefixImages"]


class PrefixImages(StackedItems):
    """PaliGemma's prefix-LM documents (see the module docstring)."""

    name: ClassVar[str] = "paligemma"
    #: No Megatron layout: its prefix attends both ways.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("PaliGemmaProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "SiglipImageProcessor",
        "SiglipImageProcessorPil",
    )
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }
    token_types: ClassVar[str | None] = "suffix"
    prefix_lm: ClassVar[bool] = True

    def __init__(self, image_processor: Any, tokens_per_image: int) -> None:
        size = image_processor.size
        shape = (3, size_value(size, "height"), size_value(size, "width"))
        super().__init__(image_processor, tokens_per_image, shape)

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> PrefixImages:
        return cls(image_processor, processor.image_seq_length)

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=list(images), return_tensors="pt")
        return out["pixel_values"], torch.ones(len(images), 3, dtype=torch.int64)
