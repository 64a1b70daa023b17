# SPDX-License-Identifier: Apache-2.0
"""Media budgets: no pack over a media budget, for every algorithm, with and without carry-over."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import (
    ALGORITHMS,
    CarryOver,
    MediaLoad,
    PackingSpec,
    pack_lengths,
    plan_carry_over,
    simulate,
    simulate_packs,
)
from energon_pack.algorithms._media import check_media_fits, enforce_media_budgets
from energon_pack.algorithms._pack import MEDIA_COST
from energon_pack.algorithms._step_order import step_order


def _media_mix(seed: int, n: int, pack_size: int) -> tuple[np.ndarray, MediaLoad]:
    """Text, single-image and multi-image documents; media tokens are part of the length."""
    rng = np.random.default_rng(seed)
    items = rng.choice([0, 0, 1, 1, 1, 2, 3], size=n)
    per_item = rng.integers(16, pack_size // 8, size=n)
    tokens = items * per_item
    text = rng.integers(1, pack_size // 4, size=n)
    lengths = np.minimum(tokens + text, pack_size)
    return lengths, MediaLoad(np.minimum(tokens, lengths), items)


def _check_budgets(bins: list[list[int]], load: MediaLoad, spec: PackingSpec) -> None:
    for b in bins:
        assert int(load.tokens[b].sum()) <= spec.max_media_tokens_per_pack
        assert int(load.items[b].sum()) <= spec.max_media_per_pack
        if spec.max_samples_per_pack is not None:
            assert len(b) <= spec.max_samples_per_pack


def test_worked_example_levels_media_first() -> None:
    spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    load = MediaLoad.of([(4, 1), (4, 1), (0, 0), (0, 0)])
    bins = enforce_media_budgets([[0, 1, 3], [2]], np.array([5, 3, 3, 2]), load, spec)
    assert bins == [[1, 3, 2], [0]]


def test_text_makes_way_for_an_evicted_media_document() -> None:
    load = MediaLoad.of([(3, 1), (0, 0), (0, 0), (3, 1), (0, 0)])
    spec = PackingSpec(pack_size=10, max_media_per_pack=1)
    bins = enforce_media_budgets([[2, 1], [0, 3, 4]], np.array([5, 4, 6, 3, 2]), load, spec)
    assert bins == [[1, 0], [3, 4], [2]]
    assert pack_lengths([5, 4, 6, 3, 2], spec, media=load) == bins


def test_nothing_over_budget_keeps_the_bins() -> None:
    lengths, load = _media_mix(0, 200, 1024)
    plain = pack_lengths(lengths, 1024)
    loose = PackingSpec(pack_size=1024, max_media_tokens_per_pack=10**9, max_media_per_pack=10**6)
    assert pack_lengths(lengths, loose, media=load) == plain


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("seed", range(6))
def test_budgets_hold_for_every_algorithm(name: str, seed: int) -> None:
    lengths, load = _media_mix(seed, 300, 1024)
    spec = PackingSpec(
        pack_size=1024,
        algorithm=name,
        max_media_tokens_per_pack=int(load.tokens.max()) + seed * 40,
        max_media_per_pack=3 + seed % 3,
        max_samples_per_pack=None if seed % 2 else 6,
        step_packs=None if seed % 3 else 4,
    )
    bins = pack_lengths(lengths, spec, media=load)
    assert sorted(i for b in bins for i in b) == list(range(lengths.size))
    assert all(int(lengths[b].sum()) <= 1024 for b in bins)
    _check_budgets(bins, load, spec)
    assert pack_lengths(lengths.tolist(), spec, media=load) == bins  # deterministic
    # The budgets do bind on this mix: without them some pack is over one of them.
    unbounded = pack_lengths(
        lengths, spec, media=None, max_media_tokens_per_pack=None, max_media_per_pack=None
    )
    assert any(
        int(load.tokens[b].sum()) > spec.max_media_tokens_per_pack
        or int(load.items[b].sum()) > spec.max_media_per_pack
        for b in unbounded
    )


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("seed", range(3))
def test_budgets_hold_through_carry_over(name: str, seed: int) -> None:
    lengths, load = _media_mix(100 + seed, 400, 1024)
    spec = PackingSpec(
        pack_size=1024,
        algorithm=name,
        carry_over=CarryOver(max_age=4 + seed),
        max_media_tokens_per_pack=int(load.tokens.max()),
        max_media_per_pack=4,
        max_samples_per_pack=8 if seed == 1 else None,
    )
    packs = simulate_packs(lengths, spec, 16, media=load)
    assert sorted(i for p in packs for i in p) == list(range(lengths.size))
    _check_budgets(packs, load, spec)
    result = simulate(lengths, spec, 16, media=load)
    assert result.packs == len(packs) and result.samples_out == lengths.size


def test_ageing_swap_refuses_to_break_a_budget() -> None:
    # Sample 3 (age 2, an image) would swap into group 0 for sample 0, but group 0 already
    # holds an image and the budget is one image per pack: no swap, group 1 is emitted as is.
    spec = PackingSpec(pack_size=10, max_media_per_pack=1)
    load = MediaLoad.of([(0, 0), (1, 1), (0, 0), (1, 1)])
    args = ([4, 3, 3, 3], [0, 0, 0, 2], 10, [[0, 1, 2], [3]], CarryOver(min_fill=0.9, max_age=2))
    assert plan_carry_over(*args).emit == [[1, 2, 3]]  # tokens only: the swap happens
    plan = plan_carry_over(*args, spec=spec, media=load)
    assert plan.emit == [[0, 1, 2], [3]]
    _check_budgets(
        plan.emit,
        load,
        PackingSpec(pack_size=10, max_media_tokens_per_pack=9, max_media_per_pack=1),
    )


def test_simulate_drops_and_counts_a_document_over_budget() -> None:
    lengths = [100, 200, 300, 50]
    load = MediaLoad.of([(0, 0), (150, 1), (0, 0), (20, 1)])
    spec = PackingSpec(pack_size=512, max_media_tokens_per_pack=128)
    result = simulate(lengths, spec, 8, media=load)
    assert result.dropped_over_budget == 1 and result.samples_out == 3
    assert result.samples_packed == 3 and result.tokens == 450
    assert 1 not in {i for p in simulate_packs(lengths, spec, 8, media=load) for i in p}


def test_errors_name_the_problem() -> None:
    spec = PackingSpec(pack_size=64, max_media_tokens_per_pack=10)
    with pytest.raises(ValueError, match="media loads were given"):
        pack_lengths([5, 6], spec)
    with pytest.raises(ValueError, match="document 1 has 11 media tokens.*budget 10"):
        check_media_fits(MediaLoad.of([(3, 1), (11, 1)]), spec)
    with pytest.raises(ValueError, match="2 entries but lengths has 3"):
        pack_lengths([5, 6, 7], spec, media=MediaLoad.of([(0, 0), (1, 1)]))
    with pytest.raises(ValueError, match="must be >= 0"):
        MediaLoad.of([(0, 0), (-1, 1)])
    with pytest.raises(ValueError, match="max_media_per_pack=0 must be an int >= 1"):
        PackingSpec(pack_size=8, max_media_per_pack=0)
    with pytest.raises(ValueError, match="over-long policy"):
        simulate([100], 64, 4, media=MediaLoad.zeros(1))


def test_step_order_counts_media_tokens() -> None:
    # Four full packs of text cost the same; two hold images. The media order puts one image
    # pack in each step of two; the plain cost order (ties by position) puts both in one.
    lengths = [8, 8, 8, 8]
    load = MediaLoad.of([(0, 0), (6, 1), (6, 1), (0, 0)])

    def steps(bins: list[list[int]]) -> list[int]:
        return [sum(int(load.tokens[i]) for b in bins[k : k + 2] for i in b) for k in (0, 2)]

    bins = pack_lengths(lengths, 8, media=load, step_packs=2, algorithm="next_fit")
    assert steps(bins) == [6, 6]
    costs = MEDIA_COST.pack_costs([[0], [1], [2], [3]], lengths, load.tokens)
    assert bins == [[i] for i in step_order(costs, 2)]
    assert steps(pack_lengths(lengths, 8, step_packs=2, algorithm="next_fit")) == [12, 0]
