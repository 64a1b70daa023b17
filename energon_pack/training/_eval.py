# SPDX-License-Identifier: Apache-2.0
"""Packed evaluation: every pack of an eval loader once, and the token-mean loss over all of them.

The loss is ``sum of every target's cross-entropy / number of targets`` over the whole eval set,
not a mean of per-batch means (packs hold different numbers of targets)::

    batch 1: 2 documents, 10 targets, CE sum 23.0
    batch 2: 3 documents,  4 targets, CE sum 12.0
    -> loss = 35.0 / 14 = 2.5   documents = 5   target_tokens = 14
       (the mean of the batch means, (2.3 + 3.0) / 2 = 2.65, weighs batch 2's targets 2.5x)

For a loader, build it over the val split with ``repeat=False`` (:func:`make_eval_loader`):
then each document is seen exactly once. See docs/howto/trainers.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["EVAL_COUNTS", "eval_sums", "evaluate", "eval_metrics"]

IGNORE_INDEX = -100
#: What :func:`eval_sums` returns, in order.
EVAL_COUNTS = ("loss_sum", "target_tokens", "documents", "batches")


def eval_sums(
    model: Any, batches: Iterable[Any], model_kwargs: Callable[[Any], dict[str, Any]]
) -> torch.Tensor:
    """(4,) float64 on the host: the CE sum over every target, targets, documents, batches.

    ``model_kwargs(batch)`` gives the model's inputs (on its device, without labels); the
    cross-entropy is computed here in float32 from the logits and ``batch.labels`` (already
    aligned to the inputs: no shift).
    """
    sums = torch.zeros(4, dtype=torch.float64)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                targets, documents = batch.num_target_tokens, len(batch.cu_seqlens) - 1
                logits = model(**model_kwargs(batch)).logits
                labels = batch.labels.to(logits.device)
                ce = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1).float(),
                    labels.flatten(),
                    ignore_index=IGNORE_INDEX,
                    reduction="sum",
                )
                sums += torch.tensor([ce.item(), targets, documents, 1], dtype=torch.float64)
    finally:
        model.train(was_training)
    return sums


def eval_metrics(sums: torch.Tensor, prefix: str = "eval") -> dict[str, float]:
    """``{prefix}_loss`` (token-mean), ``{prefix}_documents``, ``_target_tokens``, ``_batches``."""
    loss_sum, targets, documents, batches = (float(v) for v in sums)
    if targets == 0:
        raise ValueError(
            f"the eval loader gave {int(batches)} batches and no target token: nothing to "
            "evaluate; check that it reads the val split (a non-empty one) with repeat=False"
        )
    return {
        f"{prefix}_loss": loss_sum / targets,
        f"{prefix}_documents": int(documents),
        f"{prefix}_target_tokens": int(targets),
        f"{prefix}_batches": int(batches),
    }


def evaluate(
    model: Any,
    loader: Iterable[Any],
    *,
    attn_implementation: str | None = None,
    device: torch.device | str | None = None,
) -> dict[str, float]:
    """Evaluate ``model`` on every batch of ``loader`` once (a plain loop, no ``Trainer``).

    Args:
        model: a transformers causal LM (put into eval mode for the loop, then restored).
        loader: packed batches, e.g. :func:`make_eval_loader` (val split, no repeat).
        attn_implementation: the ``hf_kwargs`` flavour; default the model's own.
        device: where batches go; default the model's parameters' device.

    Returns:
        ``{"eval_loss": token-mean loss, "eval_documents": ..., "eval_target_tokens": ...,
        "eval_batches": ...}`` (one process; sum the counts over ranks yourself).
    """
    attn = attn_implementation or model.config._attn_implementation
    if device is None:
        device = next(model.parameters()).device

    def model_kwargs(batch: Any) -> dict[str, Any]:
        batch = batch.to(device, non_blocking=True)
        return batch.hf_kwargs(attn, config=model, with_labels=False)

    return eval_metrics(eval_sums(model, loader, model_kwargs))
