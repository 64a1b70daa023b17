# SPDX-License-Identifier: Apache-2.0
"""Mamba2 hybrids (issue 30): mamba-ssm's scans in PyTorch against transformers' own math, the
experiment's teeth on Bamba, and the refusal without the kernels. Packed-equals-alone of
Bamba, GraniteMoE-hybrid, Falcon-H1, Zamba2 and Nemotron-H: the family matrix."""

from __future__ import annotations

import functools

import pytest
import torch
import transformers
from model_families import FAMILIES, PACK_SIZE, build_model
from transformers.models.bamba import modeling_bamba as bamba

from energon_pack.attention import (
    PackingNotExactError,
    _experiment,
    _mamba_reference,
    _verify,
    check_model,
)
from energon_pack.attention._mamba_reference import mamba_chunk_scan_combined

BAMBA = next(f for f in FAMILIES if f.name.startswith("bamba"))


def test_reference_scan_is_transformers_math_per_sequence() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 11, 4, 8, generator=gen)
    dt = torch.randn(1, 11, 4, generator=gen)
    A = -torch.rand(4, generator=gen)  # noqa: N806
    B, C = (torch.randn(1, 11, 2, 6, generator=gen) for _ in range(2))  # noqa: N806
    D, bias = torch.randn(4, generator=gen), torch.randn(4, generator=gen)  # noqa: N806
    seq_idx = torch.tensor([[0] * 4 + [1] * 7], dtype=torch.int32)
    kw = dict(D=D, dt_bias=bias, dt_softplus=True, dt_limit=(0.0, 5.0))
    out = mamba_chunk_scan_combined(x, dt, A, B, C, 4, seq_idx=seq_idx, **kw)
    fallback = bamba.mamba2_chunk_scan.__wrapped__  # transformers' chunked PyTorch scan
    for s, e in ((0, 4), (4, 11)):
        alone = fallback(*(t[:, s:e] for t in (x, dt)), A, B[:, s:e], C[:, s:e], 4, **kw)
        torch.testing.assert_close(out[:, s:e], alone, atol=1e-5, rtol=1e-5)
    whole = mamba_chunk_scan_combined(x, dt, A, B, C, 4, **kw)
    assert (whole[:, 4:] - out[:, 4:]).abs().max() > 1e-3  # without seq_idx: the state carries


def test_fused_reference_is_the_mixer_unfused(monkeypatch) -> None:
    """Train mode takes mamba-ssm's fused path (conv, scan, gated norm, projection in one
    call); its reference equals transformers' unfused PyTorch mixer on one sequence."""
    calls = []
    fused_reference = _mamba_reference.mamba_split_conv1d_scan_combined

    @functools.wraps(fused_reference)  # its signature: transformers filters kwargs by it
    def spy(*args, **kwargs):
        calls.append(kwargs.get("seq_idx"))
        return fused_reference(*args, **kwargs)

    monkeypatch.setattr(_mamba_reference, "mamba_split_conv1d_scan_combined", spy)
    model = build_model(BAMBA, "sdpa")
    mixer = next(m for m in model.modules() if isinstance(m, bamba.BambaMixer))
    hidden = torch.randn(
        1, 13, model.config.hidden_size, generator=torch.Generator().manual_seed(2)
    )
    with torch.no_grad():
        unfused = mixer(hidden)  # eval: causal_conv1d_fn, mamba2_chunk_scan (PyTorch)
        with _verify.cpu_route("sdpa", type(model)):
            mixer.train()
            fused = mixer(hidden)  # train: mamba_split_conv1d_scan_combined (reference)
    torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=1e-5)
    assert calls == [None]  # the fused reference ran, once, given no seq_idx


def test_experiment_catches_a_missing_seq_idx(monkeypatch) -> None:
    build = _experiment.hf_model_kwargs
    monkeypatch.setattr(
        _experiment,
        "hf_model_kwargs",
        lambda *a, **kw: {k: v for k, v in build(*a, **kw).items() if k != "seq_idx"},
    )
    model = build_model(BAMBA, "sdpa")
    with _verify.cpu_route("sdpa", type(model)), torch.no_grad():
        report = _verify.config_report(model.config, "sdpa", 32)
        logits, _ = _experiment.packed_vs_alone(model, report, _experiment.experiment_rows(32))
    assert logits > 1e-4


def test_refused_without_the_kernels_naming_them() -> None:
    model = build_model(BAMBA, "sdpa")
    with pytest.raises(PackingNotExactError) as err:
        check_model(model, "sdpa", pack_size=PACK_SIZE)
    assert "pip install causal-conv1d mamba-ssm" in str(err.value)
    assert "seq_idx for mamba_chunk_scan_combined" in str(err.value)
    with _verify.cpu_route("sdpa", type(model)):
        assert check_model(model, "sdpa", pack_size=PACK_SIZE).state_layers == ("linear_attention",)
    assert isinstance(model, transformers.BambaForCausalLM)
