# SPDX-License-Identifier: Apache-2.0
"""A savable energon loader that checkpoints after every sample (demo, tests, examples).

``make_loader(path, encoder, num_workers=2)`` builds ``get_train_dataset`` with every argument
energon requires spelled out, then ``get_savable_loader(..., checkpoint_every_sec=0,
checkpoint_every_min_n_samples=1)``, so a state saved at any step restores exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["make_loader"]


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
) -> Any:
    """A savable energon loader over ``path`` that checkpoints after every sample.

    ``repeat=False`` gives exactly one epoch; with workers, the state saved at any step restores
    exactly (``checkpoint_every_sec=0, checkpoint_every_min_n_samples=1``).
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
    return get_savable_loader(dataset, checkpoint_every_sec=0, checkpoint_every_min_n_samples=1)
