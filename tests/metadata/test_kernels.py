# SPDX-License-Identifier: Apache-2.0
"""Kernel adapters name the fields exactly as the kernels do, with int32 offsets."""

from __future__ import annotations

import importlib.util

from energon_pack.attention import document_metadata, flash_attn_kwargs, packed_seq_params


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


def test_metadata_package_does_not_import_megatron() -> None:
    import subprocess
    import sys

    code = (
        "import sys, energon_pack.attention as m; "
        "m.packed_seq_params(m.document_metadata([[2]])); "
        "assert not any(k == 'megatron.energon' or k.startswith('megatron.energon.') "
        "for k in sys.modules), sorted(k for k in sys.modules if k.startswith('megatron'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
