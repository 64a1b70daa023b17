# SPDX-License-Identifier: Apache-2.0
"""Context parallelism on THD rows: the positions each CP rank holds (load-balanced split).

Transformer Engine's ``thd_get_partitioned_indices`` in plain torch; see
``docs/howto/trainers.md``.
"""

from __future__ import annotations

import torch

__all__ = ["cp_partition_indices"]


def cp_partition_indices(
    cu_seqlens_padded: torch.Tensor, cp_size: int, cp_rank: int
) -> torch.Tensor:
    """``(T / cp_size,)`` int64 positions of the flattened ``(T,)`` batch that ``cp_rank`` holds.

    ``cu_seqlens_padded``: ``(D + 1,)`` slot offsets (``batch.cu_seqlens_padded``), every slot a
    multiple of ``2 * cp_size``; index ``tokens.view(-1)`` (and labels, positions, masks) with
    the result. Computed on the tensor's device; on a GPU the check syncs, so split on the host.
    """
    if cp_size < 1 or not 0 <= cp_rank < cp_size:
        raise ValueError(f"need cp_size >= 1 and 0 <= cp_rank < cp_size, got {cp_size}, {cp_rank}")
    cu = cu_seqlens_padded.to(torch.int64)
    slots = cu.diff()
    bad = torch.nonzero(slots % (2 * cp_size)).flatten().tolist()
    if bad:
        raise ValueError(
            f"document slot {bad[0]} has {int(slots[bad[0]])} tokens, not a multiple of "
            f"2 * cp_size = {2 * cp_size}; build the encoder with alignment=2 * cp_size "
            "(math.lcm(2 * cp_size, tp_size) with sequence parallelism)"
        )
    chunk = slots // (2 * cp_size)
    first = cu[:-1] + cp_rank * chunk
    second = cu[:-1] + (2 * cp_size - 1 - cp_rank) * chunk
    starts = torch.stack([first, second], dim=1).flatten()
    lengths = chunk.repeat_interleave(2)
    ends = lengths.cumsum(0)
    offsets = torch.arange(int(ends[-1]) if len(ends) else 0, device=cu.device)
    offsets -= torch.repeat_interleave(ends - lengths, lengths)
    return torch.repeat_interleave(starts, lengths) + offsets
