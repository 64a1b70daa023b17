# SPDX-License-Identifier: Apache-2.0
"""Encoded documents: what a task encoder's ``encode_sample`` returns, ready to be packed.

One document is its token ids and a loss mask that says which tokens are prediction targets.
Example, a prompt/answer pair where only the answer is trained on::

    tokens     <s>  Q   ?   A   !  </s>
    loss_mask   F   F   F   T   T   T      (tokens[0] is never a target, whatever the mask says)

A captioning document adds the image processor's output and the ``[start, end)`` span of each
image's placeholder tokens in ``tokens`` (``image_grid_thw`` in the Qwen2-VL convention).

Every document type says which token spans hold media (:meth:`EncodedSample.media_spans`, no cut
may fall inside one) and how to cut itself (:meth:`EncodedSample.slice`), so the over-long policy
needs no knowledge of the types. A captioning document ``0 1 [2 3 4 5] 6 7 [8 9] 10`` (images
of 16 and 8 pixel rows) sliced to ``[6, 11)`` is ``6 7 [8 9] 10`` with span ``[2, 4)``, grid
``[[1, 2, 4]]`` and the second image's 8 rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from megatron.energon import Sample, edataclass

__all__ = ["EncodedCaptioningSample", "EncodedSample"]


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

    @property
    def length(self) -> int:
        """Number of tokens of the document."""
        return int(self.tokens.shape[0])

    @property
    def media_load(self) -> tuple[int, int]:
        """``(media placeholder tokens, images + videos)``: what the media budgets of
        :class:`~energon_pack.algorithms.PackingSpec` count; ``(0, 0)`` for text. A document
        type with media overrides it (captioning: ``(256, 1)`` for one 256-token image)."""
        return 0, 0

    def media_spans(self) -> torch.Tensor:
        """``(k, 2)`` int64 ``[start, end)`` token spans of media, by start; none for text."""
        return torch.zeros((0, 2), dtype=torch.int64)

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """The fields of the document cut to tokens ``[start, end)``; subtypes add their media.

        Call it on a base explicitly (``EncodedSample.slice_fields(self, start, end)``): zero
        argument ``super()`` fails in slots dataclasses before Python 3.14.
        """
        types = None if self.token_type_ids is None else self.token_type_ids[start:end]
        return {
            "tokens": self.tokens[start:end],
            "loss_mask": self.loss_mask[start:end],
            "token_type_ids": types,
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


@edataclass
class EncodedCaptioningSample(EncodedSample):
    """One tokenized document with images."""

    #: (num_patches, patch_dim) float32, image processor output (all images of this sample).
    pixel_values: torch.Tensor
    #: (num_images, 3) int64 (t, h, w) in patches before the spatial merge (Qwen2-VL convention).
    image_grid_thw: torch.Tensor
    #: (num_images, 2) int64 [start, end) of each image's placeholder tokens in ``tokens``.
    image_spans: torch.Tensor

    @property
    def num_media_tokens(self) -> int:
        """Media placeholder tokens of the document (in its media spans)."""
        spans = self.media_spans()
        return int((spans[:, 1] - spans[:, 0]).sum())

    @property
    def media_load(self) -> tuple[int, int]:
        """``(num_media_tokens, items in media_spans)``, for images and (subtypes) videos; a
        light document's spans are final, so it gives the numbers of the materialized one."""
        return self.num_media_tokens, len(self.media_spans())

    def media_spans(self) -> torch.Tensor:
        """The image spans, ``(num_images, 2)`` int64."""
        return torch.as_tensor(self.image_spans, dtype=torch.int64).view(-1, 2)

    def slice_fields(self, start: int, end: int) -> dict[str, Any]:
        """Tokens, and the images inside ``[start, end)`` (rows, grids, spans re-based)."""
        fields = EncodedSample.slice_fields(self, start, end)
        pixels, grid, spans, _ = slice_media(
            self.pixel_values, self.image_grid_thw, self.image_spans, start, end
        )
        fields.update(pixel_values=pixels, image_grid_thw=grid, image_spans=spans)
        return fields


def slice_media(
    rows: torch.Tensor, grid_thw: torch.Tensor, spans: torch.Tensor, start: int, end: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """The media items whose spans lie in ``[start, end)``: ``(rows, grids, spans - start, kept)``.

    ``rows`` holds ``t*h*w`` rows per item, in item order (pixels, or a light row map);
    ``kept`` are the kept items' indices. Items at ``[2, 6)`` and ``[8, 10)`` with grids
    ``(1, 4, 4)`` and ``(1, 2, 4)``, cut to ``[6, 11)``: rows ``16:24``, grid ``[[1, 2, 4]]``,
    spans ``[[2, 4]]``, kept ``[1]``.
    """
    grid = torch.as_tensor(grid_thw).view(-1, 3)
    spans = torch.as_tensor(spans, dtype=torch.int64).view(-1, 2)
    kept = [i for i, (s, e) in enumerate(spans.tolist()) if s >= start and e <= end]
    if len(kept) == len(grid) and start == 0:
        return rows, grid, spans, kept
    offsets = [0, *torch.cumsum(grid.prod(dim=1), 0).tolist()]
    parts = [rows[offsets[i] : offsets[i + 1]] for i in kept]
    kept_rows = torch.cat(parts) if parts else rows[:0]
    return kept_rows, grid[kept], spans[kept] - start, kept
