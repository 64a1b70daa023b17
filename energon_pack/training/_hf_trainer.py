# SPDX-License-Identifier: Apache-2.0
"""Hugging Face ``Trainer`` on an energon savable loader of packed batches, with exact resume::

    trainer = PackedTrainer(model=model, args=args, loader=loader,   # loader: get_savable_loader
                            eval_loader=make_eval_loader(...))       # optional
    trainer.train()                                 # later: trainer.train(resume_from_checkpoint=True)
    trainer.evaluate()                              # {"eval_loss": token-mean, ...}

Batches go to the model as ``batch.hf_kwargs(attn, config=model.config)``; a step's loss is
the token-mean over its micro-batches; each ``checkpoint-N`` also holds the loader state, written
before transformers writes the checkpoint (see ``_checkpoints``), which
``train(resume_from_checkpoint=...)`` restores. ``args.max_steps`` must be set. See
docs/howto/trainers.md.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from energon_pack.attention import check_first_batch as _check_first_batch
from energon_pack.training._checkpoints import (
    LOADER_STATE_FILE,
    TRAINER_STATE_FILE,
    checkpoint_folders,
    incomplete_reason,
    latest_complete,
    load_loader_state,
    rotate,
    write_loader_state,
)
from energon_pack.training._eval import eval_metrics, eval_sums

__all__ = ["LOADER_STATE_FILE", "PackedTrainer"]

logger = logging.getLogger(__name__)


class _Unsized:
    """The loader without ``__len__`` (energon's counts samples, not packs): Trainer then runs
    ``max_steps`` and calls ``iter`` once."""

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


class PackedTrainer(Trainer):
    """``Trainer`` fed by an energon savable loader of packed batches (see the module docs).

    Args:
        loader: ``get_savable_loader(...)`` over a packing task encoder (built fresh: a resume
            restores its state before the first batch).
        eval_loader: packed batches for ``evaluate()``: a loader over the val split that
            ends (``make_eval_loader``); each ``evaluate()`` iterates it once.
        attn_implementation: the ``hf_kwargs`` flavour; default the model's own.
        check_first_batch: before the first step, run the first batch through the model in
            train mode and compare each document with it alone
            (:func:`~energon_pack.attention.check_first_batch`; raises
            ``PackingNotExactError`` if packing changes the model's result).
        *args, **kwargs: as for ``Trainer`` (``train_dataset`` and ``eval_dataset`` stay None).
    """

    def __init__(
        self,
        *args: Any,
        loader: Any,
        eval_loader: Iterable[Any] | None = None,
        attn_implementation: str | None = None,
        check_first_batch: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("eval_dataset") is not None:
            raise ValueError(
                "PackedTrainer evaluates packed batches, not a dataset: pass "
                "eval_loader=make_eval_loader(path, encoder) instead of eval_dataset=..."
            )
        # as eval_dataset too: Trainer checks that one is there when eval_strategy is set
        super().__init__(*args, eval_dataset=eval_loader, **kwargs)
        if not self.model_accepts_loss_kwargs and self.compute_loss_func is None:
            raise ValueError(
                f"{type(self.model).__name__}.forward takes no num_items_in_batch, so each "
                "micro-batch would be averaged alone (not a token-mean over the step); pass "
                "compute_loss_func=... (it receives num_items_in_batch) or use such a model"
            )
        self.loader = loader
        self.eval_loader = eval_loader
        self.attn_implementation = attn_implementation or self.model.config._attn_implementation
        self.args.ignore_data_skip = True
        self._first_batch_unchecked = check_first_batch

    def get_train_dataloader(self) -> Any:
        return _Unsized(self.loader)

    def get_batch_samples(
        self, epoch_iterator: Iterator[Any], num_batches: int, device: torch.device
    ) -> tuple[list[dict[str, Any]], torch.Tensor]:
        """The step's micro-batches as model kwargs, and their target count."""
        batches = list(itertools.islice(epoch_iterator, num_batches))
        if self._first_batch_unchecked and batches:
            self._first_batch_unchecked = False
            self.check_first_batch(batches[0])
        num_items = torch.tensor(sum(b.num_target_tokens for b in batches), device=device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            num_items = self.accelerator.gather(num_items).sum()
        return [self.model_inputs(b) for b in batches], num_items

    def model_inputs(self, batch: Any) -> dict[str, Any]:
        """``batch`` on ``args.device`` as kwargs of the model (``batch.hf_kwargs``)."""
        batch = batch.to(self.args.device, non_blocking=True)
        return batch.hf_kwargs(self.attn_implementation, config=self.model)

    def check_first_batch(self, batch: Any) -> Any:
        """:func:`~energon_pack.attention.check_first_batch` on ``batch`` with the model in
        train mode, as ``model_inputs`` passes it; logs and returns the report."""
        model, was_training = self.model_wrapped, self.model.training
        model.train()
        try:
            report = _check_first_batch(
                model, batch, self.attn_implementation, config=self.model.config
            )
        finally:
            model.train(was_training)
        logger.info("first-batch packing check passed: %s", report)
        return report

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """``Trainer.train``; a resume first restores the loader from the checkpoint.

        ``resume_from_checkpoint=True`` picks the newest *complete* ``checkpoint-N`` of
        ``args.output_dir`` (one killed mid-save is skipped, with a warning); a path to an
        incomplete one is refused, naming what is missing and the checkpoint to use instead.
        """
        if resume_from_checkpoint is True:
            resume_from_checkpoint = self._newest_complete_checkpoint()
        if resume_from_checkpoint:
            checkpoint = Path(resume_from_checkpoint)
            self._refuse_incomplete(checkpoint)
            rank = self.args.process_index
            self.loader.restore_state_rank(load_loader_state(checkpoint, rank))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def _newest_complete_checkpoint(self) -> str:
        run_dir, rank = Path(self.args.output_dir), self.args.process_index
        newest = latest_complete(run_dir, rank)
        skipped = [
            f"{p.name} ({incomplete_reason(p, rank)})"
            for p in checkpoint_folders(run_dir)
            if newest is None or int(p.name.rsplit("-", 1)[1]) > int(newest.name.rsplit("-", 1)[1])
        ]
        if newest is None:
            found = f": only incomplete ones, {', '.join(skipped)}" if skipped else ""
            raise ValueError(
                f"no complete checkpoint-N folder in {run_dir} to resume from{found}; train "
                "from scratch (resume_from_checkpoint=None) or pass another output_dir"
            )
        if skipped:
            logger.warning(
                "resuming from %s, the newest complete checkpoint; skipping newer incomplete "
                "ones (killed while saving): %s",
                newest,
                ", ".join(skipped),
            )
        return str(newest)

    def _refuse_incomplete(self, checkpoint: Path) -> None:
        reason = incomplete_reason(checkpoint, self.args.process_index)
        if reason is None:
            return
        newest = latest_complete(checkpoint.parent, self.args.process_index)
        instead = (
            f"resume from {newest} (the newest complete checkpoint there) instead"
            if newest is not None
            else f"{checkpoint.parent} holds no complete checkpoint to resume from"
        )
        raise FileNotFoundError(
            f"{checkpoint} is incomplete: {reason}. It was killed while being saved or not "
            f"saved by PackedTrainer, so the loader cannot continue where it stopped; {instead}"
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The loader state first (atomically), then transformers' checkpoint, then rotation
        that keeps the newest complete checkpoint (see ``_checkpoints``)."""
        run_dir = Path(self._get_output_dir(trial=trial))
        folder = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save:  # a folder saved before (an older run) is stale until done
            (folder / TRAINER_STATE_FILE).unlink(missing_ok=True)
        write_loader_state(folder, self.args.process_index, self.loader.save_state_rank())
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if limit:
            self.accelerator.wait_for_everyone()  # every rank's loader state is written
            if self.args.should_save:
                protect = [folder, self.state.best_model_checkpoint]
                rotate(run_dir, limit, self.args.process_index, protect)

    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Every batch of ``eval_loader`` once: ``{prefix}_loss`` is the token-mean loss over
        all of them (summed over ranks), with ``_documents``, ``_target_tokens``, ``_batches``
        and ``_runtime``; logged and passed to ``on_evaluate`` callbacks like Trainer's."""
        loader = self.eval_loader if eval_dataset is None else eval_dataset
        if loader is None:
            raise ValueError(
                "PackedTrainer.evaluate() needs packed eval batches: pass "
                "PackedTrainer(eval_loader=make_eval_loader(path, encoder)) (the val split, no "
                "repeat), or evaluate(eval_dataset=<such a loader>)"
            )
        start = time.time()
        device, config = self.args.device, self.model.config

        def model_kwargs(batch: Any) -> dict[str, Any]:
            batch = batch.to(device, non_blocking=True)
            return batch.hf_kwargs(self.attn_implementation, config=config, with_labels=False)

        sums = eval_sums(self.model, loader, model_kwargs)
        if self.args.world_size > 1:
            sums = self.accelerator.reduce(sums.to(device), reduction="sum").cpu()
        metrics: dict[str, float] = eval_metrics(sums, metric_key_prefix)
        metrics[f"{metric_key_prefix}_runtime"] = round(time.time() - start, 4)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(
            self.args, self.state, self.control, metrics
        )
        return metrics
