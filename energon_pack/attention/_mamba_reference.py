# SPDX-License-Identifier: Apache-2.0
"""mamba-ssm's Mamba2 scans in PyTorch, resetting the state where ``seq_idx`` changes.

transformers 5.24's Mamba2 mixers (Bamba, GraniteMoE-hybrid, Falcon-H1, Zamba2, Nemotron-H,
Mamba2) pass their ``**kwargs`` (so ``seq_idx``) to mamba-ssm's ``mamba_chunk_scan_combined``
(eval) and ``mamba_split_conv1d_scan_combined`` (train mode, fused with the causal conv, the
gated RMSNorm and the output projection), both of which start a new sequence, from zero state,
where ``seq_idx`` changes. The functions below are those kernels' math (the scan in chunks, as
the kernels compute it), for ``_linear_reference.emulated_linear_kernels`` to put into
transformers' route on CPU. Example:
``seq_idx = [[0, 0, 1]]``: the third token's state is ``dt * x ⊗ B`` of its own token only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from energon_pack.attention._linear_reference import causal_conv1d_fn

__all__ = ["CHUNK", "mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined"]


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - mamba-ssm's names
    B: torch.Tensor,  # noqa: N803
    C: torch.Tensor,  # noqa: N803
    chunk_size: int,
    D: torch.Tensor | None = None,  # noqa: N803
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The selective state-space scan: x ``(b, l, h, p)``, dt ``(b, l, h)``, A ``(h,)``, B / C
    ``(b, l, g, n)``, D ``(h,)`` or ``(h, p)``, z ``(b, l, h, p)`` (output gated by silu(z)),
    ``seq_idx`` ``(b, l)`` int32: ``state = exp(dt A) state + dt x ⊗ B`` (zero where seq_idx
    changes), ``y = state · C + D x``. ``chunk_size`` only tiles the real kernel's work (the
    reference runs chunks of :data:`CHUNK`: :func:`_chunked_scan`)."""
    if cu_seqlens is not None or return_varlen_states:
        raise NotImplementedError("the reference scan reads seq_idx, not cu_seqlens")
    batch, length, heads, _ = x.shape
    per_group = heads // B.shape[2]
    dt = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)
    dt = (F.softplus(dt) if dt_softplus else dt).clamp(min=dt_limit[0], max=dt_limit[1])
    xf = x.float()
    b, c = (t.float().repeat_interleave(per_group, dim=2) for t in (B, C))
    state = torch.zeros(batch, heads, x.shape[3], B.shape[3])
    if initial_states is not None:
        state = initial_states.float().clone()
    # sequence ids that change where seq_idx changes (a new sequence starts from zero state)
    seq = torch.zeros(batch, length, dtype=torch.long)
    if seq_idx is not None and length > 1:
        seq[:, 1:] = (seq_idx[:, 1:] != seq_idx[:, :-1]).long().cumsum(1)
    out, state = _chunked_scan(xf, dt, dt * A.float(), b, c, seq, state)
    if D is not None:
        out = out + xf * (D.float()[:, None] if D.dim() == 1 else D.float())
    if z is not None:
        out = out * F.silu(z.float())
    return (out.to(x.dtype), state) if return_final_states else out.to(x.dtype)


#: Tokens per chunk of :func:`_chunked_scan`.
CHUNK = 64


