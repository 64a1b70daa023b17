# SPDX-License-Identifier: Apache-2.0
"""Hybrid models (issue 30): transformers' linear-attention / short-conv route, proven on CPU
with reference kernels, the flattened ``(1, B*L)`` layout, and the refusals by mechanism."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

from energon_pack.attention import (
    PackingNotExactError,
    _experiment,
    _linear_reference,
    _verify,
    check_model,
    document_metadata,
    hf_kwargs,
)
from energon_pack.attention._linear_reference import causal_conv1d_fn, chunk_gated_delta_rule

ROWS = [[8, 4], [6, 3]]  # tail padding (2, then 5 slots): before the next pack's first document
LENGTH = 14


def _qwen3_next() -> torch.nn.Module:
    config = transformers.Qwen3NextConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8, num_experts=2,
        num_experts_per_tok=1, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return transformers.Qwen3NextForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return _qwen3_next()


def _batch() -> tuple[object, torch.Tensor]:
    meta = document_metadata(ROWS, length=LENGTH)
    tokens = torch.randint(3, 97, (len(ROWS), LENGTH), generator=torch.Generator().manual_seed(1))
    return meta, tokens


def _alone_diff(model, tokens, logits) -> float:
    """max |logit diff| of each document of ``logits`` ``(B, L, V)`` vs the document alone."""
    worst = 0.0
    for r, lengths in enumerate(ROWS):
        start = 0
        for n in lengths:
            alone = model(input_ids=tokens[r : r + 1, start : start + n]).logits[0]
            worst = max(worst, float((logits[r, start : start + n] - alone).abs().max()))
            start += n
    return worst


def test_reference_conv_resets_at_seq_idx() -> None:
    x = torch.randn(1, 6, 10).transpose(1, 2).contiguous().transpose(1, 2)  # channel last
    weight, bias = torch.randn(6, 4), torch.randn(6)
    seq_idx = torch.tensor([[0] * 3 + [1] * 7], dtype=torch.int32)
    out = causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")
    for s, e in ((0, 3), (3, 10)):  # each sequence alone, zero history
        part = F.conv1d(x[..., s:e], weight[:, None], bias, padding=3, groups=6)[..., : e - s]
        torch.testing.assert_close(out[..., s:e], F.silu(part))
    whole = causal_conv1d_fn(x, weight, bias, activation="silu")
    assert (whole[..., 3:6] - out[..., 3:6]).abs().max() > 1e-3  # without seq_idx: mixed
    with pytest.raises(ValueError, match="int32"):
        causal_conv1d_fn(x, weight, seq_idx=seq_idx.long())


def test_reference_delta_rule_is_transformers_math_per_sequence() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 11, 2, 8, generator=gen) for _ in range(2))
    v = torch.randn(1, 11, 4, 8, generator=gen)  # grouped values: 2 per q/k head
    g = -torch.rand(1, 11, 4, generator=gen)
    beta = torch.rand(1, 11, 4, generator=gen)
    cu = torch.tensor([0, 4, 11], dtype=torch.int32)
    out, final = chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True,
                                        cu_seqlens=cu, output_final_state=True)  # fmt: skip
    assert final.shape == (2, 4, 8, 8)
    fallback = qwen3_next.torch_chunk_gated_delta_rule.__wrapped__  # transformers' own math
    for s, e in ((0, 4), (4, 11)):
        part = (t[:, s:e] for t in (q, k, v))
        alone, _ = fallback(*part, g=g[:, s:e], beta=beta[:, s:e], use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(out[:, s:e], alone, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="batch size is expected to be 1"):
        chunk_gated_delta_rule(*(torch.cat([t, t]) for t in (q, k, v, g, beta)), cu_seqlens=cu)


@pytest.mark.parametrize("impl", ["sdpa", "flash_attention_2"])
def test_flattened_route_is_exact(model, impl) -> None:
    """hf_kwargs lays the packs end to end; through transformers' route and the reference
    kernels each document's logits and the loss equal the document alone."""
    meta, tokens = _batch()
    labels = torch.where(meta.segment_ids > 0, tokens, -100)
    with _verify.cpu_route(impl, type(model)), torch.no_grad():
        model.config._attn_implementation = impl
        kwargs = hf_kwargs(meta, tokens, labels, impl, config=model)
        assert kwargs["input_ids"].shape == kwargs["seq_idx"].shape == (1, 2 * LENGTH)
        assert kwargs["seq_idx"].dtype == torch.int32
        assert kwargs["cu_seq_lens_q"].tolist() == [0, 8, 14, 20, 28]  # padding in its slot
        assert kwargs["seq_idx"][0, 12:15].tolist() == [1, 1, 2]
        assert kwargs["max_length_q"] == 8 and kwargs["labels"][0, LENGTH] == -100
        out = model(**kwargs)
        logits = out.logits.view(2, LENGTH, -1)
        assert _alone_diff(model, tokens, logits) <= 1e-5
    model.config._attn_implementation = "sdpa"
    assert qwen3_next.causal_conv1d_fn.__wrapped__.__module__ == qwen3_next.__name__  # restored


