# SPDX-License-Identifier: Apache-2.0
"""Type registry: a new modality is a document type, a pack type and a batch type, nothing else.

The QA types below stand for a modality added later (VQA, video conversations): they register
themselves by naming what they hold, and ``pack_documents`` / ``collate_packs`` (which the
encoders call) use them without a change to shared code.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
import torch
from megatron.energon import edataclass

from energon_pack.samples import (
    EncodedCaptioningSample,
    EncodedSample,
    PackedCaptioningSample,
    PackedTextBatch,
    PackedTextSample,
    collate_packs,
    pack_documents,
)
from energon_pack.samples._batch import PackedCaptioningBatch
from energon_pack.samples._packed import PackLayout
from energon_pack.samples._types import TypeRegistry


@edataclass
class QADocument(EncodedSample):
    """A document whose answer starts at ``answer_start``."""

    #: Offset of the answer in ``tokens``.
    answer_start: int


@edataclass
class PackedQASample(PackedTextSample):
    """A pack of QA documents."""

    #: Holds QA documents.
    document_type: ClassVar[type[EncodedSample]] = QADocument
    #: Answer offsets in pack coordinates.
    answer_starts: list[int]

    @classmethod
    def modality_fields(
        cls, samples: Sequence[QADocument], layout: PackLayout, **options: Any
    ) -> dict[str, Any]:
        return {"answer_starts": [s.answer_start + st for s, st in zip(samples, layout.starts)]}


@edataclass
class PackedQABatch(PackedTextBatch):
    """A batch of QA packs."""

    #: Collates QA packs.
    pack_type: ClassVar[type[PackedTextSample]] = PackedQASample
    #: Per row, answer offsets.
    answer_starts: list[list[int]]

    @classmethod
    def modality_fields(cls, packs: Sequence[PackedQASample], length: int) -> dict[str, Any]:
        return {"answer_starts": [p.answer_starts for p in packs]}


def qa(key: str, n: int, answer_start: int) -> QADocument:
    return QADocument(
        __key__=key,
        __restore_key__=(),
        tokens=torch.arange(1, n + 1),
        loss_mask=torch.ones(n, dtype=torch.bool),
        answer_start=answer_start,
    )


def test_a_new_modality_packs_and_collates_through_its_own_types() -> None:
    pack = pack_documents([qa("q", 3, 2), qa("r", 2, 1)], alignment=4)
    assert type(pack) is PackedQASample
    assert pack.answer_starts == [2, 5]  # r starts at 4 (q is padded from 3 to 4)
    batch = collate_packs([pack, pack_documents([qa("s", 5, 3)])], pad_to=8)
    assert type(batch) is PackedQABatch
    assert batch.answer_starts == [[2, 5], [3]]
    assert batch.cu_seqlens.tolist() == [0, 3, 5, 10]
    # the batch crosses worker processes: it pickles with its metadata
    again = pickle.loads(pickle.dumps(batch))
    assert torch.equal(again.metadata.seq_idx, batch.metadata.seq_idx)
    assert again.answer_starts == batch.answer_starts


def test_registries_map_each_type_to_its_container() -> None:
    from energon_pack.samples._batch import BATCH_TYPES
    from energon_pack.samples._packed import PACK_TYPES

    assert PACK_TYPES.lookup(EncodedSample) is PackedTextSample
    assert PACK_TYPES.lookup(EncodedCaptioningSample) is PackedCaptioningSample
    assert PACK_TYPES.lookup(QADocument) is PackedQASample
    assert BATCH_TYPES.lookup(PackedCaptioningSample) is PackedCaptioningBatch
    assert BATCH_TYPES.lookup(PackedQASample) is PackedQABatch
    assert PACK_TYPES.lookup(int) is None


def test_a_pack_subclass_that_only_adds_fields_collates_as_its_base() -> None:
    # what finalize_pack returns: a subclass without its own document_type
    registry = TypeRegistry("pack")

    class Base:
        pass

    class Extended(Base):
        pass

    class Container:
        pass

    registry.register(Base, Container)
    assert registry.lookup(Extended) is Container
    registry.check(Container, [Extended()], Base)
    with pytest.raises(ValueError, match="pack .* is a int: a Container holds Bases"):
        registry.check(Container, [1], Base)


def test_mixed_pack_types_do_not_collate() -> None:
    text = pack_documents(
        [
            EncodedSample(
                __key__="t",
                __restore_key__=(),
                tokens=torch.arange(2),
                loss_mask=torch.ones(2).bool(),
            )
        ]
    )
    qa_pack = pack_documents([qa("q", 3, 2)])
    with pytest.raises(ValueError, match="'q' is a PackedQASample.*PackedTextBatch.*mix"):
        collate_packs([text, qa_pack])
    with pytest.raises(ValueError, match="'t' is a PackedTextSample.*PackedQABatch holds"):
        collate_packs([qa_pack, text])
