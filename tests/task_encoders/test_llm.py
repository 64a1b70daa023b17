# SPDX-License-Identifier: Apache-2.0
"""LLMPackingTaskEncoder on real energon datasets: every sample once, for every algorithm and
over-long policy; exact document tokens; JSONL through the cooker; config errors."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from megatron.energon import stateless

from energon_pack.algorithms import ALGORITHMS, CarryOver, OverlongPolicy
from energon_pack.encoding import SmallPackingBufferWarning
from energon_pack.energon import FatalOverlongSampleError
from energon_pack.task_encoders import LLMPackingTaskEncoder, PackingConfig
from energon_pack.task_encoders._llm import cook_text
from energon_pack.testing import assert_each_sample_once
from energon_pack.training import make_loader

PACK_SIZE = 32  # the corpus has documents longer than this
BOS, EOS = 2, 3  # ids of the test tokenizer's specials


def documents(pack: Any) -> dict[str, list[int]]:
    """Member key -> that document's tokens, cut out of the pack by doc_lengths_padded."""
    out, start = {}, 0
    for key, n, padded in zip(pack.sample_keys, pack.doc_lengths, pack.doc_lengths_padded):
        out[key] = pack.tokens[start : start + n].tolist()
        start += padded
    return out


def expected_tokens(tokenizer: Any, text: str) -> list[int]:
    body = tokenizer.encode(text, add_special_tokens=False)
    return [BOS, *body, EOS] if body else []


SLOW = pytest.mark.slow
#: Every algorithm under "split" and every policy under the default algorithm in the fast tier.
CASES = [
    pytest.param(
        a, p, marks=() if p is OverlongPolicy.SPLIT or a == PackingConfig.algorithm else SLOW
    )
    for a in sorted(ALGORITHMS)
    for p in OverlongPolicy
]


@pytest.mark.parametrize("algorithm, policy", CASES)
def test_every_sample_once_for_every_algorithm_and_policy(
    text_dataset, tokenizer_dir, tokenizer, algorithm: str, policy: OverlongPolicy
) -> None:
    enc = LLMPackingTaskEncoder(
        tokenizer_dir, pack_size=PACK_SIZE, algorithm=algorithm, overlong=policy
    )
    want = {k: expected_tokens(tokenizer, t) for k, t in text_dataset.records.items()}
    overlong = sorted(k for k, v in want.items() if len(v) > PACK_SIZE)
    empty = [k for k, v in want.items() if not v]
    assert overlong and empty == ["000005"]  # the corpus exercises both cases

    if policy is OverlongPolicy.ERROR:  # the run stops at the first over-long sample
        with pytest.raises(FatalOverlongSampleError) as info:
            list(make_loader(text_dataset.path, enc, packing_buffer_size=16))
        key = str(info.value).split("'")[1]
        assert key in overlong and f"> pack_size={PACK_SIZE}" in str(info.value)
        return
    packs = list(make_loader(text_dataset.path, enc, packing_buffer_size=16))
    assert_each_sample_once(packs, text_dataset.keys, dropped=enc.stats.dropped_keys)
    assert enc.stats.dropped_empty == 1 and "000005" in enc.stats.dropped_keys
    assert all(sum(p.doc_lengths_padded) <= PACK_SIZE for p in packs)

    got: dict[str, list[int]] = {}
    for p in packs:
        got.update(documents(p))
    for key, tokens in want.items():
        if not tokens or (key in overlong and policy is OverlongPolicy.DROP):
            assert key not in got
        elif key in overlong and policy is OverlongPolicy.TRUNCATE:
            assert got[key] == tokens[:PACK_SIZE]
        elif key in overlong:  # split: the pieces, in order, are the document
            pieces = sorted((k for k in got if k.startswith(key + "#")), key=lambda k: int(k[7:]))
            assert len(pieces) == -(-len(tokens) // PACK_SIZE)
            assert sum((got[k] for k in pieces), []) == tokens
        else:
            assert got[key] == tokens
    counts = {"truncate": enc.stats.truncated_overlong, "split": enc.stats.split_overlong}
    counts["drop"] = enc.stats.dropped_overlong
    if policy is not OverlongPolicy.ERROR:
        assert counts[policy.value] == len(overlong)


def test_labels_stay_inside_documents(text_dataset, tokenizer_dir) -> None:
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE, overlong="truncate")
    pack = next(p for p in make_loader(text_dataset.path, enc) if len(p.doc_lengths) >= 2)
    ends = torch.tensor(pack.doc_lengths).cumsum(0) - 1
    assert (pack.labels[ends] == -100).all()  # the last token of a document predicts nothing
    starts = ends[:-1] + 1
    assert (pack.position_ids[starts] == 0).all() and (pack.tokens[starts] == BOS).all()
    # BOS is never a target: no label points at it.
    assert not (pack.labels == BOS).any()