@pytest.mark.parametrize("drop", [("seq_idx",), ("cu_seq_lens_q",)])
def test_experiment_catches_a_missing_border(model, monkeypatch, drop) -> None:
    """The proof has teeth: without seq_idx (conv) or cu_seq_lens_q (delta rule) the same
    experiment measures the documents mixing."""
    build = _experiment.hf_model_kwargs
    monkeypatch.setattr(
        _experiment,
        "hf_model_kwargs",
        lambda *a, **kw: {k: v for k, v in build(*a, **kw).items() if k not in drop},
    )
    with _verify.cpu_route("sdpa", type(model)), torch.no_grad():
        report = _verify.config_report(model.config, "sdpa", 32)
        logits, _ = _experiment.packed_vs_alone(model, report, _experiment.experiment_rows(32))
    assert logits > 1e-4


def _qwen3_5() -> torch.nn.Module:
    config = transformers.Qwen3_5TextConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return transformers.Qwen3_5ForCausalLM(config).eval()


@pytest.mark.parametrize("build", [_qwen3_next, _qwen3_5], ids=["qwen3-next", "qwen3.5"])
def test_position_ids_alone_leak_through_the_fallbacks(build) -> None:
    """The peers' silent path (ms-swift, NeMo before the fix): (B, L) rows, reset positions and
    a document mask, no seq_idx / cu_seq_lens: transformers' PyTorch fallbacks run each row as
    one sequence. The figure in docs/howto/kernels.md: ``pytest -s -k leak`` prints it."""
    model = build()
    meta, tokens = _batch()
    with _verify.cpu_route("sdpa", type(model)):
        report = check_model(model, "sdpa", pack_size=LENGTH)
        exact = model(**hf_kwargs(meta, tokens, None, "sdpa", config=model)).logits
    plain = dataclasses.replace(report, state_layers=())
    kwargs = _experiment.hf_model_kwargs(meta, tokens, plain)
    with torch.no_grad():
        logits = model(input_ids=tokens, **kwargs).logits
        leak = _alone_diff(model, tokens, logits)
        assert _alone_diff(model, tokens, exact.view(len(ROWS), LENGTH, -1)) <= 1e-5
    print(f"{type(model).__name__}: position ids only, max |logit diff| vs alone {leak:.2g}")
    assert leak > 1e-3


def test_refused_without_the_kernels_naming_them(model, monkeypatch) -> None:
    with pytest.raises(PackingNotExactError) as err:
        check_model(model, "sdpa", pack_size=LENGTH)
    assert "pip install causal-conv1d flash-linear-attention" in str(err.value)
    assert "through transformers' route with PyTorch reference kernels" in str(err.value)
    real = importlib.util.find_spec
    monkeypatch.setattr(  # fla installed, causal-conv1d not
        _linear_reference.importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "fla" else real(name, *a),
    )
    with pytest.raises(PackingNotExactError, match=r"pip install causal-conv1d \("):
        check_model(model, "sdpa", pack_size=LENGTH)
    monkeypatch.setattr(_linear_reference.importlib.util, "find_spec", lambda *a: object())
    assert check_model(model, "sdpa", pack_size=LENGTH).state_layers == ("linear_attention",)


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ("JambaConfig", "these are Mamba (v1) layers: transformers calls mamba_inner_fn"),
        ("MiniMaxConfig", "modeling_minimax.py of transformers"),
        ("Lfm3VlConfig", "lfm3_vl is a multimodal hybrid"),
    ],
)
def test_other_hybrids_refused_by_mechanism(config, says) -> None:
    with pytest.raises(PackingNotExactError, match="non-attention layer types") as err:
        check_model(getattr(transformers, config)(), "sdpa", pack_size=64)
    assert says in str(err.value)


