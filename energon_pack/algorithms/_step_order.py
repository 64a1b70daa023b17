# SPDX-License-Identifier: Apache-2.0
"""Order a buffer's packs so that every ``step_packs`` consecutive packs cost about the same.

The packs are sorted by cost, cut into ``step_packs`` strata and dealt out one per stratum in
a serpentine. Costs ``[9, 8, 7, 6, 3, 2, 1, 0]``, ``k = 2``: ``6 3 7 2 8 1 9 0``. See
docs/benchmarks/balance.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["check_step_packs", "step_order"]


def check_step_packs(step_packs: object) -> None:
    """Raise ``ValueError`` unless ``step_packs`` is an int >= 1 (bools are not)."""
    if (
        not isinstance(step_packs, (int, np.integer))
        or isinstance(step_packs, bool)
        or step_packs < 1
    ):
        raise ValueError(
            f"step_packs={step_packs!r} must be an int >= 1: the packs one rank trains on per "
            "optimizer step (micro-batch size x gradient accumulation steps)."
        )


def step_order(costs: Sequence[float] | np.ndarray, step_packs: int) -> list[int]:
    """Positions of the packs in an order where any ``step_packs`` in a row cost about the same.

    ``step_order([9, 8, 7, 6, 3, 2, 1, 0], 2) == [3, 4, 2, 5, 1, 6, 0, 7]`` (costs
    ``6 3 7 2 8 1 9 0``: any two in a row sum to 9 or 10).

    Raises:
        ValueError: ``step_packs`` is not an int >= 1.
    """
    check_step_packs(step_packs)
    arr = np.asarray(costs, dtype=np.float64)
    n = int(arr.size)
    k = step_packs
    if k == 1 or n <= k:
        return list(range(n))
    ranked = np.lexsort((np.arange(n), -arr)).tolist()  # costliest first, ties by position
    m = -(-n // k)
    ranked += [-1] * (m * k - n)  # placeholders at the cheap end, dropped below
    strata = [ranked[j * m : (j + 1) * m] for j in range(k)]
    for j in range(k):
        if (k - 1 - j) % 2:  # the last stratum (placeholders) keeps its costly-first order
            strata[j].reverse()
    return [p for i in range(m) for j in range(k) if (p := strata[j][i]) >= 0]
