# SPDX-License-Identifier: Apache-2.0
"""Contract checks for any packing task encoder on a real energon loader: each sample once
(:func:`assert_each_sample_once`), save/restore gives the identical rest of the epoch
(:func:`assert_resume_identical`), ``restore_sample`` rebuilds each item
(:func:`assert_restore_sample_reproduces`). Items compare field by field, tensors bit for bit,
except :data:`RUN_RECORD_FIELDS`. ``make_loader`` arguments build a fresh loader per call.
See docs/howto/custom-task.md.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

__all__ = [
    "assert_each_sample_once",
    "assert_resume_identical",
    "assert_restore_sample_reproduces",
    "assert_same_item",
    "member_keys",
]

#: Separator between a sample key and its piece index for split samples (``"000007#2"``).
SPLIT_SEPARATOR = "#"
#: Fields that record the run, not the item (skipped by :func:`assert_same_item`).
RUN_RECORD_FIELDS = frozenset({"counts"})


def member_keys(item: Any) -> list[str]:
    """Member document keys of a pack (``sample_keys``) or of a batch (flattened rows)."""
    keys = item.sample_keys
    if keys and isinstance(keys[0], list):
        return [k for row in keys for k in row]
    return list(keys)


def assert_each_sample_once(
    items: Iterable[Any], expected_keys: Iterable[str], *, dropped: Iterable[str] = ()
) -> list[Any]:
    """Check that the packs cover ``expected_keys`` exactly once; return the items consumed.

    Args:
        items: The loader (one epoch, ``repeat=False``) or its items.
        expected_keys: ``__key__`` of every source sample.
        dropped: Keys the encoder reports as dropped (they must appear in no pack).
    """
    consumed = list(items)
    counts = Counter(k for item in consumed for k in member_keys(item))
    duplicated = sorted(k for k, c in counts.items() if c > 1)
    assert not duplicated, f"documents in more than one pack: {duplicated[:10]}"
    pieces: dict[str, list[int]] = {}
    whole: set[str] = set()
    for key in counts:
        base, sep, index = key.rpartition(SPLIT_SEPARATOR)
        if sep and index.isdigit():
            pieces.setdefault(base, []).append(int(index))
        else:
            whole.add(key)
    for base, idx in pieces.items():
        assert sorted(idx) == list(range(len(idx))), f"sample {base!r}: pieces {sorted(idx)}"
    expected = set(expected_keys)
    dropped_set = set(dropped)
    seen = whole | set(pieces)
    both = sorted(whole & set(pieces))
    assert not both, f"samples both whole and split: {both[:10]}"
    assert not (seen & dropped_set), f"dropped but packed: {sorted(seen & dropped_set)[:10]}"
    missing = sorted(expected - seen - dropped_set)
    assert not missing, f"{len(missing)} samples in no pack and not dropped: {missing[:10]}"
    extra = sorted(seen - expected)
    assert not extra, f"unknown keys in packs: {extra[:10]}"
    return consumed


def _same_shape(a: Any, b: Any) -> bool:
    """Same nesting and the same strings (names of datasets), integers may differ."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b))
    if isinstance(a, int) and isinstance(b, int):
        return True
    return a == b


def _equal(a: Any, b: Any, path: str, loose_keys: bool = False) -> None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), f"{path}: type"
        assert a.dtype == b.dtype and a.shape == b.shape, (
            f"{path}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        )
        assert torch.equal(a, b), f"{path}: tensors differ"
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
        for f in dataclasses.fields(a):
            if f.name in RUN_RECORD_FIELDS or not f.compare:  # compare=False: derived
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            if loose_keys and f.name == "__restore_key__":
                assert _same_shape(x, y), f"{path}.__restore_key__: {x!r} vs {y!r}"
            else:
                _equal(x, y, f"{path}.{f.name}", loose_keys)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{path}[{i}]", loose_keys)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def assert_same_item(a: Any, b: Any, *, what: str = "item", loose_keys: bool = False) -> None:
    """Field by field equality of two packs or batches (tensors bit for bit), except
    :data:`RUN_RECORD_FIELDS`.

    ``loose_keys``: compare ``__restore_key__`` by shape only (for loaders without
    energon-pack's ``EncodeMapDataset``, where energon numbers some keys one higher).
    """
    _equal(a, b, what, loose_keys)


def assert_resume_identical(
    make_loader: Callable[[], Any], *, save_after: int, max_items: int | None = None
) -> tuple[list[Any], list[Any]]:
    """Save after ``save_after`` items, restore into a fresh loader, compare the continuation.

    The reference continues the first loader to the end of its epoch (or ``max_items`` items
    after the save). Returns ``(reference continuation, restored continuation)``.
    """
    first = make_loader()
    it = iter(first)
    for step in range(save_after):
        assert next(it, None) is not None, f"the loader ended after {step} items (< save_after)"
    state = first.save_state_rank()
    reference = _take(it, max_items)
    resumed_loader = make_loader()
    resumed_loader.restore_state_rank(state)
    resumed = _take(iter(resumed_loader), max_items)
    assert len(reference) == len(resumed), (
        f"after resume: {len(resumed)} items, reference continuation has {len(reference)}"
    )
    for i, (a, b) in enumerate(zip(reference, resumed)):
        assert_same_item(a, b, what=f"continuation[{i}]")
    return reference, resumed


def _take(it: Iterable[Any], max_items: int | None) -> list[Any]:
    out = []
    for item in it:
        out.append(item)
        if max_items is not None and len(out) >= max_items:
            break
    return out


def assert_restore_sample_reproduces(
    make_loader: Callable[[], Any], items: Sequence[Any], *, order_seed: int = 0
) -> None:
    """``restore_sample`` on a fresh loader rebuilds every item, restored in a shuffled order."""
    loader = make_loader()
    order = list(range(len(items)))
    random.Random(order_seed).shuffle(order)
    for i in order:
        restored = loader.restore_sample(items[i].__restore_key__)
        assert_same_item(items[i], restored, what=f"restore_sample(items[{i}])")
