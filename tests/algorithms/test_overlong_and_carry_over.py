# SPDX-License-Identifier: Apache-2.0
"""Over-long policy and carry-over planning."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import CarryOver, OverlongPolicy, plan_carry_over
from energon_pack.algorithms._overlong import apply_overlong


def test_overlong_policies() -> None:
    # pack 4: 9 -> split 4, 4, 1; truncate 4; drop removes it.
    assert apply_overlong([9, 3], 4, "split").tolist() == [4, 4, 1, 3]
    assert apply_overlong([8, 3], 4, OverlongPolicy.SPLIT).tolist() == [4, 4, 3]
    assert apply_overlong([9, 3], 4, "truncate").tolist() == [4, 3]
    assert apply_overlong([9, 3], 4, "drop").tolist() == [3]
    with pytest.raises(ValueError, match="sample 0 has 9 tokens > pack_size=4"):
        apply_overlong([9, 3], 4, "error")
    with pytest.raises(ValueError):
        apply_overlong([9], 4, "shorten")


def test_split_preserves_tokens() -> None:
    lengths = np.random.default_rng(0).integers(1, 50, size=300)
    out = apply_overlong(lengths, 7, "split")
    assert out.sum() == lengths.sum() and out.max() <= 7


def test_carry_over_worked_example() -> None:
    # Fills 1.0 and 0.5: the half-full group [2] is carried with age 1.
    plan = plan_carry_over([9, 1, 5], [0, 0, 0], 10, [[0, 1], [2]], CarryOver(min_fill=0.9))
    assert plan.emit == [[0, 1]]
    assert plan.carry == [2]
    assert plan.carry_ages.tolist() == [1]


def test_carry_over_respects_max_age_and_final() -> None:
    cfg = CarryOver(min_fill=0.9, max_age=2)
    # Sample 2 already carried twice: its group must be emitted.
    plan = plan_carry_over([9, 1, 5], [0, 0, 2], 10, [[0, 1], [2]], cfg)
    assert plan.emit == [[0, 1], [2]] and plan.carry == []
    # End of data: everything is emitted.
    plan = plan_carry_over([9, 1, 5], [0, 0, 0], 10, [[0, 1], [2]], cfg, final=True)
    assert plan.emit == [[0, 1], [2]] and plan.carry == []


def test_carry_over_budget_is_in_tokens_not_samples() -> None:
    # Both groups under-filled: with a budget of 1 pack (10 tokens) both stay (5 + 6 > 10: the
    # least filled first, 5, then 6 no longer fits) -> [1] is emitted.
    cfg = CarryOver(min_fill=0.99, max_carry_packs=1)
    plan = plan_carry_over([5, 6], [0, 0], 10, [[0], [1]], cfg)
    assert plan.emit == [[1]] and plan.carry == [0]
    # Two packs' worth: nothing needs to be emitted (a partial pack may grow over calls).
    plan = plan_carry_over([5, 6], [0, 0], 10, [[0], [1]], CarryOver(max_carry_packs=2))
    assert plan.emit == [] and plan.carry == [0, 1]
    # Many tiny samples: 40 one-token samples are carried whatever the buffer's sample count.
    plan = plan_carry_over([1] * 40, [0] * 40, 100, [list(range(40))], cfg)
    assert plan.emit == [] and len(plan.carry) == 40
    # Budget 0: nothing carried.
    plan = plan_carry_over([5, 6], [0, 0], 10, [[0], [1]], CarryOver(max_carry_packs=0))
    assert plan.carry == []


def test_ageing_sample_changes_place_with_younger_ones() -> None:
    # The docstring of _place_expiring: sample 3 (age 2) goes into the emitted group for
    # sample 0 (4 tokens, young); the group keeps >= min_fill, the carried one is now [0].
    cfg = CarryOver(min_fill=0.9, max_age=2)
    lengths, ages = [4, 3, 3, 3], [0, 0, 0, 2]
    plan = plan_carry_over(lengths, ages, 10, [[0, 1, 2], [3]], cfg)
    assert plan.emit == [[1, 2, 3]] and plan.carry == [0] and plan.carry_ages.tolist() == [1]
    # Without an emitted group to join, the sample at max_age forces its group out.
    plan = plan_carry_over([3], [2], 10, [[0]], cfg)
    assert plan.emit == [[0]] and plan.carry == []


def test_carry_over_config_validates() -> None:
    with pytest.raises(ValueError, match="min_fill"):
        CarryOver(min_fill=1.5)
    with pytest.raises(ValueError, match="max_carry_packs"):
        CarryOver(max_carry_packs=-1.0)
    with pytest.raises(ValueError, match="max_age"):
        CarryOver(max_age=-1)
    with pytest.raises(ValueError, match="empty selections"):
        CarryOver(max_age=100)
    assert CarryOver(max_carry_packs=2).budget_tokens(4096) == 8192


def test_overlong_rejects_non_integer_lengths() -> None:
    # 9.7 must not silently become 9 (and then 4 + 4 + 1).
    with pytest.raises(ValueError, match="integers"):
        apply_overlong([9.7, 3], 4, "split")
