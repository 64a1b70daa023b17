# SPDX-License-Identifier: Apache-2.0
"""``Arena``: tensors carved out of one buffer, aligned, independent, and sized exactly."""

from __future__ import annotations

import pytest
import torch

from energon_pack.samples import Arena


def test_tensors_are_aligned_views_of_one_buffer_and_do_not_overlap() -> None:
    requests = [((2, 3), torch.int64), ((5,), torch.int32), ((3,), torch.bool), ((0,), torch.int64)]
    arena = Arena(sum(Arena.size(shape, dtype) for shape, dtype in requests))
    tensors = [arena.empty(shape, dtype) for shape, dtype in requests]
    for t, (shape, dtype) in zip(tensors, requests):
        assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
        assert (t.data_ptr() - arena.buffer.data_ptr()) % 64 == 0
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    for i, t in enumerate(tensors[:3]):
        t.fill_(i + 1)
    assert tensors[0].eq(1).all() and tensors[1].eq(2).all() and tensors[2].all()
    with pytest.raises(ValueError, match="cannot hold"):
        arena.empty((1,), torch.int64)


def test_a_shared_arena_is_in_shared_memory() -> None:
    arena = Arena(Arena.size((4,), torch.int64), shared=True)
    assert arena.empty((4,), torch.int64).is_shared()
    assert not Arena(64).empty((8,), torch.int64).is_shared()
