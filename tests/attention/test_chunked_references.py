# SPDX-License-Identifier: Apache-2.0
"""The chunked PyTorch references of fla's ``chunk_gated_delta_rule`` and mamba-ssm's scan equal
those recurrences token by token (the previous references, kept here as the oracles), sequence
by sequence; the causal conv reference equals torch's convolution per sequence."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

from energon_pack.attention._linear_reference import (
    CHUNK,
    causal_conv1d_fn,
    chunk_gated_delta_rule,
)
from energon_pack.attention._mamba_reference import mamba_chunk_scan_combined


def _token_by_token(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None):
    """The oracle: q / k ``(1, T, H, K)`` l2-normalised in the kernel, one state per sequence
    of ``cu_seqlens``, updated one token at a time."""
    q, k = (t * torch.rsqrt((t * t).sum(-1, keepdim=True) + 1e-6) for t in (q, k))
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    q, k = (t.repeat_interleave(v.shape[2] // k.shape[2], dim=2) for t in (q, k))
    out, finals = torch.zeros(v.shape), []
    for n, (start, end) in enumerate(itertools.pairwise(cu_seqlens.tolist())):
        state = torch.zeros(v.shape[2], k.shape[3], v.shape[3])
        if initial_state is not None:
            state = initial_state[n].clone()
        for t in range(start, end):
            state = state * g[0, t].exp()[:, None, None]
            delta = (v[0, t] - torch.einsum("hk,hkv->hv", k[0, t], state)) * beta[0, t, :, None]
            state = state + k[0, t, :, :, None] * delta[:, None, :]
            out[0, t] = torch.einsum("hk,hkv->hv", q[0, t], state)
        finals.append(state)
    return out, torch.stack(finals)


def _inputs(lengths, seed, beta_max=1.0):
    gen = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q, k = (torch.randn(1, total, 2, 16, generator=gen) for _ in range(2))
    v = torch.randn(1, total, 4, 8, generator=gen)  # grouped values: 2 per q/k head
    g = -torch.rand(1, total, 4, generator=gen)
    beta = torch.rand(1, total, 4, generator=gen) * beta_max
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    return (q, k, v, g, beta), cu, torch.randn(len(lengths), 4, 16, 8, generator=gen)


@pytest.mark.parametrize(
    ("lengths", "beta_max"),
    [
        ([1, 63, CHUNK, CHUNK + 1, 1, 2 * CHUNK + 3, 7], 1.0),  # length-1, across chunk borders
        ([1, 1, 200, 3], 2.0),  # OLMo-hybrid's allow_neg_eigval: beta up to 2
        ([5], 1.0),
    ],
)
@pytest.mark.parametrize("variant", ["zero", "initial_state", "scale"])
def test_chunked_equals_token_by_token(lengths, beta_max, variant) -> None:
    inputs, cu, initial = _inputs(lengths, seed=len(lengths), beta_max=beta_max)
    kwargs = {"initial_state": initial} if variant == "initial_state" else {}
    kwargs |= {"scale": 0.3} if variant == "scale" else {}
    out, final = chunk_gated_delta_rule(*inputs, cu_seqlens=cu, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True, **kwargs)  # fmt: skip
    want, want_final = _token_by_token(*inputs, cu_seqlens=cu, **kwargs)
    assert out.shape == inputs[2].shape and final.shape == (len(lengths), 4, 16, 8)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, want_final, atol=1e-5, rtol=1e-5)
    assert (out[0, 1:] - want[0, :-1]).abs().max() > 1e-3  # the comparison can fail


def test_rows_without_cu_seqlens_are_sequences() -> None:
    """Batch of rows, no cu_seqlens: each row one sequence, its state from the row's initial
    state; equal to the oracle and to transformers' own recurrent function per row."""
    (q, k, v, g, beta), _, initial = _inputs([70, 70], seed=3)
    rows = [t.view(2, 70, *t.shape[2:]) for t in (q, k, v, g, beta)]
    out, final = chunk_gated_delta_rule(*rows, initial_state=initial, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True)  # fmt: skip
    recurrent = qwen3_next.torch_recurrent_gated_delta_rule.__wrapped__
    for r in range(2):
        row = [t[r : r + 1] for t in rows]
        cu = torch.tensor([0, 70])
        want, want_final = _token_by_token(*row, initial_state=initial[r : r + 1], cu_seqlens=cu)
        torch.testing.assert_close(out[r : r + 1], want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(final[r : r + 1], want_final, atol=1e-5, rtol=1e-5)
        theirs, _ = recurrent(*row[:3], g=row[3], beta=row[4], initial_state=initial[r : r + 1],
                              output_final_state=True, use_qk_l2norm_in_kernel=True)  # fmt: skip
        torch.testing.assert_close(out[r : r + 1], theirs, atol=1e-5, rtol=1e-5)
    assert chunk_gated_delta_rule(*rows)[1] is None  # no final state unless asked


def test_bf16_in_bf16_out_and_empty_sequences() -> None:
    """The dtype of v comes back; a zero-length sequence of cu_seqlens keeps its initial
    state."""
    inputs, _, initial = _inputs([4, 3], seed=4)
    cu = torch.tensor([0, 4, 4, 7])
    initial = torch.cat([initial[:1], initial])
    out, final = chunk_gated_delta_rule(*(t.bfloat16() for t in inputs), cu_seqlens=cu,
                                        initial_state=initial, output_final_state=True)  # fmt: skip
    assert out.dtype == torch.bfloat16 and out.shape == (1, 7, 4, 8)
    torch.testing.assert_close(final[1], initial[1])


def test_conv_taps_stay_in_their_sequence() -> None:
    """causal_conv1d_fn with several sequences per row (length 1 among them), two rows with
    other borders: each sequence equals torch's depthwise convolution of it alone."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 9, 12, generator=gen).transpose(1, 2).contiguous().transpose(1, 2)
    weight, bias = torch.randn(9, 4, generator=gen), torch.randn(9, generator=gen)
    rows = [[1, 2, 1, 5, 3], [7, 1, 4]]
    seq_idx = torch.tensor([[i for i, n in enumerate(r) for _ in range(n)] for r in rows])
    out = causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx.int(), activation="silu")
    for r, lengths in enumerate(rows):
        for s, e in itertools.pairwise([0, *itertools.accumulate(lengths)]):
            part = F.conv1d(x[r : r + 1, :, s:e], weight[:, None], bias, padding=3, groups=9)
            torch.testing.assert_close(out[r : r + 1, :, s:e], F.silu(part[..., : e - s]))
    plain = causal_conv1d_fn(x, weight, bias, activation="silu")
    assert (plain[1, :, 7:] - out[1, :, 7:]).abs().max() > 1e-3  # the borders matter here


def _scan_token_by_token(x, dt, A, B, C, seq_idx, initial):  # noqa: N803 - mamba-ssm's names
    """The oracle of the Mamba2 scan (the previous reference): dt already softplus'd."""
    b, c = (t.repeat_interleave(x.shape[2] // B.shape[2], dim=2) for t in (B, C))
    state, out = initial.clone(), torch.empty(x.shape)
    for t in range(x.shape[1]):
        if t:
            new = (seq_idx[:, t] != seq_idx[:, t - 1])[:, None, None, None]
            state = torch.where(new, torch.zeros_like(state), state)
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        state = state * decay + (dt[:, t, :, None, None] * x[:, t, :, :, None]) * b[:, t, :, None]
        out[:, t] = torch.einsum("bhpn,bhn->bhp", state, c[:, t])
    return out, state


@pytest.mark.parametrize(
    "rows", [[[1, 63, CHUNK, CHUNK + 1, 1, 7], [130, 1, 1, 4, 3, 62]], [[1, 4]]]
)
def test_mamba_chunked_scan_equals_token_by_token(rows) -> None:
    gen = torch.Generator().manual_seed(6)
    length, batch = sum(rows[0]), len(rows)
    x = torch.randn(batch, length, 4, 8, generator=gen)
    dt = torch.rand(batch, length, 4, generator=gen) * 0.5
    A = -torch.rand(4, generator=gen)  # noqa: N806
    B, C = (torch.randn(batch, length, 2, 6, generator=gen) * 0.5 for _ in range(2))  # noqa: N806
    seq_idx = torch.tensor([[i for i, n in enumerate(r) for _ in range(n)] for r in rows]).int()
    initial = torch.randn(batch, 4, 8, 6, generator=gen)
    out, final = mamba_chunk_scan_combined(x, dt, A, B, C, 16, seq_idx=seq_idx,
                                           initial_states=initial, return_final_states=True)  # fmt: skip
    want, want_final = _scan_token_by_token(x, dt, A, B, C, seq_idx, initial)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final, want_final, atol=1e-5, rtol=1e-5)
    plain = mamba_chunk_scan_combined(x, dt, A, B, C, 16, initial_states=initial)
    assert (plain - want).abs().max() > 1e-3  # the comparison can fail
