# SPDX-License-Identifier: Apache-2.0
"""``Arena``: a batch's tensors carved out of one buffer. A loader worker sends an item whose
small tensors are views of one buffer by value when the buffer is at most :data:`BY_VALUE`
bytes (``energon_pack.energon._one_storage``), else through one shared-memory segment: an arena
of a worker's item is in shared memory only above that size (docs/benchmarks/loader.md).
"""

from __future__ import annotations

import math

import torch

__all__ = ["BY_VALUE", "Arena", "in_loader_worker"]

_ALIGN = 64

#: A loader worker sends an item's small tensors by value (their bytes through the DataLoader's
#: pipe) when they total at most this many bytes; above it, through one shared-memory segment.
BY_VALUE = 4 << 20


def _shared_bytes(size: int) -> torch.Tensor:
    """``size`` bytes (uint8) allocated in shared memory: the DataLoader then sends their
    descriptor instead of copying them into a new segment (``share_memory_`` copies)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # a torch without it: copied once more, still one segment
        return torch.empty(size, dtype=torch.uint8)
    return torch.empty(0, dtype=torch.uint8).set_(new_shared(size))


def in_loader_worker() -> bool:
    """Whether this process is a torch DataLoader worker (its items are sent to the trainer)."""
    return torch.utils.data.get_worker_info() is not None


class Arena:
    """Uninitialised tensors of the given shapes and dtypes, each a view of one buffer of
    ``nbytes`` (:meth:`size` adds a request's share), shared memory when ``shared``
    (:meth:`for_item`: the buffer of an item a worker sends).

    ``a = Arena(Arena.size((2, 3), torch.int64) + Arena.size((4,), torch.int32))``, then
    ``a.empty((2, 3), torch.int64)`` and ``a.empty((4,), torch.int32)``.
    """

    def __init__(self, nbytes: int, *, shared: bool = False) -> None:
        self.buffer = _shared_bytes(nbytes) if shared else torch.empty(nbytes, dtype=torch.uint8)
        self.storage = self.buffer.untyped_storage()
        self.used = 0

    @classmethod
    def for_item(cls, nbytes: int) -> Arena:
        """The arena of an item this process sends or keeps: in shared memory only inside a
        loader worker and above :data:`BY_VALUE` bytes (smaller ones travel by value)."""
        return cls(nbytes, shared=nbytes > BY_VALUE and in_loader_worker())

    @staticmethod
    def size(shape: tuple[int, ...], dtype: torch.dtype) -> int:
        """Bytes a ``shape`` tensor of ``dtype`` takes in an arena (aligned)."""
        nbytes = math.prod(shape) * dtype.itemsize
        return -(-nbytes // _ALIGN) * _ALIGN

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The next ``shape`` tensor of ``dtype``; ValueError past the arena's size."""
        end = self.used + self.size(shape, dtype)
        if end > self.buffer.shape[0]:
            raise ValueError(
                f"arena of {len(self.buffer)} bytes cannot hold a {tuple(shape)} {dtype} tensor "
                f"after {self.used} bytes; size it with Arena.size of every request"
            )
        # a typed view of the buffer's storage at its offset (one call; a slice and two views
        # cost twice as much)
        out = torch.empty(0, dtype=dtype).set_(self.storage, self.used // dtype.itemsize, shape)
        self.used = end
        return out