def _chunked_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    log_decay: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    seq: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``state_t = exp(log_decay_t) state_{t-1} + dt_t x_t ⊗ b_t`` (from zero where ``seq``
    changes), ``y_t = state_t · c_t``, in chunks: x ``(B, L, H, P)``, dt / log_decay ``(B, L,
    H)``, b / c ``(B, L, H, N)``, seq ``(B, L)`` non-decreasing, state ``(B, H, P, N)``. Within a
    chunk y is a decay-weighted attention of c on b over the same sequence's earlier tokens
    (the SSD form, as mamba-ssm's chunk kernels); from chunk to chunk the state carries over
    where the sequence goes on. Returns y ``(B, L, H, P)`` and the last state."""
    batch, length, heads, _ = x.shape
    if not length:
        return torch.zeros(x.shape), state
    pad = -length % CHUNK  # past the end: dt 0, decay 1, the last sequence: nothing changes
    x, dt, log_decay, b, c = (
        F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, log_decay, b, c)
    )
    seq = torch.cat([seq, seq[:, -1:].expand(batch, pad)], 1)
    x, b, c = (t.transpose(1, 2).unflatten(2, (-1, CHUNK)) for t in (x * dt[..., None], b, c))
    cum = log_decay.transpose(1, 2).unflatten(2, (-1, CHUNK)).cumsum(-1)  # (B, H, chunks, Q)
    seq = seq.unflatten(1, (-1, CHUNK))[:, None]  # (B, 1, chunks, Q)
    before = torch.cat([seq[..., :1, :1], seq[..., :-1, -1:]], 2)  # the carried state's
    same = (seq[..., :, None] == seq[..., None, :]).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~same, float("-inf")).exp()
    y = ((c @ b.transpose(-1, -2)) * decay) @ x  # within each chunk
    end = (cum[..., -1:] - cum).masked_fill(seq != seq[..., -1:], float("-inf")).exp()
    added = (x * end[..., None]).transpose(-1, -2) @ b  # (B, H, chunks, P, N)
    carry = cum[..., -1].exp() * (seq[..., -1] == before[..., 0])
    read = cum.exp() * (seq == before)  # how much of the carried state each token reads
    states = []
    for n in range(cum.shape[2]):
        states.append(state)
        state = state * carry[:, :, n, None, None] + added[:, :, n]
    y = y + (c @ torch.stack(states, 2).transpose(-1, -2)) * read[..., None]
    return y.flatten(2, 3).transpose(1, 2)[:, :length].contiguous(), state  # callers view it


def _gated_rms_norm(
    y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, groups: int, before: bool
) -> torch.Tensor:
    """mamba-ssm's ``rmsnorm_fn`` with a gate: per group of ``dim // groups`` channels."""
    if not before:
        y = y * F.silu(z)
    shaped = y.unflatten(-1, (groups, -1))
    y = (shaped * torch.rsqrt(shaped.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2) * weight
    return y * F.silu(z) if before else y


def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: torch.Tensor | None,
    dt_bias: torch.Tensor,
    A: torch.Tensor,  # noqa: N803 - mamba-ssm's names
    D: torch.Tensor,  # noqa: N803
    chunk_size: int,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    activation: str = "silu",
    rmsnorm_weight: torch.Tensor | None = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: torch.Tensor | None = None,
    outproj_bias: torch.Tensor | None = None,
    headdim: int | None = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The fused Mamba2 mixer: ``zxbcdt`` ``(b, l, dim + conv_dim + h)`` split into the gate z,
    the conv input xBC and dt; xBC through the causal conv (``seq_idx``) and ``activation``;
    the scan (dt softplus, ``seq_idx``); the gated RMSNorm; the output projection."""
    heads = A.shape[0]
    headdim = headdim if headdim is not None else D.shape[-1]
    dim, conv_dim = heads * headdim, conv1d_weight.shape[0]
    if zxbcdt.shape[-1] != dim + conv_dim + heads:
        raise NotImplementedError("the reference fused scan has no non-SSM (d_mlp) channels")
    state_size = (conv_dim - dim) // (2 * ngroups)
    z, xbc, dt = torch.split(zxbcdt, [dim, conv_dim, heads], dim=-1)
    act = "silu" if activation in ("silu", "swish") else None
    xbc = causal_conv1d_fn(
        xbc.transpose(1, 2), conv1d_weight, conv1d_bias, seq_idx=seq_idx, activation=act
    ).transpose(1, 2)
    x, b, c = torch.split(xbc, [dim, ngroups * state_size, ngroups * state_size], dim=-1)
    batch, length = x.shape[:2]
    scanned = mamba_chunk_scan_combined(
        x.reshape(batch, length, heads, headdim),
        dt,
        A,
        b.reshape(batch, length, ngroups, state_size),
        c.reshape(batch, length, ngroups, state_size),
        chunk_size,
        D=D,
        z=None if rmsnorm_weight is not None else z.reshape(batch, length, heads, headdim),
        dt_bias=dt_bias,
        initial_states=initial_states,
        seq_idx=seq_idx,
        dt_softplus=True,
        dt_limit=dt_limit,
        return_final_states=return_final_states,
    )
    y, final = scanned if return_final_states else (scanned, None)
    y = y.reshape(batch, length, dim)
    if rmsnorm_weight is not None:
        y = _gated_rms_norm(y, z, rmsnorm_weight, rmsnorm_eps, ngroups, norm_before_gate)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y
