# SPDX-License-Identifier: Apache-2.0
"""``pack_lengths``' list path: the default algorithm on a list of ints (energon's buffers).

It must give exactly the bins of the array path, and step aside (``None``) for everything the
validating path has to name or the list path does not do.
"""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, PackingSpec, pack_lengths
from energon_pack.algorithms._best_fit import best_fit_decreasing_repair_list
from energon_pack.algorithms._next_fit import next_fit
from energon_pack.algorithms._pack import _plain


@pytest.mark.parametrize("seed", range(4))
def test_list_path_gives_the_array_paths_bins(seed: int) -> None:
    # Few distinct lengths make ties (equal rooms) and repairs; caps and all-in-one-pack
    # windows are covered too. Every case must take the list path (not None).
    rng = np.random.default_rng(seed)
    repair = ALGORITHMS["best_fit_decreasing_repair"]
    for _ in range(120):
        cap = int(rng.choice([10, 37, 100, 4096]))
        pool = rng.integers(1, cap + 1, size=int(rng.integers(1, 8)))
        lengths = rng.choice(pool, size=int(rng.integers(1, 400))).tolist()
        per_pack = [None, None, 1, 2, 3, 8][int(rng.integers(6))]
        given = list(lengths)
        listed = best_fit_decreasing_repair_list(lengths, cap, per_pack)
        assert listed is not None
        assert lengths == given  # the caller's list is read, never reordered
        expected = repair(np.array(lengths, dtype=np.int64), cap, per_pack)
        assert listed == expected, (lengths, cap, per_pack)
        spec = PackingSpec(pack_size=cap, max_samples_per_pack=per_pack)
        assert pack_lengths(lengths, spec) == expected


@pytest.mark.parametrize(
    "lengths",
    [[], [5, 0], [5, -1], [5, 11], [5, 2.0], [5, np.int64(2)], ["5"], [5, None]],
)
def test_list_path_steps_aside_for_what_the_validating_path_handles(
    lengths: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Zero, negative, too long, floats, NumPy ints, strings: the list path returns None and
    # pack_lengths answers as the array path does (the same bins or the same error).
    assert best_fit_decreasing_repair_list(lengths, 10) is None

    def answer() -> object:
        try:
            return pack_lengths(lengths, 10)
        except ValueError as err:
            return str(err)

    got = answer()
    monkeypatch.setattr("energon_pack.algorithms._pack._plain", lambda spec: False)  # arrays
    assert got == answer()


@pytest.mark.parametrize(
    "fields",
    [
        {"alignment": 2},
        {"step_packs": 2},
        {"max_media_per_pack": 1},
        {"algorithm": "best_fit_decreasing"},
    ],
)
def test_list_path_only_for_the_plain_default(fields: dict) -> None:
    assert _plain(PackingSpec(pack_size=10))
    assert not _plain(PackingSpec(pack_size=10, **fields))


def test_list_path_follows_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whoever registers another function under the default's name gets it, list or not.
    monkeypatch.setitem(ALGORITHMS, "best_fit_decreasing_repair", next_fit)
    assert pack_lengths([6, 5, 3, 4], 10) == [[0], [1, 2], [3]]
