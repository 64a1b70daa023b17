# SPDX-License-Identifier: Apache-2.0
"""A batch leaves a loader worker with its small tensors in one storage.

torch's DataLoader sends each tensor storage of a worker's item through shared memory: one
segment, one file descriptor and one mapping per storage, on both sides. A packed batch has
eight or more (tokens, labels, positions, segment ids, borders, ``seq_idx``, ``cu_seqlens``, ...)
where a padded one has two, and the main process paid that per-storage cost, not the bytes:
140 ms of CPU per 300-document epoch at 2 workers where a plain loader's paid 70, 80 ms since
(``python tests/benchmarks/loader_vs_energon.py --docs 300 --rounds 7 --workers 2``;
docs/benchmarks/loader.md). :func:`one_storage` copies a batch's tensors under :data:`SMALL`
bytes into one buffer allocated in shared memory and points the fields at views of it; large
tensors (pixels) keep their own storage, and tensors already in shared memory (a text batch
written into a shared :class:`~energon_pack.samples.Arena` by ``collate_packs``) stay where
they are. Values, dtypes, shapes and the identity of tensors shared by two fields are kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from energon_pack.samples import Arena

__all__ = ["SMALL", "one_storage"]

#: Tensors up to this many bytes go into the shared buffer; larger ones are sent on their own.
SMALL = 4 << 20


def one_storage(item: Any) -> Any:
    """``item`` (a dataclass batch) with its CPU tensors of at most :data:`SMALL` bytes moved
    into views of one buffer, in place; anything else is returned unchanged."""
    slots: list[tuple[Any, str, torch.Tensor]] = []
    _collect(item, slots, depth=0)
    unique: dict[int, torch.Tensor] = {}
    for _, _, t in slots:
        unique.setdefault(id(t), t)
    if len(unique) < 2:
        return item
    arena = Arena(sum(Arena.size(t.shape, t.dtype) for t in unique.values()), shared=True)
    views = {key: arena.empty(t.shape, t.dtype).copy_(t) for key, t in unique.items()}
    for owner, name, t in slots:
        object.__setattr__(owner, name, views[id(t)])
    return item


def _collect(obj: Any, out: list[tuple[Any, str, torch.Tensor]], depth: int) -> None:
    """The (owner, field, tensor) slots of ``obj``'s dataclass fields, nested dataclasses too."""
    if depth > 3 or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    for field in dataclasses.fields(obj):  # ClassVar views (``batch.position_ids``) are none
        value = getattr(obj, field.name, None)
        if isinstance(value, torch.Tensor):
            if _movable(value):
                out.append((obj, field.name, value))
        elif dataclasses.is_dataclass(value):
            _collect(value, out, depth + 1)


def _movable(t: torch.Tensor) -> bool:
    return (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_quantized
        and not t.is_shared()
        and 0 < t.numel() * t.element_size() <= SMALL
    )
