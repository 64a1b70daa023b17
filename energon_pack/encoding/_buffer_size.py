# SPDX-License-Identifier: Apache-2.0
"""Warn when a packing buffer cannot fill a pack, and say which settings would.

energon packs each buffer on its own, so a buffer whose samples total fewer tokens than a pack
only emits under-filled packs; with carry-over a pack may grow across buffers, but should fill
well before ``max_age``. The warning names both fixes (docs/howto/buffer-size.md); it is
checked on one full buffer per process.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Sequence

from energon_pack.algorithms import CarryOver

__all__ = ["SmallPackingBufferWarning", "warn_if_buffer_too_small"]


class SmallPackingBufferWarning(UserWarning):
    """The packing buffer holds fewer tokens than one pack: packs cannot be filled."""


def small_buffer_message(
    lengths: Sequence[int],
    pack_size: int,
    buffer_size: int,
    *,
    carry_over: CarryOver | None = None,
) -> str | None:
    """The warning text when ``lengths`` (one buffer of new samples) cannot fill a pack with
    these settings, else ``None``.

    ``small_buffer_message([100] * 16, 4096, 16)`` names ``packing_buffer_size >= 41`` and
    carry-over; with ``carry_over=CarryOver()`` (max_age 64: up to 16 buffers per pack) it is
    ``None``; with ``CarryOver(max_age=8)`` it names ``packing_buffer_size >= 21``.
    """
    if not lengths:
        return None
    mean = sum(lengths) / len(lengths)
    per_pack = pack_size / mean
    buffers_per_pack = per_pack / len(lengths)
    if carry_over is None:
        if per_pack <= len(lengths):
            return None
        return (
            f"packing_buffer_size={buffer_size} cannot fill one pack: samples average "
            f"{mean:.1f} tokens, so a {pack_size}-token pack needs about {per_pack:.1f} samples. "
            f"Use packing_buffer_size >= {math.ceil(per_pack)} (about "
            f"{4 * math.ceil(per_pack)} for near-full packs), or carry_over=CarryOver() (packs "
            f"grow across buffers: about {math.ceil(buffers_per_pack)} buffers per pack)."
        )
    quarter = max(1, carry_over.max_age // 4)
    if buffers_per_pack <= quarter:
        return None
    return (
        f"packing_buffer_size={buffer_size} fills a pack only across about "
        f"{buffers_per_pack:.0f} buffers (samples average {mean:.1f} tokens, a {pack_size}-token "
        f"pack needs about {per_pack:.1f}), more than max_age // 4 = {quarter}: partial packs "
        f"will leave under-filled at max_age={carry_over.max_age}. Use packing_buffer_size >= "
        f"{math.ceil(per_pack / quarter)}, or raise max_age (at most 99)."
    )


def warn_if_buffer_too_small(
    lengths: Sequence[int],
    pack_size: int,
    buffer_size: int,
    *,
    carry_over: CarryOver | None = None,
) -> bool:
    """Issue :class:`SmallPackingBufferWarning` when :func:`small_buffer_message` has one.

    Returns whether it warned, so that the caller (which keeps its own once-per-process flag)
    checks no further buffers. The warning points at the user's code that drives the loader
    (``for batch in loader:``), not at a line of energon, torch or energon-pack.
    """
    message = small_buffer_message(lengths, pack_size, buffer_size, carry_over=carry_over)
    if message is None:
        return False
    warnings.warn(message, SmallPackingBufferWarning, stacklevel=_user_stacklevel())
    return True


def _internal_prefixes() -> tuple[str, ...]:
    """Directories whose frames a warning skips: energon-pack, energon, torch, tqdm, the stdlib."""
    import contextlib

    import megatron.energon
    import torch
    import tqdm

    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the energon_pack folder
    modules = (megatron.energon, torch, tqdm, contextlib)
    return (ours + os.sep, *(os.path.dirname(m.__file__) + os.sep for m in modules if m.__file__))


def _user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` in the caller that names the first frame outside
    :func:`_internal_prefixes` (the outermost frame when all are internal, e.g. in a worker).

    Frames: 1 is the caller of ``warnings.warn``; each step outwards adds one.
    """
    internal = _internal_prefixes()
    frame = sys._getframe(1)  # the function that calls warnings.warn
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
        level += 1
    return level
