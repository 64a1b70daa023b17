# SPDX-License-Identifier: Apache-2.0
"""A dataset ``make-dataset`` wrote, read back by energon's own loader (one epoch, in order).

``[s.text for s in read_back(out)]`` -> ``["first document", "second", ...]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_back(path: Path, task_encoder: Any = None) -> list[Any]:
    """Every sample of ``path`` as ``task_encoder`` (energon's default one when ``None``)
    yields it: one epoch, no shuffling, one shard at a time."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset

    ds = get_train_dataset(
        str(path),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        shuffle_over_epochs_multiplier=None,
        parallel_shard_iters=1,
        task_encoder=DefaultTaskEncoder() if task_encoder is None else task_encoder,
        repeat=False,
    )
    return list(get_loader(ds))
