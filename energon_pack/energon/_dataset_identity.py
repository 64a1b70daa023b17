# SPDX-License-Identifier: Apache-2.0
"""What a loader reads, for the resume fingerprint: each dataset's shards (names, sample counts,
sizes and a cheap content digest), its split and energon's reading settings, without reading
the data.

A shard's digest hashes its size and the whole file up to 64 KiB, else 8 blocks of 4 KiB at
evenly spaced offsets (the first and last included): 32 KiB per shard, so a rewritten shard is
caught without a full read. Example for a dataset of 2 shards of 10 samples:
``{"dataset.shards": "2 shards, 20 samples, 20480 bytes, 5d41402abc4b", "dataset.split": ...,
"dataset.max_samples_per_sequence": "8", ...}``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

__all__ = ["dataset_identity", "shard_digest"]

#: Files up to this size are hashed whole.
WHOLE_FILE_BYTES = 64 * 1024
#: Blocks hashed in a larger file, and their size.
SAMPLED_BLOCKS = 8
BLOCK_BYTES = 4 * 1024

#: Reading settings of energon's dataset factories that change which samples a worker reads.
_READING = (
    "max_samples_per_sequence",
    "shuffle_over_epochs",
    "parallel_shard_iters",
    "subset",
    "subflavors",
    "training",
)


def dataset_identity(datasets: Sequence[Any]) -> dict[str, str]:
    """Fingerprint entries for energon's ``LoadedDataset`` list (``build_train_datasets``'s
    ``datasets``): ``dataset`` for one, ``dataset.0``, ``dataset.1``, ... for a blend."""
    out: dict[str, str] = {"datasets": str(len(datasets))}
    for i, loaded in enumerate(datasets):
        name = "dataset" if len(datasets) == 1 else f"dataset.{i}"
        _one(name, loaded, out)
    return out


def _one(name: str, loaded: Any, out: dict[str, str]) -> None:
    factory = getattr(loaded, "dataset", loaded)
    out[f"{name}.weight"] = repr(getattr(loaded, "weight", None))
    out[f"{name}.repetitions"] = repr(getattr(loaded, "repetitions", None))
    sample_type = getattr(factory, "__sample_type__", None)
    out[f"{name}.sample_type"] = getattr(sample_type, "__qualname__", repr(sample_type))
    shards = getattr(factory, "shards", None)
    if shards is not None:
        out[f"{name}.shards"] = _shards_summary(shards)
        split_files = getattr(factory, "split_part_files", None)
        excludes = sorted(getattr(factory, "sample_excludes", None) or ())
        out[f"{name}.split"] = _digest(repr((split_files, excludes)).encode())
    else:  # e.g. a JSONL dataset: one file
        path = getattr(factory, "path", None)
        out[f"{name}.file"] = shard_digest(path) if path is not None else "unknown"
    for key in _READING:
        if hasattr(factory, key):
            out[f"{name}.{key}"] = repr(getattr(factory, key))


def _shards_summary(shards: Sequence[Any]) -> str:
    """``"N shards, S samples, B bytes, digest"`` over every shard's name, count and digest."""
    total_bytes = 0
    parts = []
    for shard in shards:
        size, digest = _size_and_digest(shard.path)
        total_bytes += size
        parts.append((shard.name, shard.count, size, digest))
    samples = sum(shard.count for shard in shards)
    digest = _digest(repr(parts).encode())
    return f"{len(shards)} shards, {samples} samples, {total_bytes} bytes, {digest}"


def shard_digest(path: Any) -> str:
    """``"B bytes, digest"`` of one file (see the module docstring for what is read)."""
    size, digest = _size_and_digest(path)
    return f"{size} bytes, {digest}"


def _size_and_digest(path: Any) -> tuple[int, str]:
    """The file's size and a digest of its size and sampled content (energon ``EPath`` or a
    local path)."""
    with _open(path) as f:
        f.seek(0, 2)
        size = f.tell()
        h = hashlib.sha1(str(size).encode())
        if size <= WHOLE_FILE_BYTES:
            f.seek(0)
            h.update(f.read())
        else:
            last = size - BLOCK_BYTES
            for i in range(SAMPLED_BLOCKS):
                f.seek(last * i // (SAMPLED_BLOCKS - 1))
                h.update(f.read(BLOCK_BYTES))
    return size, h.hexdigest()[:12]


def _open(path: Any) -> Any:
    opener = getattr(path, "open", None)
    if opener is not None and not isinstance(path, str):
        return opener("rb")
    return open(path, "rb")


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]
