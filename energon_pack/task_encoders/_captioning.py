# SPDX-License-Identifier: Apache-2.0
"""``CaptioningPackingTaskEncoder``: image + caption (energon ``CaptioningSample``) into packs.

Each sample is the one-image conversation ``user: <image>``, ``assistant: caption`` on the
multimodal encoder's path, so every registered VLM family lays its image out as its processor
does. By default it is rendered without a chat template: ``[BOS] <image>*k caption [EOD]``, the
loss on the caption and EOD, ``k`` the processor's exact count (``t * h * w / merge_size**2``
for patch grids); ``use_chat_template=True`` renders it through the processor's (or the
tokenizer's) template. Images are decoded here (``decoder = None``), so a broken image is a
``ValueError`` naming the sample, which energon's error handler logs and skips. See
docs/howto/captioning.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from megatron.energon import CaptioningSample

from energon_pack.encoding import ProcessedMedia, media_of, to_pil_image
from energon_pack.task_encoders._multimodal import Message, MultimodalPackingTaskEncoder

__all__ = ["CaptioningPackingTaskEncoder"]


class CaptioningPackingTaskEncoder(MultimodalPackingTaskEncoder[CaptioningSample]):
    """Packs image-caption documents (one-image conversations).

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory; it must know
            ``image_token``.
        image_processor: The processor or image processor of a registered VLM family.
        use_chat_template: Render the conversation through the chat template (default False:
            ``[BOS] <image>*k caption [EOD]``).
        The rest as in :class:`~energon_pack.task_encoders.MultimodalPackingTaskEncoder`
        (``image_token``, ``add_bos``, ``add_eos``, ``eod_token_id``, ``mrope``,
        ``light_media``, packing fields).
    """

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any,
        *,
        use_chat_template: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(tokenizer, image_processor, use_chat_template=use_chat_template, **kwargs)
        self.image_processor = image_processor
        #: The image processor's spatial merge (1 where there are no patch grids).
        self.spatial_merge_size = self.media.merge_size

    def to_conversation(self, sample: CaptioningSample) -> Iterable[tuple[str, list[Message]]]:
        caption = sample.caption
        caption = caption.decode() if isinstance(caption, (bytes, bytearray)) else caption
        user = {"role": "user", "content": self.image_tag}
        return [(sample.__key__, [user, {"role": "assistant", "content": caption}])]

    def media_of(
        self, sample: CaptioningSample
    ) -> tuple[list[Any], list[list[Any]], list[float | None]]:
        return [sample.image], [], []

    def process_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(pixel_values, image_grid_thw (1, 3) int64)`` of one PIL image (default:
        ``MediaProcessor.images``, through :attr:`fast_pixels` where exact)."""
        media = self.media.images([image])
        return media.pixel_values, media.grid_thw

    def _processed(
        self,
        images: Sequence[Any],
        videos: Sequence[Sequence[Any]],
        key: str,
        *,
        pending: bool = False,
    ) -> tuple[ProcessedMedia, ProcessedMedia]:
        """The multimodal encoder's, or each image through an overridden :meth:`process_image`."""
        if type(self).process_image is CaptioningPackingTaskEncoder.process_image:
            return super()._processed(images, videos, key, pending=pending)
        pils = [self.augment_image(to_pil_image(image, key=key)) for image in images]
        try:
            parts = [self.process_image(pil) for pil in pils]
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the image processor failed ({type(e).__name__}: {e})."
            ) from e
        empty = self.media.empty()
        pixels = torch.cat([empty.pixel_values, *(p for p, _ in parts)])
        grid = torch.cat([empty.grid_thw, *(g for _, g in parts)])
        return media_of(self.media.family, pixels, grid, [p.size for p in pils]), empty
