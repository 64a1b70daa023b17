# SPDX-License-Identifier: Apache-2.0
"""The proof: a pack of documents with 0, 1 and 3 images and a video gives, on tiny random
Qwen2-VL / Qwen2.5-VL / Qwen3-VL, the logits of each document run alone (fp32, 1e-5), the same
token-weighted loss, and mRoPE positions equal to the model's own ``get_rope_index`` per
document (Qwen2.5-VL's video time scaling and Qwen3-VL's per-frame timestamps included)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vlm_helpers import chat_sample, png
from vlm_models import FAMILIES, TOKENS_PER_SECOND, tiny_vlm

from energon_pack.samples import collate_packs, pack_documents
from energon_pack.task_encoders import ConversationPackingTaskEncoder, ConversationSample
from energon_pack_tools import make_image_processor


def frames(n: int, size: int, seed: int) -> list[bytes]:
    return [png(size, size, seed=seed * 10 + i) for i in range(n)]


def samples(size: int) -> list[ConversationSample]:
    """Documents with 0, 1 and 3 images, one with a 3-frame video at fps 1, and one with an
    image, then a 5-frame video at fps 2 (Qwen3-VL: 3 timestamped frame groups)."""

    out = [
        chat_sample("text", ["is it a token", "it is"]),
        chat_sample("one", ["<image> is it", "a seed"], images=[png(size, 2 * size, 1)]),
        chat_sample(
            "three",
            ["<image> <image> which", "the one", "<image> and this", "a random seed"],
            images=[png(size, size, 2), png(2 * size, size, 3), png(size, 3 * size, 4)],
        ),
    ]
    out.append(chat_sample("video", ["<video> is it", "a batch"], videos=[frames(3, size, 5)]))
    out[-1].video_fps = [1.0]
    out.append(
        chat_sample(
            "mixed",
            ["<image> and <video>", "the seed", "and then", "a token"],
            images=[png(size, 2 * size, 6)],
            videos=[frames(5, size, 7)],
            video_fps=[2.0],
        )
    )
    return out


def alone(model: Any, doc: Any, ids: dict[str, int], tps: float | None) -> tuple[Any, Any]:
    """(logits, model's own mRoPE positions) of one document run alone, unpadded."""
    input_ids = doc.tokens.view(1, -1)
    types = torch.zeros_like(input_ids, dtype=torch.int)
    types[input_ids == ids["image"]] = 1
    types[input_ids == ids["video"]] = 2
    kwargs: dict[str, Any] = {"input_ids": input_ids, "mm_token_type_ids": types}
    if len(doc.image_grid_thw):
        kwargs |= {"pixel_values": doc.pixel_values, "image_grid_thw": doc.image_grid_thw}
    if len(doc.video_grid_thw):
        kwargs |= {"pixel_values_videos": doc.pixel_values_videos}
        kwargs |= {"video_grid_thw": doc.video_grid_thw}
        if tps is not None:
            kwargs["second_per_grid_ts"] = doc.video_second_per_grid
    rope = {k: v for k, v in kwargs.items() if k.endswith("grid_thw") or k == "second_per_grid_ts"}
    positions, _ = model.model.get_rope_index(input_ids, types, **rope)
    with torch.no_grad():
        logits = model(**kwargs).logits[0]
    return logits, positions[:, 0]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_equals_each_document_alone(family: str, vlm_tokenizer_dir, vlm_tokenizer) -> None:
    patch = FAMILIES[family]
    size = 2 * patch  # one merged token per 2x2 patches: images of 1..3 x 1..3 merged tokens
    processor = make_image_processor(
        patch_size=patch, min_pixels=size * size, max_pixels=9 * size * size
    )
    tps = TOKENS_PER_SECOND if family == "qwen2_5_vl" else None
    qwen3 = family == "qwen3_vl"
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir,
        processor,
        pack_size=512,
        mrope=True,
        tokens_per_second=tps,
        video_timestamps=qwen3,
    )
    names = ("image", "video", "vision_start", "vision_end")
    tokens = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    ids = {n: vlm_tokenizer.convert_tokens_to_ids(t) for n, t in zip(names, tokens)}
    # materialize: the media of light documents (planned in encode_sample) decoded, as energon's
    # post-encoder does for packed members
    docs = [enc.materialize(d) for s in samples(size) for d in enc.encode_sample(s)]
    assert [len(d.video_grid_thw) for d in docs] == [0, 0, 0, 1, 1]
    pack = pack_documents(docs, **enc.pack_options())
    batch = collate_packs([pack], pad_to=pack.length + 7)  # tail padding too
    model = tiny_vlm(family, len(vlm_tokenizer), ids)
    with torch.no_grad():
        out = model(**batch.hf_kwargs("sdpa", config=model))
    logits = out.logits[0]
    total, count, start = 0.0, 0, 0
    for doc in docs:
        n = doc.length
        ref, positions = alone(model, doc, ids, tps)
        torch.testing.assert_close(logits[start : start + n], ref, atol=1e-5, rtol=0)
        assert torch.equal(pack.mrope_position_ids[:, start : start + n], positions), doc.__key__
        targets = torch.full((n,), -100)
        targets[:-1] = torch.where(doc.loss_mask[1:], doc.tokens[1:], -100)
        total += float(torch.nn.functional.cross_entropy(ref, targets, reduction="sum"))
        count += int((targets != -100).sum())
        start += n
    assert count == int((batch.labels != -100).sum())
    assert float(out.loss) == pytest.approx(total / count, rel=1e-5)
    if qwen3:  # one timestamped group per temporal patch: 2 and 3 groups, text between them
        stamps = [t for d in docs for t in d.tokens.tolist() if t == ids["vision_start"]]
        assert len(stamps) == 5 + (1 + 2) + (1 + 3)  # 5 images; videos: outer + per group
        assert pack.num_media_tokens == sum(
            int(torch.isin(d.tokens, torch.tensor([ids["image"], ids["video"]])).sum())
            for d in docs
        )
    if family == "qwen2_5_vl":  # the video's temporal row steps by tokens_per_second * 2 s
        (s, e) = pack.video_spans[0].tolist()
        assert sorted(set(pack.mrope_position_ids[0, s:e].tolist()))[1:2] == [
            pack.mrope_position_ids[0, s].item() + TOKENS_PER_SECOND * 2
        ]
