# SPDX-License-Identifier: Apache-2.0
"""megatron_batch: the THD micro-batch Megatron's forward_step takes, by hand and against the
installed megatron-core's own batch utilities (CPU; its fused kernels are not exercised)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from energon_pack.attention import cp_partition_indices
from energon_pack.samples import collate_packs, megatron_batch, pack_documents
from energon_pack_tools import make_document

FIELDS = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded")


def _fields(params: Any) -> dict[str, Any]:
    params = params if isinstance(params, dict) else vars(params)
    return {k: params[k] for k in ("qkv_format", *FIELDS, "max_seqlen_q", "max_seqlen_kv")}


def _batch(alignment: int = 4):
    """Rows ``a a a p | b b p p`` and ``c c c c c p p p`` (slots 4, 4 and 8)."""
    p0 = pack_documents(
        [make_document("a", [1, 2, 3]), make_document("b", [4, 5])], alignment=alignment
    )
    p1 = pack_documents([make_document("c", [6, 7, 8, 9, 10])], alignment=alignment)
    return collate_packs([p0, p1], pad_to=2 * alignment, pad_token_id=0)


def test_thd_layout_by_hand() -> None:
    mb = megatron_batch(_batch())
    assert mb.tokens.tolist() == [[1, 2, 3, 0, 4, 5, 0, 0, 6, 7, 8, 9, 10, 0, 0, 0]]
    assert mb.labels.tolist() == [[2, 3, 0, 0, 5, 0, 0, 0, 7, 8, 9, 10, 0, 0, 0, 0]]
    assert mb.loss_mask.tolist() == [[1, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]]
    assert mb.loss_mask.dtype == torch.float32 and mb.num_tokens == 7
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7]]
    assert mb.padding_mask.tolist() == [[t == 0 for t in mb.tokens[0].tolist()]]
    fields = _fields(mb.packed_seq_params)
    assert fields["qkv_format"] == "thd"
    assert fields["cu_seqlens_q"].tolist() == fields["cu_seqlens_kv"].tolist() == [0, 3, 5, 10]
    assert fields["cu_seqlens_q_padded"].tolist() == [0, 4, 8, 16]
    assert fields["cu_seqlens_kv_padded"].tolist() == [0, 4, 8, 16]
    assert fields["cu_seqlens_q"].dtype == torch.int32
    assert fields["max_seqlen_q"] == fields["max_seqlen_kv"] == 8
    assert type(fields["max_seqlen_q"]) is int


def test_context_parallel_shares_cover_the_batch_once() -> None:
    batch, whole = _batch(), megatron_batch(_batch())
    per_token_loss = torch.rand(1, 16)  # what the model's forward returns with labels
    loss, tokens = 0.0, 0
    for rank in range(2):
        mb = megatron_batch(batch, cp_size=2, cp_rank=rank)
        index = cp_partition_indices(batch.cu_seqlens_padded, 2, rank)
        assert mb.tokens.shape == (1, 8)
        for name in ("tokens", "labels", "loss_mask", "position_ids", "padding_mask"):
            assert torch.equal(getattr(mb, name)[0], getattr(whole, name)[0, index]), name
        assert _fields(mb.packed_seq_params)["cu_seqlens_q_padded"].tolist() == [0, 4, 8, 16]
        loss += float((per_token_loss[0, index] * mb.loss_mask[0]).sum())
        tokens += mb.num_tokens
    # calculate_per_token_loss: sums and counts over CP ranks give the token-mean of the batch
    assert tokens == whole.num_tokens == batch.num_target_tokens
    assert loss / tokens == pytest.approx(float((per_token_loss * whole.loss_mask).sum()) / 7)


def test_static_metadata_for_cuda_graphs() -> None:
    fields = _fields(megatron_batch(_batch(), max_documents=5).packed_seq_params)
    assert fields["cu_seqlens_q"].tolist() == [0, 3, 5, 10, 10, 10]
    assert fields["cu_seqlens_kv_padded"].tolist() == [0, 4, 8, 16, 16, 16]
    assert fields["max_seqlen_q"] == fields["max_seqlen_kv"] == 8  # the row length
    with pytest.raises(ValueError, match="3 documents, more than max_documents=2"):
        megatron_batch(_batch(), max_documents=2)


def test_device_moves_tensors_and_metadata() -> None:
    mb = megatron_batch(_batch(), cp_size=2, cp_rank=0, device="meta")
    assert mb.tokens.is_meta and mb.loss_mask.is_meta and mb.padding_mask.is_meta
    assert _fields(mb.packed_seq_params)["cu_seqlens_q_padded"].is_meta
    assert mb.num_tokens == 4  # counted on the host before the move


# -- against the installed megatron-core -------------------------------------------------------


class _Group:
    """Just what megatron.core.utils asks of a CP process group: its size and this rank."""

    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


@pytest.fixture
def mcore() -> Any:
    utils = pytest.importorskip("megatron.core.utils")
    started = not torch.distributed.is_initialized()
    if started:  # get_batch_on_this_cp_rank reads the group only once torch.distributed is up
        store = torch.distributed.HashStore()
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield utils
    if started:
        torch.distributed.destroy_process_group()


def _needs(module: Any, name: str, reason: str) -> Any:
    """``module.name``, or a skip naming the megatron-core version that lacks it."""
    from megatron.core import __version__

    if not hasattr(module, name):
        pytest.skip(f"megatron-core {__version__} has no {name}: {reason}")
    return getattr(module, name)


def test_packed_seq_params_is_megatron_cores_and_matches_its_get_batch(mcore: Any) -> None:
    from megatron.core.packed_seq_params import PackedSeqParams

    mb = megatron_batch(_batch())
    assert isinstance(mb.packed_seq_params, PackedSeqParams)
    fields = _fields(mb.packed_seq_params)
    _needs(mcore, "get_thd_batch_on_this_cp_rank", "0.16's THD batch builder (gone in 0.19)")
    _, theirs = mcore.get_thd_batch_on_this_cp_rank(
        {"tokens": mb.tokens},
        fields["cu_seqlens_q"],
        fields["cu_seqlens_q_padded"],
        torch.tensor([fields["max_seqlen_q"]]),
        cp_size=1,
        cp_rank=0,
    )
    for name, value in _fields(theirs).items():
        assert value.tolist() == fields[name].tolist() if name in FIELDS else value == fields[name]


@pytest.mark.parametrize("cp_size", [2, 4])
def test_cp_split_matches_megatron_per_document(mcore: Any, cp_size: int) -> None:
    """Megatron's own split (get_batch_on_this_cp_rank) applied to each document slot."""
    import inspect

    from megatron.core.models.common.embeddings.rope_utils import _get_thd_freqs_on_this_cp_rank

    # 0.16 reads the group's size() and rank(); 0.19 asks torch.distributed (a real CP group:
    # there the split is checked against its GDN all-to-all below)
    split = "is_hybrid_cp" not in inspect.signature(mcore.get_batch_on_this_cp_rank).parameters
    batch = _batch(alignment=2 * cp_size)
    whole = megatron_batch(batch)
    cu = batch.cu_seqlens_padded.tolist()
    for rank in range(cp_size):
        mb = megatron_batch(batch, cp_size=cp_size, cp_rank=rank)
        theirs, positions = [whole.tokens[:, :0]], []
        for start, end in zip(cu, cu[1:]):
            slot = {"tokens": whole.tokens[:, start:end].clone()}
            if split:
                group = _Group(cp_size, rank)
                theirs.append(mcore.get_batch_on_this_cp_rank(slot, group)["tokens"])
            # the positions Megatron's THD rope gives this rank's share of the slot
            share = torch.empty((end - start) // cp_size)
            positions.append(
                _get_thd_freqs_on_this_cp_rank(rank, cp_size, share, torch.arange(end - start))
            )
        if split:
            assert torch.equal(mb.tokens, torch.cat(theirs, dim=1))
        assert torch.equal(mb.position_ids[0], torch.cat(positions))


def test_padding_mask_has_megatrons_polarity_for_moe_routing(mcore: Any) -> None:
    from megatron.core.transformer.moe import moe_utils

    mb = megatron_batch(_batch())
    padding = mb.padding_mask.reshape(-1)  # the router's flattening (micro-batch size 1)
    logits = torch.randn(padding.numel(), 4, generator=torch.Generator().manual_seed(0))
    routing_map, scores = moe_utils.compute_routing_scores_for_aux_loss(
        logits, topk=2, score_function="softmax", padding_mask=padding
    )
    assert routing_map.sum(dim=1).tolist() == [0 if p else 2 for p in padding.tolist()]
    assert scores[padding].abs().sum() == 0
    z_loss = moe_utils.z_loss_func(logits, 1.0, padding_mask=padding)
    real = logits[~padding]
    assert z_loss.item() == pytest.approx(torch.logsumexp(real, -1).square().mean().item())


# -- megatron-core 0.19: flattening, Mamba's seq_idx, gated delta-net THD ----------------------


def test_flattening_is_megatron_cores_flatten_batch(mcore: Any) -> None:
    """The ``B`` rows as one ``(1, B * L)`` row: megatron-core's own micro-batch flattening
    (``flatten_batch_for_packed_sequences``, rows' ``cu_seqlens`` padded with ``L``)."""
    flatten = _needs(mcore, "flatten_batch_for_packed_sequences", "0.19's micro-batch flattening")
    batch = _batch()
    length = batch.tokens.shape[1]
    rows = [list(range(0, length + 1, 4)), [0, 8, 8]]  # slots 4, 4 | 8, padded with L
    theirs = flatten(
        {
            "tokens": batch.tokens.clone(),
            "position_ids": batch.position_ids.clone(),
            "cu_seqlens": torch.tensor(rows, dtype=torch.int32),
            "max_seqlen": torch.tensor([[4], [8]]),
        }
    )
    mb = megatron_batch(batch)
    assert torch.equal(mb.tokens, theirs["tokens"])
    assert torch.equal(mb.position_ids, theirs["position_ids"])
    params = _fields(mb.packed_seq_params)
    assert params["cu_seqlens_q_padded"].tolist() == theirs["cu_seqlens"][0].tolist()
    assert params["max_seqlen_q"] == int(theirs["max_seqlen"])


@pytest.mark.parametrize("max_documents", [None, 5])
def test_seq_idx_for_mamba_is_megatron_cores(mcore: Any, max_documents: int | None) -> None:
    """0.19's Mamba layers keep documents apart by ``packed_seq_params.seq_idx`` alone, which
    ``PackedSeqParams`` computes only when given ``total_tokens``: megatron_batch sets both,
    equal to its own ``__post_init__`` on the same offsets (CUDA-graph padding included), global
    on every CP rank (Mamba's all-to-all runs the scan over the whole sequence)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    if "seq_idx" not in PackedSeqParams.__dataclass_fields__:
        _needs(PackedSeqParams, "seq_idx", "its Mamba mixer derives seq_idx from cu_seqlens")
    for rank in range(2):
        mb = megatron_batch(_batch(), cp_size=2, cp_rank=rank, max_documents=max_documents)
        ours = mb.packed_seq_params
        theirs = PackedSeqParams(
            qkv_format="thd", cu_seqlens_q_padded=ours.cu_seqlens_q_padded, total_tokens=16
        )
        assert ours.total_tokens == 16
        assert ours.seq_idx.dtype == theirs.seq_idx.dtype == torch.int32
        assert torch.equal(ours.seq_idx, theirs.seq_idx)
        assert ours.seq_idx.tolist() == [[0] * 4 + [1] * 4 + [2] * 8]


@pytest.mark.parametrize("cp_size", [1, 2])
def test_gated_delta_net_takes_the_thd_batch(mcore: Any, cp_size: int) -> None:
    """megatron-core 0.19's ``GatedDeltaNet`` in THD (its forward runs FLA's Triton kernels, not
    on CPU): batch dimension 1; its offset check (``_resolve_cu_seqlens``: the slots end at the
    global length, each a multiple of CP) takes ``packed_seq_params`` as is; and its CP
    all-to-all permutation (``_build_thd_cp_a2a_perm``), applied to the ranks' shares laid end
    to end, gives the whole batch back in order."""
    pytest.importorskip("triton", reason="megatron-core's gated delta-net module imports triton")
    try:
        from megatron.core.ssm import gated_delta_net as gdn
    except ImportError as error:  # 0.16 has no THD GDN: its forward raises NotImplementedError
        pytest.skip(f"no THD gated delta-net in this megatron-core ({error})")
    perm = _needs(getattr(gdn, "common", gdn), "_build_thd_cp_a2a_perm", "no THD GDN (0.16)")
    batch = _batch()  # slots of 4 and 8: multiples of 2 * CP
    whole = megatron_batch(batch)
    total = batch.tokens.numel()
    params = whole.packed_seq_params
    assert whole.tokens.shape == (1, total)  # "Packed sequence expects batch dimension to be 1"
    resolved = gdn.GatedDeltaNet._resolve_cu_seqlens(
        None, params.cu_seqlens_q_padded, params.cu_seqlens_q, total, "cu_seqlens_q", cp_size
    )
    assert torch.equal(resolved, params.cu_seqlens_q_padded)
    shares = [megatron_batch(batch, cp_size=cp_size, cp_rank=r) for r in range(cp_size)]
    laid = torch.cat([mb.tokens[0] for mb in shares])
    index, inverse = perm(params.cu_seqlens_q_padded, cp_size, total)
    assert torch.equal(laid[index], whole.tokens[0])
    assert torch.equal(whole.tokens[0][inverse], laid)
