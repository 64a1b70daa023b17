# SPDX-License-Identifier: Apache-2.0
"""energon-pack: sequence packing for megatron-energon.

The public API is the names below; everything else lives in the layer packages
(``energon_pack.algorithms``, ``.attention``, ``.samples``, ``.encoding``, ``.energon``,
``.task_encoders``, ``.tools``, ``.testing``), whose implementation modules are private::

    from energon_pack import CarryOver, LLMPackingTaskEncoder
    encoder = LLMPackingTaskEncoder(tokenizer_dir, pack_size=4096, carry_over=CarryOver())

The rule: one name per concept, each name at home in exactly one layer package and re-exported
here unchanged. The pure layer (``PackingSpec``, ``pack_lengths``, ``simulate``, ...) is imported
eagerly and needs only NumPy; names that need torch or megatron-energon are imported on first
access, so ``import energon_pack`` (and the ``simulate`` command) stays light. Type checkers see
every name through the ``TYPE_CHECKING`` imports, which mirror ``_LAZY`` (a test keeps them equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from energon_pack.algorithms import (
    ALGORITHMS,
    CarryOver,
    MediaLoad,
    OverlongPolicy,
    OverlongSampleError,
    PackingSpec,
    pack_lengths,
    simulate,
)

if TYPE_CHECKING:
    from energon_pack.attention import (
        FirstBatchReport,
        PackingNotExactError,
        check_first_batch,
        check_model,
    )
    from energon_pack.encoding import PackingStats, SmallPackingBufferWarning
    from energon_pack.energon import seeded_stateless
    from energon_pack.samples import EncodedSample, PackedTextBatch, PackedTextSample
    from energon_pack.task_encoders import (
        CaptioningPackingTaskEncoder,
        ConversationPackingTaskEncoder,
        LLMPackingTaskEncoder,
        PackingConfig,
        PackingTaskEncoder,
        SFTPackingTaskEncoder,
        VQAPackingTaskEncoder,
    )

__version__ = "0.1.0"

#: name -> the layer package that defines it (imported on first access).
_LAZY: dict[str, str] = {
    "check_first_batch": "energon_pack.attention",
    "check_model": "energon_pack.attention",
    "FirstBatchReport": "energon_pack.attention",
    "PackingNotExactError": "energon_pack.attention",
    "PackingStats": "energon_pack.encoding",
    "SmallPackingBufferWarning": "energon_pack.encoding",
    "seeded_stateless": "energon_pack.energon",
    "EncodedSample": "energon_pack.samples",
    "PackedTextBatch": "energon_pack.samples",
    "PackedTextSample": "energon_pack.samples",
    "CaptioningPackingTaskEncoder": "energon_pack.task_encoders",
    "ConversationPackingTaskEncoder": "energon_pack.task_encoders",
    "LLMPackingTaskEncoder": "energon_pack.task_encoders",
    "PackingConfig": "energon_pack.task_encoders",
    "PackingTaskEncoder": "energon_pack.task_encoders",
    "SFTPackingTaskEncoder": "energon_pack.task_encoders",
    "VQAPackingTaskEncoder": "energon_pack.task_encoders",
}

__all__ = [
    "ALGORITHMS",
    "CaptioningPackingTaskEncoder",
    "ConversationPackingTaskEncoder",
    "CarryOver",
    "check_first_batch",
    "check_model",
    "EncodedSample",
    "FirstBatchReport",
    "LLMPackingTaskEncoder",
    "MediaLoad",
    "OverlongPolicy",
    "OverlongSampleError",
    "pack_lengths",
    "PackedTextBatch",
    "PackedTextSample",
    "PackingConfig",
    "PackingNotExactError",
    "PackingSpec",
    "PackingStats",
    "PackingTaskEncoder",
    "seeded_stateless",
    "SFTPackingTaskEncoder",
    "simulate",
    "VQAPackingTaskEncoder",
    "SmallPackingBufferWarning",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'energon_pack' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
