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
tensors (pixels) keep their own storage. Values, dtypes, shapes and the identity of tensors
shared by two fields are kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["SMALL", "one_storage"]

#: Tensors up to this many bytes go into the shared buffer; larger ones are sent on their own.
SMALL = 4 << 20
_ALIGN = 64


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
    starts, size = {}, 0
    for key, t in unique.items():
        starts[key] = size
        size += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    buffer = _shared_bytes(size)
    views = {}
    for key, t in unique.items():
        start = starts[key]
        view = buffer[start : start + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
        views[key] = view.copy_(t)
    for owner, name, t in slots:
        object.__setattr__(owner, name, views[id(t)])
    return item


def _shared_bytes(size: int) -> torch.Tensor:
    """``size`` bytes allocated in shared memory: the DataLoader then sends their descriptor
    instead of copying them into a new segment (``share_memory_`` of a tensor copies)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # a torch without it: copied once more, still one segment
        return torch.empty(size, dtype=torch.uint8)
    return torch.empty(0, dtype=torch.uint8).set_(new_shared(size))


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
        and 0 < t.numel() * t.element_size() <= SMALL
    )
