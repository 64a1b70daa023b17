# SPDX-License-Identifier: Apache-2.0
"""Bidirectional blocks inside documents and model-specific positions, proven on tiny models.

Each case packs documents with the real packer, runs ``batch.hf_kwargs(impl, config=...)``
through a tiny random fp32 transformers model and compares every document's logits with the
same document run alone (``input_ids`` and, for VLMs, its images and ``token_type_ids``, as the
model's processor would give them): equal within 1e-5, in sdpa, eager and flex_attention.
Documents of 20 and 12 tokens (windows of 8) in one row; 7 and 3 plus tail padding in another.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from model_families import _SMALL, VOCAB, WINDOW
from test_model_families import eager_flex  # noqa: F401  (fixture)
from test_windows import _selected, _tiles
from torch.nn.attention.flex_attention import create_block_mask
from transformers import masking_utils

from energon_pack.attention import (
    LocalAttention,
    PackingNotExactError,
    check_model,
    document_metadata,
    hf_kwargs,
)
from energon_pack.attention._flash_reference import emulated_flash
from energon_pack.attention._flex import block_causal_block_mask
from energon_pack.attention._masks import document_causal_mask
from energon_pack.attention._model_kwargs import bidirectional_blocks
from energon_pack.samples import EncodedSample, collate_packs, pack_documents

IMPLS = ("sdpa", "eager", "flex_attention")
ROWS = [[20, 12], [7, 3]]
IMAGE, BOI, EOI = 90, 91, 92  # token ids of the tiny VLMs (inside the vocabulary)
TOKENS_PER_IMAGE = 4
SLOW = pytest.mark.slow


def _cells(*prefix: str, impls: tuple[str, ...] = IMPLS) -> list:
    """``(*prefix, impl)`` parameters; flex runs unfused on CPU (seconds each): marked slow."""
    return [pytest.param(*prefix, i, marks=SLOW if i == "flex_attention" else ()) for i in impls]


def test_blocks_worked_example() -> None:
    meta = document_metadata([[4, 2]], length=7)
    types = torch.tensor([[0, 1, 1, 0, 1, 0, 1]])  # the pad's type must not matter
    blocks = {
        k: bidirectional_blocks(meta.segment_ids, k, types)[0].tolist()
        for k in ("image_tokens", "prefix", "document")
    }
    assert blocks == {
        "image_tokens": [0, 1, 1, 0, 2, 0, 0],
        "prefix": [1, 0, 0, 1, 0, 2, 0],
        "document": [1, 1, 1, 1, 2, 2, 0],
    }
    # a run of image tokens that crosses a document border is two blocks
    meta = document_metadata([[2, 2]])
    types = torch.tensor([[0, 1, 1, 0]])
    assert bidirectional_blocks(meta.segment_ids, "image_tokens", types).tolist() == [[0, 1, 2, 0]]
    with pytest.raises(ValueError, match="need token_type_ids"):
        bidirectional_blocks(meta.segment_ids, "prefix")


LOCALS = [
    LocalAttention(),
    LocalAttention(window=5),
    LocalAttention(window=5, both_ways=True),
    LocalAttention(window=9, both_ways=True),
    LocalAttention(chunk=6),
]


@pytest.mark.parametrize("kind", ["document", "image_tokens", "prefix"])
@pytest.mark.parametrize("local", LOCALS)
def test_block_mask_tiles_with_blocks(kind: str, local: LocalAttention) -> None:
    meta = document_metadata([[20, 12, 3], [9, 30]], length=40)
    gen = torch.Generator().manual_seed(0)
    types = (torch.rand(2, 40, generator=gen) < 0.5).to(torch.int64)
    blocks = bidirectional_blocks(meta.segment_ids, kind, types)
    dense = document_causal_mask(meta.seq_idx, local, blocks)
    # the literal rule: same slot, then causal or same block, then the window / chunk
    q, k = torch.arange(40)[:, None], torch.arange(40)[None, :]
    same = (blocks[:, :, None] == blocks[:, None, :]) & (blocks[:, :, None] > 0)
    rule = (meta.seq_idx[:, :, None] == meta.seq_idx[:, None, :]) & ((k <= q) | same)
    if local.window is not None:
        rule &= q - k < local.window
        if local.both_ways:
            rule &= k - q < local.window
    if local.chunk is not None:
        pos = meta.position_ids
        rule &= pos[:, :, None] // local.chunk == pos[:, None, :] // local.chunk
    assert torch.equal(dense[:, 0], rule)
    tiles = _tiles(dense, 4)
    nb = tiles.shape[1]
    mask = block_causal_block_mask(meta.seq_idx, block_size=4, local=local, blocks=blocks)
    partial = _selected(mask.kv_num_blocks, mask.kv_indices, nb)
    full = _selected(mask.full_kv_num_blocks, mask.full_kv_indices, nb)
    reachable = tiles.flatten(-2).any(-1)
    assert not bool((reachable & ~(partial | full)).any())  # no allowed pair is skipped
    if kind != "prefix":  # tight where blocks are contiguous (random prefixes have holes)
        assert torch.equal(partial | full, reachable)
    assert bool(tiles.flatten(-2).all(-1)[full].all())
    for b in range(2):
        mm = mask.mask_mod(torch.tensor(b), torch.tensor(0), q, k)
        assert torch.equal(mm, dense[b, 0])


# -- tiny models -------------------------------------------------------------------------------


def _gemma3_text(**kw):
    return transformers.Gemma3TextConfig(
        **_SMALL,
        head_dim=8,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        **kw,
    )


def _siglip(image_size: int) -> dict:
    return dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=4,
    )


def _gemma3_vlm():
    # a window of 3 < the images' 4 tokens: the window bounds only earlier keys of an image
    text = {**_gemma3_text().to_dict(), "sliding_window": 3}
    return transformers.Gemma3Config(
        text_config=text,
        vision_config=_siglip(16),
        mm_tokens_per_image=TOKENS_PER_IMAGE,
        image_token_id=IMAGE,
        boi_token_id=BOI,
        eoi_token_id=EOI,
    )


def _paligemma(text_type: str = "gemma", **text_kw):
    text = {"model_type": text_type, **_SMALL, "head_dim": 8, **text_kw}
    return transformers.PaliGemmaConfig(
        text_config=text,
        vision_config=_siglip(8),
        image_token_id=IMAGE,
        projection_dim=32,
    )


@pytest.fixture
def fast_flex(eager_flex, monkeypatch):  # noqa: F811
    """The eager flex path, and transformers' own masks (the documents alone) built without
    torch.compile (it costs ~50 s on CPU; same mask)."""
    monkeypatch.setattr(
        masking_utils,
        "create_block_mask",
        lambda *args, _compile=False, **kw: create_block_mask(*args, _compile=False, **kw),
    )


def _model(model_class: str, config, impl: str) -> torch.nn.Module:
    """Seeded tiny fp32 model; a VLM's vision tower runs sdpa (its attention is not packed)."""
    torch.manual_seed(0)
    if hasattr(config, "vision_config"):
        impl = {"text_config": impl, "vision_config": "sdpa", "": impl}
    model = getattr(transformers, model_class)._from_config(
        config, attn_implementation=impl, dtype=torch.float32
    )
    return model.eval()


