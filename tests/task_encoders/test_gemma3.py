# SPDX-License-Identifier: Apache-2.0
"""Gemma 3 (stacked images, bidirectional image tokens) beyond the conformance suite
(tests/task_encoders/families/, which checks documents against ``Gemma3Processor`` and sdpa
logits): a tiny random ``Gemma3ForConditionalGeneration`` (sliding window 3 < an image's 4
tokens) gives each document's logits alone within 1e-5 fp32 in eager and flex_attention too
(slow tier); refusals, analyze, media budgets and the adapters that cannot build its masks.

The tokenizer is a real ``GemmaTokenizer`` (byte-fallback BPE with newline runs as tokens) with
Gemma 3's chat template, so the layout ``\\n\\n<start_of_image>...<end_of_image>\\n\\n`` merges
with the newlines around it exactly as the processor's text replacement does.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import png, vlm_datasets
from vlm_models import (
    GEMMA3_TOKENS_PER_IMAGE,
    gemma3_processor,
    gemma3_tokenizer,
    tiny_gemma3,
)

from energon_pack.attention._verify import cpu_route
from energon_pack.samples import collate_packs
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import synthetic_texts

#: Image sizes (width, height): square, wide, tall, tiny, larger than the 32-pixel input.
SIZES = [(32, 32), (150, 60), (40, 120), (9, 14), (200, 90), (64, 64)]
PACK_SIZE = 128
TOKENS = dict(
    image_token="<image_soft_token>",
    video_token=None,
    vision_start_token="<start_of_image>",
    vision_end_token="<end_of_image>",
)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return synthetic_texts(60, seed=8, min_words=1, max_words=5)


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    return gemma3_tokenizer(tmp_path_factory.mktemp("gemma3_tok"), texts)


def encoder(cls: Any, tok_dir: Path, **kw: Any) -> Any:
    return cls(tok_dir, gemma3_processor(tok_dir), pack_size=PACK_SIZE, **TOKENS, **kw)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """VQA and LLaVA conversations with 0..3 images in several turns, some with a system turn."""
    return vlm_datasets(tmp_path_factory, "g3", SIZES, system=True)


def alone(processor: Any, turns: list[tuple[str, str]], images: list[bytes]) -> dict[str, Any]:
    """``processor.apply_chat_template(tokenize=True)`` on the conversation as typed content
    (each text split at its tags: ``{"type": "image"}`` and ``{"type": "text"}`` items)."""
    messages = [
        {
            "role": r,
            "content": [
                {"type": "image"} if p == "<image>" else {"type": "text", "text": p}
                for p in re.split("(<image>)", t)
                if p
            ],
        }
        for r, t in turns
    ]
    pil = [Image.open(io.BytesIO(b)) for b in images]
    return processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"images": pil} if pil else {},
    )


def packs_of(task: str, path: Path, tok_dir: Path, light: bool) -> list[Any]:
    cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
    enc = encoder(cls, tok_dir, light_media=light)
    assert enc.light_media is light and enc.media.family.name == "gemma3"
    return list(make_loader(path, enc, packing_buffer_size=8))


@pytest.fixture(scope="module")
def packs(datasets: dict[str, Any], gemma3_dir: Path) -> dict[str, list[Any]]:
    """Each dataset's packs with light buffers, checked bit-identical to stock buffers'."""
    out = {}
    for task, (path, _) in datasets.items():
        light = packs_of(task, path, gemma3_dir, light=True)
        stock = packs_of(task, path, gemma3_dir, light=False)
        assert len(light) == len(stock)
        for a, b in zip(light, stock):  # restore keys name the stage light buffers add
            assert_same_item(dataclasses.replace(a, __restore_key__=b.__restore_key__), b)
        out[task] = light
    return out


def _documents(pack: Any) -> Any:
    """``(key, token slice, image slice)`` of each document of ``pack``."""
    start = image = 0
    for key, n in zip(pack.sample_keys, pack.doc_lengths):
        images = int(
            (pack.image_spans[:, 0] >= start).logical_and(pack.image_spans[:, 0] < start + n).sum()
        )
        yield key, slice(start, start + n), slice(image, image + images)
        start, image = start + n, image + images


@pytest.fixture
def fast_flex() -> Iterator[None]:
    """transformers' flex path and its own masks (each document alone) without torch.compile
    (~50 s on CPU; the same result), as check_model's experiment runs them. It also drops
    transformers' flex singleton, which keeps the compiled kernel of an earlier test."""
    with cpu_route("flex_attention"):
        yield


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("impl", ["eager", "flex_attention"])  # sdpa: the suite
@pytest.mark.slow  # the fast tier: test_bidirectional's tiny Gemma 3 VLM cells
def test_tiny_gemma3_packed_logits_equal_alone(
    impl: str,
    fast_flex: None,
    datasets: dict[str, Any],
    packs: dict[str, list[Any]],
    gemma3_dir: Path,
) -> None:
    """Both datasets' packs, two to a batch with tail padding, through ``hf_kwargs(impl,
    config=model)`` (image tokens bidirectional per image, per document, with the window)."""
    processor = gemma3_processor(gemma3_dir)
    model = tiny_gemma3(processor.tokenizer, impl)
    worst = 0.0
    tasks = ["conversation"] if impl == "flex_attention" else ["vqa", "conversation"]
    for task in tasks:  # flex without torch.compile is slow on CPU: the multi-image one
        ref = datasets[task][1]
        rows = packs[task]
        for b in range(0, len(rows), 2):
            batch = collate_packs(rows[b : b + 2], pad_to=PACK_SIZE)
            kwargs = batch.hf_kwargs(impl, config=model.config, with_labels=False)
            assert "image_grid_thw" not in kwargs  # stacked images: pixel_values (N, 3, S, S)
            assert kwargs.get("pixel_values", torch.zeros(0, 3, 32, 32)).dim() == 4
            with torch.no_grad():
                logits = model(**kwargs).logits
            if "pixel_values" in kwargs:
                control = batch, logits  # a batch with images
            for r, pack in enumerate(rows[b : b + 2]):
                for key, tokens, _ in _documents(pack):
                    with torch.no_grad():
                        single = model(**alone(processor, *ref[key])).logits[0]
                    got = logits[r, tokens]
                    worst = max(worst, float((got - single).abs().max()))
                    torch.testing.assert_close(got, single, atol=1e-5, rtol=0)
    print(f"gemma3 {impl}: max |packed - alone| logit difference {worst:.2e}")
    # the check can fail: without the image blocks (all token types 0) packing is causal
    batch, logits = control
    causal = batch.hf_kwargs(
        impl, config=model.config, with_labels=False, token_type_ids=0 * batch.token_type_ids
    )
    with torch.no_grad():
        assert float((model(**causal).logits - logits).abs().max()) > 1e-3


