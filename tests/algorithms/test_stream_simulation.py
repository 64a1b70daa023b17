# SPDX-License-Identifier: Apache-2.0
"""The streaming model of energon's PackingDataset, with and without carry-over."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, CarryOver, simulate


def test_worked_example_from_docstring() -> None:
    # Buffer 4 of length-3 samples, pack 6: select([3,3,3,3]) -> 2 packs; the last sample is
    # read while they stream out, then flushed alone at the end: 3 packs, 15 / 18 tokens.
    r = simulate([3] * 5, 6, 4, algorithm="first_fit_decreasing")
    assert (r.packs, r.tokens, r.select_calls, r.lower_bound_packs) == (3, 15, 2, 3)
    assert r.fill == pytest.approx(15 / 18)


def test_select_calls_follow_energon_buffering() -> None:
    # ENERGON_NOTES: 120 samples through buffer 50 -> select calls of 50, 50, 20. One sample
    # per pack: select(50) queues 50 packs, the next 50 are read while they stream out, the
    # empty queue triggers select(50), and the last 20 are selected at end of data.
    r = simulate([7] * 120, 7, 50, algorithm="next_fit")
    assert r.select_calls == 3 and r.packs == 120


def test_overlong_split_and_drop_counts() -> None:
    r = simulate([9, 3], 4, 8, overlong="split")
    assert (r.samples_in, r.samples_packed, r.samples_out, r.tokens) == (2, 4, 4, 12)
    r = simulate([9, 3], 4, 8, overlong="drop")
    assert (r.samples_packed, r.dropped_overlong, r.tokens) == (1, 1, 3)
    with pytest.raises(ValueError, match="pack size 4"):
        simulate([9, 3], 4, 8, overlong="error")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_carry_over_every_sample_exactly_once_and_age_bounded(name: str) -> None:
    lengths = np.random.default_rng(1).integers(1, 900, size=800)
    cfg = CarryOver(min_fill=0.99, max_carry_fraction=0.5, max_age=3)
    r = simulate(lengths, 1024, 16, algorithm=name, carry_over=cfg)
    assert r.samples_out == r.samples_packed == 800
    assert r.tokens == int(lengths.sum())  # nothing lost, flushed at the end
    assert r.max_age <= 3


def test_carry_over_improves_fill_on_small_buffers() -> None:
    lengths = np.random.default_rng(2).lognormal(6.5, 1.0, size=3000).astype(np.int64) + 1
    plain = simulate(lengths, 4096, 16)
    carried = simulate(lengths, 4096, 16, carry_over=CarryOver())
    assert carried.fill > plain.fill + 0.02


def test_warns_when_buffer_cannot_fill_a_pack() -> None:
    r = simulate([10] * 100, 1000, 8)
    assert r.warnings and "buffer of at least" in r.warnings[0]
