# SPDX-License-Identifier: Apache-2.0
"""Training on packed batches: :func:`make_loader` (a savable energon loader that restores
exactly), ``PackedTrainer`` (transformers' ``Trainer`` on that loader, exact resume, packed
evaluation; imported on first access since ``Trainer`` needs accelerate), and for a plain loop
:func:`evaluate` over :func:`make_eval_loader` (every val document once, token-mean loss).
"""

from typing import Any

from energon_pack.training._eval import evaluate
from energon_pack.training._loader import make_eval_loader, make_loader, pin_memory_for_device

__all__ = ["evaluate", "make_eval_loader", "make_loader", "PackedTrainer", "pin_memory_for_device"]


def __getattr__(name: str) -> Any:
    if name == "PackedTrainer":
        from energon_pack.training._hf_trainer import PackedTrainer

        return PackedTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
