# SPDX-License-Identifier: Apache-2.0
"""Sample, pack and batch types (``@edataclass``): ``encode_sample`` returns an
:class:`EncodedSample` per document, ``pack_documents`` concatenates documents into a
:class:`PackedTextSample`, ``collate_packs`` stacks packs into a :class:`PackedTextBatch`
whose adapters speak each kernel's vocabulary; each modality (captioning, multimodal) has its
own three types. See docs/concepts/packing.md and docs/concepts/metadata.md.
"""

from energon_pack.samples._arena import Arena
from energon_pack.samples._batch import (
    PackedCaptioningBatch,
    PackedMultimodalBatch,
    PackedTextBatch,
    collate_packs,
)
from energon_pack.samples._counts import PackingCounts
from energon_pack.samples._encoded import (
    EncodedCaptioningSample,
    EncodedMultimodalSample,
    EncodedSample,
    MediaFamily,
)
from energon_pack.samples._light import LightMultimodalDocument
from energon_pack.samples._megatron import MegatronBatch
from energon_pack.samples._megatron_batch import megatron_batch
from energon_pack.samples._megatron_vlm import (
    MEGATRON_VLM_LAYOUTS,
    MegatronVLMBatch,
    VisionCost,
    attention_flops,
    bridge_vlm_batch,
)
from energon_pack.samples._packed import PackedCaptioningSample, PackedTextSample, pack_documents
from energon_pack.samples._rows import RowSource, concat_rows, empty_rows

__all__ = [
    "Arena",
    "EncodedCaptioningSample",
    "EncodedMultimodalSample",
    "EncodedSample",
    "LightMultimodalDocument",
    "MEGATRON_VLM_LAYOUTS",
    "MediaFamily",
    "MegatronBatch",
    "PackedCaptioningBatch",
    "PackedMultimodalBatch",
    "PackedCaptioningSample",
    "PackedTextBatch",
    "PackedTextSample",
    "PackingCounts",
    "RowSource",
    "collate_packs",
    "concat_rows",
    "empty_rows",
    "bridge_vlm_batch",
    "megatron_batch",
    "MegatronVLMBatch",
    "VisionCost",
    "attention_flops",
    "pack_documents",
]