def test_gemma3_refusals(gemma3_dir: Path) -> None:
    """Pan-and-scan, an image processor without the processor's tokens per image, mRoPE,
    videos and a tokenizer without the image start/end tokens are refused, each saying why."""
    processor = gemma3_processor(gemma3_dir)
    with pytest.raises(ValueError, match="pass the whole Gemma3Processor"):
        encoder_with(processor.image_processor, gemma3_dir)
    processor.image_processor.do_pan_and_scan = True
    with pytest.raises(ValueError, match="do_pan_and_scan=True is not supported"):
        encoder_with(processor, gemma3_dir)
    with pytest.raises(ValueError, match="gemma3 models take 1-D positions"):
        encoder(ConversationPackingTaskEncoder, gemma3_dir, mrope=True)
    enc = encoder(ConversationPackingTaskEncoder, gemma3_dir)
    with pytest.raises(ValueError, match="not supported for the gemma3 .*with videos: qwen2-vl"):
        enc.media.videos([[Image.new("RGB", (32, 32))]])
    with pytest.raises(ValueError, match="wraps each image in vision start/end tokens"):
        ConversationPackingTaskEncoder(
            gemma3_dir,
            gemma3_processor(gemma3_dir),
            image_token="<image_soft_token>",
            vision_start_token=None,
            pack_size=PACK_SIZE,
        )


def encoder_with(processor: Any, tok_dir: Path) -> Any:
    return ConversationPackingTaskEncoder(tok_dir, processor, pack_size=PACK_SIZE, **TOKENS)


def test_analyze_counts_gemma3_media_tokens(
    tmp_path: Path, datasets: dict[str, Any], gemma3_dir: Path
) -> None:
    """``energon-pack analyze --task conversation --processor DIR`` on a saved Gemma 3
    processor (tokenizer included): the family's tokens per image and every document."""
    from click.testing import CliRunner

    from energon_pack_tools.cli import main

    processor = gemma3_processor(gemma3_dir)
    processor.save_pretrained(tmp_path / "gemma3")
    path, ref = datasets["conversation"]
    args = ["analyze", str(path), "--task", "conversation", "--processor", str(tmp_path / "gemma3")]
    res = CliRunner().invoke(
        main, [*args, "--pack-size", str(PACK_SIZE), "--buffer-size", "4", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    n_images = sum(len(images) for _, images in ref.values())
    assert out["media"]["media_tokens"] == GEMMA3_TOKENS_PER_IMAGE * n_images
    assert out["samples_in"] == len(ref)


def test_gemma3_media_budgets(datasets: dict[str, Any], gemma3_dir: Path) -> None:
    """``max_media_per_pack=2``: no pack holds more than 2 images (1-D image rows), and the
    3-image conversations, which no pack could hold, are dropped and counted."""
    path, ref = datasets["conversation"]
    enc = encoder(ConversationPackingTaskEncoder, gemma3_dir, max_media_per_pack=2)
    packs = list(make_loader(path, enc, packing_buffer_size=8))
    assert max(len(p.image_grid_thw) for p in packs) == 2
    assert all(len(p.pixel_values) == len(p.image_grid_thw) for p in packs)
    three = {k for k, (_, images) in ref.items() if len(images) == 3}
    assert sorted(k for p in packs for k in p.sample_keys) == sorted(set(ref) - three)
    assert sum(p.counts.dropped_over_budget for p in packs) == len(three) == 2


def test_document_causal_adapters_are_refused_for_gemma3_batches(gemma3_dir: Path) -> None:
    """A batch with token_type_ids never gets a plain document-causal mask: every adapter
    without the model says so (hf_kwargs with config=model builds the image blocks)."""
    from vlm_helpers import chat_sample

    from energon_pack.samples import megatron_batch, pack_documents

    enc = encoder(ConversationPackingTaskEncoder, gemma3_dir, light_media=False)
    docs = [
        doc
        for i in range(2)
        for doc in enc.encode_sample(
            chat_sample(f"k{i}", ["<image> hi", "a"], images=[png(9, 14, i)])
        )
    ]
    batch = collate_packs([pack_documents(docs[:1]), pack_documents(docs[1:])], pad_to=PACK_SIZE)
    calls = {
        "hf_kwargs() without config=model": lambda: batch.hf_kwargs("sdpa", config=None),
        "flash_attn_kwargs()": batch.flash_attn_kwargs,
        "packed_seq_params()": batch.packed_seq_params,
        "block_mask()": batch.block_mask,
        "dense_mask()": batch.dense_mask,
        "megatron_batch()": lambda: megatron_batch(batch),
    }
    for what, call in calls.items():
        with pytest.raises(ValueError, match=rf"{re.escape(what)}: .*token_type_ids"):
            call()
