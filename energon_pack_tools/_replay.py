# SPDX-License-Identifier: Apache-2.0
"""``analyze``'s replay: the loader's documents (lengths in reading order, media loads where the
spec uses them) through ``simulate`` with the same spec, then a buffer sweep for the smallest
buffer reaching the target fill.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from energon_pack.algorithms import CarryOver, MediaLoad, PackingSpec, as_spec, simulate

__all__ = ["BUFFER_CANDIDATES", "recommend_buffer_size", "replay_and_sweep"]

#: Buffer sizes tried by :func:`recommend_buffer_size`.
BUFFER_CANDIDATES: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def recommend_buffer_size(
    lengths: Sequence[int],
    spec: PackingSpec | int,
    *,
    target_fill: float = 0.99,
    candidates: Sequence[int] = BUFFER_CANDIDATES,
    media: MediaLoad | None = None,
    **spec_fields: Any,
) -> tuple[int | None, dict[int, float]]:
    """Smallest candidate buffer whose simulated fill reaches ``target_fill``, and the sweep.

    ``spec`` and ``media`` as in :func:`~energon_pack.algorithms.simulate`: a spec, or the
    pack size with spec fields as keywords. Stops at the first hit and at the first candidate
    holding every length (larger ones behave the same).
    """
    spec = as_spec(spec, **spec_fields)
    sweep: dict[int, float] = {}
    for buffer in candidates:
        sweep[buffer] = simulate(lengths, spec, buffer, media=media).fill
        if sweep[buffer] >= target_fill - 1e-12:
            return buffer, sweep
        if buffer >= len(lengths):
            break
    return None, sweep


def _replay_media(
    lengths: Sequence[int], loads: Sequence[tuple[int, int]], spec: PackingSpec
) -> tuple[MediaLoad | None, PackingSpec, str | None]:
    """What the replay passes ``simulate``: the media loads when the spec uses them (media
    budgets, ``step_packs``), the spec, and a note when the replay cannot model the budgets.

    ``simulate`` takes media loads only for documents as encoded (none over the pack: where the
    encoder cuts a document with media depends on its spans); with a longer document the
    replay drops the budgets and says so (the loader's own figures always honour them).
    """
    if not spec.uses_media:
        return None, spec, None
    if max(lengths, default=0) <= spec.pack_size:
        return MediaLoad.of(loads), spec, None
    text_only = dataclasses.replace(spec, max_media_tokens_per_pack=None, max_media_per_pack=None)
    note = (
        "the simulated figures (simulate, buffer sweep) ignore the media budgets: some "
        "documents are longer than the pack, and where the encoder cuts them depends on their "
        "media; the loader's figures honour the budgets"
    )
    return None, text_only, note if spec.has_media_budgets else None


def replay_and_sweep(
    lengths: Sequence[int],
    loads: Sequence[tuple[int, int]],
    tokens: int,
    spec: PackingSpec,
    *,
    buffer_size: int,
    target_fill: float,
) -> dict[str, Any]:
    """``simulate`` the documents' ``lengths`` (and media ``loads``, where the spec uses them)
    with the same spec and buffer (its fill must agree with the loader's), sweep
    buffer sizes for the smallest one reaching ``target_fill`` (capped at the bound), and try
    carry-over when it was off."""
    size = spec.pack_size
    media, spec, note = _replay_media(lengths, loads, spec)
    bound = tokens / (math.ceil(tokens / size) * size) if tokens else 0.0
    target = min(target_fill, bound)
    figures: dict[str, Any] = {
        "simulated_fill": 0.0,
        "bound_fill": bound,
        "target_fill": target,
        "recommended_buffer_size": None,
        "buffer_sweep": {},
        "carry_over_fill": None,
        "carry_over_buffer_size": None,
        "replay_note": note,
    }
    if not lengths:
        return figures
    figures["simulated_fill"] = simulate(lengths, spec, buffer_size, media=media).fill
    figures["recommended_buffer_size"], figures["buffer_sweep"] = recommend_buffer_size(
        lengths, spec, target_fill=target, media=media
    )
    if spec.carry_over is not None:  # the sweep above already ran with carry-over
        figures["carry_over_buffer_size"] = figures["recommended_buffer_size"]
        return figures
    with_carry = simulate(lengths, spec, buffer_size, media=media, carry_over=CarryOver())
    figures["carry_over_fill"] = with_carry.fill
    # Carry-over reaches the target at smaller buffers (short documents especially).
    figures["carry_over_buffer_size"], _ = recommend_buffer_size(
        lengths, spec, target_fill=target, media=media, carry_over=CarryOver()
    )
    return figures
