# SPDX-License-Identifier: Apache-2.0
"""SFTPackingTaskEncoder: loss on response tokens only, with and without a chat template."""

from __future__ import annotations

import copy

import pytest
import torch

from energon_pack.task_encoders import SFTPackingTaskEncoder
from energon_pack.task_encoders._sft import PromptResponseSample
from energon_pack.testing import assert_each_sample_once
from energon_pack.training import make_loader

BOS, EOS, USER, ASSISTANT = 2, 3, 5, 6  # ids of the test tokenizer's specials


def sample(prompt: str, response: str) -> PromptResponseSample:
    return PromptResponseSample(__key__="s", __restore_key__=(), prompt=prompt, response=response)


def test_chat_template_masks_the_prompt(tokenizer_dir, tokenizer) -> None:
    enc = SFTPackingTaskEncoder(tokenizer_dir, pack_size=32)
    assert enc.use_chat_template  # the test tokenizer has one
    (doc,) = list(enc.encode_sample(sample("the model", "a seed")))
    the, model, a, seed = (tokenizer.convert_tokens_to_ids(w) for w in "the model a seed".split())
    # "<|user|> the model <|assistant|> a seed </s>": targets are "a seed </s>" only.
    assert doc.tokens.tolist() == [USER, the, model, ASSISTANT, a, seed, EOS]
    assert doc.loss_mask.tolist() == [False] * 4 + [True] * 3


def test_template_follows_the_tokenizer_and_true_needs_one(tokenizer) -> None:
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    assert not SFTPackingTaskEncoder(plain, pack_size=32).use_chat_template
    with pytest.raises(ValueError, match="has no chat_template"):
        SFTPackingTaskEncoder(plain, pack_size=32, use_chat_template=True)


def test_without_template_bos_prompt_response_eod(tokenizer_dir, tokenizer) -> None:
    enc = SFTPackingTaskEncoder(tokenizer_dir, pack_size=32, use_chat_template=False)
    (doc,) = list(enc.encode_sample(sample("the model", "a seed")))
    the, model, a, seed = (tokenizer.convert_tokens_to_ids(w) for w in "the model a seed".split())
    assert doc.tokens.tolist() == [BOS, the, model, a, seed, EOS]
    assert doc.loss_mask.tolist() == [False] * 3 + [True] * 3


def test_empty_response_is_dropped_and_counted(tokenizer_dir) -> None:
    enc = SFTPackingTaskEncoder(tokenizer_dir, pack_size=32, use_chat_template=False, add_eos=False)
    assert list(enc.encode_sample(sample("the model", ""))) == []
    assert enc.stats.dropped_empty == 1


@pytest.mark.parametrize("policy", ["truncate", "split", "drop"])
def test_jsonl_every_sample_once_and_labels_only_on_responses(
    sft_dataset, tokenizer_dir, tokenizer, policy: str
) -> None:
    enc = SFTPackingTaskEncoder(tokenizer_dir, pack_size=24, overlong=policy)
    packs = list(make_loader(sft_dataset.path, enc, packing_buffer_size=8))
    # JSONL keys are assigned by energon; recover them from a first pass of the encoder.
    keys = {k.split("#")[0] for p in packs for k in p.sample_keys} | set(enc.stats.dropped_keys)
    assert len(keys) == len(sft_dataset.records) == enc.stats.samples
    assert_each_sample_once(packs, keys, dropped=enc.stats.dropped_keys)
    response_ids = {
        tokenizer.convert_tokens_to_ids(w)
        for r in sft_dataset.records.values()
        for w in r["response"].split()
    } | {EOS}
    n_targets = 0
    for p in packs:
        targets = p.labels[p.labels != -100]
        n_targets += len(targets)
        assert set(targets.tolist()) <= response_ids
        assert not (targets == ASSISTANT).any() and not (targets == USER).any()
    assert n_targets > 0
    if policy == "truncate":  # every sample whole: count every response token + EOS
        full = sum(len(r["response"].split()) + 1 for r in sft_dataset.records.values())
        assert n_targets == full - enc.stats.truncated_tokens
        assert torch.tensor([len(p.tokens) <= 24 for p in packs]).all()
