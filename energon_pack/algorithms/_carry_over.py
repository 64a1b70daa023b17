# SPDX-License-Identifier: Apache-2.0
"""Carry-over planning: which packed groups to emit now, which samples to pack again later.

Energon packs each reading buffer on its own, so the last packs of every buffer are half empty,
and a buffer whose samples total less than one pack can never fill one. With carry-over, the
samples under-filled groups are held aside (*carried*) and packed again together with the next
buffer's samples: every ``select`` call packs ``carried + new`` samples, then this planner splits
the algorithm's groups in two:

* groups at least ``min_fill`` full are emitted;
* the least-filled groups below ``min_fill`` are carried, as long as the carried samples total
  at most ``max_carry_packs * pack_size`` tokens (the **token budget**: carried material never
  counts against energon's ``packing_buffer_size``, which keeps counting new samples only);
* a group holding a sample already carried ``max_age`` times is emitted whatever its fill;
* the last call (``final=True``, end of data) emits everything.

Nothing forces an emission per call: with short documents a partial pack grows over several
buffers (a buffer of 16 samples of ~40 tokens adds ~640 tokens to a 4096-token pack per call)
until it reaches ``min_fill``. The bounds that hold whatever the data:

* **memory**: at most ``max_carry_packs * pack_size`` carried tokens besides energon's buffers;
* **wait**: a sample is emitted by the ``max_age``-th call after the one that read it, so at
  most ``max_age + 1`` buffers of samples are read between its own read and its group's
  selection (``simulate`` reports the wait it saw, ``max_wait_samples``);
* **calls without emission**: at most ``max_age`` in a row (the oldest carried sample ages by
  one per call), which stays below energon's retry limit for empty selections;
* **nothing lost**: ``final=True`` emits every sample.

Worked trace (``energon-pack simulate`` runs it; tests/algorithms check it): pack size 10,
buffer 2, first-fit-decreasing, ``CarryOver(min_fill=0.9, max_carry_packs=1, max_age=2)``,
samples ``a..h`` of lengths ``4 3 2 5 6 3 1 2``; carried samples (their ages) before ``|``::

    call 1: pool [| a=4 b=3]         groups [a b] 7/10     carry a(1) b(1): 7 <= 10 tokens
    call 2: pool [a b | c=2 d=5]     groups [d a] 9/10     emit [d a]; carry b(2) c(1)
                                            [b c] 5/10
    call 3: pool [b c | e=6 f=3]     groups [e b] 9/10     emit [e b]; carry c(2) f(1)
                                            [f c] 5/10
    call 4: pool [c f | g=1 h=2]     groups [f c h g] 8/10 c has age 2 = max_age: emit

3 packs; stock energon packs each buffer of 2 on its own: ``[a b] [c d] [e f] [g h]``, 4 packs.
Ageing samples (age >= ``max_age // 4``) may also change places with younger samples of about
their length in an emitted group (:func:`_place_expiring`), so that a packer that always leaves
the same short samples out does not force their partial pack out at ``max_age``.

The function is pure (lists and NumPy in, lists and NumPy out): energon's wrapper and
``energon-pack simulate`` call the same code, so the simulator's figures are the loader's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from energon_pack.algorithms._media import MediaLoad, pack_fits

if TYPE_CHECKING:
    from energon_pack.algorithms._spec import PackingSpec

__all__ = ["MAX_AGE_LIMIT", "CarryOver", "CarryOverPlan", "plan_carry_over"]

#: Largest ``max_age``: energon's ``PackingDataset`` raises after 100 selections in a row that
#: return no group (its default failure tolerance), and carry-over may return none up to
#: ``max_age`` times in a row.
MAX_AGE_LIMIT = 99


@dataclass(frozen=True, kw_only=True)
class CarryOver:
    """Carry-over policy (``PackingSpec(carry_over=CarryOver())``; ``None`` there: off).

    The defaults are the recommended settings for every corpus we measured (short chat turns
    to long documents, buffers 16 to 2048; docs/benchmarks/peers.md): a partial pack may wait
    up to ``max_age`` buffers, so with a buffer that holds less than ``1 / max_age`` of a pack
    raise the buffer or ``max_age`` (``energon-pack analyze`` and the small-buffer warning say
    which).
    """

    #: Groups filled below this fraction of the pack size may be carried.
    min_fill: float = 0.998
    #: Carried samples total at most this many packs' worth of tokens (the token budget).
    max_carry_packs: float = 8.0
    #: A sample carried this many times is emitted whatever its group's fill (0: never carry);
    #: it is selected at most max_age + 1 times, so it waits at most max_age + 1 buffers.
    max_age: int = 64

    def __post_init__(self) -> None:
        if not 0.0 < self.min_fill <= 1.0:
            raise ValueError(f"min_fill={self.min_fill} must be in (0, 1], e.g. 0.99.")
        if not self.max_carry_packs >= 0.0:
            raise ValueError(
                f"max_carry_packs={self.max_carry_packs} must be >= 0: the carried tokens in "
                "packs' worth, e.g. 4 (0 disables carrying)."
            )
        if not 0 <= self.max_age <= MAX_AGE_LIMIT:
            raise ValueError(
                f"max_age={self.max_age} must be in [0, {MAX_AGE_LIMIT}] (0 disables carrying): "
                "a buffer may emit nothing up to max_age times in a row, and energon gives up "
                f"after {MAX_AGE_LIMIT + 1} empty selections."
            )

    def budget_tokens(self, pack_size: int) -> int:
        """The token budget for carried samples: ``CarryOver(max_carry_packs=2)`` -> 8192 at
        pack size 4096."""
        return int(self.max_carry_packs * pack_size)


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
    capacity: int,
    groups: list[list[int]],
    config: CarryOver,
    *,
    final: bool = False,
    spec: PackingSpec | None = None,
    media: MediaLoad | None = None,
) -> CarryOverPlan:
    """Decide which ``groups`` are emitted and which samples are carried (see module doc).

    Args:
        lengths: Length of each pool sample (as packed, i.e. after alignment); the pool is
            the carried samples followed by the buffer's new ones.
        ages: How many times each pool sample has been carried already (0: new).
        capacity: Pack size.
        groups: The algorithm's bins over the pool (every index exactly once).
        config: The policy.
        final: End of data: emit everything.
        spec: The per-pack limits besides ``capacity`` that a swap of ageing samples must
            keep (``max_samples_per_pack`` and, with ``media``, the media budgets); ``None``:
            tokens only.
        media: Media load of each pool sample (for the spec's media budgets).

    ``plan_carry_over([9, 1, 5], [0, 0, 0], 10, [[0, 1], [2]], CarryOver(min_fill=0.9))``
    emits ``[[0, 1]]`` and carries sample 2 (fill 0.5) with age 1.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    age_arr = np.asarray(ages, dtype=np.int64)
    if lens.shape != age_arr.shape:
        raise ValueError(f"lengths {lens.shape} and ages {age_arr.shape} must have one entry each.")
    empty = np.zeros(0, dtype=np.int64)
    if final or config.max_age == 0 or not groups:
        return CarryOverPlan(emit=list(groups), carry=[], carry_ages=empty)
    tokens = [int(lens[g].sum()) for g in groups]
    budget = config.budget_tokens(capacity)
    carried = _groups_to_carry(tokens, config.min_fill * capacity, budget)
    fits = None if spec is None else (lambda members: pack_fits(members, media, spec))
    groups = _place_expiring(lens, age_arr, groups, carried, capacity, config, fits)
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
    capacity: int,
    config: CarryOver,
    fits: Callable[[list[int]], bool] | None = None,
) -> list[list[int]]:
    """``groups`` with each ageing carried sample (age at least ``max_age // 4``) moved into an
    emitted group, in exchange for younger samples of about its length, where that keeps the
    emitted group at least as full as ``min(its fill, min_fill)`` (and within ``capacity``),
    and within ``fits`` (the spec's sample cap and media budgets), if given, like the carried
    group when it is emitted after all (it still holds a sample of ``max_age``).

    Without this, a packer that fills emitted groups exactly leaves some carried sample out
    call after call until it reaches ``max_age`` and forces its whole partial pack out. Capacity
    10, ``min_fill=0.9``, ``max_age=2``, groups ``[[0, 1, 2], [3]]`` of lengths ``[4, 3, 3]``
    and ``[3]``, group 1 carried, sample 3 of age 2: it may take the place of young samples
    totalling 3 or 4 tokens (group 0 then holds 9 or 10); the longest first is sample 0 (4)
    -> ``[[1, 2, 3], [0]]``: sample 3 is emitted, sample 0 carried instead.
    """
    old = max(1, config.max_age // 4)
    expiring = [(gi, j) for gi in sorted(carried) for j in groups[gi] if ages[j] >= old]
    if not expiring:
        return groups
    out = [list(g) for g in groups]
    tokens = [int(lens[g].sum()) for g in out]
    floor_fill = int(np.ceil(config.min_fill * capacity))
    emitted = [gi for gi in range(len(out)) if gi not in carried]
    for gi, j in expiring:
        a = int(lens[j])
        for ei in emitted:
            t = tokens[ei]
            hi, lo = t + a - min(t, floor_fill), max(0, t + a - capacity)
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
