# SPDX-License-Identifier: Apache-2.0
"""``simulate``'s lower bounds count the media budgets when media loads are given."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import (
    ALGORITHMS,
    CarryOver,
    MediaLoad,
    PackingSpec,
    simulate,
    simulate_packs,
)

# Four documents of 2 tokens, each one image of 3 media tokens: 8 tokens fit one pack of 10,
# but a budget of 6 media tokens holds two images, so two packs at least (and exactly).
LENGTHS = [2, 2, 2, 2]
LOAD = MediaLoad.of([(3, 1)] * 4)


def test_media_token_budget_raises_the_bound() -> None:
    spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    r = simulate(LENGTHS, spec, 8, media=LOAD)
    assert (r.packs, r.lower_bound_packs, r.global_lower_bound_packs) == (2, 2, 2)
    assert r.lower_bound_fill == pytest.approx(8 / 20) == r.fill


def test_item_budget_raises_the_bound() -> None:
    # One image per pack: ceil(4 items / 1) = 4 packs, above both token bounds.
    spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6, max_media_per_pack=1)
    r = simulate(LENGTHS, spec, 8, media=LOAD)
    assert (r.packs, r.lower_bound_packs, r.global_lower_bound_packs) == (4, 4, 4)


def test_without_budgets_the_bound_is_tokens_only() -> None:
    # Media loads but no media budget: tokens only, ceil(8 / 10) = 1.
    r = simulate(LENGTHS, PackingSpec(pack_size=10), 8, media=LOAD)
    assert (r.packs, r.lower_bound_packs, r.global_lower_bound_packs) == (1, 1, 1)


def test_documents_dropped_over_budget_are_not_counted() -> None:
    # Document 2 (7 media tokens) is over the budget of 6 and dropped: 9 media tokens remain,
    # ceil(9 / 6) = 2, not ceil(16 / 6) = 3.
    load = MediaLoad.of([(3, 1), (3, 1), (7, 1), (3, 1)])
    spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    r = simulate([2, 2, 7, 2], spec, 8, media=load)
    assert r.dropped_over_budget == 1
    assert (r.packs, r.lower_bound_packs, r.global_lower_bound_packs) == (2, 2, 2)


def test_bound_is_per_select_call() -> None:
    # Buffer 2: two select calls of two images each; each needs ceil(6 / 6) = 1 pack.
    # Buffer 1: four calls of one pack each -> per-buffer bound 4, global bound still 2.
    spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    two = simulate(LENGTHS, spec, 2, media=LOAD)
    one = simulate(LENGTHS, spec, 1, media=LOAD)
    assert (two.lower_bound_packs, two.global_lower_bound_packs) == (2, 2)
    assert (one.packs, one.lower_bound_packs, one.global_lower_bound_packs) == (4, 4, 2)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("carry", [False, True])
def test_bounds_hold_for_every_algorithm(name: str, carry: bool) -> None:
    # global bound <= per-buffer bound <= packs, on a seeded media-heavy mix.
    rng = np.random.default_rng(7)
    items = rng.choice([0, 1, 1, 2, 3], size=300)
    tokens = items * rng.integers(20, 120, size=300)
    lengths = np.minimum(tokens + rng.integers(1, 200, size=300), 1024)
    load = MediaLoad(np.minimum(tokens, lengths), items)
    spec = PackingSpec(
        pack_size=1024,
        algorithm=name,
        max_media_tokens_per_pack=400,
        max_media_per_pack=4,
        carry_over=CarryOver(max_age=3) if carry else None,
    )
    r = simulate(lengths, spec, 32, media=load)
    kept = load.tokens <= 400
    media_bound = -(-int(load.tokens[kept].sum()) // 400)
    assert r.global_lower_bound_packs >= media_bound
    assert r.global_lower_bound_packs <= r.lower_bound_packs <= r.packs


@pytest.mark.parametrize("seed", range(4))
def test_media_maxima_are_those_of_the_emitted_packs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    lengths = rng.integers(1, 200, size=n)
    tokens = (lengths * rng.uniform(0, 1, size=n)).astype(np.int64)
    media = MediaLoad(tokens=tokens, items=(tokens > 0) * rng.integers(1, 4, size=n))
    spec = PackingSpec(pack_size=256, max_media_tokens_per_pack=300, max_media_per_pack=5)
    r = simulate(lengths, spec, 16, media=media)
    packs = simulate_packs(lengths, spec, 16, media=media)
    assert r.max_media_tokens_per_pack == max(int(media.tokens[p].sum()) for p in packs) <= 300
    assert r.max_media_per_pack == max(int(media.items[p].sum()) for p in packs) <= 5
    assert simulate(lengths, 256, 16).max_media_tokens_per_pack is None
