# SPDX-License-Identifier: Apache-2.0
"""Packs: documents concatenated into one sequence, with aligned labels and reset positions.

Labels are *aligned targets*: ``labels[i]`` is the token that position ``i`` must predict, i.e.
``tokens[i + 1]`` of the same document, or -100 where there is none (the last position of every
document, masked targets, alignment padding). No document ever predicts the next one's first
token. Example, documents ``[5, 6, 7]`` and ``[8, 9]`` (all targets in the loss), alignment 1::

    tokens        5     6     7     8     9
    labels        6     7  -100     9  -100
    position_ids  0     1     2     0     1
    doc_lengths   [3, 2]

With ``alignment=4`` each document is padded to a multiple of 4 (``doc_lengths_padded=[4, 4]``)
with ``pad_token_id``, label -100, and positions that continue the document's count. Packs are
unpadded at the end; ``collate_packs`` pads rows to a common length.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from megatron.energon import Sample, edataclass

from energon_pack.attention import aligned_lengths, mrope_position_ids, position_ids_from_lengths
from energon_pack.samples._encoded import EncodedCaptioningSample, EncodedSample

__all__ = ["IGNORE_INDEX", "PackedCaptioningSample", "PackedTextSample", "pack_documents"]

#: Label value of positions without a target (PyTorch's and Hugging Face's ignore_index).
IGNORE_INDEX = -100


@edataclass
class PackedTextSample(Sample):
    """One pack of text documents (unpadded; collation pads)."""

    #: (n,) int64 token ids, n = sum(doc_lengths_padded).
    tokens: torch.Tensor
    #: (n,) int64 aligned targets; -100 at the last position of each document, where the target
    #: is not in the loss mask, and on alignment padding.
    labels: torch.Tensor
    #: (n,) int64 position inside the document, reset to 0 per document.
    position_ids: torch.Tensor
    #: Real document lengths, in order.
    doc_lengths: list[int]
    #: Lengths after alignment padding (== doc_lengths when alignment=1).
    doc_lengths_padded: list[int]
    #: ``__key__`` of each member document, in order.
    sample_keys: list[str]

    @property
    def length(self) -> int:
        """Number of tokens of the pack (alignment padding included)."""
        return int(self.tokens.shape[0])


@edataclass
class PackedCaptioningSample(PackedTextSample):
    """One pack of captioning documents."""

    #: (num_patches, patch_dim) float32, pixel_values of all images of the pack, in pack order.
    pixel_values: torch.Tensor
    #: (num_images, 3) int64 (t, h, w) patch grid of each image, in pack order.
    image_grid_thw: torch.Tensor
    #: (num_images, 2) int64 [start, end) placeholder spans in the pack's token coordinates.
    image_spans: torch.Tensor
    #: (3, n) int64 mRoPE (temporal, height, width) positions reset per document, or None.
    mrope_position_ids: torch.Tensor | None = None


def _check(samples: Sequence[EncodedSample]) -> tuple[bool, list[int]]:
    """Validate the documents; return (captioning?, lengths)."""
    if len(samples) == 0:
        raise ValueError("pack_documents got no samples; a pack needs at least one document")
    captioning = isinstance(samples[0], EncodedCaptioningSample)
    lengths = []
    for s in samples:
        shape = s.tokens.shape
        if len(shape) != 1 or shape[0] == 0 or s.loss_mask.shape != shape:
            raise ValueError(
                f"sample {s.__key__!r}: tokens {tuple(shape)} and loss_mask "
                f"{tuple(s.loss_mask.shape)} must be equal non-empty 1-D shapes"
            )
        if isinstance(s, EncodedCaptioningSample) != captioning:
            raise ValueError(
                f"sample {s.__key__!r} mixes text and captioning documents in one pack; "
                "encode every document of a dataset with the same sample type"
            )
        lengths.append(shape[0])
    return captioning, lengths


def _sources(samples: Sequence[Sample]) -> tuple[Any, ...] | None:
    seen: list[Any] = []
    for s in samples:
        for src in s.__sources__ or ():
            if src not in seen:
                seen.append(src)
    return tuple(seen) if any(s.__sources__ is not None for s in samples) else None


def _aligned_labels(tokens: np.ndarray, loss_mask: np.ndarray, lengths: list[int]) -> np.ndarray:
    """labels[i] = tokens[i+1] if loss_mask[i+1], -100 at the last token of each document."""
    labels = np.full(tokens.shape, IGNORE_INDEX, dtype=np.int64)
    valid = loss_mask[1:].astype(bool)  # a copy: we clear the document ends in it
    valid[np.cumsum(np.asarray(lengths[:-1], dtype=np.int64)) - 1] = False
    np.copyto(labels[:-1], tokens[1:], where=valid)
    return labels


def pack_documents(
    samples: Sequence[EncodedSample],
    *,
    alignment: int = 1,
    pad_token_id: int = 0,
    mrope: bool = False,
    spatial_merge_size: int = 2,
) -> PackedTextSample | PackedCaptioningSample:
    """Concatenate encoded documents into one pack.

    Args:
        samples: the documents, in pack order (all text or all captioning).
        alignment: pad every document to a multiple of this (2 * context-parallel size for CP).
        pad_token_id: token id of alignment padding.
        mrope: also build ``(3, n)`` mRoPE position ids (captioning packs only).
        spatial_merge_size: the vision tower's spatial merge, for mRoPE.

    Returns a :class:`PackedCaptioningSample` for captioning documents, else a
    :class:`PackedTextSample`, with ``__key__`` the member keys joined by ``","``,
    ``__restore_key__=()`` (energon sets it), the first member's ``__subflavors__`` and the
    members' ``__sources__`` (deduplicated, in order).
    """
    captioning, lengths = _check(samples)
    padded = aligned_lengths(lengths, alignment)
    # NumPy for the per-token work: its small ops cost ~1 us where torch's cost ~5-10 us
    tokens = torch.cat([s.tokens for s in samples]).numpy()
    labels = _aligned_labels(tokens, torch.cat([s.loss_mask for s in samples]).numpy(), lengths)
    starts = list(itertools.accumulate(padded, initial=0))[:-1]
    if padded != lengths:
        n = sum(padded)
        real = np.concatenate([np.arange(st, st + ln) for st, ln in zip(starts, lengths)])
        out_tokens = np.full(n, pad_token_id, dtype=tokens.dtype)
        out_tokens[real] = tokens
        out_labels = np.full(n, IGNORE_INDEX, dtype=np.int64)
        out_labels[real] = labels
        tokens, labels = out_tokens, out_labels
    keys = [s.__key__ for s in samples]
    common: dict[str, Any] = {
        "__key__": ",".join(keys),
        "__restore_key__": (),
        "__subflavors__": samples[0].__subflavors__,
        "__sources__": _sources(samples),
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "position_ids": position_ids_from_lengths(padded),
        "doc_lengths": lengths,
        "doc_lengths_padded": padded,
        "sample_keys": keys,
    }
    if not captioning:
        if mrope:
            raise ValueError("mrope=True needs captioning documents (EncodedCaptioningSample)")
        return PackedTextSample(**common)
    caps: Sequence[EncodedCaptioningSample] = samples  # type: ignore[assignment]
    spans = torch.cat([s.image_spans.view(-1, 2) + st for s, st in zip(caps, starts)])
    mrope_ids = None
    if mrope:
        mrope_ids = torch.cat(
            [
                mrope_position_ids(
                    ln,
                    s.image_spans.view(-1, 2),
                    s.image_grid_thw.view(-1, 3),
                    spatial_merge_size=spatial_merge_size,
                    padded_length=pl,
                )
                for s, ln, pl in zip(caps, lengths, padded)
            ],
            dim=1,
        )
    return PackedCaptioningSample(
        **common,
        pixel_values=torch.cat([s.pixel_values for s in caps]),
        image_grid_thw=torch.cat([s.image_grid_thw.view(-1, 3) for s in caps]),
        image_spans=spans.to(torch.int64),
        mrope_position_ids=mrope_ids,
    )
