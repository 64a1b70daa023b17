# SPDX-License-Identifier: Apache-2.0
"""mRoPE 3-row (temporal, height, width) position ids of one document, Qwen2-VL style.

Matches ``Qwen2VLModel.get_rope_index`` of transformers 5.x for one unpadded sequence (tested):

- a text run advances all three rows together, one step per token;
- an image run of grid ``(t, h, w)`` patches (before the spatial merge ``m``) covers
  ``t * (h/m) * (w/m)`` placeholder tokens, laid out t-major then rows then columns; its rows are
  ``start + t_i``, ``start + h_i`` and ``start + w_i``; the text after it starts at
  ``start + max(h/m, w/m)``.

Example: 2 text tokens, one image of grid ``(1, 4, 4)`` with ``m = 2`` (4 tokens), 1 text token::

    temporal  0 1 | 2 2 2 2 | 4
    height    0 1 | 2 2 3 3 | 4
    width     0 1 | 2 3 2 3 | 4

In a pack, each document starts again at 0, and padding tokens continue the text count.
"""

from __future__ import annotations

import torch

__all__ = ["mrope_position_ids"]


def mrope_position_ids(
    length: int,
    image_spans: torch.Tensor,
    image_grid_thw: torch.Tensor,
    *,
    spatial_merge_size: int = 2,
    padded_length: int | None = None,
) -> torch.Tensor:
    """Return the ``(3, padded_length)`` int64 mRoPE position ids of one document.

    Args:
        length: number of real tokens of the document.
        image_spans: ``(num_images, 2)`` int64 ``[start, end)`` of each image's placeholder
            tokens, sorted and non-overlapping, in document coordinates.
        image_grid_thw: ``(num_images, 3)`` int64 ``(t, h, w)`` patch grid before the merge.
        spatial_merge_size: the vision tower's spatial merge ``m`` (2 for Qwen2-VL).
        padded_length: slot length (>= ``length``); padding continues the text count.
    """
    total = length if padded_length is None else padded_length
    if total < length:
        raise ValueError(f"padded_length {total} is shorter than the document ({length})")
    spans = image_spans.tolist()
    grids = image_grid_thw.tolist()
    if len(spans) != len(grids):
        raise ValueError(
            f"{len(spans)} image spans but {len(grids)} image_grid_thw rows; give one per image"
        )
    m = spatial_merge_size
    out = torch.empty(3, total, dtype=torch.int64)
    cursor = 0  # next token index
    pos = 0  # next text position
    for i, ((start, end), (t, h, w)) in enumerate(zip(spans, grids)):
        if start < cursor or end > length or h % m or w % m:
            raise ValueError(
                f"image {i}: span [{start}, {end}) with grid (t={t}, h={h}, w={w}) is out of order, "
                f"out of the document (length {length}) or not divisible by merge size {m}"
            )
        gh, gw = h // m, w // m
        if end - start != t * gh * gw:
            raise ValueError(
                f"image {i}: span [{start}, {end}) has {end - start} tokens but grid "
                f"(t={t}, h={h}, w={w}) with merge {m} needs {t * gh * gw}"
            )
        if start > cursor:
            out[:, cursor:start] = torch.arange(pos, pos + start - cursor)
            pos += start - cursor
        tt = torch.arange(t).view(t, 1, 1).expand(t, gh, gw)
        hh = torch.arange(gh).view(1, gh, 1).expand(t, gh, gw)
        ww = torch.arange(gw).view(1, 1, gw).expand(t, gh, gw)
        out[:, start:end] = torch.stack([tt, hh, ww]).reshape(3, -1) + pos
        pos += max(gh, gw)
        cursor = end
    if total > cursor:
        out[:, cursor:] = torch.arange(pos, pos + total - cursor)
    return out
