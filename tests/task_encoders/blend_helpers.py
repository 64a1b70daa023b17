# SPDX-License-Identifier: Apache-2.0
"""The blend loaders of ``test_size_blend.py`` and ``test_packing_groups.py``: a
``LengthTextEncoder`` at :data:`PACK` tokens (over-long documents split) with a blend size and
packing groups, loaded repeating with seed offset 1 (the blends themselves are the
``short_long_blend`` / ``grouped_blend`` fixtures of ``conftest.py``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from energon_pack.training import make_loader
from energon_pack_tools import LengthTextEncoder

PACK = 2048


def blend_encoder(
    size: Any = "tokens", groups: Any = None, encoder: Any = None, **config: Any
) -> Any:
    """``encoder`` (default: a ``LengthTextEncoder`` of :data:`PACK` tokens, ``overlong="split"``
    and ``config``) with ``blend_size = size`` and ``packing_groups = groups``."""
    encoder = encoder or LengthTextEncoder(pack_size=PACK, overlong="split", **config)
    encoder.blend_size = size
    encoder.packing_groups = groups
    return encoder


def blend_loader(meta: Path, encoder: Any = None, buffer: int | None = 32) -> Any:
    """The savable loader of ``meta`` with ``encoder`` (default: :func:`blend_encoder`'s) and
    packing buffer ``buffer``, repeating, seed offset 1."""
    encoder = encoder or blend_encoder()
    return make_loader(meta, encoder, packing_buffer_size=buffer, repeat=True, seed_offset=1)


def take(loader: Any, n: int) -> list[Any]:
    """The first ``n`` items of a fresh iteration of ``loader``."""
    return list(itertools.islice(iter(loader), n))


def take_tokens(loader: Any, tokens: int) -> list[Any]:
    """Packs until they hold ``tokens`` real tokens."""
    packs, total = [], 0
    for pack in loader:
        packs.append(pack)
        total += sum(pack.doc_lengths)
        if total >= tokens:
            return packs
    raise AssertionError("the loader ended")
