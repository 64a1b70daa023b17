# SPDX-License-Identifier: Apache-2.0
"""A savable energon loader that checkpoints after every sample (training scripts, tests).

``make_loader(path, encoder, num_workers=2)`` builds ``get_train_dataset`` with every argument
energon requires spelled out, then ``get_savable_loader(..., checkpoint_every_sec=0,
checkpoint_every_min_n_samples=1)``, so a state saved at any step restores exactly. It pins
memory only where there is a GPU to copy to (:func:`pin_memory_for_device`): energon asks for
pinned memory always, and on a CPU-only machine torch warns about it on every loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["make_eval_loader", "make_loader", "pin_memory_for_device"]


def pin_memory_for_device(loader: Any, pin_memory: bool | None = None) -> Any:
    """Set ``loader.pin_memory`` (energon always asks for True) to ``pin_memory``, by default
    to whether CUDA is available; before the first iteration. Returns ``loader``."""
    import torch

    loader.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
    return loader


def make_loader(
    path: Path,
    task_encoder: Any,
    *,
    packing_buffer_size: int | None = 16,
    batch_size: int | None = None,
    num_workers: int = 0,
    repeat: bool = False,
    shuffle_buffer_size: int | None = None,
    seed_offset: int = 0,
    max_samples_per_sequence: int | None = None,
    pin_memory: bool | None = None,
) -> Any:
    """A savable energon loader over ``path`` that checkpoints after every sample.

    ``repeat=False`` gives exactly one epoch; with workers, the state saved at any step restores
    exactly (``checkpoint_every_sec=0, checkpoint_every_min_n_samples=1``). ``pin_memory``:
    None pins when CUDA is available (no CPU-only warning).
    """
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    worker_config = WorkerConfig(
        rank=0, world_size=1, num_workers=num_workers, seed_offset=seed_offset
    )
    dataset = get_train_dataset(
        str(path),
        worker_config=worker_config,
        batch_size=batch_size,
        packing_buffer_size=packing_buffer_size,
        shuffle_buffer_size=shuffle_buffer_size,
        max_samples_per_sequence=max_samples_per_sequence,
        task_encoder=task_encoder,
        repeat=repeat,
    )
    loader = get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)
    return pin_memory_for_device(loader, pin_memory)


def make_eval_loader(
    path: Path,
    task_encoder: Any,
    *,
    split_part: str = "val",
    packing_buffer_size: int | None = 16,
    batch_size: int | None = None,
    num_workers: int = 0,
    pin_memory: bool | None = None,
) -> Any:
    """An energon loader over the ``split_part`` split of ``path`` that gives every document
    once per iteration (``get_val_dataset``: no repeat, no shuffle; the last packing buffer is
    flushed), for :func:`~energon_pack.training.evaluate` and ``PackedTrainer(eval_loader=...)``.
    Under torch.distributed each rank reads its share (``WorkerConfig.default_worker_config``).
    """
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    worker_config = WorkerConfig.default_worker_config(num_workers)
    dataset = get_val_dataset(
        str(path),
        split_part=split_part,
        worker_config=worker_config,
        batch_size=batch_size,
        packing_buffer_size=packing_buffer_size,
        task_encoder=task_encoder,
    )
    return pin_memory_for_device(get_loader(dataset), pin_memory)
