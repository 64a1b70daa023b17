# SPDX-License-Identifier: Apache-2.0
"""``CaptioningPackingTaskEncoder``: image + caption (energon ``CaptioningSample``) into packs.

Each sample becomes one document ``[BOS] <image>*k caption [EOD]``. The image goes through a
transformers image processor (Qwen2-VL style: ``pixel_values`` of ``t*h*w`` patches and
``image_grid_thw``); the number of placeholder tokens is measured from the grid, never
estimated: ``k = t * h * w / merge_size**2``. A 64x48 image with ``min_pixels=28*28``,
``max_pixels=112*112`` is resized to 56x56, grid ``(1, 4, 4)``, so ``k = 16 / 4 = 4``::

    tokens     <s> <img> <img> <img> <img>  a   cat  </s>
    loss_mask   F    F     F     F     F    T    T    T      (no loss on image tokens)
    image_spans [[1, 5]]

Images are decoded here, not by energon's decoder (``decoder = None``), so a broken image is a
``ValueError`` naming the sample key inside ``encode_sample``: energon's error handler logs it
and skips the sample, the loader goes on. Decoded inputs (PIL images or ``(C, H, W)`` tensors,
when you set a decoder) are accepted too. Override :meth:`augment_image` for random
augmentations: it runs seeded, so ``restore_sample`` and resume reproduce them.
``mrope=True`` adds Qwen2-VL 3-row position ids to each pack.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from megatron.energon import CaptioningSample

from energon_pack.encoding import DocumentTokenizer, to_pil_image
from energon_pack.samples import (
    EncodedCaptioningSample,
    PackedCaptioningBatch,
    PackedCaptioningSample,
    PackedTextBatch,
    PackedTextSample,
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
        **packing: :class:`~energon_pack.task_encoders.PackingConfig` fields.
    """

    #: Raw bytes reach ``encode_sample``: images are decoded (and errors reported) there.
    decoder = None
    #: Packs hold the images of their documents.
    pack_type: ClassVar[type[PackedTextSample]] = PackedCaptioningSample
    #: Batches hold the images of their packs.
    batch_type: ClassVar[type[PackedTextBatch]] = PackedCaptioningBatch

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
        **packing: Any,
    ) -> None:
        self.tokenizer = DocumentTokenizer(
            tokenizer, add_bos=add_bos, add_eos=add_eos, eod_token_id=eod_token_id
        )
        self.image_processor = image_processor
        self.image_token_id = self.tokenizer.token_id(image_token)
        self.mrope = mrope
        self.spatial_merge_size = int(getattr(image_processor, "merge_size", 2))
        packing.setdefault("pad_token_id", self.tokenizer.pad_token_id)
        super().__init__(**packing)

    def pack_options(self) -> dict[str, Any]:
        """``mrope`` and the image processor's ``spatial_merge_size``, for each pack."""
        return {"mrope": self.mrope, "spatial_merge_size": self.spatial_merge_size}

    def augment_image(self, image: Any) -> Any:
        """Hook for (random) augmentations of the PIL image; runs seeded. Default: identity."""
        return image

    def process_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pixel_values (patches, patch_dim) float32, image_grid_thw (1, 3) int64)``."""
        out = self.image_processor(images=[image], return_tensors="pt")
        pixel_values = torch.as_tensor(out["pixel_values"]).to(torch.float32)
        grid = torch.as_tensor(out["image_grid_thw"]).to(torch.int64).reshape(-1, 3)
        return pixel_values, grid

    def encode_document(self, sample: CaptioningSample) -> EncodedCaptioningSample:
        key = sample.__key__
        image = self.augment_image(to_pil_image(sample.image, key=key))
        try:
            pixel_values, grid = self.process_image(image)
        except Exception as e:
            raise ValueError(
                f"sample {key!r}: the image processor failed ({type(e).__name__}: {e})."
            ) from e
        num_image_tokens = int(grid.prod()) // self.spatial_merge_size**2
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
