# SPDX-License-Identifier: Apache-2.0
"""A metadataset blend packed per group: each packing group has its own pipeline (blend of its
datasets, shuffle buffer, ``encode_sample``, packing dataset with its own buffer size), and the
groups' packs are blended by :class:`SizeBlendDataset` (energon PR #228's flow)::

    [leaf -> Repeat] (per leaf) -> blend -> shuffle -> encode -> pack   (per group)
        -> blend of packs (group weight = the sum of its leaves' weights) -> batch

energon 7.4.1 builds one pipeline inline (``TaskEncoder.build_train_datasets``, no hook per
group): :func:`build_grouped_train_datasets` builds it instead, with energon's own stages in
energon's order, so every stage's state is part of the loader's one saved state. The packs of
a group are measured by ``pack_size`` (their tokens, or documents) for the outer blend.
How-to: docs/howto/blends.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from megatron.energon.errors import FatalSampleError
from megatron.energon.metadataset.loader_interface import DatasetBlendMode
from megatron.energon.task_encoder.base import TaskEncoder
from megatron.energon.wrappers import (
    BlendDataset,
    EpochizeDataset,
    LogSampleDataset,
    RepeatDataset,
    ShuffleBufferDataset,
)

from energon_pack.energon._size_blend import SizeBlendDataset
from energon_pack.energon._version import check_energon_version

__all__ = [
    "GROUP_SUBFLAVOR",
    "PackingGroupError",
    "build_grouped_train_datasets",
    "group_of",
    "leaf_groups",
]

#: The subflavor that names a leaf's packing group (set on a leaf or on a nested metadataset).
GROUP_SUBFLAVOR = "packing_group"


class PackingGroupError(FatalSampleError, ValueError):
    """A document reached another packing group's buffer than its own: the loader stops
    (energon's error handler never swallows a ``FatalSampleError``)."""


def _group_name(subflavors: Mapping[str, Any] | None) -> str | None:
    """The packing group ``subflavors`` name (None: the default group)."""
    group = (subflavors or {}).get(GROUP_SUBFLAVOR)
    return None if group is None else str(group)


def group_of(sample: Any) -> str | None:
    """The packing group a (raw or encoded) sample came from: its ``packing_group`` subflavor."""
    return _group_name(getattr(sample, "__subflavors__", None))


def leaf_groups(datasets: Sequence[Any]) -> list[str | None]:
    """Each loaded dataset's ``packing_group`` subflavor (None: the default group)."""
    return [_group_name(getattr(loaded.dataset, "subflavors", None)) for loaded in datasets]


def build_grouped_train_datasets(
    encoder: TaskEncoder[Any, Any, Any, Any],
    *,
    datasets: Sequence[Any],
    worker_config: Any,
    branches: Sequence[tuple[Sequence[int], Callable[[Any], Any]]],
    sample_size: Callable[[Any], int] | None,
    pack_size: Callable[[Any], int],
    batch_size: int | None,
    batch_drop_last: bool = False,
    virtual_epoch_length: int = 0,
    shuffle_buffer_size: int | None = None,
    blend_mode: DatasetBlendMode = DatasetBlendMode.NONE,
    repeat: bool = True,
) -> Any:
    """energon's ``build_train_datasets`` with one packing pipeline per group (module docstring).

    Args:
        branches: Per group, in the order its first leaf appears in the metadataset: its
            leaves (places in the metadataset) and the function that packs its encoded
            samples (``pack(dataset) -> dataset of packs``).
        sample_size: The size a raw sample adds to its leaf's share inside a group of several
            leaves (a :class:`SizeBlendDataset`), or None: energon's sample-weighted blend there.
        pack_size: The size a pack adds to its group's share of the blend of groups.
        The rest: as energon's ``build_train_datasets`` (``packing_buffer_size`` is each
        group's own, in its ``pack``).
    """
    check_energon_version(
        feature="Per-group packing (encoder.packing_groups)",
        relies_on="task_encoder/base.py's build_train_datasets (rebuilt per group)",
        off="remove the encoder's packing_groups",
    )
    if blend_mode == DatasetBlendMode.SAMPLE_REPETITIONS:
        raise ValueError(
            "encoder.packing_groups blends the groups' packs by the metadataset's `blend:` "
            "weights, but this metadataset is `blend_epochized:` (repetitions per epoch): "
            "write it as `blend:` with `weight:` entries, or remove encoder.packing_groups."
        )
    # energon's worker rotation: each leaf starts on the worker after the previous leaf's end
    global_workers = max(1, worker_config.num_workers) * worker_config.world_size
    offsets, total = [], 0
    for loaded in datasets:
        offsets.append(total % global_workers)
        total += len(loaded.dataset)
    leaves = []
    for loaded, offset in zip(datasets, offsets):
        reader = encoder._load_dataset(loaded, offset, worker_config=worker_config)
        if repeat:
            reader = RepeatDataset(reader, worker_config=worker_config)
        weight = 1.0 if loaded.weight is None else float(loaded.weight)
        leaves.append((reader, weight))

    packed = []
    for places, pack in branches:
        parts = [leaves[i] for i in places]
        dataset = _blend(parts, sample_size, worker_config)
        if shuffle_buffer_size is not None and shuffle_buffer_size > 1:
            dataset = ShuffleBufferDataset(
                dataset, size=shuffle_buffer_size, worker_config=worker_config
            )
        dataset = encoder.build_encode_sample(dataset, worker_config=worker_config)
        packed.append((pack(dataset), sum(weight for _, weight in parts)))

    dataset = _blend(packed, pack_size, worker_config)
    # energon's build_batch after packing: batching and encode_batch (packs are made above)
    dataset = TaskEncoder.build_batch(
        encoder,
        dataset,
        batch_size=batch_size,
        batch_drop_last=batch_drop_last,
        packing_buffer_size=None,
        worker_config=worker_config,
    )
    if virtual_epoch_length > 0:
        dataset = EpochizeDataset(dataset, length=virtual_epoch_length, worker_config=worker_config)
    if worker_config.should_log(level=1):
        dataset = LogSampleDataset(dataset, mode="train", worker_config=worker_config)
    return dataset


def _blend(
    parts: list[tuple[Any, float]], size: Callable[[Any], int] | None, worker_config: Any
) -> Any:
    """``parts`` ((dataset, weight) pairs) as one dataset: a lone part itself, else blended by
    ``size`` (a :class:`SizeBlendDataset`; None: energon's sample-weighted ``BlendDataset``)."""
    if len(parts) == 1:
        return parts[0][0]
    if size is None:
        return BlendDataset(*parts, worker_config=worker_config)
    return SizeBlendDataset(*parts, sample_size=size, worker_config=worker_config)
