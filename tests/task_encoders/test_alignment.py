# SPDX-License-Identifier: Apache-2.0
"""Context-parallel alignment end to end: documents padded to a multiple of ``2 * CP`` (or
``lcm(2 * CP, TP)`` with sequence parallelism) through a real energon loader.

Invariants checked on every pack and batch: each document's slot is a multiple of the
alignment and shorter than ``length + alignment``; padding tokens are ``pad_token_id`` with
label -100 and positions that continue the document's count; ``cu_seqlens`` are the real
lengths and ``cu_seqlens_padded`` the slots (last entry ``B * L``); no token is lost.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
import torch

from energon_pack.samples import EncodedSample
from energon_pack.samples._packed import IGNORE_INDEX
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.training import make_loader
from energon_pack_tools import make_document

BOS, EOS, PAD = 2, 3, 0  # ids of the test tokenizer's specials
PACK_SIZE = 48  # a multiple of 4 and 12; the corpus has documents longer than 32, none > 48


def doc(key: str, tokens: list[int]) -> EncodedSample:
    return make_document(key, tokens, [False] + [True] * (len(tokens) - 1))


def test_pack_selected_samples_with_alignment_2_hand_worked(tokenizer_dir) -> None:
    """Regression for a report of "arrays used as indices must be of integer type" from
    ``pack_selected_samples`` at alignment 2 (a pack of one document is the edge case: no
    inner document border to index)."""
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=8, alignment=2, log_every=0)
    one = enc.pack_selected_samples([doc("a", [BOS, 7, EOS])])
    # 3 tokens -> a slot of 4: one pad token, label -100, its position continues 0 1 2 -> 3
    assert one.tokens.tolist() == [BOS, 7, EOS, PAD]
    assert one.labels.tolist() == [7, EOS, IGNORE_INDEX, IGNORE_INDEX]
    assert one.position_ids.tolist() == [0, 1, 2, 3]
    assert (one.doc_lengths, one.doc_lengths_padded) == ([3], [4])

    two = enc.pack_selected_samples([doc("a", [BOS, 7, EOS]), doc("b", [BOS, 9, 9, EOS])])
    # slots [4, 4]: "a" is padded, "b" (4 tokens) is not; "a" never predicts "b"'s BOS
    assert two.tokens.tolist() == [BOS, 7, EOS, PAD, BOS, 9, 9, EOS]
    assert two.labels.tolist() == [7, EOS, -100, -100, 9, 9, EOS, -100]
    assert two.position_ids.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert (two.doc_lengths, two.doc_lengths_padded) == ([3, 4], [4, 4])
    assert two.__key__ == "a,b"


def expected_tokens(tokenizer: Any, text: str) -> list[int]:
    body = tokenizer.encode(text, add_special_tokens=False)
    return [BOS, *body, EOS] if body else []


def check_pack(pack: Any, alignment: int, got: dict[str, list[int]]) -> None:
    """Slot invariants of one pack; collect each document's real tokens into ``got``."""
    assert sum(pack.doc_lengths_padded) == pack.length <= PACK_SIZE
    start = 0
    for key, n, slot in zip(pack.sample_keys, pack.doc_lengths, pack.doc_lengths_padded):
        assert slot % alignment == 0 and n <= slot < n + alignment, (key, n, slot)
        tokens = pack.tokens[start : start + slot]
        labels = pack.labels[start : start + slot]
        assert tokens[n:].eq(PAD).all()  # alignment padding
        assert labels[n - 1 :].eq(IGNORE_INDEX).all()  # last token + padding predict nothing
        assert labels[: n - 1].tolist() == tokens[1:n].tolist()  # LLM: every next token
        assert pack.position_ids[start : start + slot].tolist() == list(range(slot))
        assert key not in got, f"document {key!r} packed twice"
        got[key] = tokens[:n].tolist()
        start += slot


def check_batch(batch: Any, alignment: int) -> None:
    rows, length = batch.tokens.shape
    assert length == PACK_SIZE
    real = [n for row in batch.doc_lengths for n in row]
    cu = batch.cu_seqlens.tolist()
    cu_padded = batch.cu_seqlens_padded.tolist()
    assert batch.cu_seqlens.dtype == batch.cu_seqlens_padded.dtype == torch.int32
    assert cu == list(itertools.accumulate(real, initial=0))
    slots = [b - a for a, b in zip(cu_padded, cu_padded[1:])]
    assert all(s % alignment == 0 and s >= n for s, n in zip(slots, real))
    assert cu_padded[-1] == rows * length  # the row's tail padding joins its last slot
    assert batch.max_seqlen == max(real) and batch.max_seqlen_padded == max(slots)
    padding = batch.segment_ids == 0  # alignment padding and tail padding
    assert batch.labels[padding].eq(IGNORE_INDEX).all() and batch.tokens[padding].eq(PAD).all()
    params = batch.packed_seq_params()
    fields = params if isinstance(params, dict) else vars(params)
    assert fields["qkv_format"] == "thd"
    assert fields["cu_seqlens_q"].tolist() == cu and fields["cu_seqlens_q_padded"].tolist() == (
        cu_padded
    )
    assert batch.flash_attn_kwargs()["cu_seqlens_q"].tolist() == cu_padded


@pytest.mark.parametrize(
    ("cp", "tp"),
    [(2, 1), (2, 3)],  # alignment 2 * CP = 4; with sequence parallel TP=3: lcm(4, 3) = 12
    ids=["cp2", "cp2-tp3"],
)
def test_alignment_end_to_end_through_energon(
    text_dataset, tokenizer_dir, tokenizer, cp: int, tp: int
) -> None:
    alignment = math.lcm(2 * cp, tp)
    enc = LLMPackingTaskEncoder(
        tokenizer_dir, pack_size=PACK_SIZE, alignment=alignment, overlong="split", log_every=0
    )
    got: dict[str, list[int]] = {}
    packs = list(make_loader(text_dataset.path, enc, packing_buffer_size=16))
    for pack in packs:
        check_pack(pack, alignment, got)
    # nothing lost: every non-empty document, exactly its tokens (none is over 48 tokens)
    want = {k: expected_tokens(tokenizer, t) for k, t in text_dataset.records.items()}
    assert got == {k: v for k, v in want.items() if v}
    assert any(p.doc_lengths != p.doc_lengths_padded for p in packs)  # padding really happened

    batches = list(make_loader(text_dataset.path, enc, packing_buffer_size=16, batch_size=2))
    for batch in batches:
        check_batch(batch, alignment)
    # batching regroups the same packs: same documents, same order
    assert [k for b in batches for row in b.sample_keys for k in row] == [
        k for p in packs for k in p.sample_keys
    ]
