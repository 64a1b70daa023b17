# SPDX-License-Identifier: Apache-2.0
"""Training on packed batches: :func:`make_loader` (a savable energon loader that restores
exactly) and ``PackedTrainer`` (transformers' ``Trainer`` on that loader, exact resume; imported
on first access since ``Trainer`` needs accelerate).
"""

from typing import Any

from energon_pack.training._loader import make_loader, pin_memory_for_device

__all__ = ["make_loader", "PackedTrainer", "pin_memory_for_device"]


def __getattr__(name: str) -> Any:
    if name == "PackedTrainer":
        from energon_pack.training._hf_trainer import PackedTrainer

        return PackedTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
