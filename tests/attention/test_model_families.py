# SPDX-License-Identifier: Apache-2.0
"""The model-family matrix: every cell is exact (1e-5, logits and loss) or refused by name.

Rows, the tiny configs and the packed batch are in ``model_families.py``. Each cell asks
``check_model`` with the registry off (the verdict is the experiment's or a named refusal)
and measures what it accepted; ``verified.json`` and the table in ``docs/howto/kernels.md``
must equal what the cells prove (``python tests/benchmarks/model_matrix.py --write``
regenerates both). Then ``check_model`` on models the matrix has never seen.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
import transformers
from model_families import (
    FAMILIES,
    IMPLEMENTATIONS,
    WINDOW,
    Cell,
    CumsumLlama,
    Family,
    build_model,
    markdown_table,
    packed_batch,
    registry,
    run_cell,
)

from energon_pack.attention import (
    LocalAttention,
    PackingNotExactError,
    _verdicts,
    _verify,
    check_model,
    document_metadata,
)
from energon_pack.attention._flash_reference import varlen_attention
from energon_pack.attention._masks import document_causal_mask

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
from model_matrix import BEGIN, DOC, END, REGISTRY, replace_table, table_rows  # noqa: E402

_TRANSFORMERS = tuple(int(x) for x in transformers.__version__.split(".")[:2])
#: Families refused in every implementation, by the start of the error's feature.
REFUSED = {
    "llama (dynamic NTK rope)": "dynamic NTK rope",
    "phi3 (LongRoPE, original 16)": "LongRoPE",
    "bloom (ALiBi)": "ALiBi (bloom)",
    "falcon (ALiBi)": "ALiBi (falcon)",
    # hybrids whose layers have no border input (Mamba v1's selective scan) or are PyTorch
    # code that takes none; Qwen3-Next, Qwen3.5, LFM2 and the Mamba2 hybrids are exact
    # (transformers' kernel route with reference kernels)
    "jamba": "non-attention layer types ['linear_attention']",
    "minimax": "non-attention layer types ['linear_attention']",
    "recurrent-gemma": "non-attention layer types ['linear_attention']",
    "rwkv": "recurrent layers without attention",
    "xlstm": "recurrent layers without attention",
    "bart decoder": "no position_ids in BartForCausalLM",
    "mbart decoder": "no position_ids in MBartForCausalLM",
    "marian decoder": "no position_ids in MarianForCausalLM",
    "pegasus decoder": "no position_ids in PegasusForCausalLM",
    "blenderbot decoder": "no position_ids in BlenderbotForCausalLM",
    "mvp decoder": "no position_ids in MvpForCausalLM",
    "trocr decoder": "no position_ids in TrOCRForCausalLM",
    "t5gemma (encoder-decoder)": "encoder-decoder",
    "blt": "unreadable config BltConfig",
}
#: Cells refused in one implementation only: the experiment measured them wrong (or failing).
REFUSED_CELLS = {
    # GPTNeoFlashAttention2.forward calls _flash_attention_forward without the packing kwargs
    # (no cu_seq_lens, no position_ids): documents attend across each other, 0.83 in eval
    # and train mode alike (transformers 5.24)
    ("gpt-neo", "flash_attention_2"): "GPTNeoForCausalLM with flash_attention_2",
    ("falcon (rotary)", "flash_attention_2"): "FalconForCausalLM with flash_attention_2",
    ("moshi (unused sliding_window)", "sdpa"): "MoshiForCausalLM with sdpa",
    ("moshi (unused sliding_window)", "eager"): "MoshiForCausalLM with eager",
    ("moshi (unused sliding_window)", "flex_attention"): "MoshiForCausalLM with flex_attention",
    # "Attention sinks cannot be run on CPU with flex": the check runs on CPU
    ("gpt-oss (window 8)", "flex_attention"): "GptOssForCausalLM with flex_attention",
    # transformers' LFM2 reads BlockMask.ndim ('BlockMask' object has no attribute 'ndim')
    ("lfm2 (hybrid short conv)", "flex_attention"): "Lfm2ForCausalLM with flex_attention",
    ("lfm2-moe", "flex_attention"): "Lfm2MoeForCausalLM with flex_attention",
    ("granitemoe-hybrid", "flex_attention"): "GraniteMoeHybridForCausalLM with flex_attention",
    ("nemotron-h", "flex_attention"): "NemotronHForCausalLM with flex_attention",
    ("zamba2", "flex_attention"): "Zamba2ForCausalLM with flex_attention",
}
#: Its logits are exact, its loss is not: it does not shift labels as HF's causal LMs do.
REFUSED_CELLS.update(
    {("whisper decoder", i): f"WhisperForCausalLM with {i}" for i in IMPLEMENTATIONS}
)
if _TRANSFORMERS < (5, 24):  # GPT-J's flash route passes cu_seq_lens from 5.24 on
    REFUSED_CELLS[("gpt-j", "flash_attention_2")] = "GPTJForCausalLM with flash_attention_2"
_CELLS: dict[tuple[str, str], Cell] = {}
#: How a matrix cell is answered: from verified.json on the versions it was proven on, else by
#: the experiment (CI also runs these tests on the declared transformers floor).
_MATRIX_OR_COPY = (
    "family matrix (transformers "
    if _verdicts.table_versions() == _verdicts.installed()
    else "tiny copy"
)


@pytest.fixture
def eager_flex():
    """transformers' flex path without torch.compile (unfused, same result)."""
    with _verify.cpu_route("flex_attention"):
        yield


