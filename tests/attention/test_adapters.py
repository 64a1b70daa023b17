# SPDX-License-Identifier: Apache-2.0
"""Kernel adapters name the fields exactly as the kernels do, with int32 offsets."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from test_masks import dense_block_causal_mask

from energon_pack.attention import (
    block_mask,
    dense_mask,
    document_metadata,
    flash_attn_kwargs,
    hf_kwargs,
    packed_seq_params,
)
from energon_pack.attention._adapters import hf_labels
from energon_pack.attention._verify import IMPLEMENTATIONS as HF_ATTENTION_IMPLEMENTATIONS


def test_flash_attn_kwargs_use_slot_offsets() -> None:
    # row [3, 2, 1] padded to 8: the varlen kernel must cover all 8 tokens -> [0, 3, 5, 8]
    kw = flash_attn_kwargs(document_metadata([[3, 2, 1]], length=8))
    assert set(kw) == {"cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"}
    assert kw["cu_seqlens_q"].tolist() == kw["cu_seqlens_k"].tolist() == [0, 3, 5, 8]
    assert str(kw["cu_seqlens_q"].dtype) == "torch.int32"
    assert kw["max_seqlen_q"] == kw["max_seqlen_k"] == 3
    assert type(kw["max_seqlen_q"]) is int


def test_packed_seq_params_real_and_padded_offsets() -> None:
    params = packed_seq_params(document_metadata([[3, 2, 1]], length=8))
    if importlib.util.find_spec("megatron.core") is not None:  # pragma: no cover - not on CI
        params = {
            k: getattr(params, k)
            for k in (
                "qkv_format",
                "cu_seqlens_q",
                "cu_seqlens_kv",
                "cu_seqlens_q_padded",
                "cu_seqlens_kv_padded",
                "max_seqlen_q",
                "max_seqlen_kv",
            )
        }
    assert params["qkv_format"] == "thd"
    assert params["cu_seqlens_q"].tolist() == params["cu_seqlens_kv"].tolist() == [0, 3, 5, 6]
    assert params["cu_seqlens_q_padded"].tolist() == [0, 3, 5, 8]
    assert params["cu_seqlens_kv_padded"].tolist() == [0, 3, 5, 8]
    assert params["max_seqlen_q"] == params["max_seqlen_kv"] == 3


@pytest.mark.slow  # a subprocess importing torch
def test_a_megatron_core_that_does_not_import_is_named_not_turned_into_a_dict(tmp_path) -> None:
    """megatron-core 0.17+ without triton: ``import megatron.core`` fails. The fields as a dict
    would reach a model that wants ``PackedSeqParams``; the error names the cause instead."""
    import os
    import subprocess
    import sys

    broken = tmp_path / "megatron" / "core"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'triton'\")")
    code = (
        "import energon_pack.attention as m\n"
        "try:\n"
        "    m.packed_seq_params(m.document_metadata([[2]]))\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    path = os.pathsep.join([str(tmp_path), *sys.path])
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "megatron-core is installed but" in out and "No module named 'triton'" in out


def test_dense_and_block_mask_of_the_metadata() -> None:
    meta = document_metadata([[3, 2, 1]], length=8)
    dense = dense_mask(meta)
    assert torch.equal(dense, dense_block_causal_mask([[3, 2, 3]], 8))
    # the BlockMask's mask_mod reproduces the dense mask pair by pair
    mm = block_mask(meta, block_size=4).mask_mod
    q, k = torch.arange(8).view(-1, 1), torch.arange(8).view(1, -1)
    assert torch.equal(mm(torch.tensor(0), 0, q, k), dense[0, 0])


def test_hf_labels_shift_right() -> None:
    assert hf_labels(torch.tensor([[6, 7, -100, 9, -100]])).tolist() == [[-100, 6, 7, -100, 9]]


def test_hf_kwargs_from_metadata_and_tokens() -> None:
    meta = document_metadata([[3, 2]], length=6)
    tokens = torch.arange(6).view(1, 6)
    labels = torch.tensor([[1, 2, -100, 4, -100, -100]])
    kw = hf_kwargs(meta, tokens, labels, "flash_attention_3", config=None)
    assert list(kw) == [
        "input_ids",
        "position_ids",
        "labels",
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
    ]
    assert kw["input_ids"] is tokens and kw["position_ids"] is meta.position_ids
    assert kw["labels"].tolist() == [[-100, 1, 2, -100, 4, -100]]
    assert kw["cu_seq_lens_q"].tolist() == [0, 3, 6] and kw["max_length_q"] == 3
    assert "labels" not in hf_kwargs(meta, tokens, None, "sdpa", config=None)
    assert set(HF_ATTENTION_IMPLEMENTATIONS) >= {"sdpa", "eager", "flex_attention"}
    with pytest.raises(ValueError, match="unknown attn_implementation 'bogus'"):
        hf_kwargs(meta, tokens, labels, "bogus", config=None)


def test_hf_kwargs_without_config_is_refused() -> None:
    # a windowed model served the plain document-causal mask would differ silently (~0.2)
    meta = document_metadata([[3, 2]], length=6)
    with pytest.raises(TypeError, match=r"needs config=model.*config=None"):
        hf_kwargs(meta, torch.arange(6).view(1, 6))
