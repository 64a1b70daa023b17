# SPDX-License-Identifier: Apache-2.0
"""A tiny transformers causal LM built from a config (random seeded weights, offline).

The demo trains it on packs; the correctness checks in :mod:`energon_pack.testing` run it on
packed rows and on each document alone::

    model = tiny_causal_lm(vocab_size=64)   # 2-layer float32 Llama, eval mode
"""

from __future__ import annotations

import torch

__all__ = ["tiny_causal_lm"]


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