def cell(family: Family, impl: str) -> Cell:
    """The cell's outcome (computed once per session), with the registry off."""
    key = (family.name, impl)
    if key not in _CELLS:
        with mock.patch.object(_verify, "_verified", dict):
            _verify._VERDICTS.clear()
            _CELLS[key] = run_cell(family, impl)
            _verify._VERDICTS.clear()  # verdicts made without the registry stay out
    return _CELLS[key]


def all_cells() -> dict[tuple[str, str], Cell]:
    return {(f.name, i): cell(f, i) for f in FAMILIES for i in IMPLEMENTATIONS}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_is_exact_or_refused_by_name(family: Family) -> None:
    for impl in IMPLEMENTATIONS:
        got = cell(family, impl)
        expected = REFUSED.get(family.name) or REFUSED_CELLS.get((family.name, impl))
        if not family.supports(impl):
            assert got.outcome == "n/a"
        elif expected is not None:
            assert (got.outcome, got.detail[: len(expected)]) == ("raises", expected), impl
        else:
            assert got.outcome == "exact", (impl, got)


def test_registry_and_doc_table_are_the_matrix() -> None:
    saved = json.loads(REGISTRY.read_text())
    if saved["made_with"] != _verdicts.installed():
        # another transformers / torch than the matrix was proven on: the table is never read
        # (the experiment decides), so it need not match; model_matrix.py --write renews it
        assert _verdicts.table() == {} and _verify._verified() == {}
        return
    cells = all_cells()
    assert saved["cells"] == registry(cells)
    text = DOC.read_text()
    assert replace_table(text, markdown_table(cells)) == text
    assert f"transformers {saved['made_with']['transformers']}" in text


def test_a_subset_write_replaces_only_its_rows() -> None:
    """``model_matrix.py --write NAME``: the named families' rows anew, the others kept."""
    written = DOC.read_text().split(BEGIN)[1].split(END)[0].splitlines()
    rows = table_rows(DOC.read_text())
    assert list(rows) == [f.name for f in FAMILIES]
    first = FAMILIES[0].name
    table = markdown_table({(first, i): Cell("raises", "x") for i in IMPLEMENTATIONS}, rows)
    lines = table.splitlines()
    assert lines[2] == f"| {first} | " + " | ".join(["raises: x"] * len(IMPLEMENTATIONS)) + " |"
    assert lines[:2] + lines[3:] == written[:2] + written[3:]


def test_without_config_a_sliding_model_differs() -> None:
    # the reason config= is required: the plain document-causal mask ignores Mistral's window
    family = next(f for f in FAMILIES if f.name.startswith("mistral"))
    model = build_model(family, "sdpa")
    batch, docs = packed_batch()
    with torch.no_grad():
        plain = model(**batch.hf_kwargs("sdpa", config=None)).logits
        exact = model(**batch.hf_kwargs("sdpa", config=model)).logits
        alone = model(input_ids=docs[0][0].tokens.view(1, -1)).logits[0]
    assert float((plain[0, :20] - alone).abs().max()) > 1e-3
    assert float((exact[0, :20] - alone).abs().max()) <= 1e-5


