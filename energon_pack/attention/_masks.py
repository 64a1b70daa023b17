# SPDX-License-Identifier: Apache-2.0
"""Dense block-causal masks: the slow, obviously correct reference for every fast path.

Query ``q`` may attend key ``k`` iff both lie in the same slot (document plus its padding, see
``_documents``) and ``k <= q``. For ``doc_lengths=[3, 2, 1]`` (``True`` = may attend)::

    [[1, 0, 0, 0, 0, 0],
     [1, 1, 0, 0, 0, 0],
     [1, 1, 1, 0, 0, 0],
     [0, 0, 0, 1, 0, 0],
     [0, 0, 0, 1, 1, 0],
     [0, 0, 0, 0, 0, 1]]

The dense mask costs ``B * L * L`` bytes (64 MiB for one 8k row): it is only built on request.
SDPA takes the boolean mask; eager attention adds a float mask (0 where allowed, the dtype's
minimum elsewhere), see :func:`additive_mask`. Every row has at least its diagonal, so no
softmax row is empty and padding rows never produce NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["additive_mask", "dense_block_causal_mask"]


def dense_block_causal_mask(slot_lengths: Sequence[Sequence[int]], length: int) -> torch.Tensor:
    """Return the ``(B, 1, L, L)`` bool block-causal mask of rows of slots.

    ``slot_lengths[r]`` must sum to ``length`` (use ``DocumentMetadata.slot_lengths``).
    Built with an explicit loop over slots, on purpose: this is the reference.
    """
    mask = torch.zeros(len(slot_lengths), 1, length, length, dtype=torch.bool)
    for r, slots in enumerate(slot_lengths):
        if sum(slots) != length:
            raise ValueError(
                f"row {r}: slot lengths {list(slots)} sum to {sum(slots)}, not the row length "
                f"{length}; fold the tail padding into the last slot"
            )
        start = 0
        for n in slots:
            mask[r, 0, start : start + n, start : start + n] = torch.ones(
                n, n, dtype=torch.bool
            ).tril()
            start += n
    return mask


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Turn a bool mask into the additive float mask eager attention expects.

    ``True -> 0.0``, ``False -> torch.finfo(dtype).min``; same shape, given dtype.
    """
    if mask.dtype != torch.bool:
        raise ValueError(f"expected a bool mask, got dtype {mask.dtype}")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)
