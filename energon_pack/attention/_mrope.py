# SPDX-License-Identifier: Apache-2.0
"""mRoPE 3-row (temporal, height, width) position ids of one document, Qwen2-VL style.

Matches ``Qwen2VLModel.get_rope_index`` on one unpadded document (tested); Qwen3-VL's
timestamped videos split into per-frame runs (:func:`frame_runs`). HunYuan-VL's 4-row rule:
:func:`xdrope_position_ids`. See
``docs/concepts/metadata.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from energon_pack.attention._compat import text_config

__all__ = [
    "MROPE_LAYOUTS",
    "frame_runs",
    "model_mrope_rows",
    "mrope_position_ids",
    "xdrope_position_ids",
]

#: The mRoPE position rules packs build: Qwen2-VL's (:func:`mrope_position_ids`, also GLM-4V
#: and Ernie-4.5-VL) and HunYuan-VL's (:func:`xdrope_position_ids`).
MROPE_LAYOUTS = ("qwen", "xdrope")


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


def xdrope_position_ids(
    length: int,
    image_spans: torch.Tensor,
    image_grid_thw: torch.Tensor,
    *,
    spatial_merge_size: int = 2,
    padded_length: int | None = None,
) -> torch.Tensor:
    """Return the ``(4, padded_length)`` int64 HunYuan-VL positions of one document: rows
    ``(position, width, height, image index)``, as ``HunYuanVLModel.get_rope_index`` gives them
    to a 4-axis model for the document alone (tested).

    Every row counts ``0..padded_length-1``, except on each image's grid tokens, where the
    last three hold the column (``0..w/m``: a newline token ends each row), the row
    (``0..h/m-1``) and the image's index in the document. An image span of ``h/m * (w/m + 1) +
    2`` tokens keeps its first and last token on the count. A 3-axis model reads rows 1..3
    (:func:`model_mrope_rows`; row 0 is then its text position, which its forward needs not
    with a document mask, and refuses: it takes no ``num_mrope_axes + 1`` rows).
    Example: 10 tokens, one span ``[2, 8)`` with grid ``(1, 4, 2)``, merge 2 -> grid tokens
    ``3..6``: width ``0 1 0 1``, height ``0 0 1 1``, index ``0 0 0 0``; elsewhere ``0..9``.
    """
    total = length if padded_length is None else padded_length
    if total < length:
        raise ValueError(f"padded_length {total} is shorter than the document ({length})")
    spans, grids = image_spans.view(-1, 2).tolist(), image_grid_thw.view(-1, 3).tolist()
    if len(spans) != len(grids):
        raise ValueError(
            f"{len(spans)} image spans but {len(grids)} image_grid_thw rows; give one per image"
        )
    out = torch.arange(total, dtype=torch.int64).view(1, -1).repeat(4, 1)
    m = spatial_merge_size
    for index, ((start, end), (_, h, w)) in enumerate(zip(spans, grids)):
        gh, gw = h // m, w // m + 1  # a newline token after each row
        n = gh * gw
        if end > length or end - start not in (n, n + 2):
            raise ValueError(
                f"image {index}: span [{start}, {end}) has {end - start} tokens but grid "
                f"(h={h}, w={w}) with merge {m} needs {n} or {n + 2} (document length {length})"
            )
        first = start + 1 if end - start == n + 2 else start
        hh, ww = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
        out[1, first : first + n] = ww.flatten()
        out[2, first : first + n] = hh.flatten()
        out[3, first : first + n] = index
    return out


def model_mrope_rows(positions: torch.Tensor, config: Any) -> torch.Tensor:
    """The rows of a batch's mRoPE ``positions`` (``(rows, B, L)``) the model of ``config``
    (a model or its config) reads: 3-row positions as they are; HunYuan-VL's 4 rows
    (:func:`xdrope_position_ids`) whole for a 4-axis model, the last 3 for a 3-axis one (its
    text config's ``rope_parameters["mrope_section"]`` has 3 entries).

    Raises:
        ValueError: 4 rows without ``config`` (the model's axes decide), or for a model whose
            ``mrope_section`` has neither 3 nor 4 entries.
    """
    if positions.shape[0] != 4:
        return positions
    if config is None:
        raise ValueError(
            "these packs have HunYuan-VL's 4-row positions, which a 3-axis model reads without "
            "the first row: pass config=model to hf_kwargs"
        )
    text = text_config(config)
    section = (getattr(text, "rope_parameters", None) or {}).get("mrope_section") or ()
    if len(section) in (3, 4):
        return positions[4 - len(section) :]
    raise ValueError(
        f"{type(text).__name__} has mrope_section {list(section)}, but these packs have "
        "HunYuan-VL's positions (1-D position, width, height, image index), which fit a model "
        "of 3 or 4 mRoPE axes"
    )
