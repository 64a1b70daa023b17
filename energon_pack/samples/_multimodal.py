# SPDX-License-Identifier: Apache-2.0
"""Documents, packs and batches with any number of images and videos (VQA, conversations, video).

A multimodal document is a captioning document (images: ``pixel_values``, ``image_grid_thw``,
``image_spans``) plus videos in the Qwen2-VL convention: ``pixel_values_videos`` rows,
``video_grid_thw`` (t, h, w) per video, the ``[start, end)`` spans of their placeholder tokens
and ``video_second_per_grid`` (seconds per temporal patch, ``temporal_patch_size / fps``). A
text-only document has zero images and zero videos (``(0, patch_dim)`` rows, ``(0, 3)`` grids),
so text-only conversations pack with the others.

The types register themselves (``document_type`` / ``pack_type``), so ``pack_documents`` and
``collate_packs`` build these from multimodal documents with no shared-code change. mRoPE runs of
a document are its images and videos in token order; a video's temporal row steps by
``tokens_per_second * second_per_grid`` (Qwen2.5-VL; ``tokens_per_second=None``: by 1, as
Qwen2-VL). Example, a document ``<s> <video>*2 hi there`` with one video of grid ``(2, 2, 2)``, merge
2, ``second_per_grid=1.0`` and ``tokens_per_second=2``::

    temporal  0 | 1 3 | 2 3        height  0 | 1 1 | 2 3        width  0 | 1 1 | 2 3
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from megatron.energon import edataclass

from energon_pack.attention import frame_runs, mrope_position_ids
from energon_pack.samples._batch import PackedCaptioningBatch, PackedTextBatch, image_kwargs
from energon_pack.samples._encoded import EncodedCaptioningSample, EncodedSample, slice_media
from energon_pack.samples._packed import (
    PackedCaptioningSample,
    PackedTextSample,
    PackLayout,
    concat_media,
)

__all__ = ["EncodedMultimodalSample", "PackedMultimodalBatch", "PackedMultimodalSample"]

#: The video fields of multimodal documents, packs and batches, as ``concat_media`` names them.
VIDEO_FIELDS = ("pixel_values_videos", "video_grid_thw", "video_spans")


@edataclass
class EncodedMultimodalSample(EncodedCaptioningSample):
    """One tokenized document with 0..n images and 0..n videos."""

    #: (video_rows, patch_dim) float32, video processor output of all videos of this document.
    pixel_values_videos: torch.Tensor
    #: (num_videos, 3) int64 (t, h, w) patch grid per video, before the spatial merge.
    video_grid_thw: torch.Tensor
    #: (num_videos, 2) int64 [start, end) of each video's placeholder tokens in ``tokens``.
    video_spans: torch.Tensor
    #: (num_videos,) float32 seconds per temporal patch (temporal_patch_size / fps).
    video_second_per_grid: torch.Tensor

    @property
    def num_media_tokens(self) -> int:
        """Image plus video placeholder tokens of the document."""
        return _media_tokens(self.tokens, self.image_spans, self.video_spans)

    def media_spans(self) -> torch.Tensor:
        """Image and video spans, ``(num_images + num_videos, 2)`` int64, by start."""
        spans = torch.cat([self.image_spans.view(-1, 2), self.video_spans.view(-1, 2)])
        return spans[torch.argsort(spans[:, 0], stable=True)].to(torch.int64)

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """Tokens, the images and the videos inside ``[start, end)``, each in order."""
        fields = EncodedCaptioningSample.slice_fields(self, start, end)
        rows, grid, spans, kept = slice_media(
            self.pixel_values_videos, self.video_grid_thw, self.video_spans, start, end
        )
        fields.update(
            pixel_values_videos=rows,
            video_grid_thw=grid,
            video_spans=spans,
            video_second_per_grid=self.video_second_per_grid.view(-1)[kept],
        )
        return fields


def _media_tokens(tokens: torch.Tensor, image_spans: Any, video_spans: Any) -> int:
    """Placeholder tokens in the spans. A span may hold text between its placeholders (a
    Qwen3-VL video's timestamps, Idefics3's tile markers): a span that starts and ends with the
    same token counts that token only; any other span counts its length."""
    spans = torch.cat([image_spans.view(-1, 2), video_spans.view(-1, 2)])
    n = int((spans[:, 1] - spans[:, 0]).sum())
    for s, e in spans.tolist():
        if e - s > 1 and tokens[s] == tokens[e - 1]:
            n -= int((tokens[s:e] != tokens[s]).sum())
    return n


def _runs(
    doc: EncodedMultimodalSample, tokens_per_second: float | None, merge: int
) -> tuple[Any, Any, Any]:
    """A document's image and video runs in token order: spans, grids, time intervals (a
    Qwen3-VL video is one run per temporal patch, see ``frame_runs``)."""
    videos = doc.video_grid_thw.view(-1, 3)
    per_video = (
        [1.0] * len(videos)
        if tokens_per_second is None
        else (doc.video_second_per_grid.view(-1) * tokens_per_second).tolist()
    )
    spans, grids = doc.image_spans.view(-1, 2).tolist(), doc.image_grid_thw.view(-1, 3).tolist()
    intervals = [1.0] * len(grids)
    for span, grid, interval in zip(doc.video_spans.view(-1, 2), videos, per_video):
        runs, run_grids = frame_runs(doc.tokens, span, grid, spatial_merge_size=merge)
        spans, grids = spans + runs, grids + run_grids
        intervals += [interval] * len(runs)
    spans = torch.tensor(spans, dtype=torch.int64).view(-1, 2)
    grids = torch.tensor(grids, dtype=torch.int64).view(-1, 3)
    order = torch.argsort(spans[:, 0], stable=True)
    return spans[order], grids[order], [intervals[i] for i in order.tolist()]


@edataclass
class PackedMultimodalSample(PackedCaptioningSample):
    """One pack of multimodal documents: the images, then the videos, each in pack order."""

    #: Holds multimodal documents (registers this type for them).
    document_type: ClassVar[type[EncodedSample]] = EncodedMultimodalSample

    #: (video_rows, patch_dim) float32, the videos of the pack in pack order.
    pixel_values_videos: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos, 3) int64 patch grid per video.
    video_grid_thw: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos, 2) int64 [start, end) video spans in the pack's token coordinates.
    video_spans: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos,) float32 seconds per temporal patch.
    video_second_per_grid: torch.Tensor = None  # type: ignore[assignment]

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls,
        samples: Sequence[EncodedMultimodalSample],
        layout: PackLayout,
        *,
        mrope: bool = False,
        spatial_merge_size: int = 2,
        tokens_per_second: float | None = None,
    ) -> dict[str, Any]:
        """Images as captioning packs hold them, videos likewise, and with ``mrope=True`` the
        ``(3, n)`` positions of each document over its image and video runs."""
        fields = PackedCaptioningSample.modality_fields(samples, layout)
        fields.update(concat_media(samples, layout.starts, *VIDEO_FIELDS))
        fields["video_second_per_grid"] = torch.cat(
            [s.video_second_per_grid.view(-1) for s in samples]
        ).to(torch.float32)
        if mrope:
            per_document = []
            for s, n, padded in zip(samples, layout.lengths, layout.padded):
                spans, grids, intervals = _runs(s, tokens_per_second, spatial_merge_size)
                per_document.append(
                    mrope_position_ids(
                        n,
                        spans,
                        grids,
                        spatial_merge_size=spatial_merge_size,
                        padded_length=padded,
                        time_intervals=intervals,
                    )
                )
            fields["mrope_position_ids"] = torch.cat(per_document, dim=1)
        return fields

    @property
    def num_media_tokens(self) -> int:
        """Image plus video placeholder tokens of the pack."""
        return _media_tokens(self.tokens, self.image_spans, self.video_spans)


@edataclass
class PackedMultimodalBatch(PackedCaptioningBatch):
    """A batch of multimodal packs; ``hf_kwargs`` passes only the media the batch has."""

    #: Collates multimodal packs (registers this type for them).
    pack_type: ClassVar[type[PackedTextSample]] = PackedMultimodalSample

    #: (video_rows, patch_dim) float32, all videos of the batch in row-major pack order.
    pixel_values_videos: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos, 3) int64 patch grid per video.
    video_grid_thw: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos, 2) int64 [start, end) video spans in the flattened (B * L,) batch.
    video_spans: torch.Tensor = None  # type: ignore[assignment]
    #: (num_videos,) float32 seconds per temporal patch (``second_per_grid_ts`` in transformers).
    video_second_per_grid: torch.Tensor = None  # type: ignore[assignment]

    @classmethod
    def modality_fields(  # type: ignore[override]
        cls, packs: Sequence[PackedMultimodalSample], length: int
    ) -> dict[str, Any]:
        """Images and videos in row-major pack order, spans in batch coordinates, stacked mRoPE
        ids (the captioning batch's)."""
        fields = PackedCaptioningBatch.modality_fields(packs, length)
        fields.update(concat_media(packs, [r * length for r in range(len(packs))], *VIDEO_FIELDS))
        fields["video_second_per_grid"] = torch.cat([p.video_second_per_grid for p in packs])
        return fields

    def hf_kwargs(self, attn_implementation: str = "sdpa", **options: Any) -> dict[str, Any]:
        """Text kwargs, the images when the batch has some (``image_kwargs``: by the family's
        pixel layout), ``pixel_values_videos`` / ``video_grid_thw`` when it has videos, and the
        (3, B, L) mRoPE ``position_ids`` when built."""
        # explicit base: zero-argument super() fails in slots dataclasses before Python 3.14
        kwargs = PackedTextBatch.hf_kwargs(self, attn_implementation, **options)
        if len(self.image_grid_thw):
            kwargs.update(image_kwargs(self.pixel_values, self.image_grid_thw))
        if len(self.video_grid_thw):
            kwargs["pixel_values_videos"] = self.pixel_values_videos
            kwargs["video_grid_thw"] = self.video_grid_thw
        if self.mrope_position_ids is not None:
            kwargs["position_ids"] = self.mrope_position_ids
        return kwargs