def test_jsonl_text_through_the_cooker(jsonl_text_dataset, tokenizer_dir, tokenizer) -> None:
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE, overlong="truncate")
    packs = list(make_loader(jsonl_text_dataset.path, enc, packing_buffer_size=8))
    texts = [r["text"] for r in jsonl_text_dataset.records.values()]
    want = sorted(expected_tokens(tokenizer, t)[:PACK_SIZE] for t in texts if t)
    got = sorted(doc for p in packs for doc in documents(p).values())
    assert got == want
    assert enc.stats.samples == len(texts) and enc.stats.dropped_empty == 1


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": 42}, "JSONL sample 'k7': 'text' is int (42), not a string; write it as a JSON "
         'string ("text": "42")'),
        ({"prompt": "a", "response": "b"}, "JSONL sample 'k7' has no field 'text' (got ['prompt', "
         "'response']); write one JSON object per line with a 'text' field (prompt/response "
         "records: SFTPackingTaskEncoder)"),
    ],
)  # fmt: skip
def test_cook_text_names_the_sample_and_the_fix(record: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        cook_text({"__key__": "k7", "json": record})
    assert message in str(info.value)


def test_batches_are_padded_to_the_pack_size(text_dataset, tokenizer_dir) -> None:
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE, alignment=4)
    batch = next(iter(make_loader(text_dataset.path, enc, batch_size=3)))
    assert batch.tokens.shape == (3, PACK_SIZE)
    assert all(n % 4 == 0 for row in batch.doc_lengths_padded for n in row)


def test_add_bos_eos_switches(tokenizer_dir, tokenizer) -> None:
    from megatron.energon import TextSample

    sample = TextSample(__key__="x", __restore_key__=(), text="the model")
    body = tokenizer.encode("the model", add_special_tokens=False)
    for bos, eos, want in [
        (True, True, [BOS, *body, EOS]),
        (False, True, [*body, EOS]),
        (True, False, [BOS, *body]),
        (False, False, body),
    ]:
        enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=8, add_bos=bos, add_eos=eos)
        (doc,) = list(enc.encode_sample(sample))
        assert doc.tokens.tolist() == want
        assert doc.loss_mask.tolist() == [not bos] + [True] * (len(want) - 1)


def test_bos_and_eod_default_to_what_the_tokenizer_has(tokenizer_dir) -> None:
    """Qwen-style (no BOS) and BERT-style (no BOS/EOS, a SEP) tokenizers work by default."""
    from megatron.energon import TextSample

    from energon_pack.encoding import load_tokenizer

    sample = TextSample(__key__="x", __restore_key__=(), text="the model")
    qwen_like = load_tokenizer(tokenizer_dir)
    qwen_like.bos_token = None
    body = qwen_like.encode("the model", add_special_tokens=False)
    (doc,) = list(LLMPackingTaskEncoder(qwen_like, pack_size=8).encode_sample(sample))
    assert doc.tokens.tolist() == [*body, EOS]  # no BOS, EOS still ends the document
    assert doc.loss_mask.tolist() == [True] * (len(body) + 1)  # nothing before it: all targets
    with pytest.raises(ValueError, match="no bos_token_id"):
        LLMPackingTaskEncoder(qwen_like, pack_size=8, add_bos=True)

    bert_like = load_tokenizer(tokenizer_dir)
    bert_like.bos_token = None
    bert_like.eos_token = None
    bert_like.sep_token = "<|assistant|>"  # any existing token stands in for [SEP]
    sep = bert_like.sep_token_id
    (doc,) = list(LLMPackingTaskEncoder(bert_like, pack_size=8).encode_sample(sample))
    assert doc.tokens.tolist() == [*body, sep]


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"pack_size": 0}, "pack_size"),
        ({"pack_size": 8, "algorithm": "nope"}, "not registered"),
        ({"pack_size": 8, "alignment": 3}, "divide pack_size"),
        ({"pack_size": 8, "overlong": "cut"}, "truncate"),
        ({"pack_size": 8, "max_samples_per_pack": 0}, "max_samples_per_pack"),
        ({"pack_size": 8, "step_packs": 0}, "gradient accumulation"),
        ({"pack_size": 8, "step_packs": "4"}, "an int"),
    ],
)
def test_config_errors_say_what_to_do(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PackingConfig(**fields)


def test_step_packs_reorders_the_same_packs(text_dataset, tokenizer_dir) -> None:
    """step_packs only changes the order in which a buffer's packs are emitted."""

    def packs(**kw: Any) -> list[Any]:
        enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE, overlong="split", **kw)
        return list(make_loader(text_dataset.path, enc, packing_buffer_size=40))

    plain, stepped = packs(), packs(step_packs=2)
    assert_each_sample_once(stepped, text_dataset.keys, dropped=[text_dataset.keys[5]])
    assert sorted(p.sample_keys for p in stepped) == sorted(p.sample_keys for p in plain)
    assert [p.sample_keys for p in stepped] != [p.sample_keys for p in plain]


