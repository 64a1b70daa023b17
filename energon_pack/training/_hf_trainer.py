# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Trainer`` on an energon savable loader of packed batches, with exact resume::

    trainer = PackedTrainer(model=model, args=args, loader=loader)   # loader: get_savable_loader
    trainer.train()                                 # later: trainer.train(resume_from_checkpoint=True)

Batches go to the model as ``batch.hf_kwargs(attn, config=model.config)``; a step's loss is
the token-mean over its micro-batches; each ``checkpoint-N`` also holds the loader state, which
``train(resume_from_checkpoint=...)`` restores. ``args.max_steps`` must be set. See
docs/howto/trainers.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

__all__ = ["LOADER_STATE_FILE", "PackedTrainer"]

#: The loader state of process ``rank`` inside a checkpoint folder.
LOADER_STATE_FILE = "energon_loader_state_rank{rank}.pt"


class _Unsized:
    """The loader without ``__len__`` (energon's counts samples, not packs): Trainer then runs
    ``max_steps`` and calls ``iter`` once."""

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


class _SaveLoaderState(TrainerCallback):
    """Writes the loader's state into every checkpoint Trainer saves."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOADER_STATE_FILE.format(rank=args.process_index)
        torch.save(self.loader.save_state_rank(), path)


class PackedTrainer(Trainer):
    """``Trainer`` fed by an energon savable loader of packed batches (see the module docs).

    Args:
        loader: ``get_savable_loader(...)`` over a packing task encoder (built fresh: a resume
            restores its state before the first batch).
        attn_implementation: the ``hf_kwargs`` flavour; default the model's own.
        *args, **kwargs: as for ``Trainer`` (``train_dataset`` stays None).
    """

    def __init__(
        self, *args: Any, loader: Any, attn_implementation: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if not self.model_accepts_loss_kwargs and self.compute_loss_func is None:
            raise ValueError(
                f"{type(self.model).__name__}.forward takes no num_items_in_batch, so each "
                "micro-batch would be averaged alone (not a token-mean over the step); pass "
                "compute_loss_func=... (it receives num_items_in_batch) or use such a model"
            )
        self.loader = loader
        self.attn_implementation = attn_implementation or self.model.config._attn_implementation
        self.args.ignore_data_skip = True
        self.add_callback(_SaveLoaderState(loader))

    def get_train_dataloader(self) -> Any:
        return _Unsized(self.loader)

    def get_batch_samples(
        self, epoch_iterator: Iterator[Any], num_batches: int, device: torch.device
    ) -> tuple[list[dict[str, Any]], torch.Tensor]:
        """The step's micro-batches as model kwargs, and their target count."""
        batches = list(itertools.islice(epoch_iterator, num_batches))
        num_items = torch.tensor(sum(b.num_target_tokens for b in batches), device=device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            num_items = self.accelerator.gather(num_items).sum()
        return [self.model_inputs(b) for b in batches], num_items

    def model_inputs(self, batch: Any) -> dict[str, Any]:
        """``batch`` on ``args.device`` as kwargs of the model (``batch.hf_kwargs``)."""
        batch = batch.to(self.args.device, non_blocking=True)
        return batch.hf_kwargs(self.attn_implementation, config=self.model)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """``Trainer.train``; a resume first restores the loader from the checkpoint."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(f"no checkpoint-N folder in {self.args.output_dir} to resume from")
        if resume_from_checkpoint:
            self._restore_loader(Path(resume_from_checkpoint))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _restore_loader(self, checkpoint: Path) -> None:
        path = checkpoint / LOADER_STATE_FILE.format(rank=self.args.process_index)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: {checkpoint} was not saved by PackedTrainer, so the loader "
                "cannot continue where it stopped; resume from a PackedTrainer checkpoint"
            )
        self.loader.restore_state_rank(torch.load(path, weights_only=False))