def test_first_batch_check_reads_the_flattened_row(model) -> None:
    """check_first_batch on a real packed batch of a hybrid (the packs end to end)."""
    from model_families import packed_batch

    from energon_pack.attention import check_first_batch

    batch, _ = packed_batch()
    with _verify.cpu_route("sdpa", type(model)):
        report = check_first_batch(model, batch, "sdpa", tolerance=1e-5)
    assert report.max_difference <= 1e-5 and report.loss_difference <= 2e-5


def test_a_hybrid_whose_layers_miss_the_borders_is_refused_by_name(monkeypatch) -> None:
    """Where a layer would not get seq_idx, check_model's experiment measures it and names it."""
    build = _experiment.hf_model_kwargs
    monkeypatch.setattr(
        _experiment,
        "hf_model_kwargs",
        lambda *a, **kw: {k: v for k, v in build(*a, **kw).items() if k != "seq_idx"},
    )
    monkeypatch.setattr(_verify, "_verified", dict)  # the experiment, not the matrix, answers
    config = _qwen3_next().config
    config.vocab_size = 101  # a config no earlier test cached a verdict for
    with _verify.cpu_route("sdpa", transformers.Qwen3NextForCausalLM):
        with pytest.raises(PackingNotExactError, match="do not get the document borders") as err:
            check_model(config, "sdpa", pack_size=40)
    assert "causal_conv1d_fn" in str(err.value) and "torch_chunk_gated_delta_rule" in str(err.value)


def test_mrope_rows_go_under_the_text_row_of_the_flattened_batch(model) -> None:
    """A multimodal hybrid's (3, B, L) mRoPE rows become (4, 1, B*L): the flattened text
    positions, then the rows laid end to end."""
    meta, tokens = _batch()
    mrope = torch.arange(3 * 2 * LENGTH).view(3, 2, LENGTH)
    with _verify.cpu_route("sdpa", type(model)):
        kwargs = hf_kwargs(meta, tokens, None, "sdpa", config=model, mrope_position_ids=mrope)
        assert kwargs["position_ids"].shape == (4, 1, 2 * LENGTH)
        assert torch.equal(kwargs["position_ids"][0, 0], meta.position_ids.reshape(-1))
        assert torch.equal(kwargs["position_ids"][1:, 0], mrope.reshape(3, -1))
        with pytest.raises(ValueError, match="must be"):
            hf_kwargs(meta, tokens, None, "sdpa", config=model, mrope_position_ids=mrope[:2])
        with pytest.raises(ValueError, match="do not cover"):
            hf_kwargs(meta, tokens, None, "sdpa", config=model, mrope_position_ids=mrope[..., :5])
    plain = hf_kwargs(meta, tokens, None, "sdpa", config=None, mrope_position_ids=mrope)
    assert plain["position_ids"] is mrope  # (B, L) rows: as given


@pytest.mark.parametrize(
    ("config", "heads", "dims"),
    [("Qwen3_5TextConfig", (2, 4), (16, 16)), ("OlmoHybridConfig", (2, 2), (16, 32))],
)
def test_tiny_copy_shrinks_the_delta_net_keeping_its_ratios(config, heads, dims) -> None:
    """Default Qwen3.5 (16 key / 32 value heads of 128) and OLMo-hybrid (30 / 30 heads, value
    heads of 192 for keys of 96): the copy keeps the grouping and the value / key width ratio,
    at a width the reference kernels run in seconds."""
    tiny = _experiment.tiny_config(getattr(transformers, config)(), 4096)
    assert (tiny.linear_num_key_heads, tiny.linear_num_value_heads) == heads
    assert (tiny.linear_key_head_dim, tiny.linear_value_head_dim) == dims
    assert tiny.num_hidden_layers == 32  # every layer still
