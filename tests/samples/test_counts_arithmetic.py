# SPDX-License-Identifier: Apache-2.0
"""``PackingCounts`` arithmetic and ``PackingStats.take_counts`` on literal counts, blend tuples
included (the fast paths build counts through the slots)."""

from __future__ import annotations

from energon_pack.encoding import PackingStats
from energon_pack.samples import PackingCounts


def test_add_sub_and_total_with_blend_tuples() -> None:
    a = PackingCounts(samples=3, packs=1, pack_tokens=8, dataset_tokens=(5, 3))
    b = PackingCounts(samples=1, skipped=2, dataset_tokens=(1,), dataset_documents=(0, 1))
    assert a + b == PackingCounts(
        samples=4, skipped=2, packs=1, pack_tokens=8, dataset_tokens=(6, 3),
        dataset_documents=(0, 1),
    )  # fmt: skip
    assert (a + b) - b == a
    assert a - a == PackingCounts()  # trailing zeros cut: (0, 0) -> ()
    assert PackingCounts.total([a, None, b, PackingCounts()]) == a + b
    assert PackingCounts.total([]) == PackingCounts()
    assert PackingCounts.total([a]) == a


def test_take_counts_is_the_delta_since_the_previous_take() -> None:
    stats = PackingStats(log_every=0)
    stats.samples += 2
    stats.record_pack(doc_lengths=[5, 3], pack_size=8, datasets=[0, 1], loss_tokens=[4, 2])
    first = stats.take_counts()
    assert first == PackingCounts(
        samples=2, packs=1, pack_tokens=8, pack_documents=2, pack_slots=8,
        dataset_tokens=(5, 3), dataset_documents=(1, 1), dataset_loss_tokens=(4, 2),
    )  # fmt: skip
    assert stats.take_counts() == PackingCounts()
    stats.record_pack(doc_lengths=[4], pack_size=8, datasets=[1], loss_tokens=[3])
    assert stats.take_counts() == PackingCounts(
        packs=1, pack_tokens=4, pack_documents=1, pack_slots=8,
        dataset_tokens=(0, 4), dataset_documents=(0, 1), dataset_loss_tokens=(0, 3),
    )  # fmt: skip
    assert stats.counts() == first + PackingCounts(
        packs=1, pack_tokens=4, pack_documents=1, pack_slots=8,
        dataset_tokens=(0, 4), dataset_documents=(0, 1), dataset_loss_tokens=(0, 3),
    )  # fmt: skip
