# SPDX-License-Identifier: Apache-2.0
"""Encoded documents (what ``encode_sample`` returns) and the media fields that documents, packs
and batches share, declared once. A document says which token spans hold media (no cut may fall
inside one) and how to cut itself, so the over-long policy needs no knowledge of the types.
See docs/concepts/packing.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from megatron.energon import Sample, edataclass

__all__ = ["EncodedCaptioningSample", "EncodedMultimodalSample", "EncodedSample", "MediaFamily"]


#: The media spans of a text document (shared: it has no element to change).
_NO_SPANS = torch.zeros((0, 2), dtype=torch.int64)


@edataclass
class EncodedSample(Sample):
    """One tokenized document."""

    #: False for a planned document whose media are not decoded yet (a light media buffer's):
    #: packing one is an error until the encoder's ``materialize`` has run on it.
    ready_to_pack: ClassVar[bool] = True

    #: (n,) int64 token ids of the document (BOS/EOS included).
    tokens: torch.Tensor
    #: (n,) bool; True where tokens[i] is a prediction target (may be predicted from position
    #: i-1). tokens[0] is never predicted whatever loss_mask[0] says.
    loss_mask: torch.Tensor
    #: (n,) int64 token types as the model's processor returns them, for models whose
    #: attention reads them (Gemma 3: 1 on image tokens; PaliGemma: 0 on the prefix), or None.
    token_type_ids: torch.Tensor | None = None
    #: (n,) int64 the modality of each token as MoE layers route it, for models whose experts
    #: read them (Ernie-4.5-VL: 1 on image tokens and the image start/end around them), or None.
    moe_mm_token_type_ids: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Number of tokens of the document."""
        return int(self.tokens.shape[0])

    @property
    def media_load(self) -> tuple[int, int]:
        """``(media placeholder tokens, images + videos)``, for media budgets (text: (0, 0))."""
        return 0, 0

    def media_spans(self) -> torch.Tensor:
        """``(k, 2)`` int64 ``[start, end)`` token spans of media, by start; none for text."""
        return _NO_SPANS

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """The fields of the document cut to tokens ``[start, end)``; subtypes add their media.

        Call it on a base explicitly (``EncodedSample.slice_fields(self, start, end)``): zero
        argument ``super()`` fails in slots dataclasses before Python 3.14.
        """
        types = None if self.token_type_ids is None else self.token_type_ids[start:end]
        moe = self.moe_mm_token_type_ids
        return {
            "tokens": self.tokens[start:end],
            "loss_mask": self.loss_mask[start:end],
            "token_type_ids": types,
            "moe_mm_token_type_ids": None if moe is None else moe[start:end],
        }

    def slice(self, start: int, end: int, *, key: str | None = None) -> EncodedSample:
        """A new document of this type: tokens ``[start, end)`` and exactly the media inside.

        A cut inside a media span is a ``ValueError``. ``key`` is the new ``__key__`` (``None``:
        unchanged). ``doc.slice(0, 4)`` of text ``[a b c d e]`` holds ``[a b c d]``.
        """
        for s, e in self.media_spans().tolist():
            if start < e and s < end and not (start <= s and e <= end):
                raise ValueError(
                    f"document {self.__key__!r}: [{start}, {end}) cuts media span [{s}, {e})."
                )
        changes = self.slice_fields(start, end)
        if key is not None:
            changes["__key__"] = key
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, slots=True)
class MediaFamily:
    """What the VLM family that made a document declares to the layers that read its pack and
    batch (an encoder sets it from its ``VisionFamily``)."""

    #: The family's name (``VisionFamily.name``, ``"qwen2-vl"``), for messages.
    name: str
    #: The Megatron VLM layout its batches take (``VisionFamily.megatron_layout``, a key of
    #: :data:`~energon_pack.samples.MEGATRON_VLM_LAYOUTS`), or None: ``megatron_batch``
    #: refuses them.
    megatron_layout: str | None = None


@dataclasses.dataclass(kw_only=True)
class ImageFields:
    """The image fields of documents, packs and batches (a mixin, first in the bases): items in
    order (a batch: row-major pack order), spans as token offsets in the document, the pack, or
    the flattened ``(B * L,)`` batch (row = start // L)."""

    __slots__ = ()
    #: The fields ``concat_media`` / ``slice_media`` join or cut: rows, grid, spans.
    image_fields: ClassVar[tuple[str, str, str]] = ("pixel_values", "image_grid_thw", "image_spans")

    #: (rows, patch_dim) float32 image processor output of all images (Qwen-VL patch rows; other
    #: families: their processor's pixel layout, see ``image_kwargs``).
    pixel_values: torch.Tensor
    #: (num_images, 3) int64 (t, h, w) in patches before the spatial merge (Qwen2-VL convention).
    image_grid_thw: torch.Tensor
    #: (num_images, 2) int64 [start, end) of each image's placeholder tokens.
    image_spans: torch.Tensor
    #: (num_images, 2) int64 original (height, width) per image, for models that read them
    #: (LLaVA-NeXT, -OneVision), or None.
    image_sizes: torch.Tensor | None = None
    #: The VLM family that made the documents and what it declares, or None (documents built
    #: by hand); one family per pack and batch.
    family: MediaFamily | None = None


