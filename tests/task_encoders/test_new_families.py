# SPDX-License-Identifier: Apache-2.0
"""GLM-4.1V, GLM-4.6V, Ernie-4.5-VL-MoE and HunYuan-VL (3- and 4-axis XD-RoPE): LLaVA conversations (0..3 images over several
turns) in a real energon dataset, packed through the loader, equal, document by document, the
same conversation run alone through the family's own processor (token ids, pixel rows, the
model's own mRoPE positions from ``get_rope_index``, Ernie's ``moe_mm_token_type_ids``), and a
tiny random model of the family gives each document's logits alone within 1e-5 (fp32) through
``batch.hf_kwargs("sdpa", config=model)``. Ernie's model is refused a batch without
``moe_mm_token_type_ids`` (its logits then differ), and any other model a batch with them."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import vlm_datasets
from vlm_mrope_models import (
    ERNIE_TOKENS,
    GLM4V_TOKENS,
    HUNYUAN_TOKENS,
    ernie_processor,
    glm4v_processor,
    hunyuan_processor,
    paddleocr_processor,
    tiny_ernie,
    tiny_glm4v,
    tiny_hunyuan,
    tiny_paddleocr,
)

from energon_pack.encoding import vision_family
from energon_pack.samples import collate_packs, megatron_batch
from energon_pack.task_encoders import ConversationPackingTaskEncoder
from energon_pack.training import make_loader

#: Image sizes (width, height): one merged patch, wide, tall, tiny (rounded up), past the cap.
SIZES = [(28, 28), (90, 30), (40, 70), (9, 14), (200, 120)]
PACK_SIZE = 160
#: GLM-4V's tokens by name (its processor reads ``image_token`` and ``video_token`` by name).
GLM4V_NAMED = dict(zip(("image_token", "boi", "eoi", "bov", "eov", "video_token"), GLM4V_TOKENS))
#: Per family: (named tokens its tokenizer gets, processor builder, tiny model builder).
FAMILIES: dict[str, tuple[dict[str, str], Any, Any]] = {
    "glm-4v": (
        GLM4V_NAMED,
        glm4v_processor,
        tiny_glm4v,
    ),
    "glm-4.6v": (
        GLM4V_NAMED,
        lambda path: glm4v_processor(path, glm46v=True),
        lambda tok: tiny_glm4v(tok, glm46v=True),
    ),
    "ernie-4.5-vl": (ERNIE_TOKENS, ernie_processor, tiny_ernie),
    "hunyuan-vl": (HUNYUAN_TOKENS, hunyuan_processor, tiny_hunyuan),
    "paddleocr-vl": (ERNIE_TOKENS, paddleocr_processor, tiny_paddleocr),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """LLaVA conversations with 0..3 images (the last in a later turn), some with a system turn."""
    return vlm_datasets(tmp_path_factory, "new", SIZES, records=8, system=True)["conversation"]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(
    request: Any, tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path
) -> tuple[str, Path, Any]:
    """``(name, tokenizer dir, processor)``: the session tokenizer with the family's tokens."""
    from transformers import AutoTokenizer

    named, make_processor, _ = FAMILIES[request.param]
    path = tmp_path_factory.mktemp(request.param)
    AutoTokenizer.from_pretrained(tokenizer_dir, extra_special_tokens=named).save_pretrained(path)
    return request.param, path, make_processor(path)


def alone(processor: Any, markup: str, turns: list[tuple[str, str]], images: list[bytes]) -> Any:
    """The conversation through the family's processor: the chat template with each ``<image>``
    as the processor's markup, then the processor with the images."""
    messages = [{"role": r, "content": t.replace("<image>", markup)} for r, t in turns]
    text = processor.tokenizer.apply_chat_template(messages, tokenize=False)
    pil = [Image.open(io.BytesIO(b)) for b in images]
    return processor(text=[text], images=[pil] if pil else None, return_tensors="pt")


