# SPDX-License-Identifier: Apache-2.0
"""Tiny transformers causal LMs for correctness checks, and the per-document reference run.

The oracle for packing: a packed forward pass must give, for every document, the logits of that
document run alone. ``tiny_causal_lm`` builds a 2-layer Llama with random (seeded) float32
weights from a config, offline; ``document_logits`` / ``document_loss`` run one document alone::

    model = tiny_causal_lm(vocab_size=64)
    ref = document_logits(model, torch.tensor([1, 5, 9]))   # (3, 64)
"""

from __future__ import annotations

import torch

from energon_pack.tools import tiny_causal_lm

__all__ = ["document_logits", "document_loss", "tiny_causal_lm"]


@torch.no_grad()
def document_logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """``(n, vocab)`` float32 logits of one document ``tokens`` (n,) run alone, unpadded."""
    return model(input_ids=tokens.view(1, -1)).logits[0]


@torch.no_grad()
def document_loss(
    model: torch.nn.Module, tokens: torch.Tensor, loss_mask: torch.Tensor
) -> tuple[float, int]:
    """(sum of token losses, number of targets) of one document run alone.

    Target ``tokens[i]`` counts iff ``loss_mask[i]`` and ``i >= 1`` (it is predicted from
    position ``i - 1``); computed directly with ``cross_entropy``, not through HF's loss.
    """
    logits = document_logits(model, tokens)
    targets = tokens[1:].clone()
    targets[~loss_mask[1:].bool()] = -100
    total = torch.nn.functional.cross_entropy(
        logits[:-1], targets, ignore_index=-100, reduction="sum"
    )
    return float(total), int((targets != -100).sum())
