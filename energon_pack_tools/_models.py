# SPDX-License-Identifier: Apache-2.0
"""A tiny transformers causal LM (seeded random weights, offline) and the per-document reference
run: a packed forward pass must give each document the logits of that document alone.
"""

from __future__ import annotations

import torch

__all__ = ["document_logits", "document_loss", "tiny_causal_lm"]


def tiny_causal_lm(
    vocab_size: int,
    *,
    seed: int = 0,
    attn_implementation: str = "sdpa",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_position_embeddings: int = 4096,
) -> torch.nn.Module:
    """A float32 ``LlamaForCausalLM`` with seeded random weights, in eval mode.

    Grouped-query attention (``num_kv_heads < num_heads``) is on by default so the mask is
    exercised through the GQA code path too.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
    )
    config._attn_implementation = attn_implementation
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


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
