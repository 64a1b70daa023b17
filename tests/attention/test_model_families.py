# SPDX-License-Identifier: Apache-2.0
"""The model-family matrix: every cell is exact (1e-5, logits and loss) or raises the error.

Rows and the packed batch are in ``model_families.py`` (documents of 20 and 12 tokens, windows
and chunks of 8). FlexAttention runs uncompiled here (transformers compiles it once per process
and the CPU compiler fails on the many shapes of the matrix; the math is the same), for the
families whose masks differ in kind: a mapping per layer type, one windowed mask, chunks.
"""

from __future__ import annotations

import pytest
import torch
from model_families import FAMILIES, WINDOW, Family, build_model, packed_batch, run_cell
from torch.nn.attention.flex_attention import flex_attention
from transformers.integrations import flex_attention as hf_flex

from energon_pack.attention import (
    LocalAttention,
    PackingNotExactError,
    check_model,
    document_causal_mask,
    document_metadata,
)

RAISES = {
    "llama (dynamic NTK rope)": "dynamic NTK rope",
    "phi3 (LongRoPE, original 16)": "LongRoPE",
    "bloom (ALiBi)": "ALiBi (bloom)",
    "falcon (ALiBi)": "ALiBi (falcon)",
    "bamba (hybrid Mamba2)": "non-attention layers",
    "lfm2 (hybrid short conv)": "non-attention layers",
}
FLEX_ROWS = {"qwen2 (window 8 on layer 2)", "starcoder2 (window 8)", "llama4 text (chunks of 8)"}


def _cells() -> list:
    cells = []
    for family in FAMILIES:
        for impl in ("sdpa", "eager", "flex_attention"):
            if impl == "flex_attention" and family.name not in FLEX_ROWS | set(RAISES):
                continue
            if family.supports(impl):
                cells.append(pytest.param(family, impl, id=f"{family.name}-{impl}"))
    return cells


@pytest.fixture
def eager_flex(monkeypatch):
    """transformers' flex path without torch.compile (unfused, same result)."""
    wrapper = hf_flex.WrappedFlexAttention
    monkeypatch.setattr(wrapper, "_is_flex_compiled", True)
    monkeypatch.setattr(wrapper, "_compiled_flex_attention", staticmethod(flex_attention))
    monkeypatch.setattr(wrapper, "training", False, raising=False)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(("family", "impl"), _cells())
def test_cell_is_exact_or_raises(eager_flex, family: Family, impl: str) -> None:
    outcome, detail = run_cell(family, impl)
    if family.name in RAISES:
        assert (outcome, detail.split(" [")[0]) == ("raises", RAISES[family.name])
        assert detail.startswith(RAISES[family.name])
    else:
        assert outcome == "exact", detail


def test_without_config_a_sliding_model_differs() -> None:
    # the reason for config=: the plain document-causal mask ignores Mistral's window
    family = next(f for f in FAMILIES if f.name.startswith("mistral"))
    model = build_model(family, "sdpa")
    batch, docs = packed_batch()
    with torch.no_grad():
        plain = model(**batch.hf_kwargs("sdpa")).logits
        exact = model(**batch.hf_kwargs("sdpa", config=model.config)).logits
        alone = model(input_ids=docs[0][0].tokens.view(1, -1)).logits[0]
    assert float((plain[0, :20] - alone).abs().max()) > 1e-3
    assert float((exact[0, :20] - alone).abs().max()) <= 1e-5


def test_error_names_feature_reason_and_remedy() -> None:
    family = next(f for f in FAMILIES if f.name.startswith("phi3 (LongRoPE"))
    with pytest.raises(PackingNotExactError, match="LongRoPE.*largest position.*What to do"):
        check_model(family.config(), "sdpa", pack_size=17)
    # exact while no pack can pass original_max_position_embeddings
    assert check_model(family.config(), "sdpa", pack_size=16).notes == (
        "LongRoPE: pack_size 16 <= 16",
    )


def test_report_of_a_mixed_model() -> None:
    family = next(f for f in FAMILIES if f.name.startswith("gemma2"))
    report = check_model(family.config(), "eager", pack_size=64)
    assert report.layer_types == ("sliding_attention", "full_attention")
    assert report.local == {
        "sliding_attention": LocalAttention(window=WINDOW),
        "full_attention": LocalAttention(),
    }
    assert report.needs_mapping and report.accepts_mask_mapping


def test_flash_refuses_chunks_longer_than_the_pack() -> None:
    family = next(f for f in FAMILIES if f.name.startswith("llama4"))
    with pytest.raises(PackingNotExactError, match="chunked attention with flash"):
        check_model(family.config(), "flash_attention_2", pack_size=64)
    check_model(family.config(), "flash_attention_2", pack_size=WINDOW)
    with pytest.raises(ValueError, match="unknown attn_implementation"):
        check_model(family.config(), "xformers")


@pytest.mark.parametrize("local", [LocalAttention(window=3), LocalAttention(chunk=3)])
def test_window_and_chunk_match_transformers_per_document(local: LocalAttention) -> None:
    from transformers.masking_utils import (
        chunked_causal_mask_function,
        sliding_window_causal_mask_function,
    )

    lengths = [7, 5, 1]
    meta = document_metadata([lengths], length=15)
    mask = document_causal_mask(meta.seq_idx, local)[0, 0]
    if local.window is not None:
        fn = sliding_window_causal_mask_function(local.window)
    else:
        fn = chunked_causal_mask_function(local.chunk, torch.zeros(1, dtype=torch.long))
    expected = torch.zeros(15, 15, dtype=torch.bool)
    start = 0
    for n in [*lengths[:-1], lengths[-1] + 2]:  # tail padding joins the last slot
        for q in range(n):
            for k in range(n):
                expected[start + q, start + k] = bool(fn(0, 0, torch.tensor(q), torch.tensor(k)))
        start += n
    assert torch.equal(mask, expected)
