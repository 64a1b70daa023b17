# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5-VL (issue 30): a gated delta-net VLM packed through ``hf_kwargs(..., config=model)``
on transformers' kernel route with the CPU reference kernels gives each document (text, images,
timestamped videos) its logits alone (fp32, 1e-5) and the same loss, at batch size 1 and in the
flattened ``(1, B*L)`` layout of larger batches, with ``(4, 1, B*L)`` text + mRoPE positions."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers
from test_vlm_proof import alone, samples
from vlm_models import tiny_qwen3_5_vl

from energon_pack.attention import PackingNotExactError, check_model, cpu_route
from energon_pack.samples import collate_packs, pack_documents
from energon_pack.task_encoders import ConversationPackingTaskEncoder
from energon_pack_tools import make_image_processor

PATCH = 16
NAMES = ("image", "video", "vision_start", "vision_end")
TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@pytest.fixture(scope="module")
def documents(vlm_tokenizer_dir, vlm_tokenizer) -> tuple[Any, list[Any], dict[str, int]]:
    size = 2 * PATCH
    processor = make_image_processor(
        patch_size=PATCH, min_pixels=size * size, max_pixels=9 * size * size
    )
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, processor, pack_size=512, mrope=True, video_timestamps=True
    )
    ids = {n: vlm_tokenizer.convert_tokens_to_ids(t) for n, t in zip(NAMES, TOKENS)}
    docs = [enc.materialize(d) for s in samples(size) for d in enc.encode_sample(s)]
    return enc, docs, ids


@pytest.mark.parametrize(
    ("moe", "split", "impl"),
    [(False, 1, "sdpa"), (False, 2, "sdpa"), (False, 2, "flash_attention_2"), (True, 2, "sdpa")],
)
def test_packed_equals_each_document_alone(documents, vlm_tokenizer, moe, split, impl) -> None:
    enc, docs, ids = documents
    groups = [docs] if split == 1 else [docs[:3], docs[3:]]  # the videos in the second pack
    packs = [pack_documents(g, **enc.pack_options()) for g in groups]
    length = max(p.length for p in packs) + 7  # tail padding in every pack
    batch = collate_packs(packs, pad_to=length)
    cls = (
        transformers.Qwen3_5MoeForConditionalGeneration
        if moe
        else transformers.Qwen3_5ForConditionalGeneration
    )
    with cpu_route(impl, cls), torch.no_grad():  # flash through the reference kernel
        model = tiny_qwen3_5_vl(len(vlm_tokenizer), ids, moe=moe, attn_implementation=impl)
        kwargs = batch.hf_kwargs(impl, config=model)
        assert kwargs["input_ids"].shape == kwargs["seq_idx"].shape == (1, split * length)
        assert kwargs["position_ids"].shape == (4, 1, split * length)
        text_row, mrope = kwargs["position_ids"][0, 0], kwargs["position_ids"][1:, 0]
        assert torch.equal(text_row, batch.metadata.position_ids.reshape(-1))
        assert torch.equal(mrope, batch.mrope_position_ids.reshape(3, -1))
        assert len(kwargs["video_grid_thw"]) == 2 and len(kwargs["image_grid_thw"]) == 5
        out = model(**kwargs)
        logits = out.logits.view(split, length, -1)
        total, count = 0.0, 0
        for r, (pack, group) in enumerate(zip(packs, groups)):
            start = 0
            for doc in group:
                n = doc.length
                ref, positions = alone(model, doc, ids, None)
                torch.testing.assert_close(logits[r, start : start + n], ref, atol=1e-5, rtol=0)
                assert torch.equal(pack.mrope_position_ids[:, start : start + n], positions)
                targets = torch.full((n,), -100)
                targets[:-1] = torch.where(doc.loss_mask[1:], doc.tokens[1:], -100)
                total += float(torch.nn.functional.cross_entropy(ref, targets, reduction="sum"))
                count += int((targets != -100).sum())
                start += n
    assert count == int((batch.labels != -100).sum())
    assert float(out.loss) == pytest.approx(total / count, rel=1e-5)


def test_refused_without_the_kernels_naming_them(documents, vlm_tokenizer) -> None:
    _, _, ids = documents
    model = tiny_qwen3_5_vl(len(vlm_tokenizer), ids)
    with pytest.raises(PackingNotExactError, match="pip install causal-conv1d flash-linear"):
        check_model(model, "sdpa", pack_size=64)