class UnbuildableLlama(transformers.LlamaForCausalLM):
    def __init__(self, config):
        if config.hidden_size < 128:
            raise ValueError("needs hidden_size >= 128")
        super().__init__(config)


def test_a_mechanism_never_seen_is_measured_and_refused() -> None:
    config = transformers.LlamaConfig(hidden_size=128, num_hidden_layers=2, vocab_size=300)
    assert check_model(transformers.LlamaForCausalLM(config), "sdpa").verified_by.startswith(
        _MATRIX_OR_COPY
    )
    with pytest.raises(PackingNotExactError, match=r"CumsumLlama with sdpa.*max output difference"):
        check_model(CumsumLlama(config), "sdpa")
    # a class transformers does not define is measured on the instance itself
    report = check_model(UnbuildableLlama(config), "sdpa")
    assert report.verified_by.startswith("the instance itself")
    # a config transformers maps to no model class (a user's own) cannot be copied
    never_seen = type("NeverSeenConfig", (transformers.PretrainedConfig,), {"model_type": "x"})
    with pytest.raises(PackingNotExactError, match=r"unknown model class.*check_model\(model"):
        check_model(never_seen(), "sdpa")


def test_wrapped_models_are_checked_as_the_model_inside() -> None:
    # DDP / FSDP / DataParallel keep the model in .module, torch.compile in ._orig_mod; none
    # has a config (examples/distributed_train.py passes its DDP model)
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, vocab_size=300)
    model = transformers.LlamaForCausalLM(config)
    assert check_model(torch.nn.DataParallel(model), "sdpa") == check_model(model, "sdpa")
    assert check_model(torch.compile(model), "sdpa") == check_model(model, "sdpa")
    # the class inside is what is verified: a wrapped CumsumLlama is still refused
    with pytest.raises(PackingNotExactError, match=r"CumsumLlama"):
        check_model(torch.nn.DataParallel(CumsumLlama(config)), "sdpa")


def test_a_7b_config_is_checked_on_a_tiny_copy_and_cached() -> None:
    # no 7B weights are built: the registry answers for Llama, a tiny copy for the rest
    report = check_model(transformers.LlamaConfig(), "sdpa", pack_size=4096)
    assert report.verified_by.startswith(_MATRIX_OR_COPY)
    config = transformers.MistralConfig(attention_bias=True)  # a flag the matrix has not seen
    report = check_model(config, "sdpa", pack_size=8192)
    assert report.verified_by.startswith("tiny copy") and report.local == {
        "sliding_attention": LocalAttention(window=4096)
    }
    assert check_model(config, "sdpa", pack_size=8192) is report  # cached


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
    with pytest.raises(ValueError, match="unknown attn_implementation"):
        check_model(family.config(), "xformers")


@pytest.mark.parametrize("window", [(-1, -1), (2, 0)])
def test_flash_reference_is_attention_per_sequence(window: tuple[int, int]) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(9, 4, 8, generator=gen) for _ in range(3))
    cu = torch.tensor([0, 5, 9], dtype=torch.int32)
    out = varlen_attention(q, k[:, :2], v[:, :2], cu, cu, 5, 5, causal=True, window_size=window)
    for start, end in [(0, 5), (5, 9)]:
        n = end - start
        mask = torch.ones(n, n).tril().bool()
        if window[0] >= 0:
            mask &= torch.ones(n, n).triu(-window[0]).bool()
        kv = [x[start:end, :2].repeat_interleave(2, dim=1).transpose(0, 1) for x in (k, v)]
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[start:end].transpose(0, 1), *kv, attn_mask=mask
        )
        torch.testing.assert_close(out[start:end], ref.transpose(0, 1))
    with pytest.raises(ValueError, match="longer than max_seqlen_q=4"):
        varlen_attention(q, k, v, cu, cu, 4, 4, causal=True)


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
