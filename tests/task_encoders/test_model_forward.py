# SPDX-License-Identifier: Apache-2.0
"""A packed batch from each encoder through a tiny transformers model: finite loss, and for text
the packed loss equals the loss of the documents run one by one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vlm_models import tiny_vlm

from energon_pack.task_encoders import (
    CaptioningPackingTaskEncoder,
    LLMPackingTaskEncoder,
    SFTPackingTaskEncoder,
)
from energon_pack.training import make_loader
from energon_pack_tools import document_loss, tiny_causal_lm


def first_batch(path: Any, enc: Any) -> Any:
    return next(iter(make_loader(path, enc, packing_buffer_size=8, batch_size=2)))


@pytest.mark.parametrize("name", ["llm", "sft"])
def test_text_batch_loss_equals_documents_alone(
    name: str, text_dataset, sft_dataset, tokenizer_dir, tokenizer
) -> None:
    if name == "llm":
        enc, path = LLMPackingTaskEncoder(tokenizer_dir, pack_size=32), text_dataset.path
    else:
        enc, path = SFTPackingTaskEncoder(tokenizer_dir, pack_size=24), sft_dataset.path
    batch = first_batch(path, enc)
    model = tiny_causal_lm(vocab_size=len(tokenizer))
    with torch.no_grad():
        loss = model(**batch.hf_kwargs("sdpa", config=model)).loss
    assert torch.isfinite(loss)
    # Reference: every document alone (targets = labels != -100 in the pack).
    total, count = 0.0, 0
    for row, lengths in enumerate(batch.doc_lengths):
        start = 0
        for n, padded in zip(lengths, batch.doc_lengths_padded[row]):
            tokens = batch.tokens[row, start : start + n]
            mask = torch.zeros(n, dtype=torch.bool)
            mask[1:] = batch.labels[row, start : start + n - 1] != -100
            s, c = document_loss(model, tokens, mask)
            total, count = total + s, count + c
            start += padded
    assert count == int((batch.labels != -100).sum())
    assert float(loss) == pytest.approx(total / count, rel=1e-4)


def test_captioning_batch_through_tiny_qwen2_vl(
    captioning_dataset, tokenizer_dir, tokenizer, image_processor
) -> None:
    enc = CaptioningPackingTaskEncoder(
        tokenizer_dir, image_processor, pack_size=48, mrope=True, overlong="drop"
    )
    batch = first_batch(captioning_dataset.path, enc)
    vocab = len(tokenizer)
    ids = dict(
        image=enc.image_token_id, video=vocab - 1, vision_start=vocab - 2, vision_end=vocab - 3
    )
    model = tiny_vlm("qwen2_vl", vocab, ids)
    kwargs = batch.hf_kwargs("sdpa", config=model)
    assert kwargs["position_ids"].shape == (3, *batch.tokens.shape)
    out = model(**kwargs)
    assert torch.isfinite(out.loss)
    out.loss.backward()  # gradients reach the vision tower through the image tokens
    grad = model.model.visual.patch_embed.proj.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
