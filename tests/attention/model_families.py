# SPDX-License-Identifier: Apache-2.0
"""Tiny random decoder models of every family a user would pack for, and the matrix cell check.

Shared by ``test_model_families.py`` and ``tests/benchmarks/model_matrix.py``. Each family is a
transformers config (2 layers, hidden 32, windows / chunks of 8, no downloads). A cell runs a
packed batch (documents of 20 and 12 tokens in one row, 7 and 3 plus tail padding in another)
through ``batch.hf_kwargs(impl, config=model.config)`` and compares every document's logits
and the token-weighted loss with the document run alone. The outcome is ``"exact"`` (max
logit difference <= 1e-5), ``"raises"`` (:class:`PackingNotExactError`) or ``"differs"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from energon_pack.attention import PackingNotExactError  # noqa: E402
from energon_pack.samples import EncodedSample, collate_packs, pack_documents  # noqa: E402

VOCAB = 97
WINDOW = 8
ROWS = [[20, 12], [7, 3]]  # documents longer than the window; the second row has tail padding
PACK_SIZE = 34
IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention")
_SMALL = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
_MIXED = ["sliding_attention", "full_attention"]
_HEAD = 8


@dataclass(frozen=True)
class Family:
    """One row of the matrix: a name, the causal-LM class and its tiny config."""

    #: Row label, e.g. ``"mistral (window 8)"``.
    name: str
    #: transformers class name of the causal LM.
    model_class: str
    #: Builds the config.
    config: Callable[[], Any]
    #: Implementations transformers refuses on CPU for this model (beyond its class flags).
    refused_on_cpu: tuple[str, ...] = ()

    def supports(self, impl: str) -> bool:
        """Whether transformers lets this model run with ``impl`` on CPU."""
        if impl in self.refused_on_cpu:
            return False
        cls = getattr(transformers, self.model_class)
        flag = {"sdpa": "_supports_sdpa", "flex_attention": "_supports_flex_attn"}.get(impl)
        return flag is None or bool(getattr(cls, flag, False))


def _cfg(name: str, **kw: Any) -> Callable[[], Any]:
    return lambda: getattr(transformers, name)(**kw)


def _longrope() -> dict[str, Any]:
    half = _HEAD // 2
    return {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0] * half,
        "long_factor": [2.0] * half,
        "original_max_position_embeddings": 16,
    }


S = _SMALL
FAMILIES = [
    Family("llama", "LlamaForCausalLM", _cfg("LlamaConfig", **S)),
    Family(
        "llama (dynamic NTK rope)",
        "LlamaForCausalLM",
        _cfg(
            "LlamaConfig",
            **S,
            max_position_embeddings=16,
            rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
        ),
    ),
    Family(
        "mistral (window 8)",
        "MistralForCausalLM",
        _cfg("MistralConfig", **S, sliding_window=WINDOW),
    ),
    Family("qwen2", "Qwen2ForCausalLM", _cfg("Qwen2Config", **S)),
    Family(
        "qwen2 (window 8 on layer 2)",
        "Qwen2ForCausalLM",
        _cfg(
            "Qwen2Config", **S, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1
        ),
    ),
    Family("qwen3", "Qwen3ForCausalLM", _cfg("Qwen3Config", **S, head_dim=_HEAD)),
    Family(
        "qwen3 (window 8 on layer 2)",
        "Qwen3ForCausalLM",
        _cfg(
            "Qwen3Config",
            **S,
            head_dim=_HEAD,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=1,
        ),
    ),
    Family(
        "gemma2 (window 8)",
        "Gemma2ForCausalLM",
        _cfg("Gemma2Config", **S, head_dim=_HEAD, sliding_window=WINDOW, layer_types=_MIXED),
    ),
    Family(
        "gemma3 text (window 8)",
        "Gemma3ForCausalLM",
        _cfg("Gemma3TextConfig", **S, head_dim=_HEAD, sliding_window=WINDOW, layer_types=_MIXED),
    ),
    Family("phi3", "Phi3ForCausalLM", _cfg("Phi3Config", **S, pad_token_id=0)),
    Family(
        "phi3 (window 8)",
        "Phi3ForCausalLM",
        _cfg("Phi3Config", **S, pad_token_id=0, sliding_window=WINDOW),
    ),
    Family(
        "phi3 (LongRoPE, original 16)",
        "Phi3ForCausalLM",
        _cfg(
            "Phi3Config",
            **S,
            pad_token_id=0,
            max_position_embeddings=64,
            original_max_position_embeddings=16,
            rope_parameters=_longrope(),
        ),
    ),
    Family(
        "starcoder2 (window 8)",
        "Starcoder2ForCausalLM",
        _cfg("Starcoder2Config", **S, sliding_window=WINDOW),
    ),
    Family(
        "cohere2 (window 8)",
        "Cohere2ForCausalLM",
        _cfg("Cohere2Config", **S, sliding_window=WINDOW, layer_types=_MIXED),
    ),
    Family(
        "gpt-oss (window 8)",
        "GptOssForCausalLM",
        _cfg(
            "GptOssConfig",
            **S,
            head_dim=_HEAD,
            sliding_window=WINDOW,
            layer_types=_MIXED,
            num_local_experts=2,
            num_experts_per_tok=1,
        ),
        refused_on_cpu=("flex_attention",),  # "Attention sinks cannot be run on CPU with flex"
    ),
    Family(
        "llama4 text (chunks of 8)",
        "Llama4ForCausalLM",
        _cfg(
            "Llama4TextConfig",
            **S,
            head_dim=_HEAD,
            intermediate_size_mlp=64,
            attention_chunk_size=WINDOW,
            layer_types=["chunked_attention", "full_attention"],
            no_rope_layers=[1, 0],
            num_local_experts=2,
            num_experts_per_tok=1,
        ),
    ),
    Family("olmo2", "Olmo2ForCausalLM", _cfg("Olmo2Config", **S)),
    Family(
        "gpt-neox",
        "GPTNeoXForCausalLM",
        _cfg(
            "GPTNeoXConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
        ),
    ),
    Family(
        "gpt2",
        "GPT2LMHeadModel",
        _cfg("GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4),
    ),
    Family(
        "opt",
        "OPTForCausalLM",
        _cfg(
            "OPTConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            word_embed_proj_dim=32,
        ),
    ),
    Family(
        "bloom (ALiBi)",
        "BloomForCausalLM",
        _cfg("BloomConfig", vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
    ),
    Family(
        "falcon (rotary)",
        "FalconForCausalLM",
        _cfg(
            "FalconConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
        ),
    ),
    Family(
        "falcon (ALiBi)",
        "FalconForCausalLM",
        _cfg(
            "FalconConfig",
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            alibi=True,
        ),
    ),
    Family(
        "bamba (hybrid Mamba2)",
        "BambaForCausalLM",
        _cfg(
            "BambaConfig",
            **S,
            attn_layer_indices=[1],
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=8,
            mamba_chunk_size=8,
        ),
    ),
    Family(
        "lfm2 (hybrid short conv)", "Lfm2ForCausalLM", _cfg("Lfm2Config", **S, full_attn_idxs=[1])
    ),
]


def build_model(family: Family, impl: str, seed: int = 0) -> torch.nn.Module:
    """The family's tiny float32 causal LM with seeded random weights, in eval mode."""
    config = family.config()
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = getattr(transformers, family.model_class)._from_config(
            config, attn_implementation=impl, dtype=torch.float32
        )
    finally:
        torch.random.set_rng_state(state)
    return model.eval()


