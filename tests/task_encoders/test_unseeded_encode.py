# SPDX-License-Identifier: Apache-2.0
"""``encode_sample`` seeds the RNGs only where ``encode_document`` may draw (issue 35.1).

Text encoders with a transformers tokenizer run unseeded (no RNG state saved, seeded or restored
per document); every other encoder, and any subclass that overrides ``encode_document``, is
seeded as before. Either way the packs, counts and restore keys are the same, and a random
augmentation still replays after resume.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np
import torch
from megatron.energon import WorkerConfig

from energon_pack import (
    CaptioningPackingTaskEncoder,
    CarryOver,
    LLMPackingTaskEncoder,
    SFTPackingTaskEncoder,
)
from energon_pack.encoding import DocumentTokenizer
from energon_pack.energon import seeded_stateless
from energon_pack.testing import assert_restore_sample_reproduces, assert_resume_identical
from energon_pack.training import make_loader


class TokenDropoutLLM(LLMPackingTaskEncoder):
    """Drops each token with probability 0.3 (``random``, NumPy and torch each decide a third)."""

    def encode_document(self, sample: Any) -> Any:
        doc = super().encode_document(sample)
        n = len(doc.tokens)
        keep = (np.random.rand(n) >= 0.1) & (torch.rand(n) >= 0.1).numpy()
        keep &= np.array([random.random() >= 0.1 for _ in range(n)], dtype=bool)
        keep[0] = True
        return type(doc).derive_from(doc, tokens=doc.tokens[keep], loss_mask=doc.loss_mask[keep])


class DeterministicOverride(LLMPackingTaskEncoder):
    encode_draws_random = False

    def encode_document(self, sample: Any) -> Any:
        return super().encode_document(sample)


class ForcedSeeding(LLMPackingTaskEncoder):
    encode_draws_random = True


class WordTokenizer:
    """Not a transformers tokenizer: one id per word (it could draw random numbers)."""

    eos_token_id = 1
    pad_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [2 + len(word) for word in text.split()]


def test_who_is_seeded(tokenizer_dir, image_processor) -> None:
    def seeds(enc: Any) -> bool:
        return enc._seeds_encode()

    assert not seeds(LLMPackingTaskEncoder(tokenizer_dir, pack_size=32))
    assert not seeds(SFTPackingTaskEncoder(tokenizer_dir, pack_size=32))
    assert not seeds(DeterministicOverride(tokenizer_dir, pack_size=32))
    assert seeds(TokenDropoutLLM(tokenizer_dir, pack_size=32))  # overrides encode_document
    assert seeds(ForcedSeeding(tokenizer_dir, pack_size=32))
    assert seeds(CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, pack_size=48))
    assert seeds(LLMPackingTaskEncoder(WordTokenizer(), pack_size=32))
    assert DocumentTokenizer(WordTokenizer()).draws_random
    enc = LLMPackingTaskEncoder(tokenizer_dir, pack_size=32)
    enc.encode_draws_random = True  # an instance can ask for seeding too
    assert seeds(enc)


def packs(path: Any, enc: Any, **loader: Any) -> list[tuple[Any, ...]]:
    return [
        (p.tokens.tolist(), p.labels.tolist(), p.sample_keys, p.__restore_key__, repr(p.counts))
        for p in make_loader(path, enc, shuffle_buffer_size=4, **loader)
    ]


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_unseeded_packs_equal_seeded_packs(text_dataset, tokenizer_dir) -> None:
    """Skipping the RNG handling changes nothing: same packs, restore keys and counts as the
    seeded path (stock buffers and carry-over), and the caller's RNG stream is left alone."""
    for carry in (None, CarryOver()):
        common = {"pack_size": 32, "overlong": "split", "carry_over": carry}
        seed_all(3)
        seeded = packs(text_dataset.path, ForcedSeeding(tokenizer_dir, **common), batch_size=2)
        after_seeded = random.random(), float(np.random.rand()), float(torch.rand(()))
        seed_all(3)
        plain = packs(
            text_dataset.path, LLMPackingTaskEncoder(tokenizer_dir, **common), batch_size=2
        )
        after_plain = random.random(), float(np.random.rand()), float(torch.rand(()))
        assert len(plain) > 3
        assert plain == seeded
        assert after_plain == after_seeded


def test_random_encoder_still_replays_after_resume(text_dataset, tokenizer_dir) -> None:
    """A subclass of an unseeded encoder that draws is seeded: random, yet exact on resume."""
    enc = TokenDropoutLLM(tokenizer_dir, pack_size=32, overlong="split")
    plain = LLMPackingTaskEncoder(tokenizer_dir, pack_size=32, overlong="split")
    first, again = packs(text_dataset.path, enc), packs(text_dataset.path, enc)
    assert first == again
    assert first != packs(text_dataset.path, plain)  # the dropout really drops
    mk = functools.partial(
        make_loader, text_dataset.path, enc, packing_buffer_size=8, shuffle_buffer_size=4
    )
    reference, resumed = assert_resume_identical(mk, save_after=3)
    assert_restore_sample_reproduces(mk, reference, order_seed=1)
    assert_restore_sample_reproduces(mk, resumed, order_seed=2)


class Draws:
    seeded = True

    @seeded_stateless(run_ahead=True, seed_if=lambda self: self.seeded)
    def gen(self, n: int):
        for _ in range(n):
            yield random.random(), float(np.random.rand()), float(torch.rand(()))

    @seeded_stateless(seed_if=lambda self: self.seeded)
    def one(self) -> float:
        return random.random()


def test_seed_if_false_runs_unseeded_in_a_worker() -> None:
    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    obj = Draws()
    config.worker_activate(5)
    try:
        seed_all(1)
        seeded = list(obj.gen(3)), obj.one()
        after_seeded = random.random()
        obj.seeded = False
        seed_all(1)
        unseeded = list(obj.gen(3)), obj.one()
        seed_all(1)
        caller = [(random.random(), float(np.random.rand()), float(torch.rand(()))) for _ in "abc"]
    finally:
        config.worker_deactivate()
    assert unseeded[0] == caller  # the caller's own stream, not a seeded one
    assert seeded[0] != caller
    assert after_seeded == caller[0][0]  # seeded calls left the caller's stream alone
