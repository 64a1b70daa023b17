# SPDX-License-Identifier: Apache-2.0
"""Sample and batch types of energon-pack (``@edataclass``), packing, collation and adapters.

The flow: ``encode_sample`` returns an :class:`EncodedSample` per document; ``pack_documents``
concatenates the selected ones into a :class:`PackedTextSample` (aligned labels, reset
positions); ``collate_packs`` stacks packs into a :class:`PackedTextBatch`, whose adapters speak
each kernel's vocabulary::

    pack = pack_documents([doc_a, doc_b])          # tokens (n,), labels (n,), position_ids (n,)
    batch = collate_packs([pack], pad_to=4096)     # (1, 4096) + metadata (cu_seqlens, ...)
    loss = model(**batch.hf_kwargs("sdpa", config=model)).loss   # or batch.flash_attn_kwargs(), ...

Each type builds itself (``PackedTextSample.from_documents``, ``PackedTextBatch.from_packs``,
and the captioning types likewise); ``pack_documents`` / ``collate_packs`` pick the type
registered for their input. A new modality adds an encoded type, a pack type
(``document_type = ...``, fields from ``modality_fields``) and a batch type (``pack_type =
...``): no shared code changes. The multimodal types (any number of images and videos per
document, text-only documents too) are built that way.
"""

from energon_pack.samples._batch import (
    PackedCaptioningBatch,
    PackedTextBatch,
    collate_packs,
    image_kwargs,
)
from energon_pack.samples._counts import PackingCounts
from energon_pack.samples._encoded import EncodedCaptioningSample, EncodedSample
from energon_pack.samples._light import (
    LightCaptioningDocument,
    LightMultimodalDocument,
    light_document,
    materialized,
)
from energon_pack.samples._megatron import MegatronBatch, megatron_batch
from energon_pack.samples._multimodal import (
    EncodedMultimodalSample,
    PackedMultimodalBatch,
    PackedMultimodalSample,
)
from energon_pack.samples._packed import (
    IGNORE_INDEX,
    PackedCaptioningSample,
    PackedTextSample,
    PackLayout,
    pack_documents,
)
from energon_pack.samples._rows import RowSource, concat_rows, empty_rows

__all__ = [
    "IGNORE_INDEX",
    "EncodedCaptioningSample",
    "EncodedMultimodalSample",
    "EncodedSample",
    "LightCaptioningDocument",
    "LightMultimodalDocument",
    "MegatronBatch",
    "PackedCaptioningBatch",
    "PackedCaptioningSample",
    "PackedMultimodalBatch",
    "PackedMultimodalSample",
    "PackedTextBatch",
    "PackedTextSample",
    "PackingCounts",
    "PackLayout",
    "RowSource",
    "collate_packs",
    "concat_rows",
    "empty_rows",
    "image_kwargs",
    "light_document",
    "materialized",
    "megatron_batch",
    "pack_documents",
]