def test_tokenizer_path_must_exist(tmp_path) -> None:
    with pytest.raises(ValueError, match="not a local directory"):
        LLMPackingTaskEncoder(tmp_path / "missing", pack_size=8)


def test_a_hub_id_is_tried_on_the_hub_and_the_environment_is_left_alone(
    tokenizer_dir, monkeypatch
) -> None:
    # HF_HUB_OFFLINE=1 (conftest): transformers looks only in the cache, where this id is not
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ValueError,
        match="'energon-pack-tests/no-such-tokenizer' is not a local "
        "directory and cannot be loaded as a Hub id",
    ):
        LLMPackingTaskEncoder("energon-pack-tests/no-such-tokenizer", pack_size=8)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    LLMPackingTaskEncoder(str(tokenizer_dir), pack_size=8)  # a local directory: no env change
    assert "HF_HUB_OFFLINE" not in os.environ


def test_a_loader_without_packing_buffer_is_refused(text_dataset, tokenizer_dir) -> None:
    # Without packing_buffer_size energon never packs: unpacked documents would reach the user
    # (batch_size=None) or collation would fail on them; the encoder says what to pass instead.
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE)
    with pytest.raises(ValueError, match="packing_buffer_size"):
        make_loader(text_dataset.path, enc, packing_buffer_size=None)


class _OnePerRow(LLMPackingTaskEncoder):
    """Evaluation without packing: a subclass whose batch collates single documents."""

    @stateless
    def batch(self, samples: list[Any]) -> list[int]:
        return [len(s.tokens) for s in samples]


def test_encoder_with_its_own_batch_runs_without_a_packing_buffer(text_dataset, tokenizer_dir):
    enc = _OnePerRow(tokenizer_dir, pack_size=PACK_SIZE, carry_over=CarryOver())
    loader = make_loader(text_dataset.path, enc, packing_buffer_size=None, batch_size=4)
    rows = [n for batch in loader for n in batch]
    # Every document arrives alone in its own row (no pack is built, carry-over is unused).
    assert enc.stats.samples == len(text_dataset.records)
    assert len(rows) == enc.stats.documents > 0
    assert enc.stats.packs == 0 and max(rows) <= PACK_SIZE


def test_stock_packing_warns_once_when_a_full_buffer_cannot_fill_a_pack(
    text_dataset, tokenizer_dir
) -> None:
    # Buffers of 2 samples (a few to 40 words each) cannot fill 2048 tokens: one warning per
    # process, naming a buffer size that would; the end-of-data flush is not judged.
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=2048, overlong="split")
    with pytest.warns(SmallPackingBufferWarning) as record:
        packs = list(make_loader(text_dataset.path, enc, packing_buffer_size=2))
    messages = [str(w.message) for w in record if w.category is SmallPackingBufferWarning]
    assert len(messages) == 1
    assert "packing_buffer_size=2 cannot fill one pack" in messages[0]
    assert "Use packing_buffer_size >= " in messages[0]
    assert_each_sample_once(packs, text_dataset.keys, dropped=enc.stats.dropped_keys)


def test_stock_packing_with_a_large_enough_buffer_does_not_warn(
    text_dataset, tokenizer_dir, recwarn
) -> None:
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=PACK_SIZE, overlong="split")
    list(make_loader(text_dataset.path, enc, packing_buffer_size=16))
    assert not [w for w in recwarn if w.category is SmallPackingBufferWarning]


def test_document_framing_literal(tokenizer_dir: Any) -> None:
    """``[BOS] prompt target [EOD]``, loss on target and EOD, int64 / bool; empty target with
    an EOD still trains the EOD; ``masked_document`` without a target is empty."""
    from energon_pack.encoding import DocumentTokenizer, masked_document

    doc = DocumentTokenizer(str(tokenizer_dir))
    tokens, mask = doc.document([9, 8], [6, 5])
    assert tokens.tolist() == [BOS, 9, 8, 6, 5, EOS] and tokens.dtype == torch.int64
    assert mask.tolist() == [False, False, False, True, True, True] and mask.dtype == torch.bool
    tokens, mask = doc.document([], [])
    assert tokens.tolist() == [BOS, EOS] and mask.tolist() == [False, True]
    tokens, mask = masked_document([5, 6], [7])
    assert tokens.tolist() == [5, 6, 7] and mask.tolist() == [False, False, True]
    tokens, mask = masked_document([5, 6], [])
    assert tokens.shape == mask.shape == (0,) and tokens.dtype == torch.int64
    tokens, _ = masked_document((1,), torch.tensor([2, 3]))  # any sequence of ints
    assert tokens.tolist() == [1, 2, 3]
