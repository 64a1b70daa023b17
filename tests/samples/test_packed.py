# SPDX-License-Identifier: Apache-2.0
"""pack_documents: labels, positions, keys and images, by hand and on seeded random packs."""

from __future__ import annotations

import random
from typing import ClassVar

import pytest
import torch
from megatron.energon import edataclass

from energon_pack.samples import (
    EncodedCaptioningSample,
    EncodedSample,
    PackedCaptioningSample,
    PackedTextSample,
    collate_packs,
    pack_documents,
)
from energon_pack_tools import make_document

doc = make_document


def test_worked_example_labels_never_cross_documents() -> None:
    pack = pack_documents([doc("a", [5, 6, 7]), doc("b", [8, 9])])
    assert isinstance(pack, PackedTextSample)
    assert pack.tokens.tolist() == [5, 6, 7, 8, 9]
    # 7 must not predict 8 (next document): -100 at the last position of every document
    assert pack.labels.tolist() == [6, 7, -100, 9, -100]
    assert pack.position_ids.tolist() == [0, 1, 2, 0, 1]
    assert pack.doc_lengths == pack.doc_lengths_padded == [3, 2]
    assert pack.sample_keys == ["a", "b"]
    assert pack.__key__ == "a,b" and pack.__restore_key__ == ()


def test_loss_mask_drops_targets_and_first_token_is_never_a_target() -> None:
    # mask [T, F, F, T, T]: targets are tokens 3 and 4 (predicted from positions 2 and 3);
    # loss_mask[0] = True is ignored since nothing precedes token 0
    pack = pack_documents([doc("a", [1, 2, 3, 4, 5], [1, 0, 0, 1, 1]), doc("b", [6, 7], [1, 1])])
    assert pack.labels.tolist() == [-100, -100, 4, 5, -100, 7, -100]


def test_alignment_pads_each_document() -> None:
    pack = pack_documents([doc("a", [5, 6, 7]), doc("b", [8, 9])], alignment=4, pad_token_id=0)
    assert pack.tokens.tolist() == [5, 6, 7, 0, 8, 9, 0, 0]
    assert pack.labels.tolist() == [6, 7, -100, -100, 9, -100, -100, -100]
    assert pack.position_ids.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert pack.doc_lengths == [3, 2] and pack.doc_lengths_padded == [4, 4]


def test_subflavors_and_sources_follow_the_members() -> None:
    a = doc("a", [1, 2], __subflavors__={"src": "x"}, __sources__=("s1", "s2"))
    b = doc("b", [3], __subflavors__={"src": "y"}, __sources__=("s2", "s3"))
    pack = pack_documents([a, b])
    assert pack.__subflavors__ == {"src": "x"}
    assert pack.__sources__ == ("s1", "s2", "s3")  # deduplicated, in order


@pytest.mark.parametrize("seed", range(20))
def test_random_packs_labels_match_a_per_document_loop(seed: int) -> None:
    rng = random.Random(seed)
    docs = []
    for i in range(rng.randint(1, 6)):
        n = rng.choice([1, 2, rng.randint(1, 50)])
        # random targets, or pretraining's (all but BOS: the labels' fast path)
        bos_only = rng.random() < 0.5
        mask = [i > 0 for i in range(n)] if bos_only else [rng.random() < 0.7 for _ in range(n)]
        docs.append(doc(str(i), [rng.randrange(100) for _ in range(n)], mask))
    alignment = rng.choice([1, 2, 8])
    pack = pack_documents(docs, alignment=alignment, pad_token_id=-1)
    expected_tokens, expected_labels, expected_pos = per_document_loop(docs, alignment)
    assert pack.tokens.tolist() == expected_tokens
    assert pack.labels.tolist() == expected_labels
    assert pack.position_ids.tolist() == expected_pos
    # a batch writes the same labels into its rows, -100 on the tail (rows of different packs:
    # the batch writes them over its flattened rows at once)
    other = pack_documents(docs[::-1], alignment=alignment, pad_token_id=-1)
    tail = rng.randint(0, 5)
    batch = collate_packs([pack, other, pack], pad_to=pack.length + tail)
    reversed_labels = per_document_loop(docs[::-1], alignment)[1]
    rows = [expected_labels, reversed_labels, expected_labels]
    assert batch.labels.tolist() == [row + [-100] * tail for row in rows]


