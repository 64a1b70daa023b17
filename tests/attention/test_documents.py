# SPDX-License-Identifier: Apache-2.0
"""Document metadata: the worked example by hand, then fast paths against loop references."""

from __future__ import annotations

import random

import pytest
import torch

from energon_pack.attention import aligned_lengths, document_metadata, position_ids_from_lengths


def test_worked_example_three_docs_two_tail_pads() -> None:
    # docs [3, 2, 1] in a row of 8: the 2 tail pads join the last slot (slots 3, 2, 3)
    m = document_metadata([[3, 2, 1]], length=8)
    assert m.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    assert m.segment_ids.tolist() == [[1, 1, 1, 2, 2, 3, 0, 0]]
    assert m.document_borders.tolist() == [[True, False, False, True, False, True, True, False]]
    assert m.seq_idx.tolist() == [[0, 0, 0, 1, 1, 2, 2, 2]]
    assert m.cu_seqlens.tolist() == [0, 3, 5, 6]
    assert m.cu_seqlens_padded.tolist() == [0, 3, 5, 8]
    assert m.cu_seqlens.dtype == m.cu_seqlens_padded.dtype == m.seq_idx.dtype == torch.int32
    assert m.position_ids.dtype == m.segment_ids.dtype == torch.int64
    assert m.max_seqlen == 3 and type(m.max_seqlen) is int
    assert m.max_seqlen_padded == 3
    assert m.slot_lengths == ((3, 2, 3),)


def test_alignment_padding_inside_slots() -> None:
    # docs [3, 2] aligned to 4 -> slots [4, 4]; each doc's pad starts a border, segment 0
    assert aligned_lengths([3, 2, 4, 1], 4) == [4, 4, 4, 4]
    m = document_metadata([[3, 2]], doc_lengths_padded=[[4, 4]])
    assert m.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]
    assert m.segment_ids.tolist() == [[1, 1, 1, 0, 2, 2, 0, 0]]
    assert m.document_borders.tolist() == [[True, False, False, True, True, False, True, False]]
    assert m.cu_seqlens.tolist() == [0, 3, 5]
    assert m.cu_seqlens_padded.tolist() == [0, 4, 8]
    assert (m.max_seqlen, m.max_seqlen_padded) == (3, 4)
    # with 4 tail pads: the slots grow, the aligned document lengths do not
    m = document_metadata([[3, 2]], length=12, doc_lengths_padded=[[4, 4]])
    assert (m.doc_lengths, m.doc_lengths_padded, m.slot_lengths) == (
        ((3, 2),),
        ((4, 4),),
        ((4, 8),),
    )


def test_two_rows_offsets_run_over_the_flattened_batch() -> None:
    # row 0 = [3, 2] + 1 pad, row 1 = [6]: row 1's slot starts at 6 in the (12,) flattening
    m = document_metadata([[3, 2], [6]], length=6)
    assert m.cu_seqlens.tolist() == [0, 3, 5, 11]
    assert m.cu_seqlens_padded.tolist() == [0, 3, 6, 12]
    assert m.seq_idx.tolist() == [[0, 0, 0, 1, 1, 1], [2] * 6]
    assert m.segment_ids.tolist() == [[1, 1, 1, 2, 2, 0], [1] * 6]


def _reference(rows: list[list[int]], padded: list[list[int]], length: int) -> dict:
    """Token-by-token loops: the obviously correct version."""
    pos, seg, border, sidx = [], [], [], []
    cu, cu_pad, slot_no = [0], [0], 0
    for real, pad in zip(rows, padded):
        p_row, s_row, b_row, i_row = [], [], [], []
        for d, (n, p) in enumerate(zip(real, pad)):
            if d == len(real) - 1:
                p += length - sum(pad)
            for i in range(p):
                p_row.append(i)
                s_row.append(d + 1 if i < n else 0)
                b_row.append(i == 0 or i == n)
                i_row.append(slot_no)
            slot_no += 1
            cu.append(cu[-1] + n)
            cu_pad.append(cu_pad[-1] + p)
        pos.append(p_row)
        seg.append(s_row)
        border.append(b_row)
        sidx.append(i_row)
    return {"pos": pos, "seg": seg, "border": border, "seq_idx": sidx, "cu": cu, "cu_pad": cu_pad}


def _random_rows(rng: random.Random, length: int, alignment: int) -> tuple[list, list]:
    rows, padded = [], []
    for _ in range(rng.randint(1, 3)):
        real: list[int] = []
        while True:
            n = rng.choice([1, 1, 2, rng.randint(1, length)])
            if sum(aligned_lengths([*real, n], alignment)) > length:
                break
            real.append(n)
        if not real:
            real = [1]
        rows.append(real)
        padded.append(aligned_lengths(real, alignment))
    return rows, padded


@pytest.mark.parametrize("seed", range(40))
def test_matches_loop_reference_on_random_rows(seed: int) -> None:
    rng = random.Random(seed)
    alignment = rng.choice([1, 1, 2, 4])
    length = rng.randint(alignment, 64) // alignment * alignment
    rows, padded = _random_rows(rng, length, alignment)
    m = document_metadata(rows, length=length, doc_lengths_padded=padded)
    ref = _reference(rows, padded, length)
    assert m.position_ids.tolist() == ref["pos"]
    assert m.segment_ids.tolist() == ref["seg"]
    assert m.document_borders.tolist() == ref["border"]
    assert m.seq_idx.tolist() == ref["seq_idx"]
    assert m.cu_seqlens.tolist() == ref["cu"]
    assert m.cu_seqlens_padded.tolist() == ref["cu_pad"]
    assert m.cu_seqlens_padded[-1] == len(rows) * length
    assert m.max_seqlen == max(n for r in rows for n in r)


@pytest.mark.parametrize(
    ("rows", "length"),
    [
        ([[7]], 7),  # one document, exactly full
        ([[7]], 10),  # one document, padding only at the end
        ([[1]], 1),  # a single one-token document
        ([[1, 1, 1]], 3),  # only one-token documents, full
        ([[4, 1, 3]], 8),  # a length-1 document in the middle, exactly full
    ],
)
def test_edge_cases_match_reference(rows: list[list[int]], length: int) -> None:
    m = document_metadata(rows, length=length)
    ref = _reference(rows, rows, length)
    assert m.position_ids.tolist() == ref["pos"]
    assert m.segment_ids.tolist() == ref["seg"]
    assert m.cu_seqlens_padded.tolist() == ref["cu_pad"]
    assert m.document_borders.tolist() == ref["border"]


def test_position_ids_from_lengths() -> None:
    assert position_ids_from_lengths([3, 2]).tolist() == [0, 1, 2, 0, 1]
    assert position_ids_from_lengths([1]).tolist() == [0]


@pytest.mark.parametrize(
    ("rows", "kwargs", "match"),
    [
        ([[3, 0]], {}, "length 0"),
        ([[]], {}, "no document"),
        ([[5, 5]], {"length": 8}, "row length is 8"),
        ([[3]], {"doc_lengths_padded": [[2]]}, "padded length 2"),
        ([[3]], {"doc_lengths_padded": [[4, 4]]}, "one padded length per document"),
    ],
)
def test_bad_lengths_raise(rows: list[list[int]], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        document_metadata(rows, **kwargs)


def test_bad_alignment_raises() -> None:
    with pytest.raises(ValueError, match="alignment"):
        aligned_lengths([3], 0)
