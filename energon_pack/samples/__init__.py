# SPDX-License-Identifier: Apache-2.0
"""Sample and batch types of energon-pack (``@edataclass``), packing, collation and adapters.

The flow: ``encode_sample`` returns an :class:`EncodedSample` per document; ``pack_documents``
concatenates the selected ones into a :class:`PackedTextSample` (aligned labels, reset
positions); ``collate_packs`` stacks packs into a :class:`PackedTextBatch`, whose adapters speak
each kernel's vocabulary::

    pack = pack_documents([doc_a, doc_b])          # tokens (n,), labels (n,), position_ids (n,)
    batch = collate_packs([pack], pad_to=4096)     # (1, 4096) + cu_seqlens, max_seqlen, ...
    loss = model(**batch.hf_kwargs("sdpa")).loss   # or batch.flash_attn_kwargs(), ...
"""

from energon_pack.samples._batch import PackedCaptioningBatch, PackedTextBatch, collate_packs
from energon_pack.samples._encoded import EncodedCaptioningSample, EncodedSample
from energon_pack.samples._packed import (
    IGNORE_INDEX,
    PackedCaptioningSample,
    PackedTextSample,
    pack_documents,
)

__all__ = [
    "IGNORE_INDEX",
    "EncodedCaptioningSample",
    "EncodedSample",
    "PackedCaptioningBatch",
    "PackedCaptioningSample",
    "PackedTextBatch",
    "PackedTextSample",
    "collate_packs",
    "pack_documents",
]