def _docs(rows, make_doc):
    gen = torch.Generator().manual_seed(1)
    return [
        [make_doc(f"r{r}d{i}", n, gen) for i, n in enumerate(lengths)]
        for r, lengths in enumerate(rows)
    ]


def _text_doc(key: str, n: int, gen, low: int = 2) -> EncodedSample:
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        tokens=torch.randint(low, 80, (n,), generator=gen),
        loss_mask=torch.ones(n, dtype=torch.bool),
    )


@torch.no_grad()
def _max_difference(model, impl, docs, pad_to=34, alone=None, **extra) -> float:
    """Max |logit difference| of the packed run vs each document alone (real tokens)."""
    batch = collate_packs([pack_documents(row) for row in docs], pad_to=pad_to)
    kwargs = batch.hf_kwargs(impl, config=model.config, with_labels=False)
    out = model(**kwargs, **extra).logits
    worst = 0.0
    for r, row in enumerate(docs):
        start = 0
        for doc in row:
            single = model(input_ids=doc.tokens.view(1, -1), **(alone or (lambda d: {}))(doc))
            got = out[r, start : start + doc.length]
            worst = max(worst, float((got - single.logits[0]).abs().max()))
            start += doc.length
    return worst


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("impl", _cells())
def test_gemma3_text_bidirectional(fast_flex, impl: str) -> None:
    model = _model("Gemma3ForCausalLM", _gemma3_text(use_bidirectional_attention=True), impl)
    report = check_model(model, impl, pack_size=34)
    assert report.bidirectional == "document"
    # Gemma 3 stores W // 2 + 1 for bidirectional configs and keeps |q - k| < W
    window = model.config.sliding_window
    assert report.local["sliding_attention"] == LocalAttention(window=window, both_ways=True)
    assert _max_difference(model, impl, _docs(ROWS, _text_doc)) <= 1e-5