def per_document_loop(
    docs: list[EncodedSample], alignment: int
) -> tuple[list[int], list[int], list[int]]:
    """The tokens, labels and positions of a pack of ``docs``, document by document."""
    tokens, labels, positions = [], [], []
    for d in docs:
        t, m = d.tokens.tolist(), d.loss_mask.tolist()
        n = len(t)
        slot = -(-n // alignment) * alignment
        tokens += t + [-1] * (slot - n)
        labels += [t[i + 1] if i + 1 < n and m[i + 1] else -100 for i in range(n)]
        labels += [-100] * (slot - n)
        positions += list(range(slot))
    return tokens, labels, positions


def cap(
    key: str, n: int, spans: list[list[int]], grids: list[list[int]]
) -> EncodedCaptioningSample:
    patches = sum(t * h * w for t, h, w in grids)
    return EncodedCaptioningSample(
        __key__=key,
        __restore_key__=(),
        tokens=torch.arange(n),
        loss_mask=torch.ones(n, dtype=torch.bool),
        pixel_values=torch.full((patches, 3), float(len(key))),
        image_grid_thw=torch.tensor(grids, dtype=torch.int64).view(-1, 3),
        image_spans=torch.tensor(spans, dtype=torch.int64).view(-1, 2),
    )


def test_captioning_pack_shifts_spans_and_builds_mrope_per_document() -> None:
    a = cap("a", 6, [[1, 5]], [[1, 4, 4]])  # 16 patches, 4 tokens
    b = cap("bb", 5, [[0, 2]], [[1, 2, 4]])  # 8 patches, 2 tokens
    pack = pack_documents([a, b], alignment=4, mrope=True)
    assert isinstance(pack, PackedCaptioningSample)
    # b starts at 8 (a is padded from 6 to 8)
    assert pack.image_spans.tolist() == [[1, 5], [8, 10]]
    assert pack.image_grid_thw.tolist() == [[1, 4, 4], [1, 2, 4]]
    assert pack.pixel_values.shape == (24, 3)
    assert pack.pixel_values[:16].eq(1.0).all() and pack.pixel_values[16:].eq(2.0).all()
    # second document restarts at 0: image 1x2 grid, then text from max(1, 2) = 2
    assert pack.mrope_position_ids[:, 8:].tolist() == [
        [0, 0, 2, 3, 4, 5, 6, 7],
        [0, 0, 2, 3, 4, 5, 6, 7],
        [0, 1, 2, 3, 4, 5, 6, 7],
    ]
    assert pack_documents([a, b]).mrope_position_ids is None


@pytest.mark.parametrize(
    ("samples", "kwargs", "match"),
    [
        ([], {}, "no samples"),
        ([doc("a", [])], {}, "non-empty"),
        ([doc("a", [1, 2], [1])], {}, "non-empty 1-D"),
        # a text pack would drop the captioning document's images
        ([doc("a", [1]), cap("b", 2, [], [])], {}, "'b' is a EncodedCaptioningSample.*mix"),
        ([cap("a", 2, [], []), doc("b", [1])], {}, "'b' is a EncodedSample.*mix"),
        ([object()], {}, "is a object"),
        ([doc("a", [1])], {"alignment": 0}, "alignment"),
    ],
)
def test_bad_inputs_raise(samples, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        pack_documents(samples, **kwargs)


@edataclass
class _PlannedDocument(EncodedSample):
    ready_to_pack: ClassVar[bool] = False


def _typed(key: str, tokens: list[int], types: int) -> EncodedSample:
    return doc(key, tokens, token_type_ids=torch.zeros(types, dtype=torch.int64))


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (doc("bad", [1, 2, 3], [1, 1]), r"'bad': tokens \(3,\) and loss_mask \(2,\)"),
        (doc("bad", []), r"'bad': tokens \(0,\) and loss_mask \(0,\) must be equal non-empty"),
        (doc("bad", torch.ones(2, 2)), r"'bad': tokens \(2, 2\)"),
        (doc("bad", [1], document_type=_PlannedDocument), "'bad' is a _PlannedDocument: its media"),
        (_typed("bad", [1, 2], 2), "'ok' has no token_type_ids but others in its pack do"),
    ],
)
def test_a_bad_document_among_good_ones_is_named(bad: EncodedSample, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pack_documents([doc("ok", [1, 2]), bad, doc("ok2", [3])])


def test_token_types_of_the_wrong_length_are_named() -> None:
    with pytest.raises(ValueError, match=r"'bad': token_type_ids \(3,\) for 2 tokens"):
        pack_documents([_typed("ok", [1, 2], 2), _typed("bad", [1, 2], 3)])


def test_sources_none_when_no_document_has_any() -> None:
    assert pack_documents([doc("a", [1]), doc("b", [2])]).__sources__ is None
    mixed = pack_documents([doc("a", [1]), doc("b", [2], __sources__=("s",))])
    assert mixed.__sources__ == ("s",)


def test_options_belong_to_their_pack_type() -> None:
    with pytest.raises(TypeError, match=r"PackedTextSample.*\['mrope'\]"):
        pack_documents([doc("a", [1])], mrope=True)


def test_each_pack_type_builds_itself_and_refuses_other_documents() -> None:
    a = cap("a", 6, [[1, 5]], [[1, 4, 4]])
    pack = PackedCaptioningSample.from_documents([a], alignment=4, mrope=True)
    assert torch.equal(pack.tokens, pack_documents([a], alignment=4, mrope=True).tokens)
    assert pack.doc_lengths_padded == [8]
    with pytest.raises(ValueError, match="would lose its fields"):
        PackedTextSample.from_documents([a])
    with pytest.raises(ValueError, match="holds EncodedCaptioningSamples"):
        PackedCaptioningSample.from_documents([doc("b", [1, 2])])