@dataclasses.dataclass(kw_only=True)
class VideoFields:
    """The video fields of multimodal documents, packs and batches (Qwen2-VL convention; a
    mixin like :class:`ImageFields`)."""

    __slots__ = ()
    video_fields: ClassVar[tuple[str, str, str]] = (
        "pixel_values_videos",
        "video_grid_thw",
        "video_spans",
    )

    #: (video_rows, patch_dim) float32 video processor output of all videos, in order.
    pixel_values_videos: torch.Tensor
    #: (num_videos, 3) int64 (t, h, w) patch grid per video, before the spatial merge.
    video_grid_thw: torch.Tensor
    #: (num_videos, 2) int64 [start, end) of each video's placeholder tokens.
    video_spans: torch.Tensor
    #: (num_videos,) float32 seconds per temporal patch (temporal_patch_size / fps;
    #: ``second_per_grid_ts`` in transformers).
    video_second_per_grid: torch.Tensor


@edataclass
class EncodedCaptioningSample(ImageFields, EncodedSample):
    """One tokenized document with images."""

    @property
    def num_media_tokens(self) -> int:
        """Media placeholder tokens of the document (in its media spans)."""
        spans = self.media_spans()
        return int((spans[:, 1] - spans[:, 0]).sum())

    @property
    def media_load(self) -> tuple[int, int]:
        """``(num_media_tokens, items in media_spans)``; a light document's spans are final, so
        it gives the numbers of the materialized one."""
        return self.num_media_tokens, len(self.media_spans())

    def media_spans(self) -> torch.Tensor:
        """The image spans, ``(num_images, 2)`` int64."""
        return torch.as_tensor(self.image_spans, dtype=torch.int64).view(-1, 2)

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """Tokens, and the images inside ``[start, end)`` (rows, grids, spans re-based)."""
        fields = EncodedSample.slice_fields(self, start, end)
        rows, grid, spans, kept = slice_media(self, self.image_fields, start, end)
        fields.update(zip(self.image_fields, (rows, grid, spans)))
        if self.image_sizes is not None:
            fields["image_sizes"] = self.image_sizes[kept]
        return fields


@edataclass
class EncodedMultimodalSample(VideoFields, EncodedCaptioningSample):
    """One tokenized document with 0..n images and 0..n videos (text-only: zero of each)."""

    @property
    def num_media_tokens(self) -> int:
        """Image plus video placeholder tokens of the document."""
        return media_tokens(self.tokens, self.image_spans, self.video_spans)

    def media_spans(self) -> torch.Tensor:
        """Image and video spans, ``(num_images + num_videos, 2)`` int64, by start."""
        spans = torch.cat([self.image_spans.view(-1, 2), self.video_spans.view(-1, 2)])
        return spans[torch.argsort(spans[:, 0], stable=True)].to(torch.int64)

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """Tokens, the images and the videos inside ``[start, end)``, each in order."""
        fields = EncodedCaptioningSample.slice_fields(self, start, end)
        rows, grid, spans, kept = slice_media(self, self.video_fields, start, end)
        fields.update(zip(self.video_fields, (rows, grid, spans)))
        fields["video_second_per_grid"] = self.video_second_per_grid.view(-1)[kept]
        return fields


def slice_media(
    doc: Any, names: tuple[str, str, str], start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """The media items (fields ``names``: rows, grid, spans) whose spans lie in ``[start, end)``:
    ``(rows, grids, spans - start, kept)``.

    Rows are ``t*h*w`` per item (pixels, or a light row map); ``kept`` are the kept items'
    indices. Items at ``[2, 6)`` and ``[8, 10)`` with grids ``(1, 4, 4)`` and ``(1, 2, 4)``, cut
    to ``[6, 11)``: rows ``16:24``, grid ``[[1, 2, 4]]``, spans ``[[2, 4]]``, kept ``[1]``.
    """
    rows, grid, spans = (getattr(doc, n) for n in names)
    grid = torch.as_tensor(grid).view(-1, 3)
    spans = torch.as_tensor(spans, dtype=torch.int64).view(-1, 2)
    kept = [i for i, (s, e) in enumerate(spans.tolist()) if s >= start and e <= end]
    if len(kept) == len(grid) and start == 0:
        return rows, grid, spans, kept
    offsets = [0, *torch.cumsum(grid.prod(dim=1), 0).tolist()]
    parts = [rows[offsets[i] : offsets[i + 1]] for i in kept]
    kept_rows = torch.cat(parts) if parts else rows[:0]
    return kept_rows, grid[kept], spans[kept] - start, kept


def media_tokens(tokens: torch.Tensor, image_spans: Any, video_spans: Any) -> int:
    """Placeholder tokens in the spans. A span may hold text between its placeholders: a span
    that starts and ends with the same token counts only that token (a Qwen3-VL video's
    timestamps) or, for an image, the token of its longest run (the first on a tie: Idefics3's
    markers around its ``<image>`` runs); any other span counts its length."""
    n = 0
    for images, spans in ((True, image_spans), (False, video_spans)):
        for s, e in spans.view(-1, 2).tolist():
            span = tokens[s:e]
            if e - s < 2 or span[0] != span[-1]:
                n += e - s
                continue
            at = torch.cat([torch.tensor([0]), (span[1:] != span[:-1]).nonzero().view(-1) + 1])
            runs = torch.diff(at, append=torch.tensor([e - s]))
            n += int((span == span[at[runs.argmax()]] if images else span == span[0]).sum())
    return n
