# SPDX-License-Identifier: Apache-2.0
"""energon-pack: sequence packing for megatron-energon.

The pure algorithms layer (``PackingSpec``, ``pack_lengths``, ``ALGORITHMS``) is imported eagerly and needs only
NumPy. Everything that needs torch or megatron-energon (metadata, samples, task encoders) is
imported lazily on first attribute access, so ``import energon_pack.algorithms`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from energon_pack.algorithms import ALGORITHMS, PackingSpec, pack_lengths

__version__ = "0.1.0"

# name -> submodule that defines it (imported on first access)
_LAZY: dict[str, str] = {
    "CarryOver": "energon_pack.algorithms",
    "OverlongPolicy": "energon_pack.algorithms",
    "PackingTaskEncoder": "energon_pack.task_encoders",
    "LLMPackingTaskEncoder": "energon_pack.task_encoders",
    "CaptioningPackingTaskEncoder": "energon_pack.task_encoders",
    "SFTPackingTaskEncoder": "energon_pack.task_encoders",
    "seeded_stateless": "energon_pack.encoding",
    "PackingConfig": "energon_pack.task_encoders",
    "PackingStats": "energon_pack.encoding",
    "SeedSource": "energon_pack.encoding",
    "OverlongSampleError": "energon_pack.algorithms",
    "pack_documents": "energon_pack.samples",
    "collate_packs": "energon_pack.samples",
    "document_metadata": "energon_pack.attention",
}

__all__ = ["ALGORITHMS", "PackingSpec", "pack_lengths", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'energon_pack' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