_ENCODER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)
ENCODERS = [
    ("BertForMaskedLM", "BertConfig", {}),
    ("RobertaForMaskedLM", "RobertaConfig", {}),
    ("RobertaForCausalLM", "RobertaConfig", {"is_decoder": True}),
]
# RoBERTa's copies in transformers (same embeddings and attention code): sdpa is enough
COPIES = [
    ("XLMRobertaForMaskedLM", "XLMRobertaConfig", {}),
    ("CamembertForMaskedLM", "CamembertConfig", {}),
    ("Data2VecTextForMaskedLM", "Data2VecTextConfig", {}),
]


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(
    ("model_class", "config_class", "extra", "impl"),
    [p for e in ENCODERS for p in _cells(*e)]
    + [p for e in COPIES for p in _cells(*e, impls=("sdpa",))],
)
def test_encoders_and_padding_idx_positions(
    fast_flex, impl: str, model_class: str, config_class: str, extra: dict
) -> None:
    config = getattr(transformers, config_class)(**_ENCODER, **extra)
    model = _model(model_class, config, impl)
    report = check_model(model, impl, pack_size=34)
    assert report.bidirectional == (None if extra else "document")
    pad = config.pad_token_id
    assert report.position_padding_idx == (None if config_class == "BertConfig" else pad)
    docs = _docs(ROWS, _text_doc)
    docs[0][1].tokens[3] = pad  # a pad token inside a document: RoBERTa does not count it
    assert _max_difference(model, impl, docs) <= 1e-5


def _vlm_doc(key: str, n: int, gen) -> EncodedSample:
    """Text with images of 4 tokens (``<boi> <img>*4 <eoi>``); the first document of each row
    ends with an image and the next starts with one, so two runs of image tokens touch."""
    tokens = torch.randint(2, 80, (n,), generator=gen)
    starts = {20: [1, 8], 12: [0], 7: [], 3: []}[n]
    image_at_end = n in (20, 7)
    for s in starts:
        tokens[s : s + TOKENS_PER_IMAGE] = IMAGE
    if image_at_end:
        tokens[n - TOKENS_PER_IMAGE :] = IMAGE
    types = (tokens == IMAGE).to(torch.int64)
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        tokens=tokens,
        loss_mask=torch.ones(n, dtype=torch.bool),
        token_type_ids=types,
    )


def _pixels(doc: EncodedSample, size: int, per_image: int) -> torch.Tensor:
    count = int((doc.tokens == IMAGE).sum()) // per_image
    gen = torch.Generator().manual_seed(int(doc.tokens.sum()))
    return torch.randn(count, 3, size, size, generator=gen)


def _alone(size: int):
    """The inputs a document gets alone: its images (if any) and its token_type_ids."""

    def inputs(doc: EncodedSample) -> dict:
        pixels = _pixels(doc, size, TOKENS_PER_IMAGE)
        kwargs = {"token_type_ids": doc.token_type_ids.view(1, -1)}
        return {**kwargs, "pixel_values": pixels} if len(pixels) else kwargs

    return inputs


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("impl", _cells())
def test_gemma3_vlm_image_tokens(fast_flex, impl: str) -> None:
    model = _model("Gemma3ForConditionalGeneration", _gemma3_vlm(), impl)
    report = check_model(model, impl, pack_size=34)
    assert report.bidirectional == "image_tokens" and report.needs_mapping
    docs = _docs(ROWS, _vlm_doc)
    pixels = torch.cat([_pixels(d, 16, TOKENS_PER_IMAGE) for row in docs for d in row])
    assert _max_difference(model, impl, docs, alone=_alone(16), pixel_values=pixels) <= 1e-5


