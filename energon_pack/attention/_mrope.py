# SPDX-License-Identifier: Apache-2.0
"""mRoPE 3-row (temporal, height, width) position ids of one document, Qwen2-VL style.

Matches ``Qwen2VLModel.get_rope_index`` on one unpadded document (tested); Qwen3-VL's
timestamped videos split into per-frame runs (:func:`frame_runs`). See
``docs/concepts/metadata.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["frame_runs", "mrope_position_ids"]


def frame_runs(
    tokens: torch.Tensor, span: Sequence[int], grid: Sequence[int], *, spatial_merge_size: int = 2
) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """A video's mRoPE runs: the span itself, or one ``(1, h, w)`` run per temporal patch when
    text separates the patches (Qwen3-VL timestamps).

    The placeholder token is ``tokens[start]``; each patch is a maximal run of it. Tokens
    ``[v v x x v v]`` with span ``(0, 6)`` and grid ``(2, 2, 4)`` (2 tokens a patch) ->
    ``[(0, 2), (4, 6)]``, ``[(1, 2, 4), (1, 2, 4)]``.

    Raises:
        ValueError: when the runs do not match the grid (``t`` runs of ``h*w/m**2`` tokens).
    """
    start, end = int(span[0]), int(span[1])
    t, h, w = (int(x) for x in grid)
    per_patch = (h // spatial_merge_size) * (w // spatial_merge_size)
    if end - start == t * per_patch:
        return [(start, end)], [(t, h, w)]
    is_pad = (tokens[start:end] == tokens[start]).tolist()
    runs: list[tuple[int, int]] = []
    for i, pad in enumerate(is_pad):
        if pad and (i == 0 or not is_pad[i - 1]):
            runs.append((start + i, start + i))
        if pad:
            runs[-1] = (runs[-1][0], start + i + 1)
    if len(runs) != t or any(e - s != per_patch for s, e in runs):
        raise ValueError(
            f"video span [{start}, {end}) holds placeholder runs {[e - s for s, e in runs]} but "
            f"grid (t={t}, h={h}, w={w}) with merge {spatial_merge_size} needs {t} of {per_patch}"
        )
    return runs, [(1, h, w)] * t


def mrope_position_ids(
    length: int,
    image_spans: torch.Tensor,
    image_grid_thw: torch.Tensor,
    *,
    spatial_merge_size: int = 2,
    padded_length: int | None = None,
    time_intervals: Sequence[float] | None = None,
) -> torch.Tensor:
    """Return the ``(3, padded_length)`` int64 mRoPE position ids of one document.

    Args:
        length: number of real tokens of the document.
        image_spans: ``(num_images, 2)`` int64 ``[start, end)`` of each image's placeholder
            tokens, sorted and non-overlapping, in document coordinates.
        image_grid_thw: ``(num_images, 3)`` int64 ``(t, h, w)`` patch grid before the merge.
        spatial_merge_size: the vision tower's spatial merge ``m`` (2 for Qwen2-VL).
        padded_length: slot length (>= ``length``); padding continues the text count.
        time_intervals: per run, the temporal step of one temporal patch (default 1 each:
            images, and Qwen2-VL videos; Qwen2.5-VL videos: ``tokens_per_second *
            second_per_grid_t``).
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
    intervals = [1.0] * len(spans) if time_intervals is None else list(time_intervals)
    if len(intervals) != len(spans):
        raise ValueError(
            f"{len(spans)} spans but {len(intervals)} time_intervals; give one per run"
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
        # the model's own expression: (arange(t) * interval).long(), then + start
        tt = (torch.arange(t) * intervals[i]).long().view(t, 1, 1).expand(t, gh, gw)
        hh = torch.arange(gh).view(1, gh, 1).expand(t, gh, gw)
        ww = torch.arange(gw).view(1, 1, gw).expand(t, gh, gw)
        out[:, start:end] = torch.stack([tt, hh, ww]).reshape(3, -1) + pos
        pos += max(gh, gw)
        cursor = end
    if total > cursor:
        out[:, cursor:] = torch.arange(pos, pos + total - cursor)
    return out
