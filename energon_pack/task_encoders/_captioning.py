# SPDX-License-Identifier: Apache-2.0
"""``CaptioningPackingTaskEncoder``: image + caption (energon ``CaptioningSample``) into packs.

Each sample becomes one document ``[BOS] <image>*k caption [EOD]``, the loss on the caption and
EOD; ``k = t * h * w / merge_size**2`` from the processor's grid, never estimated. Images are
decoded here (``decoder = None``), so a broken image is a ``ValueError`` naming the sample,
which energon's error handler logs and skips. See docs/howto/captioning.md.
"""

from __future__ import annotations

from typing import Any

import torch
from megatron.energon import CaptioningSample

from energon_pack.encoding import (
    DocumentTokenizer,
    MediaProcessor,
    PatchGrids,
    check_planned,
    high_bit_depth_modes,
    kept_items,
    to_pil_image,
)
from energon_pack.samples import (
    EncodedCaptioningSample,
    EncodedSample,
    LightCaptioningDocument,
)
from energon_pack.task_encoders._base import PackingTaskEncoder

__all__ = ["CaptioningPackingTaskEncoder"]


class CaptioningPackingTaskEncoder(PackingTaskEncoder[CaptioningSample]):
    """Packs image-caption documents.

    Args:
        tokenizer: A transformers tokenizer or a local tokenizer directory; it must know
            ``image_token``.
        image_processor: A Qwen2-VL-style image processor (``merge_size``, returns
            ``pixel_values`` and ``image_grid_thw``).
        image_token: The placeholder token repeated for each image.
        add_bos, add_eos, eod_token_id: As in ``LLMPackingTaskEncoder``.
        mrope: Add 3-row mRoPE position ids to each pack.
        light_media: Buffer planned documents, decode images after selection (``None``: where
            exact, with or without carry-over; ``True``: raise where not possible).
        **packing: :class:`~energon_pack.task_encoders.PackingConfig` fields.
    """

    #: Raw bytes reach ``encode_sample``: images are decoded (and errors reported) there.
    decoder = None

    def __init__(
        self,
        tokenizer: Any,
        image_processor: Any,
        *,
        image_token: str = "<|image_pad|>",
        add_bos: bool | None = None,
        add_eos: bool | None = None,
        eod_token_id: int | None = None,
        mrope: bool = False,
        light_media: bool | None = None,
        **packing: Any,
    ) -> None:
        self.tokenizer = DocumentTokenizer(
            tokenizer, add_bos=add_bos, add_eos=add_eos, eod_token_id=eod_token_id
        )
        self.image_processor = image_processor
        self.media = MediaProcessor(image_processor)
        #: Writes pixel rows in place, bit-identical to the processor (None: the processor's).
        self.fast_pixels = self.media.fast
        self.image_token_id = self.tokenizer.token_id(image_token)
        if type(self.media.family) is not PatchGrids:  # Qwen-VL's own classes only
            raise ValueError(
                f"CaptioningPackingTaskEncoder lays images out Qwen-VL style; for "
                f"{self.media.family.name} use ConversationPackingTaskEncoder (a user turn "
                "with the image tag, the caption as the answer), which lays out the family's "
                "markers as its processor does."
            )
        self.media.check_mrope(mrope)
        self.mrope = mrope
        self.spatial_merge_size = self.media.merge_size
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)
        self._init_light_media(light_media, image_processor, ("augment_image",))

    def pack_options(self) -> dict[str, Any]:
        """``mrope`` and the image processor's ``spatial_merge_size``, for each pack."""
        return {"mrope": self.mrope, "spatial_merge_size": self.spatial_merge_size}

    def augment_image(self, image: Any) -> Any:
        """Hook for (random) augmentations of the PIL image; runs seeded. Default: identity."""
        return image

    def process_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Hook: ``(pixel_values (patches, patch_dim) float32, image_grid_thw (1, 3) int64)``
        (default: ``MediaProcessor.images``, through :attr:`fast_pixels` where exact)."""
        media = self.media.images([image])
        return media.pixel_values, media.grid_thw

    def _processed(
        self, images: list[Any], key: str, *, pending: bool = False
    ) -> tuple[Any, torch.Tensor]:
        """Decode, augment and process images (errors name the sample): ``(rows, grid)``;
        ``pending``: rows left for the pack to write where ``MediaProcessor.images`` can."""
        pils = [self.augment_image(to_pil_image(image, key=key)) for image in images]
        try:
            if type(self).process_image is CaptioningPackingTaskEncoder.process_image:
                media = self.media.images(pils, pending=pending)
                return media.pixel_values, media.grid_thw
            parts = [self.process_image(pil) for pil in pils]
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the image processor failed ({type(e).__name__}: {e})."
            ) from e
        if len(parts) == 1:  # the usual case: no copy of the ~24 MB of pixels of a 1 MP image
            return parts[0]
        empty = self.media.empty()
        return (
            torch.cat([empty.pixel_values, *(p for p, _ in parts)]),
            torch.cat([empty.grid_thw, *(g for _, g in parts)]),
        )

    def encode_document(self, sample: CaptioningSample) -> EncodedCaptioningSample:
        key = sample.__key__
        self._stats_now().record_high_bit_depth(key, high_bit_depth_modes([sample.image]))
        if self.media_planner is not None:
            planned = self.media_planner.images([sample.image], key=key)
            if planned is not None:
                doc = self._document(sample, planned.pixel_values, planned.grid_thw)
                return LightCaptioningDocument.planned(doc, images=[sample.image])
            self.light_fallbacks += 1
        return self._document(sample, *self._processed([sample.image], key))

    def materialize(self, doc: EncodedSample, *, into_pack: bool = False) -> EncodedSample:
        """A light document with its kept image(s) decoded, augmented and processed;
        ``into_pack``: the pixel rows left for the pack to write (``PendingPixels``) where
        :attr:`fast_pixels` makes them (and ``process_image`` is not overridden)."""
        if not isinstance(doc, LightCaptioningDocument):
            return doc
        images = [doc.images[i] for i in kept_items(doc.pixel_values)]
        pixel_values, grid = self._processed(images, doc.__key__, pending=into_pack)
        check_planned(doc.image_grid_thw, grid, key=doc.__key__)
        return doc.materialized(pixel_values=pixel_values)

    def _document(
        self, sample: CaptioningSample, pixel_values: torch.Tensor, grid: torch.Tensor
    ) -> EncodedCaptioningSample:
        num_image_tokens = sum(self.media.tokens(grid))
        caption = sample.caption
        caption = caption.decode() if isinstance(caption, (bytes, bytearray)) else caption
        # [BOS] <image>*k caption [EOD]: the image tokens are the prompt (no loss), the caption
        # and EOD the target. Nothing to learn (empty caption, no EOD) gives an empty document,
        # which encode_sample drops and counts, as for text.
        tokens, loss_mask = self.tokenizer.document(
            [self.image_token_id] * num_image_tokens, self.tokenizer.encode_text(caption)
        )
        start = 1 if self.tokenizer.ids.bos is not None else 0
        return EncodedCaptioningSample.derive_from(
            sample,
            tokens=tokens,
            loss_mask=loss_mask,
            pixel_values=pixel_values,
            image_grid_thw=grid,
            image_spans=torch.tensor([[start, start + num_image_tokens]], dtype=torch.int64),
        )