def _prefix_doc(key: str, n: int, gen) -> EncodedSample:
    """PaliGemma: ``<img>*4`` and a prompt (type 0, the bidirectional prefix), then the
    answer (type 1)."""
    tokens = torch.randint(2, 80, (n,), generator=gen)
    prefix = {20: 9, 12: 6, 7: 5, 3: 2}[n]
    images = min(4, prefix)  # the 3-token document has no image
    if n == 3:
        images = 0
    tokens[:images] = IMAGE
    types = torch.ones(n, dtype=torch.int64)
    types[:prefix] = 0
    return EncodedSample(
        __key__=key,
        __restore_key__=(),
        tokens=tokens,
        loss_mask=torch.ones(n, dtype=torch.bool),
        token_type_ids=types,
    )


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize(
    ("text", "impl"),
    # Gemma 2 has no sdpa in transformers (softcapping)
    _cells("gemma") + _cells("gemma2 (window 64)", impls=("eager", "flex_attention")),
)
def test_paligemma_prefix(fast_flex, impl: str, text: str) -> None:
    config = (
        _paligemma()
        if text == "gemma"
        else _paligemma(
            "gemma2", sliding_window=64, layer_types=["sliding_attention", "full_attention"]
        )
    )
    model = _model("PaliGemmaForConditionalGeneration", config, impl)
    report = check_model(model, impl, pack_size=34)
    assert (report.bidirectional, report.position_offset) == ("prefix", 1)
    docs = _docs(ROWS, _prefix_doc)
    pixels = torch.cat([_pixels(d, 8, TOKENS_PER_IMAGE) for row in docs for d in row])
    assert _max_difference(model, impl, docs, alone=_alone(8), pixel_values=pixels) <= 1e-5


def test_refusals_name_the_mechanism() -> None:
    windowed = _paligemma(
        "gemma2", sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]
    )
    with pytest.raises(PackingNotExactError, match="single attention_mask.*at most 8 tokens"):
        check_model(windowed, "sdpa", pack_size=34)
    check_model(windowed, "eager", pack_size=WINDOW)  # the window never binds
    with pytest.raises(
        PackingNotExactError, match=r"bidirectional attention \(prefix\) with flash"
    ):
        check_model(_paligemma(), "flash_attention_2", pack_size=34)
    gemma2 = transformers.Gemma2Config(**_SMALL, head_dim=8, use_bidirectional_attention=True)
    with pytest.raises(PackingNotExactError, match=r"bidirectional attention \(gemma2\)"):
        check_model(gemma2, "sdpa", pack_size=34)


def test_vlm_without_token_type_ids_is_an_error() -> None:
    model = _model("Gemma3ForConditionalGeneration", _gemma3_vlm(), "sdpa")
    docs = _docs([[12]], _text_doc)
    batch = collate_packs([pack_documents(docs[0])])
    with pytest.raises(ValueError, match="need token_type_ids"):
        batch.hf_kwargs("sdpa", config=model.config)


@pytest.mark.parametrize(
    ("model_class", "config"),
    [
        ("Gemma3ForCausalLM", lambda: _gemma3_text(use_bidirectional_attention=True)),
        ("BertForMaskedLM", lambda: transformers.BertConfig(**_ENCODER)),
        ("RobertaForMaskedLM", lambda: transformers.RobertaConfig(**_ENCODER)),
    ],
)
def test_whole_documents_through_the_flash_route(model_class: str, config) -> None:
    # transformers' own flash route on CPU, a PyTorch reference in place of the kernel: each
    # slot's padding is a varlen sequence of its own, so non-causal documents never see it
    with emulated_flash("flash_attention_2", getattr(transformers, model_class)):
        model = _model(model_class, config(), "flash_attention_2")
        docs = _docs(ROWS, _text_doc)
        assert _max_difference(model, "flash_attention_2", docs) <= 1e-5
    meta = document_metadata([[3, 2], [1]], length=6, doc_lengths_padded=[[4, 2], [1]])
    kwargs = hf_kwargs(
        meta, torch.zeros(2, 6, dtype=torch.int64), None, "flash_attention_2", config=config()
    )
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 3, 4, 6, 7, 12]
    assert kwargs["max_length_q"] == 5
