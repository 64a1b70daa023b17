# SPDX-License-Identifier: Apache-2.0
"""The streaming model of energon's PackingDataset, with and without carry-over."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, CarryOver, simulate, simulate_packs


def test_worked_example_from_docstring() -> None:
    # Buffer 4 of length-3 samples, pack 6: select([3,3,3,3]) -> 2 packs; the last sample is
    # read while they stream out, then flushed alone at the end: 3 packs, 15 / 18 tokens.
    r = simulate([3] * 5, 6, 4, algorithm="best_fit_decreasing")
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
    with pytest.raises(ValueError, match="pack_size=4"):
        simulate([9, 3], 4, 8, overlong="error")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_carry_over_every_sample_exactly_once_and_age_bounded(name: str) -> None:
    lengths = np.random.default_rng(1).integers(1, 900, size=800)
    cfg = CarryOver(min_fill=0.99, max_carry_packs=2, max_age=3)
    r = simulate(lengths, 1024, 16, algorithm=name, carry_over=cfg)
    assert r.samples_out == r.samples_packed == 800
    assert r.tokens == int(lengths.sum())  # nothing lost, flushed at the end
    assert r.max_age <= 3
    assert r.max_carried_tokens <= 2 * 1024  # the token budget holds


def test_carry_over_worked_trace_of_the_packing_docs() -> None:
    # docs/concepts/packing.md: [d a], [e b], [f c h g] (a..h are samples 0..7).
    cfg = CarryOver(min_fill=0.9, max_carry_packs=1, max_age=2)
    r = simulate([4, 3, 2, 5, 6, 3, 1, 2], 10, 2, algorithm="best_fit_decreasing", carry_over=cfg)
    assert (r.packs, r.max_age, r.select_calls) == (3, 2, 4)
    packs = simulate_packs(
        [4, 3, 2, 5, 6, 3, 1, 2], 10, 2, algorithm="best_fit_decreasing", carry_over=cfg
    )
    assert packs == [[3, 0], [4, 1], [5, 2, 7, 6]]
    assert simulate([4, 3, 2, 5, 6, 3, 1, 2], 10, 2, algorithm="best_fit_decreasing").packs == 4


def test_short_documents_fill_packs_at_buffer_16_within_the_stated_wait() -> None:
    # A buffer of 16 short documents (~40 tokens) holds a sixth of a 4096-token pack: stock
    # packing fills ~17%; the token-budget carry-over grows partial packs across buffers.
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, np.rint(np.exp(rng.normal(np.log(26), 1.0, 20_000)))).astype(int)
    cfg = CarryOver()
    stock, carried = simulate(lengths, 4096, 16), simulate(lengths, 4096, 16, carry_over=cfg)
    assert stock.fill < 0.2 and carried.fill > 0.99
    assert carried.samples_out == lengths.size
    assert carried.max_age <= cfg.max_age
    # The stated wait: selected at most max_age + 1 times, plus the packs queued before it.
    assert carried.max_wait_samples <= (cfg.max_age + 2) * 16
    assert carried.max_carried_tokens <= cfg.budget_tokens(4096)


def test_carry_over_improves_fill_on_small_buffers() -> None:
    lengths = np.random.default_rng(2).lognormal(6.5, 1.0, size=3000).astype(np.int64) + 1
    plain = simulate(lengths, 4096, 16)
    carried = simulate(lengths, 4096, 16, carry_over=CarryOver())
    assert carried.fill > plain.fill + 0.02


def test_warns_when_buffer_cannot_fill_a_pack() -> None:
    r = simulate([10] * 100, 1000, 8)
    assert r.warnings and "buffer of at least" in r.warnings[0]


def test_overlong_truncate_and_split_are_counted() -> None:
    # Pack 4, lengths [9, 3, 6]: truncate cuts 9 -> 4 (5 tokens lost) and 6 -> 4 (2 lost);
    # split turns 9 into 4+4+1 and 6 into 4+2. Nothing may disappear without a count.
    r = simulate([9, 3, 6], 4, 8, overlong="truncate")
    assert (r.truncated_overlong, r.truncated_tokens, r.split_overlong, r.tokens) == (2, 7, 0, 11)
    r = simulate([9, 3, 6], 4, 8, overlong="split")
    assert (r.truncated_overlong, r.truncated_tokens, r.split_overlong, r.tokens) == (0, 0, 2, 18)
    assert r.samples_packed == 6  # 3 + 1 + 2 pieces


def test_non_integer_lengths_are_rejected_not_rounded() -> None:
    # 3.5 tokens is a measuring bug upstream; casting it to 3 would silently lose a token.
    with pytest.raises(ValueError, match="integers"):
        simulate([3.5, 2], 10, 4)
    assert simulate(np.array([3.0, 2.0]), 10, 4).tokens == 5  # integral floats are fine


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pack_size": 0}, "pack_size=0"),  # not "length 3 > pack size 1"
        ({"pack_size": 2, "alignment": 4}, "alignment=4"),  # not "truncate, split or drop"
        ({"pack_size": 8, "max_samples_per_pack": 0}, "max_samples_per_pack=0"),
    ],
)
def test_bad_settings_are_named_before_the_overlong_policy_runs(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        simulate([3], kwargs.pop("pack_size"), 4, overlong="error", **kwargs)


@pytest.mark.parametrize("run", [simulate, simulate_packs])
def test_simulate_and_simulate_packs_name_a_bad_buffer_or_length(run) -> None:
    # simulate_packs used to skip these checks: buffer 0 ran into "no group 100 times".
    with pytest.raises(ValueError, match="buffer_size=0 must be >= 1"):
        run([3, 3, 3], 6, 0)
    with pytest.raises(ValueError, match="length #1 is 0"):
        run([3, 0, 3], 6, 4)
