# SPDX-License-Identifier: Apache-2.0
"""Idefics3 and SmolVLM: each image resized and split into ``rows x cols`` square tiles plus a
global one (or the global one only), ``image_seq_len`` tokens a tile, laid out by the
processor's own ``replace_image_token``
(``<fake_token_around_image><row_1_col_1><image>*n...``). Tiles are kept ``(tiles, 1, 3, S, S)``;
batches give the model ``(1, tiles, 3, S, S)``; 1-D positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from energon_pack.encoding._families._interface import StackedItems, size_value

__all__ = ["SmolVLMTiles", "SplitTiles"]


class SplitTiles(StackedItems):
    """Idefics3 split tiles (see the module docstring)."""

    name: ClassVar[str] = "idefics3"
    #: No Megatron layout: its pixels are split tiles.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("Idefics3Processor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "Idefics3ImageProcessor",
        "Idefics3ImageProcessorPil",
    )
    default_tokens: ClassVar[dict[str, str | None]] = {
        "image_token": "<image>",
        "video_token": None,
        "vision_start_token": None,
        "vision_end_token": None,
    }

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        image_processor = processor.image_processor
        side = size_value(image_processor.max_image_size, "longest_edge")
        super().__init__(image_processor, processor.image_seq_len, (1, 3, side, side))

    @classmethod
    def from_processor(cls, processor: Any, image_processor: Any) -> SplitTiles:
        return cls(processor)

    def process(self, images: Sequence[Any]) -> tuple[Any, Any]:
        out = self.image_processor(images=[list(images)], return_tensors="pt")
        if not bool(out["pixel_attention_mask"].all()):
            raise ValueError(
                f"{type(self.image_processor).__name__} padded some tiles (do_image_splitting="
                "False?); packs hold whole square tiles only: set do_image_splitting=True."
            )
        grid = torch.tensor([self.plan(*im.size) for im in images], dtype=torch.int64)
        return out["pixel_values"][0][:, None], grid

    def plan(self, width: int, height: int) -> tuple[int, int, int]:
        return int(self.image_processor.get_number_of_image_patches(height, width, {})[0]), 1, 1

    def expansion(self, width: int, height: int) -> list[int]:
        """The token ids one ``width x height`` image becomes (markers and ``<image>`` runs)."""
        _, rows, cols = self.image_processor.get_number_of_image_patches(height, width, {})
        text = self.processor.replace_image_token({"rows": [[rows]], "cols": [[cols]]}, 0)
        return list(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])


class SmolVLMTiles(SplitTiles):
    """SmolVLM: Idefics3's layout through its own processor and image processor."""

    name: ClassVar[str] = "smolvlm"
    #: No Megatron layout: its pixels are split tiles.
    megatron_layout: ClassVar[str | None] = None
    processors: ClassVar[tuple[str, ...]] = ("SmolVLMProcessor",)
    image_processors: ClassVar[tuple[str, ...]] = (
        "SmolVLMImageProcessor",
        "SmolVLMImageProcessorPil",
    )
