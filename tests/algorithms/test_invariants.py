# SPDX-License-Identifier: Apache-2.0
"""One shared invariant suite, run against every registered algorithm on seeded inputs."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, pack_lengths
from energon_pack.algorithms._bounds import lower_bound

CASES = [
    # (seed, n, capacity, max_len, max_samples_per_pack, alignment)
    (0, 1, 10, 10, None, 1),
    (1, 64, 100, 100, None, 1),
    (2, 300, 128, 60, 3, 1),
    (3, 500, 4096, 4096, None, 8),
    (4, 257, 50, 7, 4, 2),
    (5, 1000, 1000, 999, None, 1),
]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize(("seed", "n", "capacity", "max_len", "max_per_pack", "align"), CASES)
def test_invariants(
    name: str, seed: int, n: int, capacity: int, max_len: int, max_per_pack: int | None, align: int
) -> None:
    rng = np.random.default_rng(seed)
    top = max_len - (max_len % align) if align > 1 else max_len
    lengths = rng.integers(1, top + 1, size=n)
    bins = pack_lengths(
        lengths, capacity, algorithm=name, max_samples_per_pack=max_per_pack, alignment=align
    )
    # Every index exactly once.
    flat = sorted(i for b in bins for i in b)
    assert flat == list(range(n))
    assert all(len(b) > 0 for b in bins)
    aligned = lengths + (-lengths) % align
    for b in bins:
        # No bin over capacity (with alignment applied).
        assert int(aligned[b].sum()) <= capacity
        if max_per_pack is not None:
            assert len(b) <= max_per_pack
    assert len(bins) >= lower_bound(aligned, capacity)
    # Deterministic: same input, same output (also from a list instead of an array).
    again = pack_lengths(
        lengths.tolist(),
        capacity,
        algorithm=name,
        max_samples_per_pack=max_per_pack,
        alignment=align,
    )
    assert again == bins


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_algorithm_callable_directly_matches_pack_lengths(name: str) -> None:
    lengths = np.random.default_rng(9).integers(1, 50, size=100)
    assert ALGORITHMS[name](lengths.astype(np.int64), 64, None) == pack_lengths(
        lengths, 64, algorithm=name
    )


def test_repair_never_worse_than_best_fit_decreasing() -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        lengths = rng.integers(1, 700, size=300)
        bfd = pack_lengths(lengths, 1024, algorithm="best_fit_decreasing")
        own = pack_lengths(lengths, 1024, algorithm="best_fit_decreasing_repair")
        assert len(own) <= len(bfd)