def packed_batch(rows: list[list[int]] = ROWS, pad_to: int = PACK_SIZE, seed: int = 1):
    """A batch from the real packer (``pack_documents`` + ``collate_packs``) and its docs."""
    gen = torch.Generator().manual_seed(seed)
    packs, docs = [], []
    for r, lengths in enumerate(rows):
        row = [
            EncodedSample(
                __key__=f"r{r}d{i}",
                __restore_key__=(),
                tokens=torch.randint(0, VOCAB, (n,), generator=gen),
                loss_mask=torch.ones(n, dtype=torch.bool),
            )
            for i, n in enumerate(lengths)
        ]
        docs.append(row)
        packs.append(pack_documents(row))
    return collate_packs(packs, pad_to=pad_to), docs


@torch.no_grad()
def max_difference(model: torch.nn.Module, impl: str, batch, docs) -> tuple[float, float]:
    """(max |logit diff| over real tokens, |loss diff|) of the packed run vs. docs alone."""
    out = model(**batch.hf_kwargs(impl, config=model.config))
    worst, total, count = 0.0, 0.0, 0
    for r, row in enumerate(docs):
        start = 0
        for doc, padded in zip(row, batch.doc_lengths_padded[r]):
            alone = model(input_ids=doc.tokens.view(1, -1)).logits[0]
            got = out.logits[r, start : start + doc.length]
            worst = max(worst, float((got - alone).abs().max()))
            total += float(
                torch.nn.functional.cross_entropy(alone[:-1], doc.tokens[1:], reduction="sum")
            )
            count += doc.length - 1
            start += padded
    return worst, abs(float(out.loss) - total / count)


def run_cell(family: Family, impl: str) -> tuple[str, str]:
    """(outcome, detail): ``exact`` / ``differs`` with the max differences, or ``raises``."""
    model = build_model(family, impl)
    batch, docs = packed_batch()
    try:
        logits, loss = max_difference(model, impl, batch, docs)
    except PackingNotExactError as err:
        return "raises", err.feature
    outcome = "exact" if logits <= 1e-5 and loss <= 1e-5 else "differs"
    return outcome, f"logits {logits:.1e}, loss {loss:.1e}"
