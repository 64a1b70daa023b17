# SPDX-License-Identifier: Apache-2.0
"""Carry-over planning: which packed groups to emit now, which samples to pack again later.

Energon packs each buffer on its own, so the last packs of every buffer are half empty. With
carry-over, the groups that an algorithm returns for one buffer are split in two:

* groups at least ``min_fill`` full are emitted;
* the least-filled groups below ``min_fill`` go back to the reading buffer (their samples'
  ages grow by one) and are packed again with the next buffer's samples,

bounded so that nothing starves or floods: at most ``max_carry_fraction`` of the buffer is
carried, a group holding a sample of age ``max_age`` is always emitted, at least one group is
emitted per call, and the last call (``final=True``, end of data) emits everything.

Worked example, capacity 10, ``min_fill=0.9``, lengths ``[9, 6, 3, 1]`` packed as
``[[0, 3], [1, 2]]`` (fills 1.0 and 0.9) -> both emitted. With lengths ``[9, 1, 5]`` packed as
``[[0, 1], [2]]``: group ``[2]`` has fill 0.5 < 0.9, so sample 2 is carried with age 1 and
``[[0, 1]]`` is emitted.

The function is pure (lists and NumPy in, lists and NumPy out): energon's wrapper and
``energon-pack simulate`` call the same code, so the simulator's figures are the loader's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CarryOver", "CarryOverPlan", "plan_carry_over"]


@dataclass(frozen=True, kw_only=True)
class CarryOver:
    """Carry-over policy (``PackingSpec(carry_over=CarryOver())``; ``None`` there: off)."""

    #: Groups filled below this fraction of the pack size may be carried.
    min_fill: float = 0.99
    #: At most this share of the buffer's samples is carried per select call.
    max_carry_fraction: float = 0.5
    #: A sample carried this many times is emitted whatever its group's fill (0: never carry).
    max_age: int = 8

    def __post_init__(self) -> None:
        if not 0.0 < self.min_fill <= 1.0:
            raise ValueError(f"min_fill={self.min_fill} must be in (0, 1], e.g. 0.99.")
        if not 0.0 <= self.max_carry_fraction < 1.0:
            raise ValueError(
                f"max_carry_fraction={self.max_carry_fraction} must be in [0, 1) so that "
                "every buffer emits something; e.g. 0.5."
            )
        if self.max_age < 0:
            raise ValueError(f"max_age={self.max_age} must be >= 0 (0 disables carrying).")


@dataclass(frozen=True, kw_only=True)
class CarryOverPlan:
    """The decision for one buffer.

    Attributes:
        emit: Groups to emit now (indices into the buffer), in the algorithm's order.
        carry: Buffer indices that go back to the reading buffer.
        carry_ages: Age of each carried sample after this call (its old age + 1).
    """

    emit: list[list[int]]
    carry: list[int]
    carry_ages: np.ndarray


def plan_carry_over(
    lengths: Sequence[int] | np.ndarray,
    ages: Sequence[int] | np.ndarray,
    capacity: int,
    groups: list[list[int]],
    config: CarryOver,
    *,
    final: bool = False,
) -> CarryOverPlan:
    """Decide which ``groups`` are emitted and which samples are carried (see module doc).

    Args:
        lengths: Length of each buffer sample (as packed, i.e. after alignment).
        ages: How many times each buffer sample has been carried already.
        capacity: Pack size.
        groups: The algorithm's bins over the buffer (every index exactly once).
        config: The policy.
        final: End of data: emit everything.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    age_arr = np.asarray(ages, dtype=np.int64)
    if lens.shape != age_arr.shape:
        raise ValueError(f"lengths {lens.shape} and ages {age_arr.shape} must have one entry each.")
    empty = np.zeros(0, dtype=np.int64)
    if final or config.max_age == 0 or not groups:
        return CarryOverPlan(emit=list(groups), carry=[], carry_ages=empty)
    fills = [int(lens[g].sum()) / capacity for g in groups]
    budget = int(config.max_carry_fraction * lens.size)
    carried: set[int] = set()
    n_carried = 0
    for gi in sorted(range(len(groups)), key=lambda i: (fills[i], i)):
        if fills[gi] >= config.min_fill:
            break
        group = groups[gi]
        if n_carried + len(group) > budget:
            continue
        if int(age_arr[group].max()) >= config.max_age:
            continue
        carried.add(gi)
        n_carried += len(group)
    if len(carried) == len(groups):  # always emit something: the fullest carried group
        carried.discard(max(carried, key=lambda i: (fills[i], -i)))
    emit = [g for i, g in enumerate(groups) if i not in carried]
    carry = [j for i in sorted(carried) for j in groups[i]]
    carry_ages = age_arr[carry] + 1 if carry else empty
    return CarryOverPlan(emit=emit, carry=carry, carry_ages=carry_ages)
