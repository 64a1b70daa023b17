# SPDX-License-Identifier: Apache-2.0
"""Light media buffers under carry-over: carried documents stay planned (no pixels), only the
members of emitted packs are materialized, packs equal stock mode with carry-over, and resume
and ``restore_sample`` are exact at 0 and 2 workers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_light_media import AugmentingCaptions, caption_encoder, same_packs
from vlm_helpers import VLM_PACK_SIZE

from energon_pack.algorithms import CarryOver
from energon_pack.energon._carry_over_dataset import CarryOverPackingDataset
from energon_pack.energon._postencode_dataset import PostencodePackingDataset
from energon_pack.samples import EncodedSample, LightMultimodalDocument
from energon_pack.task_encoders import CaptioningPackingTaskEncoder, ConversationPackingTaskEncoder
from energon_pack.testing import assert_restore_sample_reproduces, assert_resume_identical
from energon_pack.training import make_loader

#: Carry groups under 90% full, at most one pack's worth of tokens, at most twice per sample.
CARRY = CarryOver(min_fill=0.9, max_carry_packs=1, max_age=2)
BUFFER = 4


class WatchedCaptions(CaptioningPackingTaskEncoder):
    """Records what selection sees (carried documents included) and what is materialized."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.selected: list[list[Any]] = []
        self.materialized: list[str] = []

    def select_samples_to_pack(self, samples: list[EncodedSample]) -> list[list[EncodedSample]]:
        self.selected.append(list(samples))
        return super().select_samples_to_pack(samples)

    def materialize(self, doc: EncodedSample, *, into_pack: bool = False) -> EncodedSample:
        self.materialized.append(doc.__key__)
        return super().materialize(doc, into_pack=into_pack)


def packs_of(path: Any, encoder: Any, **kw: Any) -> list[Any]:
    return list(make_loader(path, encoder, packing_buffer_size=BUFFER, **kw))


def test_light_is_on_by_default_under_carry_over(tokenizer_dir, image_processor) -> None:
    assert caption_encoder(tokenizer_dir, image_processor, carry_over=CARRY).light_media
    assert caption_encoder(
        tokenizer_dir, image_processor, AugmentingCaptions, carry_over=CARRY, light_media=True
    ).light_media
    assert issubclass(CarryOverPackingDataset, PostencodePackingDataset)


def test_captioning_carried_documents_stay_planned_and_packs_equal_stock(
    captioning_dataset, tokenizer_dir, image_processor
) -> None:
    kw = {"carry_over": CARRY, "overlong": "drop"}
    stock = caption_encoder(tokenizer_dir, image_processor, light_media=False, **kw)
    light = caption_encoder(tokenizer_dir, image_processor, WatchedCaptions, **kw)
    assert light.light_media and not stock.light_media
    stock_packs = packs_of(captioning_dataset.path, stock)
    packs = packs_of(captioning_dataset.path, light)
    same_packs(stock_packs, packs)
    # Carrying happened: some documents were selected more than once, and every document that
    # selection saw (carried ones included) was planned: no pixels in the buffers.
    seen = [doc.__key__ for pool in light.selected for doc in pool]
    assert len(seen) > len(set(seen))
    assert all(isinstance(doc, LightMultimodalDocument) for pool in light.selected for doc in pool)
    # Every sample exactly once, and only emitted members were materialized, once each.
    keys = [k for p in packs for k in p.sample_keys]
    assert len(keys) == len(set(keys)) == len(set(seen))
    no_carry = caption_encoder(tokenizer_dir, image_processor, overlong="drop")
    assert sorted(keys) == sorted(k for p in packs_of(captioning_dataset.path, no_carry)
                                  for k in p.sample_keys)  # fmt: skip
    assert sorted(light.materialized) == sorted(keys)


def test_conversation_light_packs_equal_stock_under_carry_over(
    conversation_dataset, vlm_tokenizer_dir, image_processor
) -> None:
    packs = {}
    for light in (False, True):
        enc = ConversationPackingTaskEncoder(
            vlm_tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, mrope=True,
            carry_over=CARRY, light_media=light,
        )  # fmt: skip
        assert enc.light_media is light
        loader = make_loader(conversation_dataset[0], enc, packing_buffer_size=BUFFER)
        packs[light], steps = carry_steps(loader)
        assert steps, "no saved state carried documents"
    same_packs(packs[False], packs[True])
    keys = [k for p in packs[True] for k in p.sample_keys]
    assert len(keys) == len(set(keys)) > 0
    assert sum(len(p.video_grid_thw) for p in packs[True]) > 0  # planned videos carried too


def carry_steps(loader: Any) -> tuple[list[Any], list[int]]:
    """All items of ``loader`` and the steps after which its saved state carries documents."""
    items, steps = [], []
    for item in loader:
        items.append(item)
        if any(find_carried(loader.save_state_rank())):
            steps.append(len(items))
    return items, steps


def find_carried(state: Any) -> list[list[int]]:
    """Every ``_carry_ages`` list in a (nested) energon state."""
    if isinstance(state, dict):
        found = [v for k, v in state.items() if k == "_carry_ages"]
        return found + [x for k, v in state.items() if k != "_carry_ages" for x in find_carried(v)]
    if isinstance(state, (list, tuple)):
        return [x for v in state for x in find_carried(v)]
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return [x for f in dataclasses.fields(state) for x in find_carried(getattr(state, f.name))]
    return find_carried(vars(state)) if hasattr(state, "__dict__") else []


def test_resume_and_restore_sample_exact_with_random_augmentation(
    captioning_dataset, tokenizer_dir, image_processor
) -> None:
    """Seeded augmentation drawn in materialize: the same draws after resume (saved with
    planned documents in the carry buffer) and on ``restore_sample`` (carried members too)."""
    enc = caption_encoder(
        tokenizer_dir, image_processor, AugmentingCaptions, light_media=True, carry_over=CARRY,
        overlong="drop",
    )  # fmt: skip

    def loader() -> Any:
        return make_loader(captioning_dataset.path, enc, packing_buffer_size=BUFFER)

    packs, steps = carry_steps(loader())
    assert len(steps) >= 2, "no saved state carried documents"
    assert_restore_sample_reproduces(loader, packs)
    for step in (steps[0], steps[len(steps) // 2]):
        reference, resumed = assert_resume_identical(loader, save_after=step)
        assert len(resumed) == len(packs) - step


@pytest.mark.slow
def test_two_workers_conversation_resume_and_restore_sample_exact(
    conversation_dataset, vlm_tokenizer_dir, image_processor
) -> None:
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, mrope=True, carry_over=CARRY
    )
    assert enc.light_media

    def loader() -> Any:
        return make_loader(conversation_dataset[0], enc, packing_buffer_size=3, num_workers=2)

    packs, steps = carry_steps(loader())
    assert steps, "no saved state carried documents"
    assert all(not isinstance(p, LightMultimodalDocument) for p in packs)
    keys = [k for p in packs for k in p.sample_keys]
    assert len(keys) == len(set(keys))
    assert_resume_identical(loader, save_after=steps[0])
    assert_restore_sample_reproduces(loader, packs[:4])
