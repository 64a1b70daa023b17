# SPDX-License-Identifier: Apache-2.0
"""An item leaves a loader worker with its small tensors in one buffer, sent by value.

torch's DataLoader sends each tensor storage of a worker's item through shared memory: per
storage a new segment, a file descriptor handed over a socket and a mapping on both sides,
every page faulted in anew, and a copy into it. A 512 KiB text batch took 1.2 ms of CPU (both
processes) by value, 2.0 ms written into one shared buffer, 4.1 ms as a stock batch's
tensors (tests/benchmarks/worker_transfer.py; docs/benchmarks/loader.md, eleventh pass).

:func:`one_storage` runs on each item a worker sends. It puts the item's tensors of at most
:data:`SMALL` bytes into views of one buffer (a text batch is written into one by
``collate_packs`` already: nothing is copied) and has the worker's multiprocessing pickler send
that buffer's bytes with the item (:func:`_by_value`); the main process rebuilds the same views
of one tensor (:func:`_rebuilt`). Values, dtypes, shapes, strides and the identity of tensors
shared by two fields are kept; a view is sent as its own bytes, not its base's. When the small
tensors total more than ``BY_VALUE`` bytes the buffer is in shared memory and goes as before;
large tensors (pixels) keep their own storage and shared memory.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from energon_pack.samples import Arena
from energon_pack.samples._arena import BY_VALUE

__all__ = ["SMALL", "one_storage"]

logger = logging.getLogger(__name__)

#: Tensors up to this many bytes go into the one buffer; larger ones are sent on their own.
SMALL = 4 << 20

#: The item types this process's multiprocessing pickler sends by value (registered once).
_REGISTERED: set[type] = set()

#: (field path from the item, the dataclass holding the field, the tensor).
_Slot = tuple[tuple[str, ...], Any, torch.Tensor]


def one_storage(item: Any) -> Any:
    """``item`` (a dataclass batch) with its CPU tensors of at most :data:`SMALL` bytes made views
    of one buffer, in place, and its type sent by value by this process's multiprocessing
    pickler when that buffer is not in shared memory; anything else is returned unchanged."""
    slots: list[_Slot] = []
    _collect(item, (), slots, depth=0)
    unique = _unique(slots)
    if not unique:
        return item
    nbytes = sum(Arena.size(t.shape, t.dtype) for t in unique.values())
    by_value = nbytes <= BY_VALUE
    if not (by_value and _compact(unique.values(), nbytes)):
        arena = Arena(nbytes, shared=not by_value)
        views = {key: arena.empty(t.shape, t.dtype).copy_(t) for key, t in unique.items()}
        for path, owner, t in slots:
            object.__setattr__(owner, path[-1], views[id(t)])
    if by_value and type(item) not in _REGISTERED:
        ForkingPickler.register(type(item), _by_value)
        _REGISTERED.add(type(item))
    return item


def _collect(obj: Any, path: tuple[str, ...], out: list[_Slot], depth: int) -> None:
    """The slots of ``obj``'s dataclass fields holding movable tensors, nested dataclasses too."""
    if depth > 3 or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    for field in dataclasses.fields(obj):  # ClassVar views (``batch.position_ids``) are none
        value = getattr(obj, field.name, None)
        if isinstance(value, torch.Tensor):
            if _movable(value):
                out.append(((*path, field.name), obj, value))
        elif dataclasses.is_dataclass(value):
            _collect(value, (*path, field.name), out, depth + 1)


def _unique(slots: list[_Slot]) -> dict[int, torch.Tensor]:
    unique: dict[int, torch.Tensor] = {}
    for _, _, t in slots:
        unique.setdefault(id(t), t)
    return unique


def _storage(tensors: Any) -> torch.UntypedStorage | None:
    """The one storage all ``tensors`` view, or None when they view several."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage() for t in tensors}
    return next(iter(storages.values())) if len(storages) == 1 else None


def _compact(tensors: Any, nbytes: int) -> bool:
    """Whether the tensors are views of one storage no larger than an arena of them."""
    storage = _storage(tensors)
    return storage is not None and storage.nbytes() <= nbytes


def _movable(t: torch.Tensor) -> bool:
    return (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_quantized
        and not t.is_shared()
        and 0 < t.numel() * t.element_size() <= SMALL
    )


def _by_value(item: Any) -> Any:
    """The multiprocessing pickler's reduction of ``item`` in a loader worker: the item without
    its small tensors, the bytes of the one storage they view, and where each view lies in it.
    Anything else (tensors in several storages, an error) is pickled as usual."""
    try:
        slots: list[_Slot] = []
        _collect(item, (), slots, depth=0)
        unique = _unique(slots)
        storage = _storage(unique.values())
        if storage is None:
            return item.__reduce_ex__(4)
        data = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),)).numpy()
        index = {key: i for i, key in enumerate(unique)}
        views = [(t.storage_offset(), tuple(t.shape), t.stride(), t.dtype) for t in unique.values()]
        places = [(path, index[id(t)]) for path, _, t in slots]
        return _rebuilt, (
            _without_tensors(item, [path for path, _, _ in slots]),
            data,
            views,
            places,
        )
    except Exception:  # a feeder thread's error would lose the item: send it as usual
        logger.debug("sending %s through shared memory", type(item).__name__, exc_info=True)
        return item.__reduce_ex__(4)


def _without_tensors(item: Any, paths: list[tuple[str, ...]]) -> Any:
    """A shallow copy of ``item`` (and of the dataclasses on ``paths``) with None at ``paths``."""
    copies: dict[tuple[str, ...], Any] = {(): copy.copy(item)}
    for path in paths:
        for depth in range(1, len(path)):
            if path[:depth] not in copies:
                inner = copy.copy(getattr(copies[path[: depth - 1]], path[depth - 1]))
                object.__setattr__(copies[path[: depth - 1]], path[depth - 1], inner)
                copies[path[:depth]] = inner
        object.__setattr__(copies[path[:-1]], path[-1], None)
    return copies[()]


def _rebuilt(
    item: Any,
    data: np.ndarray,
    views: list[tuple[int, tuple[int, ...], tuple[int, ...], torch.dtype]],
    places: list[tuple[tuple[str, ...], int]],
) -> Any:
    """``item`` (unpickled in the main process) with its tensors back, as views of ``data``."""
    storage = torch.from_numpy(data).untyped_storage()
    tensors = [
        torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)
        for offset, shape, stride, dtype in views
    ]
    for path, i in places:
        owner = item
        for name in path[:-1]:
            owner = getattr(owner, name)
        object.__setattr__(owner, path[-1], tensors[i])
    return item
