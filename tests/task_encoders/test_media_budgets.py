# SPDX-License-Identifier: Apache-2.0
"""Media budgets through a real energon loader: no pack over a budget, every sample in exactly
one pack or dropped and counted; media loads of light and materialized documents agree."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vlm_helpers import VLM_PACK_SIZE, chat_sample, png

from energon_pack.algorithms import CarryOver, MediaLoad, PackingSpec, simulate_packs
from energon_pack.samples import (
    EncodedCaptioningSample,
    EncodedSample,
    LightMultimodalDocument,
    PackingCounts,
)
from energon_pack.task_encoders import ConversationPackingTaskEncoder
from energon_pack.testing import assert_each_sample_once, member_keys
from energon_pack.training import make_loader

#: Media load of the conversation fixture's records by ``id % 4``: text, one 6-token image,
#: three images of 2 + 4 + 6 tokens, a video of 8 tokens (2 temporal patches of 2x2 tokens).
LOADS = {0: (0, 0), 1: (6, 1), 2: (12, 3), 3: (8, 1)}


def _encoder(tokenizer_dir: Any, image_processor: Any, **kw: Any) -> Any:
    return ConversationPackingTaskEncoder(
        tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, **kw
    )


def _pack_load(pack: Any) -> tuple[int, int]:
    return pack.num_media_tokens, len(pack.image_grid_thw) + len(pack.video_grid_thw)


def test_light_and_materialized_documents_report_the_same_load(
    vlm_tokenizer_dir, image_processor
) -> None:
    frames = [png(56, 56, seed=s) for s in range(4)]
    sample = chat_sample(
        "m",
        ["<image> <image> <video> what", "a seed"],
        images=[png(28, 56, 1), png(56, 84, 2)],
        videos=[frames],
        video_fps=[2.0],
    )
    light = _encoder(vlm_tokenizer_dir, image_processor)
    (planned,) = list(light.encode_sample(sample))
    (doc,) = list(
        _encoder(vlm_tokenizer_dir, image_processor, light_media=False).encode_sample(sample)
    )
    assert isinstance(planned, LightMultimodalDocument)
    # 28x56 -> 2 tokens, 56x84 -> 6, 4 frames of 56x56 -> 2 temporal patches x 4 = 8.
    assert planned.media_load == doc.media_load == light.materialize(planned).media_load == (16, 3)


def test_text_and_captioning_documents_media_load() -> None:
    text = EncodedSample(
        __key__="t", __restore_key__=(), tokens=torch.arange(4), loss_mask=torch.ones(4, dtype=bool)
    )
    assert text.media_load == (0, 0)
    caption = EncodedCaptioningSample(
        __key__="c",
        __restore_key__=(),
        tokens=torch.arange(12),
        loss_mask=torch.ones(12, dtype=bool),
        pixel_values=torch.zeros(24, 8),
        image_grid_thw=torch.tensor([[1, 4, 4], [1, 2, 4]]),
        image_spans=torch.tensor([[1, 5], [7, 9]]),
    )
    assert caption.media_load == (6, 2)


@pytest.mark.parametrize("carry_over", [None, CarryOver(max_age=3)])
def test_loader_keeps_the_budgets_and_counts_what_cannot_fit(
    conversation_dataset, vlm_tokenizer_dir, image_processor, carry_over
) -> None:
    path, keys, records = conversation_dataset
    # Two media items per pack: the three-image conversations can never be packed.
    enc = _encoder(
        vlm_tokenizer_dir,
        image_processor,
        max_media_tokens_per_pack=10,
        max_media_per_pack=2,
        step_packs=2,
        carry_over=carry_over,
    )
    packs = list(make_loader(path, enc, packing_buffer_size=6))
    over = [k for k, r in records.items() if LOADS[r["id"] % 4] == (12, 3)]
    assert len(over) == 4
    assert_each_sample_once(packs, keys, dropped=over)
    for pack in packs:
        tokens, items = _pack_load(pack)
        assert tokens <= 10 and items <= 2
    counts = sum((p.counts for p in packs), PackingCounts())
    assert counts.dropped_over_budget == 4 and counts.documents == len(keys) - 4
    assert set(enc.stats.dropped_keys) == set(over)
    # The budgets bind: without them some pack holds more than 10 media tokens or 2 items.
    free = list(
        make_loader(path, _encoder(vlm_tokenizer_dir, image_processor), packing_buffer_size=6)
    )
    assert any(_pack_load(p)[0] > 10 or _pack_load(p)[1] > 2 for p in free)
    assert sorted(k for p in free for k in member_keys(p)) == sorted(keys)


def test_over_budget_drop_is_logged_with_key_and_reason(
    vlm_tokenizer_dir, image_processor, caplog
) -> None:
    sample = chat_sample("big", ["<image> hi", "x"], images=[png(56, 84, 3)])
    enc = _encoder(vlm_tokenizer_dir, image_processor, max_media_tokens_per_pack=4)
    with caplog.at_level("WARNING", logger="energon_pack.stats"):
        assert list(enc.encode_sample(sample)) == []
    assert enc.stats.dropped_over_budget == 1
    assert "'big'" in caplog.text and "6 media tokens > max_media_tokens_per_pack=4" in caplog.text


class Recording(ConversationPackingTaskEncoder):
    """Records each document's key, length and media load as selection first sees it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[str, tuple[int, tuple[int, int]]] = {}

    def select_samples_to_pack(self, samples: list[Any]) -> list[list[Any]]:
        for s in samples:
            self.seen.setdefault(s.__key__, (len(s.tokens), s.media_load))
        return super().select_samples_to_pack(samples)


@pytest.mark.parametrize("carry_over", [None, CarryOver(max_age=3)])
def test_loader_packs_equal_simulate_with_media(
    conversation_dataset, vlm_tokenizer_dir, image_processor, carry_over
) -> None:
    path = conversation_dataset[0]
    fields = dict(
        pack_size=VLM_PACK_SIZE,
        max_media_tokens_per_pack=14,
        max_media_per_pack=3,
        step_packs=2,
        carry_over=carry_over,
    )
    enc = Recording(vlm_tokenizer_dir, image_processor, **fields)
    packs = [p.sample_keys for p in make_loader(path, enc, packing_buffer_size=8)]
    keys = list(enc.seen)
    lengths = [enc.seen[k][0] for k in keys]
    media = MediaLoad.of(enc.seen[k][1] for k in keys)
    simulated = simulate_packs(lengths, PackingSpec(**fields), 8, media=media)
    assert packs == [[keys[i] for i in pack] for pack in simulated]