def test_packed_documents_equal_the_processor_and_the_model_alone(
    family: tuple[str, Path, Any], dataset: tuple[Path, dict[str, Any]]
) -> None:
    name, tok_dir, processor = family
    path, ref = dataset
    tokens = vision_family(processor).default_tokens
    enc = ConversationPackingTaskEncoder(
        tok_dir, processor, pack_size=PACK_SIZE, mrope=True, **tokens
    )
    assert enc.media.family.name == name and enc.light_media  # grids planned from headers
    markup = tokens["vision_start_token"] + tokens["image_token"] + tokens["vision_end_token"]
    model = FAMILIES[name][2](processor.tokenizer)
    packs = list(make_loader(path, enc, packing_buffer_size=8))
    # documents really share packs, text-only ones with ones with images among them
    assert any(len(p.image_grid_thw) and not all(ref[k][1] for k in p.sample_keys) for p in packs)
    seen = []
    for pack in packs:
        batch = collate_packs([pack], pad_to=pack.length + 3)  # tail padding too
        with torch.no_grad():
            logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits[0]
        start = rows = 0
        for key, n in zip(pack.sample_keys, pack.doc_lengths):
            turns, images = ref[key]
            want = alone(processor, markup, turns, images)
            ids = want["input_ids"]
            assert pack.tokens[start : start + n].tolist() == ids[0].tolist(), key
            inputs = {k: v for k, v in want.items() if k != "attention_mask"}
            if images:
                n_rows = int(want["pixel_values"].shape[0])
                assert torch.equal(pack.pixel_values[rows : rows + n_rows], want["pixel_values"])
                rows += n_rows
            grids = {"image_grid_thw": want["image_grid_thw"]} if images else {}
            own, _ = model.model.get_rope_index(ids, want["mm_token_type_ids"], **grids)
            positions = pack.mrope_position_ids[:, start : start + n]
            if name == "hunyuan-vl":  # 3 axes: read after the 1-D position row, as packed
                assert positions[0].tolist() == list(range(n))
                positions = positions[1:]
            assert torch.equal(positions, own[:, 0]), key
            if "moe_mm_token_type_ids" in want:
                moe = pack.moe_mm_token_type_ids[start : start + n]
                assert moe.tolist() == want["moe_mm_token_type_ids"][0].tolist(), key
            else:
                assert pack.moe_mm_token_type_ids is None
            with torch.no_grad():
                ref_logits = model(**inputs).logits[0]
            torch.testing.assert_close(logits[start : start + n], ref_logits, atol=1e-5, rtol=0)
            labels = pack.labels[start : start + n]
            assert (labels != -100).any(), key
            assert (labels[ids[0] == processor.image_token_id] == -100).all(), key
            start += n
            seen.append(key)
        assert rows == len(pack.pixel_values)
    assert sorted(seen) == sorted(ref)
    # Megatron's VLM layout is Qwen-VL's: the layouts it would lose are refused by name
    refused = {"ernie-4.5-vl": "Ernie-4.5-VL", "hunyuan-vl": "HunYuan-VL", "paddleocr-vl": "Paddle"}
    if name in refused:
        with pytest.raises(ValueError, match=f"megatron_batch.*{refused[name]}"):
            megatron_batch(collate_packs(packs[:1]))
    if name == "hunyuan-vl":  # a 4-axis model reads all 4 rows (the 1-D position first)
        four = tiny_hunyuan(processor.tokenizer, axes=4)
        pack = max(packs, key=lambda p: len(p.image_grid_thw))
        batch = collate_packs([pack], pad_to=pack.length + 3)
        with torch.no_grad():
            logits = four(**batch.hf_kwargs("sdpa", config=four, with_labels=False)).logits[0]
        start = 0
        for key, n in zip(pack.sample_keys, pack.doc_lengths):
            want = alone(processor, markup, *ref[key])
            own, _ = four.model.get_rope_index(
                want["input_ids"], want["mm_token_type_ids"], want.get("image_grid_thw")
            )
            assert torch.equal(pack.mrope_position_ids[:, start : start + n], own[:, 0]), key
            with torch.no_grad():
                inputs = {k: v for k, v in want.items() if k != "attention_mask"}
                ref_logits = four(**inputs).logits[0]
            torch.testing.assert_close(logits[start : start + n], ref_logits, atol=1e-5, rtol=0)
            start += n
        with pytest.raises(ValueError, match="4-row positions.*pass config=model"):
            batch.hf_kwargs("sdpa", config=None)
    if name == "ernie-4.5-vl":  # the experts' routing matters, and is never left out silently
        pack = next(p for p in packs if len(p.image_grid_thw))
        batch = collate_packs([pack])
        bare = dataclasses.replace(batch, moe_mm_token_type_ids=None)
        with pytest.raises(ValueError, match="reads moe_mm_token_type_ids.*this batch has none"):
            bare.hf_kwargs("sdpa", config=model)
        kwargs = batch.hf_kwargs("sdpa", config=None)  # unchecked: the inputs as given
        kwargs.pop("moe_mm_token_type_ids")
        with torch.no_grad():
            routed = model(**batch.hf_kwargs("sdpa", config=model)).logits
            text_experts = model(**kwargs).logits
        assert (routed - text_experts).abs().max() > 1e-3
        other = tiny_glm4v(processor.tokenizer)
        with pytest.raises(ValueError, match="carries moe_mm_token_type_ids.*takes none"):
            batch.hf_kwargs("sdpa", config=other)


