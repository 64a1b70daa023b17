# SPDX-License-Identifier: Apache-2.0
"""Carry-over packing through real energon loaders.

The product's ``PackingTaskEncoder`` (as :class:`~energon_pack_tools._encoders.LengthTextEncoder`:
sample text ``"n"`` is a document of n tokens; packs of 64 tokens) over 150 TextSamples of 1..40
tokens, buffer 8, ``CarryOver(min_fill=0.9, max_carry_packs=1, max_age=2)``: every sample
exactly once for every registered algorithm, no sample selected more than ``max_age + 1`` times,
the loader's packs equal ``simulate``'s (one planner), save/restore at num_workers 0 and 2 from
states that hold carried samples, exact ``restore_sample``; short documents at a buffer that
holds a fraction of a pack (the token budget); then the same contract with the project's
``LLMPackingTaskEncoder``.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from energon_pack.algorithms import ALGORITHMS, CarryOver, PackingSpec, simulate_packs
from energon_pack.encoding import SmallPackingBufferWarning
from energon_pack.energon import check_energon_version
from energon_pack.samples import PackedTextSample
from energon_pack.task_encoders import LLMPackingTaskEncoder
from energon_pack.training import make_loader
from energon_pack_tools import (
    LengthTextEncoder,
    make_text_dataset,
    make_tokenizer,
    sample_key,
    synthetic_texts,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PACK_SIZE = 64
NUM_SAMPLES = 150


#: Carry groups under 90% full, at most one pack's worth of tokens, at most twice per sample.
CONFIG = CarryOver(min_fill=0.9, max_carry_packs=1, max_age=2)


# --- dataset and loader helpers ------------------------------------------------------------


@pytest.fixture(scope="module")
def text_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """150 TextSamples in 3 shards, 1..40 tokens (seeded); returns (path, key -> length)."""
    rng = random.Random(5)
    lengths = [rng.randint(1, 40) for _ in range(NUM_SAMPLES)]
    texts = [str(n) for n in lengths]
    path = make_text_dataset(tmp_path_factory.mktemp("carry") / "ds", texts, samples_per_shard=50)
    return path, {sample_key(i): n for i, n in enumerate(lengths)}


def toy_encoder(algorithm: str = "best_fit_decreasing", carry: bool = True) -> LengthTextEncoder:
    """The real base class, configured with ``carry_over`` (or stock packing)."""
    return LengthTextEncoder(
        pack_size=PACK_SIZE, algorithm=algorithm, carry_over=CONFIG if carry else None
    )


def find_carry_ages(state: Any) -> list[list[int]]:
    """Every ``_carry_ages`` list anywhere in a (nested) energon state."""
    found: list[list[int]] = []
    if isinstance(state, dict):
        for key, value in state.items():
            if key == "_carry_ages":
                found.append(value)
            else:
                found.extend(find_carry_ages(value))
    elif isinstance(state, (list, tuple)):
        for value in state:
            found.extend(find_carry_ages(value))
    elif dataclasses.is_dataclass(state) and not isinstance(state, type):
        for f in dataclasses.fields(state):
            found.extend(find_carry_ages(getattr(state, f.name)))
    elif hasattr(state, "__dict__"):
        found.extend(find_carry_ages(vars(state)))
    return found


def fill(packs: list[PackedTextSample]) -> float:
    return sum(sum(p.doc_lengths) for p in packs) / (len(packs) * PACK_SIZE)


# --- tests ---------------------------------------------------------------------------------


def test_worked_trace_from_the_module_docstring(tmp_path: Path) -> None:
    # Lengths a..h = 4 3 2 5 6 3 1 2, pack 10, buffer 2 (the docs/concepts/packing.md trace):
    # [d a] and [e b] at 9/10, then [f c h g] when c reaches max_age; stock: 4 packs of 2.
    path = make_text_dataset(tmp_path / "ds", [str(n) for n in (4, 3, 2, 5, 6, 3, 1, 2)])
    a, b, c, d, e, f, g, h = (sample_key(i) for i in range(8))

    def packs(carry: CarryOver | None) -> list[list[str]]:
        encoder = LengthTextEncoder(pack_size=10, algorithm="best_fit_decreasing", carry_over=carry)
        return [p.sample_keys for p in make_loader(path, encoder, packing_buffer_size=2)]

    assert packs(CONFIG) == [[d, a], [e, b], [f, c, h, g]]
    assert sorted(map(sorted, packs(None))) == [[a, b], [c, d], [e, f], [g, h]]


@pytest.mark.parametrize("buffer", [1, 4, 8])
@pytest.mark.parametrize("policy", [CONFIG, CarryOver()])
def test_loader_packs_equal_simulate(text_dataset, buffer: int, policy: CarryOver) -> None:
    # simulate on the order in which the loader read the samples (first appearance in its
    # selections) gives the same packs, member by member: the planner is one function.
    path, lengths = text_dataset
    encoder = LengthTextEncoder(
        pack_size=PACK_SIZE, algorithm="best_fit_decreasing", carry_over=policy
    )
    packs = [p.sample_keys for p in make_loader(path, encoder, packing_buffer_size=buffer)]
    keys = list(dict.fromkeys(k for selection in encoder.selections for k in selection))
    assert sorted(keys) == sorted(lengths)
    spec = PackingSpec(pack_size=PACK_SIZE, algorithm="best_fit_decreasing", carry_over=policy)
    simulated = simulate_packs([lengths[k] for k in keys], spec, buffer)
    assert packs == [[keys[i] for i in pack] for pack in simulated]


def test_short_documents_fill_at_a_buffer_smaller_than_a_pack(tmp_path: Path) -> None:
    # 600 documents of 1..6 tokens (mean 3.5), pack 64, buffer 4: a buffer holds ~14 tokens,
    # a fifth of a pack. Stock packing fills ~22%; carried partial packs grow across buffers.
    rng = random.Random(7)
    lengths = [rng.randint(1, 6) for _ in range(600)]
    path = make_text_dataset(tmp_path / "ds", [str(n) for n in lengths], samples_per_shard=200)
    policy = CarryOver(max_age=32)

    def run(carry: CarryOver | None) -> tuple[list[PackedTextSample], list[Any]]:
        loader = make_loader(
            path, LengthTextEncoder(pack_size=PACK_SIZE, carry_over=carry), packing_buffer_size=4
        )
        packs, states = [], []
        for pack in loader:
            states.append(loader.save_state_rank())
            packs.append(pack)
        return packs, states

    stock, _ = run(None)
    packs, states = run(policy)
    assert fill(stock) < 0.3 and fill(packs) > 0.95
    assert sorted(k for p in packs for k in p.sample_keys) == [sample_key(i) for i in range(600)]
    # More samples are carried than the buffer holds (the budget is in tokens, not samples)...
    assert max(len(ages) for s in states for ages in find_carry_ages(s)) > 2 * 4
    # ... and resuming from such a state continues exactly.
    step = max(range(len(states)), key=lambda i: sum(map(len, find_carry_ages(states[i]))))
    resumed = make_loader(
        path, LengthTextEncoder(pack_size=PACK_SIZE, carry_over=policy), packing_buffer_size=4
    )
    resumed.restore_state_rank(states[step])
    assert [p.sample_keys for p in resumed] == [p.sample_keys for p in packs[step + 1 :]]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_sample_exactly_once(text_dataset, algorithm: str) -> None:
    path, lengths = text_dataset
    packs = list(make_loader(path, toy_encoder(algorithm), packing_buffer_size=8))
    keys = [k for p in packs for k in p.sample_keys]
    # repeat=False: the last buffer (carried samples included) is flushed, nothing lost.
    assert sorted(keys) == sorted(lengths)
    assert all(sum(p.doc_lengths) <= PACK_SIZE for p in packs)
    assert all(p.doc_lengths == [lengths[k] for k in p.sample_keys] for p in packs)


def test_carry_over_beats_stock_packing(text_dataset) -> None:
    path, lengths = text_dataset
    stock = list(make_loader(path, toy_encoder(carry=False), packing_buffer_size=8))
    carried = list(make_loader(path, toy_encoder(), packing_buffer_size=8))
    lower_bound = -(-sum(lengths.values()) // PACK_SIZE)
    # The same samples in fewer packs: buffers of 8 leave a half-empty pack each time.
    assert lower_bound <= len(carried) < len(stock)
    assert fill(carried) > fill(stock) + 0.05


def test_no_sample_older_than_max_age(text_dataset) -> None:
    path, lengths = text_dataset
    encoder = toy_encoder()
    packs = list(make_loader(path, encoder, packing_buffer_size=8))
    appearances: dict[str, int] = {}
    for buffer in encoder.selections:
        for key in buffer:
            appearances[key] = appearances.get(key, 0) + 1
    # A sample is selected once when it arrives and once more per carry: at most max_age + 1.
    assert max(appearances.values()) <= CONFIG.max_age + 1
    # ... and carrying did happen, up to the limit.
    assert max(appearances.values()) == CONFIG.max_age + 1
    assert sorted(k for p in packs for k in p.sample_keys) == sorted(lengths)


def test_save_restore_and_restore_sample_num_workers_0(text_dataset) -> None:
    path, _ = text_dataset
    loader = make_loader(path, toy_encoder(), packing_buffer_size=8)
    packs, states = [], []
    for pack in loader:
        states.append(loader.save_state_rank())
        packs.append(pack)
    # restore_sample rebuilds every pack (carried members included) from its key alone.
    for pack in packs:
        again = loader.restore_sample(pack.__restore_key__)
        assert (again.sample_keys, again.doc_lengths) == (pack.sample_keys, pack.doc_lengths)
    with_carry = [i for i, s in enumerate(states) if any(find_carry_ages(s))]
    assert len(with_carry) > 5
    for step in (with_carry[0], with_carry[len(with_carry) // 2], with_carry[-1]):
        resumed = make_loader(path, toy_encoder(), packing_buffer_size=8)
        resumed.restore_state_rank(states[step])
        rest = [p.sample_keys for p in resumed]
        assert rest == [p.sample_keys for p in packs[step + 1 :]], step


def test_save_restore_with_repeat_across_epochs(text_dataset) -> None:
    # Training (repeat=True): no end of data, carried samples cross epoch borders.
    path, _ = text_dataset
    loader = make_loader(path, toy_encoder(), packing_buffer_size=8, repeat=True)
    it = iter(loader)
    for _ in range(60):  # 150 samples ~ 50 packs: past the first epoch
        next(it)
    state = loader.save_state_rank()
    assert any(find_carry_ages(state))
    tail = [next(it).sample_keys for _ in range(20)]
    resumed = make_loader(path, toy_encoder(), packing_buffer_size=8, repeat=True)
    resumed.restore_state_rank(state)
    it = iter(resumed)
    assert [next(it).sample_keys for _ in range(20)] == tail


@pytest.mark.slow
def test_save_restore_num_workers_2(text_dataset) -> None:
    path, lengths = text_dataset
    loader = make_loader(path, toy_encoder(), packing_buffer_size=8, num_workers=2)
    packs, state, step = [], None, None
    for pack in loader:
        packs.append(pack)
        if state is None and len(packs) > 6:
            candidate = loader.save_state_rank()
            if any(find_carry_ages(candidate)):
                state, step = candidate, len(packs)
    assert sorted(k for p in packs for k in p.sample_keys) == sorted(lengths)
    assert state is not None, "no state with carried samples was seen"
    resumed = make_loader(path, toy_encoder(), packing_buffer_size=8, num_workers=2)
    resumed.restore_state_rank(state)
    assert [p.sample_keys for p in resumed] == [p.sample_keys for p in packs[step:]]


def test_small_buffer_warns_with_a_size_that_fills(text_dataset) -> None:
    path, lengths = text_dataset
    encoder = toy_encoder()
    with pytest.warns(SmallPackingBufferWarning) as record:
        packs = list(make_loader(path, encoder, packing_buffer_size=1))
    # A buffer of one sample of n < 64 tokens needs 64 / n buffers per pack, more than
    # max_age // 4 = 1 (CONFIG): ceil(64 / n) samples per buffer keep a pack within it.
    first = lengths[encoder.selections[0][0]]
    messages = [str(w.message) for w in record if w.category is SmallPackingBufferWarning]
    assert len(messages) == 1  # once per dataset, not once per buffer
    assert f"packing_buffer_size >= {-(-PACK_SIZE // first)}," in messages[0]
    assert "max_age" in messages[0]
    assert sorted(k for p in packs for k in p.sample_keys) == sorted(lengths)


def test_large_enough_buffer_does_not_warn(text_dataset, recwarn) -> None:
    path, _ = text_dataset
    list(make_loader(path, toy_encoder(), packing_buffer_size=8))
    assert not [w for w in recwarn if w.category is SmallPackingBufferWarning]


def test_version_check() -> None:
    assert check_energon_version() == check_energon_version("7.4.1")
    for bad in ("7.5.0", "8.0.0", "7.40.1", "unknown"):
        with pytest.raises(RuntimeError, match=r"7\.4\.x.*carry_over=None"):
            check_energon_version(bad)


class PostencodeEncoder(LengthTextEncoder):
    def postencode_sample(self, sample: Any) -> Any:
        return sample


def test_postencode_sample_is_rejected(text_dataset) -> None:
    path, _ = text_dataset
    encoder = PostencodeEncoder(pack_size=PACK_SIZE, algorithm="first_fit", carry_over=CONFIG)
    with pytest.raises(ValueError, match="postencode_sample"):
        make_loader(path, encoder, packing_buffer_size=8)


# --- the project's LLM encoder with carry-over ---------------------------------------------


def test_llm_encoder_with_carry_over(tmp_path: Path) -> None:
    texts = synthetic_texts(60, seed=3, min_words=1, max_words=14)
    path = make_text_dataset(tmp_path / "ds", texts, samples_per_shard=20)
    tokenizer = make_tokenizer(tmp_path / "tok", texts)

    def encoder(carry: CarryOver | None) -> LLMPackingTaskEncoder:
        return LLMPackingTaskEncoder(
            tokenizer, carry_over=carry, pack_size=32, alignment=1, algorithm="best_fit_decreasing"
        )

    loader = make_loader(path, encoder(CONFIG), packing_buffer_size=6)
    packs, states = [], []
    for pack in loader:
        states.append(loader.save_state_rank())
        packs.append(pack)
    # Every document exactly once; [BOS] words [EOD] fits 32.
    assert sorted(k for p in packs for k in p.sample_keys) == [sample_key(i) for i in range(60)]
    assert all(sum(p.doc_lengths_padded) <= 32 for p in packs)
    stock = list(make_loader(path, encoder(None), packing_buffer_size=6))
    assert len(packs) < len(stock)
    for pack in packs[::3]:
        again = loader.restore_sample(pack.__restore_key__)
        assert again.sample_keys == pack.sample_keys
        assert torch.equal(again.tokens, pack.tokens)
    step = next(i for i, s in enumerate(states) if i > len(states) // 2 and any(find_carry_ages(s)))
    resumed = make_loader(path, encoder(CONFIG), packing_buffer_size=6)
    resumed.restore_state_rank(states[step])
    rest = list(resumed)
    assert [p.sample_keys for p in rest] == [p.sample_keys for p in packs[step + 1 :]]
    assert all(torch.equal(a.tokens, b.tokens) for a, b in zip(rest, packs[step + 1 :]))
