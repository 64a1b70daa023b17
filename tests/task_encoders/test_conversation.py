# SPDX-License-Identifier: Apache-2.0
"""ConversationPackingTaskEncoder: multi-image turns, text-only conversations, video, LLaVA
datasets; a 2-worker epoch over a VQA + conversation blend, resume and restore_sample exact
with random augmentation."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from vlm_helpers import VLM_PACK_SIZE, assert_wrappers_whole, png

from energon_pack.task_encoders import (
    ConversationPackingTaskEncoder,
    ConversationSample,
    normalize_conversation,
)
from energon_pack.testing import (
    assert_each_sample_once,
    assert_restore_sample_reproduces,
    assert_resume_identical,
    member_keys,
)
from energon_pack.training import make_loader
from energon_pack_tools import IMAGE_TOKEN


class Augmenting(ConversationPackingTaskEncoder):
    """Random flips and pixel noise: restore and resume must reproduce them (seeded)."""

    def augment_image(self, image: Any) -> Any:
        from PIL import ImageOps

        image = ImageOps.mirror(image) if random.random() < 0.5 else image
        noise = torch.randint(0, 255, (1,)).item()
        return image.point(lambda v: (v + noise) % 256)

    def augment_video(self, frames: list[Any]) -> list[Any]:
        return [self.augment_image(f) for f in frames]


def encoder(tokenizer_dir: Any, image_processor: Any, cls: Any = None, **kw: Any) -> Any:
    kw.setdefault("pack_size", VLM_PACK_SIZE)
    return (cls or ConversationPackingTaskEncoder)(tokenizer_dir, image_processor, **kw)


def conversation(turns: list[tuple[str, str]], **media: Any) -> ConversationSample:
    return ConversationSample(
        __key__="c",
        __restore_key__=(),
        conversation=[{"role": r, "content": t} for r, t in turns],
        **media,
    )


def test_three_images_over_two_turns_loss_on_assistant_turns_only(
    vlm_tokenizer_dir, image_processor, vlm_tokenizer
) -> None:
    sample = conversation(
        [("user", "<image> <image> is it"), ("assistant", "a seed"), ("user", "<image> and")]
        + [("assistant", "the token")],
        images=[png(28, 56, 1), png(56, 56, 2), png(56, 84, 3)],
    )
    (doc,) = list(encoder(vlm_tokenizer_dir, image_processor).encode_sample(sample))
    # 28 wide x 56 high -> (1, 4, 2) -> 2 tokens; 56x56 -> (1, 4, 4) -> 4; 56x84 -> (1, 6, 4) -> 6
    assert doc.image_grid_thw.tolist() == [[1, 4, 2], [1, 4, 4], [1, 6, 4]]
    assert [e - s for s, e in doc.image_spans.tolist()] == [2, 4, 6]
    image_id = vlm_tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    for s, e in doc.image_spans.tolist():
        assert (doc.tokens[s:e] == image_id).all() and not doc.loss_mask[s:e].any()
    assert int((doc.tokens == image_id).sum()) == 12
    assert vlm_tokenizer.decode(doc.tokens[doc.loss_mask]) == "a seed </s> the token </s>"


@pytest.mark.parametrize("overlong", ["split", "truncate"])
def test_overlong_cuts_keep_each_image_with_its_vision_start_and_end(
    vlm_tokenizer_dir, image_processor, overlong: str
) -> None:
    """Qwen2-VL: a cut at an image's first ``<|image_pad|>`` moves before its
    ``<|vision_start|>``; each piece holds an image's whole ``<vs> pads <ve>`` or none of it."""
    turns = [("user", "<image> is it"), ("assistant", "a seed"), ("user", "<image> and")]
    sample = conversation(
        [*turns, ("assistant", "the token")], images=[png(56, 56, 1), png(56, 56, 2)]
    )
    enc = encoder(vlm_tokenizer_dir, image_processor)
    (doc,) = list(enc.encode_sample(sample))
    start, end = (enc.tokenizer.token_id(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    at = int(doc.image_spans[1, 0])
    assert doc.tokens[at - 1] == start and doc.tokens[int(doc.image_spans[1, 1])] == end
    cut = encoder(vlm_tokenizer_dir, image_processor, pack_size=at, overlong=overlong)
    pieces = list(cut.encode_sample(sample))
    assert len(pieces) == (2 if overlong == "split" else 1)
    assert pieces[0].length == at - 1 and len(pieces[0].image_spans) == 1
    for piece in pieces:
        assert_wrappers_whole(piece.tokens, start, end)
        assert int((piece.tokens == start).sum()) == len(piece.image_spans)
        assert piece.num_media_tokens == int((piece.tokens == enc.image_token_id).sum())


def test_text_only_conversation_and_the_plain_rendering(
    vlm_tokenizer_dir, image_processor, vlm_tokenizer, caplog
) -> None:
    sample = conversation([("system", "a model"), ("user", "is it"), ("assistant", "a seed")])
    stock = encoder(vlm_tokenizer_dir, image_processor, light_media=False)  # pixels in the buffer
    (doc,) = list(stock.encode_sample(sample))
    assert doc.pixel_values.shape == (0, 1176) and doc.image_grid_thw.shape == (0, 3)
    assert vlm_tokenizer.decode(doc.tokens[doc.loss_mask]) == "a seed </s>"
    # Without a chat template: [BOS] turns, EOD after each assistant turn (in the loss).
    enc = encoder(vlm_tokenizer_dir, image_processor, use_chat_template=False)
    (doc,) = list(enc.encode_sample(sample))
    assert vlm_tokenizer.decode(doc.tokens) == "<s> a model is it a seed </s>"
    assert doc.loss_mask.tolist() == [False] * 5 + [True] * 3
    # Nothing to learn (no assistant turn): dropped and counted, the log says why.
    with caplog.at_level("WARNING", logger="energon_pack"):
        assert list(enc.encode_sample(conversation([("user", "is it")]))) == []
    assert enc.stats.dropped_empty == 1
    assert "no assistant turn (turns: user), so nothing to train on" in caplog.text
    assert "add the reply (role 'assistant', or from 'gpt')" in caplog.text


def test_tags_and_media_must_match(vlm_tokenizer_dir, image_processor) -> None:
    enc = encoder(vlm_tokenizer_dir, image_processor)
    turns = [("user", "<image> is it"), ("assistant", "a seed")]
    with pytest.raises(ValueError, match="1 <image> tag"):
        list(enc.encode_sample(conversation(turns, images=[png(28, 28, 1)] * 2)))
    # No tag at all: LLaVA's convention puts the images before the first user turn.
    (doc,) = list(enc.encode_sample(conversation([turns[1]], images=[png(28, 28, 1)])))
    assert doc.image_spans.tolist() == [[2, 3]]
    with pytest.raises(ValueError, match="turn 0 needs a role"):
        normalize_conversation({"conversations": [{"from": "bot", "value": "x"}]})
    assert normalize_conversation({"conversations": [{"from": "gpt", "value": "x"}]}) == [
        {"role": "assistant", "content": "x"}
    ]


def test_tag_mismatch_is_the_rule_the_encoder_applies() -> None:
    check = ConversationPackingTaskEncoder.tag_mismatch
    assert check("<image><image> hi", 1, 0) == ("<image>", "image", 2, 1)
    assert check("hi", 2, 1) is None  # no tags: the items go before the first user turn
    assert check("<image> hi <video>", 1, 1) is None
    assert check("<image> hi <video>", 1, 2) == ("<video>", "video", 1, 2)
    assert check("<video> hi", 0, 0) == ("<video>", "video", 1, 0)
    assert check("<image> <video> <video>", 0, 1) == ("<image>", "image", 1, 0)


def test_llava_dataset_epoch_video_and_media_counts(
    conversation_dataset, vlm_tokenizer_dir, image_processor, vlm_tokenizer
) -> None:
    path, keys, records = conversation_dataset
    enc = encoder(vlm_tokenizer_dir, image_processor, mrope=True, tokens_per_second=2)
    packs = list(make_loader(path, enc, packing_buffer_size=8))
    assert_each_sample_once(packs, keys)
    video_id = vlm_tokenizer.convert_tokens_to_ids("<|video_pad|>")
    seen_videos = 0
    for pack in packs:
        assert len(pack.tokens) <= VLM_PACK_SIZE
        for (s, e), (t, h, w) in zip(pack.video_spans.tolist(), pack.video_grid_thw.tolist()):
            assert e - s == t * h * w // 4 and (pack.tokens[s:e] == video_id).all()
            seen_videos += 1
        assert int((pack.tokens == video_id).sum()) == int(pack.video_grid_thw.prod(1).sum()) // 4
        for key in pack.sample_keys:
            images = records[key].get("image")
            n = 0 if images is None else 1 if isinstance(images, str) else len(images)
            assert n <= len(pack.image_grid_thw)
    assert seen_videos == sum("video" in r for r in records.values()) == 4
    # 3 and 4 frames at fps 2: both 2 temporal patches (3 is padded to 4) of 1 second each.
    assert all(p.video_second_per_grid.tolist() == [1.0] * len(p.video_grid_thw) for p in packs)


def mixed_dataset(tmp_path: Path, vqa: Path, conv: Path) -> Path:
    """A metadataset: one epoch of the VQA dataset and one of the conversation dataset."""
    yaml = tmp_path / "mixed.yaml"
    yaml.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend_epochized:\n      - repetitions: 1\n        path: {vqa}\n"
        f"      - repetitions: 1\n        path: {conv}\n"
    )
    return yaml


@pytest.mark.slow  # 2 workers
def test_two_worker_epoch_over_a_vqa_and_conversation_blend_resume_and_restore(
    tmp_path, vqa_dataset, conversation_dataset, vlm_tokenizer_dir, image_processor
) -> None:
    path = mixed_dataset(tmp_path, vqa_dataset[0], conversation_dataset[0])
    enc = encoder(vlm_tokenizer_dir, image_processor, Augmenting, mrope=True)

    def loader() -> Any:
        return make_loader(path, enc, packing_buffer_size=6, num_workers=2)

    packs = list(loader())
    # Both datasets number their samples from 000000: each key once per dataset that has it.
    expected = Counter(vqa_dataset[1]) + Counter(conversation_dataset[1])
    assert Counter(k for p in packs for k in member_keys(p)) == expected
    assert_resume_identical(loader, save_after=2)
    assert_restore_sample_reproduces(loader, packs[:4])


def test_without_a_video_token_images_work_and_videos_are_refused(
    vlm_tokenizer_dir, image_processor
) -> None:
    # no vision start/end either: the placeholders are the bare tokens
    enc = encoder(vlm_tokenizer_dir, image_processor, video_token=None, vision_start_token=None)
    turns = [("user", "<image> is it"), ("assistant", "a seed")]
    (doc,) = list(enc.encode_sample(conversation(turns, images=[png(28, 28, 1)])))
    assert doc.image_spans.shape == (1, 2) and doc.video_spans.shape == (0, 2)
    video = [("user", "<video> is it"), ("assistant", "a seed")]
    with pytest.raises(ValueError, match="'c'"):
        list(enc.encode_sample(conversation(video, videos=[[png(28, 28, 1)] * 2])))
