# SPDX-License-Identifier: Apache-2.0
"""concat_rows: torch.cat, with row sources written in place."""

from __future__ import annotations

import pytest
import torch

from energon_pack.samples import RowSource, concat_rows, empty_rows


class Rows:
    """A row source: ``n`` rows of ``value``, counting its writes."""

    def __init__(self, n: int, value: float, dim: int = 4) -> None:
        self.shape = torch.Size((n, dim))
        self.dtype = torch.float32
        self.value = value
        self.writes = 0

    def write_into(self, out: torch.Tensor) -> None:
        assert out.shape == self.shape and out.is_contiguous()
        out.fill_(self.value)
        self.writes += 1


def test_row_sources_are_written_into_their_slice() -> None:
    a, b = torch.arange(8.0).view(2, 4), Rows(3, 7.0)
    empty = Rows(0, 9.0)
    assert isinstance(b, RowSource)
    out = concat_rows([a, b, empty, torch.ones(1, 4)])
    expected = torch.cat([a, torch.full((3, 4), 7.0), torch.ones(1, 4)])
    assert torch.equal(out, expected) and b.writes == 1


def test_tensors_only_equal_torch_cat() -> None:
    parts = [torch.rand(2, 3), torch.zeros(1, 3)]
    assert torch.equal(concat_rows(parts), torch.cat(parts))
    mixed = [torch.ones(2, 3), torch.ones(1, 3, dtype=torch.float64)]  # torch.cat promotes
    assert concat_rows(mixed).dtype == torch.float64
    bf16 = [torch.ones(2, 3, dtype=torch.bfloat16)] * 2  # no NumPy dtype: torch.cat
    assert torch.equal(concat_rows(bf16), torch.cat(bf16))


def test_empty_rows_has_the_shape_and_dtype_asked_for() -> None:
    rows = empty_rows((3, 4), torch.float32)
    assert rows.shape == (3, 4) and rows.dtype == torch.float32
    assert empty_rows((2, 2), torch.bfloat16).dtype == torch.bfloat16


def test_rows_of_different_widths_or_dtypes_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot join"):
        concat_rows([torch.ones(2, 3), Rows(1, 0.0, dim=4)])
    with pytest.raises(ValueError, match="cannot join"):
        concat_rows([torch.ones(2, 4, dtype=torch.float64), Rows(1, 0.0)])
