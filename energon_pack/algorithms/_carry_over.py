# SPDX-License-Identifier: Apache-2.0
"""Carry-over planning: which packed groups to emit now, which samples to pack again later.

:func:`plan_carry_over` emits the groups at least ``min_fill`` full and carries the
least-filled others within a token budget; a sample carried ``max_age`` times is emitted
whatever its fill. Pure, so ``simulate`` and the loader run the same code. See
docs/concepts/packing.md (with a worked trace).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._media import MediaLoad, pack_fits
from energon_pack.algorithms._spec import CarryOver, PackingSpec

__all__ = ["CarryOver", "CarryOverPlan", "plan_carry_over"]


@dataclass(frozen=True, kw_only=True)
class CarryOverPlan:
    """The decision for one select call.

    Attributes:
        emit: Groups to emit now (indices into the pool), in the algorithm's order.
        carry: Pool indices that are carried to the next call, in pool order.
        carry_ages: Age of each carried sample after this call (its old age + 1).
    """

    emit: list[list[int]]
    carry: list[int]
    carry_ages: np.ndarray


def plan_carry_over(
    lengths: Sequence[int] | np.ndarray,
    ages: Sequence[int] | np.ndarray,
    pack_size: int,
    groups: list[list[int]],
    config: CarryOver,
    *,
    final: bool = False,
    spec: PackingSpec | None = None,
    media: MediaLoad | None = None,
) -> CarryOverPlan:
    """Decide which ``groups`` are emitted and which samples are carried (module docstring).

    ``lengths`` and ``ages`` (times carried so far) are per pool sample: the carried ones, then
    the buffer's new ones; ``groups`` the algorithm's bins over the pool; ``final`` (end of
    data) emits everything. ``spec`` and ``media``: the per-pack limits besides ``pack_size``
    that a swap of ageing samples keeps. ``plan_carry_over([9, 1, 5], [0, 0, 0], 10, [[0, 1],
    [2]], CarryOver(min_fill=0.9))`` emits ``[[0, 1]]`` and carries sample 2 with age 1.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    age_arr = np.asarray(ages, dtype=np.int64)
    if lens.shape != age_arr.shape:
        raise ValueError(f"lengths {lens.shape} and ages {age_arr.shape} must have one entry each.")
    empty = np.zeros(0, dtype=np.int64)
    if final or config.max_age == 0 or not groups:
        return CarryOverPlan(emit=list(groups), carry=[], carry_ages=empty)
    tokens = [int(lens[g].sum()) for g in groups]
    budget = config.budget_tokens(pack_size)
    carried = _groups_to_carry(tokens, config.min_fill * pack_size, budget)
    fits = None if spec is None else (lambda members: pack_fits(members, media, spec))
    groups = _place_expiring(lens, age_arr, groups, carried, pack_size, config, fits)
    carried = {gi for gi in carried if max(age_arr[groups[gi]], default=0) < config.max_age}
    emit = [g for i, g in enumerate(groups) if i not in carried and g]
    carry = sorted(j for i in carried for j in groups[i])
    carry_ages = age_arr[carry] + 1 if carry else empty
    return CarryOverPlan(emit=emit, carry=carry, carry_ages=carry_ages)


def _groups_to_carry(tokens: list[int], min_tokens: float, budget: int) -> set[int]:
    """The least-filled groups below ``min_tokens`` that fit the budget together.

    ``_groups_to_carry([9, 4, 3, 7], 9, 8) == {1, 2}``: 3 + 4 fit 8 tokens, 7 more would not.
    """
    carried: set[int] = set()
    used = 0
    for gi in sorted(range(len(tokens)), key=lambda i: (tokens[i], i)):
        if tokens[gi] >= min_tokens:
            break
        if used + tokens[gi] <= budget:
            carried.add(gi)
            used += tokens[gi]
    return carried


def _place_expiring(
    lens: np.ndarray,
    ages: np.ndarray,
    groups: list[list[int]],
    carried: set[int],
    pack_size: int,
    config: CarryOver,
    fits: Callable[[list[int]], bool] | None = None,
) -> list[list[int]]:
    """``groups`` with each ageing carried sample (age ``>= max_age // 4``) exchanged for
    younger samples of about its length in an emitted group, where that keeps the emitted group
    at least ``min(its fill, min_fill)`` full, within ``pack_size`` and within ``fits``. Without
    this, a packer that fills emitted groups exactly leaves the same carried sample out until
    ``max_age`` forces its whole partial pack out."""
    old = max(1, config.max_age // 4)
    expiring = [(gi, j) for gi in sorted(carried) for j in groups[gi] if ages[j] >= old]
    if not expiring:
        return groups
    out = [list(g) for g in groups]
    tokens = [int(lens[g].sum()) for g in out]
    floor_fill = int(np.ceil(config.min_fill * pack_size))
    emitted = [gi for gi in range(len(out)) if gi not in carried]
    for gi, j in expiring:
        a = int(lens[j])
        for ei in emitted:
            t = tokens[ei]
            hi, lo = t + a - min(t, floor_fill), max(0, t + a - pack_size)
            taken, total = [], 0
            for k in sorted(out[ei], key=lambda k: (-int(lens[k]), k)):
                if total >= lo:
                    break
                if ages[k] < ages[j] and total + int(lens[k]) <= hi:
                    taken.append(k)
                    total += int(lens[k])
            if lo <= total <= hi:
                new_e = [k for k in out[ei] if k not in taken] + [j]
                new_g = [k for k in out[gi] if k != j] + taken
                # the carried group is emitted, hence must fit, if it still holds an expired one
                emitted_g = max((int(ages[k]) for k in new_g), default=0) >= config.max_age
                if fits is not None and not (fits(new_e) and (not emitted_g or fits(new_g))):
                    continue
                out[ei], out[gi] = new_e, new_g
                tokens[ei] += a - total
                tokens[gi] += total - a
                break
    return out
