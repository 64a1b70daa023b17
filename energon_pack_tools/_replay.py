# SPDX-License-Identifier: Apache-2.0
"""``analyze``'s replay: the loader's documents (lengths in reading order, media loads where the
spec uses them) through ``simulate`` with the same spec, then a buffer sweep for the smallest
buffer reaching the target fill.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from energon_pack.algorithms import CarryOver, MediaLoad, PackingSpec, as_spec, simulate

__all__ = [
    "BUFFER_CANDIDATES",
    "PACK_SIZE_FACTORS",
    "PackSizeChoice",
    "pack_size_choices",
    "recommend_buffer_size",
    "replay_and_sweep",
]

#: Buffer sizes tried by :func:`recommend_buffer_size`.
BUFFER_CANDIDATES: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

#: Pack sizes :func:`pack_size_choices` tries, as multiples of the chosen one.
PACK_SIZE_FACTORS: tuple[float, ...] = (0.5, 1.0, 2.0)


class PackSizeChoice(NamedTuple):
    """The simulated figures of one pack size (same lengths, buffer and policies)."""

    fill: float  #: real tokens / pack slots
    packs: int
    tokens: int  #: real tokens in packs (the over-long policy at this size applied)


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


def pack_size_choices(
    lengths: Sequence[int],
    loads: Sequence[tuple[int, int]],
    spec: PackingSpec,
    *,
    buffer_size: int,
    factors: Sequence[float] = PACK_SIZE_FACTORS,
) -> dict[int, PackSizeChoice]:
    """``simulate`` the same documents at other pack sizes (``factors`` x ``spec.pack_size``,
    rounded down to the alignment), same buffer and policies: what a smaller or larger pack
    would fill. A size the spec refuses (below the alignment, or ``overlong="error"`` with a
    document longer than it) is left out.

    ``[300, 300, 200, 200]`` at 512, ``overlong="split"``, buffer 4: 256 cuts each 300 into
    256 + 44, so the first buffer holds those four pieces (3 packs) and the 200s come alone
    (5 packs, 1000 / 1280 = 78.1%); 512 pairs 300 + 200 twice (2 packs, 97.7%); 1024 holds all
    four (1 pack, 97.7%). With ``overlong="error"`` 256 is left out.
    """
    choices: dict[int, PackSizeChoice] = {}
    for factor in factors:
        size = int(spec.pack_size * factor) // spec.alignment * spec.alignment
        if size < 1 or size in choices:
            continue
        try:
            at = dataclasses.replace(spec, pack_size=size)
            media, at, _ = _replay_media(lengths, loads, at)
            sim = simulate(lengths, at, buffer_size, media=media)
        except ValueError:  # e.g. overlong="error" and a document longer than this size
            continue
        choices[size] = PackSizeChoice(sim.fill, sim.packs, sim.tokens)
    return choices


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
        "pack_size_choices": {},
    }
    if not lengths:
        return figures
    figures["pack_size_choices"] = pack_size_choices(lengths, loads, spec, buffer_size=buffer_size)
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