def test_llava_next_documents_keep_the_bos_of_a_llama_tokenizer(tmp_path: Path) -> None:
    """A real ``LlamaTokenizer`` built with ``add_bos_token=True`` (its own post-processor adds
    BOS, as Llama and Mistral checkpoints do) and Mistral's LLaVA-NeXT chat template, which
    writes none: every packed document starts with the one BOS that
    ``LlavaNextProcessor.apply_chat_template(tokenize=True)`` puts there (not in the loss), and
    a tiny LLaVA-NeXT gives each document's logits alone."""
    from vlm_helpers import chat_sample, llama_tokenizer, png
    from vlm_models import llava_processor, tiny_llava

    from energon_pack.samples import pack_documents
    from energon_pack_tools import synthetic_texts

    path = llama_tokenizer(tmp_path, synthetic_texts(40, seed=8), ["<image>"])
    processor = llava_processor(path)
    processor.chat_template = processor.tokenizer.chat_template
    bos = processor.tokenizer.bos_token_id
    assert (
        processor.tokenizer("a").input_ids[0]
        == bos
        != processor.tokenizer.encode("a", add_special_tokens=False)[0]
    )
    enc = ConversationPackingTaskEncoder(path, processor, pack_size=512, image_token="<image>")
    conversations = [
        (["<image>\nwhat is it", "a seed"], [png(150, 60, 1)]),
        (
            ["hi", "hello", "and <image> here, or <image>?", "both"],
            [png(13, 77, 2), png(56, 56, 3)],
        ),
        (["no image", "then text"], []),
    ]
    docs, wants = [], []
    for i, (turns, images) in enumerate(conversations):
        (doc,) = enc.encode_sample(chat_sample(f"k{i}", turns, images=images))
        roles = ["user", "assistant"] * len(turns)
        messages = [{"role": r, "content": t} for r, t in zip(roles, turns)]
        pil = [Image.open(io.BytesIO(b)) for b in images]
        kwargs = {"processor_kwargs": {"images": pil}} if pil else {}
        want = processor.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_tensors="pt", **kwargs
        )
        assert doc.tokens.tolist() == want["input_ids"][0].tolist(), turns
        assert doc.tokens[0] == bos and int((doc.tokens == bos).sum()) == 1
        assert not doc.loss_mask[0]
        docs.append(enc.materialize(doc))
        wants.append(want)
    pack = pack_documents(docs, **enc.pack_options())
    model = tiny_llava(
        len(processor.tokenizer), processor.tokenizer.convert_tokens_to_ids("<image>")
    )
    batch = collate_packs([pack], pad_to=pack.length + 2)
    with torch.no_grad():
        logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits[0]
        start = 0
        for doc, want in zip(docs, wants):
            inputs = {k: v for k, v in want.items() if k != "attention_mask"}
            ref_logits = model(**inputs).logits[0]
            n = doc.length
            torch.testing.assert_close(logits[start : start + n], ref_logits, atol=1e-5, rtol=0)
            start += n


def test_gemma4_is_refused_by_name_with_its_reasons() -> None:
    """Gemma 4: its image processor is refused naming why its layout is not served; its VLM
    with vision-bidirectional sliding layers is refused by ``check_model`` naming the mechanism,
    and flash-attn for any Gemma 4 (global layers' head_dim 512, past flash-attn's 256)."""
    import transformers
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    from energon_pack.attention import PackingNotExactError, check_model

    with pytest.raises(ValueError, match="^Gemma4ImageProcessorPil .*image_position_ids.*sliding"):
        vision_family(Gemma4ImageProcessorPil())
    config = transformers.Gemma4Config()
    with pytest.raises(PackingNotExactError, match="head_dim 512 with flash-attn"):
        check_model(config, "flash_attention_2", pack_size=256)
    config.text_config.use_bidirectional_attention = "vision"
    with pytest.raises(PackingNotExactError, match="image tokens in sliding layers only"):
        check_model(config, "sdpa", pack_size=256)
