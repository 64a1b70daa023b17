# SPDX-License-Identifier: Apache-2.0
"""An item leaves a loader worker with its small tensors in one storage.

torch's DataLoader sends each tensor storage of a worker's item through shared memory: one
segment, one file descriptor and one mapping per storage, on both sides, and a copy into it.
The main process paid that per storage, not per byte (docs/benchmarks/loader.md, fourth pass).
A text batch is written into one shared buffer by ``collate_packs`` already
(:class:`~energon_pack.samples.Arena`); :func:`one_storage` moves the rest (media batches'
small fields, a pack sent unbatched, a subclass's extra fields): it copies the item's tensors
under :data:`SMALL` bytes that are not in shared memory yet into one shared buffer and points
the fields at views of it. Large tensors (pixels) keep their own storage. Values, dtypes,
shapes and the identity of tensors shared by two fields are kept; a view is sent as its own
bytes, not its base's.
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
