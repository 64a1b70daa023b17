# SPDX-License-Identifier: Apache-2.0
"""What the conformance suite (``families/test_conformance.py``: packed documents equal the
processor's, logits each alone, for every family) does not check of the newer families: Ernie's
model is refused a batch without ``moe_mm_token_type_ids`` (its logits then differ), and any
other model a batch with them; a 4-axis HunYuan-VL model reads all four XD-RoPE rows packed
(each document's positions are its own ``get_rope_index``'s, logits alone within 1e-5);
``megatron_batch`` refuses the layouts Megatron's Qwen-VL one would lose; LLaVA-NeXT documents
keep the BOS of a Llama tokenizer; Gemma 4 is refused by name."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import chat_sample, png
from vlm_models import typed, typed_template
from vlm_mrope_models import named_tokenizer, tiny_model
from vlm_mrope_models import processor as mrope_processor

from energon_pack.encoding import vision_family
from energon_pack.samples import collate_packs, megatron_batch, pack_documents
from energon_pack.task_encoders import ConversationPackingTaskEncoder

#: Conversations (turns, image sizes): one image, two in a later turn, none.
CONVERSATIONS = [
    (["<image> what is it", "a seed"], [(40, 70)]),
    (["hi", "hello", "and <image> here, or <image>?", "both"], [(90, 30), (28, 28)]),
    (["no image", "then text"], []),
]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Any:
    """``packed(name)``: ``(processor, pack, the processor's own documents)`` of
    :data:`CONVERSATIONS` packed with the family's processor (its template writes
    start, image, end for each image item, as the published ones)."""
    cache: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name in cache:
            return cache[name]
        path = named_tokenizer(name, tokenizer_dir, tmp_path_factory.mktemp(name))
        processor = mrope_processor(name, path)
        tokens = vision_family(processor).default_tokens
        media = tokens["vision_start_token"] + tokens["image_token"] + tokens["vision_end_token"]
        processor.chat_template = typed_template(f"'{media}'")
        enc = ConversationPackingTaskEncoder(path, processor, pack_size=256, mrope=True, **tokens)
        docs, wants = [], []
        for i, (turns, sizes) in enumerate(CONVERSATIONS):
            images = [png(w, h, seed=i) for w, h in sizes]
            (doc,) = enc.encode_sample(chat_sample(f"k{i}", turns, images=images))
            docs.append(enc.materialize(doc))
            messages = [
                {"role": r, "content": typed(t)} for r, t in zip(["user", "assistant"] * 2, turns)
            ]
            pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
            wants.append(
                processor.apply_chat_template(
                    messages,
                    tokenize=True,
                    return_dict=True,
                    return_tensors="pt",
                    processor_kwargs={"images": pil} if pil else {},
                )
            )
        pack = pack_documents(docs, **enc.pack_options())
        cache[name] = processor, pack, wants
        return cache[name]

    return get


@pytest.mark.parametrize(
    "name, dropped",
    [
        ("ernie-4.5-vl", "moe_mm_token_type_ids"),
        ("hunyuan-vl", "4-row mRoPE positions"),
        ("paddleocr-vl", "not patch rows"),
    ],
)
def test_megatron_batch_refuses_layouts_it_would_lose(packed: Any, name: str, dropped: str) -> None:
    """These families declare no Megatron layout: their batches are refused naming the family;
    built by hand (no family), by what Megatron's VLM layout would drop."""
    _, pack, _ = packed(name)
    batch = collate_packs([pack])
    with pytest.raises(ValueError, match=f"megatron_batch.*the {name} family, which declares no"):
        megatron_batch(batch)
    with pytest.raises(ValueError, match=f"megatron_batch.*{dropped}.*no Megatron VLM layout"):
        megatron_batch(dataclasses.replace(batch, family=None))


def test_hunyuan_four_axis_model_reads_all_four_rows(packed: Any) -> None:
    """A 4-axis HunYuan-VL model reads the 1-D position row too: each document's 4 rows are its
    own ``get_rope_index``'s and its logits alone within 1e-5; a batch of them is refused a
    call without the model's config."""
    processor, pack, wants = packed("hunyuan-vl")
    four = tiny_model("hunyuan-vl", processor.tokenizer, mrope_section=[2, 2, 2, 2])
    batch = collate_packs([pack], pad_to=pack.length + 3)
    with torch.no_grad():
        logits = four(**batch.hf_kwargs("sdpa", config=four, with_labels=False)).logits[0]
    start = 0
    for want, n in zip(wants, pack.doc_lengths):
        assert pack.tokens[start : start + n].tolist() == want["input_ids"][0].tolist()
        own, _ = four.model.get_rope_index(
            want["input_ids"], want["mm_token_type_ids"], want.get("image_grid_thw")
        )
        assert torch.equal(pack.mrope_position_ids[:, start : start + n], own[:, 0])
        inputs = {k: v for k, v in want.items() if k != "attention_mask"}
        with torch.no_grad():
            alone = four(**inputs).logits[0]
        torch.testing.assert_close(logits[start : start + n], alone, atol=1e-5, rtol=0)
        start += n
    with pytest.raises(ValueError, match="4-row positions.*pass config=model"):
        batch.hf_kwargs("sdpa", config=None)


def test_ernie_routing_is_never_left_out(packed: Any) -> None:
    """Ernie's experts' routing matters: a batch without ``moe_mm_token_type_ids`` is refused
    for its model (the logits without them differ), and a batch with them for another model."""
    processor, pack, _ = packed("ernie-4.5-vl")
    model = tiny_model("ernie-4.5-vl", processor.tokenizer)
    batch = collate_packs([pack])
    bare = dataclasses.replace(batch, moe_mm_token_type_ids=None)
    reader = type(model.model).__name__  # the base model, whose forward reads them
    missing = f"^{reader} reads moe_mm_token_type_ids .*this batch has none.*own processor"
    with pytest.raises(ValueError, match=missing + ".*pass moe_mm_token_type_ids=... to hf_kwarg"):
        bare.hf_kwargs("sdpa", config=model)
    kwargs = batch.hf_kwargs("sdpa", config=None)  # unchecked: the inputs as given
    kwargs.pop("moe_mm_token_type_ids")
    with torch.no_grad():
        routed = model(**batch.hf_kwargs("sdpa", config=model)).logits
        text_experts = model(**kwargs).logits
    assert (routed - text_experts).abs().max() > 1e-3
    other = tiny_model("glm-4v", processor.tokenizer)
    # the message is the report's: the input and the class that does not read it, no family
    with pytest.raises(ValueError, match="carries moe_mm_token_type_ids") as refused:
        batch.hf_kwargs("sdpa", config=other)
    message = str(refused.value)
    assert f"{type(other.model).__name__} does not read moe_mm_token_type_ids" in message
    assert "Ernie" not in message and "own processor" in message


def test_llava_next_documents_keep_the_bos_of_a_llama_tokenizer(tmp_path: Path) -> None:
    """A real ``LlamaTokenizer`` built with ``add_bos_token=True`` (its own post-processor adds
    BOS, as Llama and Mistral checkpoints do) and Mistral's LLaVA-NeXT chat template, which
    writes none: every packed document starts with the one BOS that
    ``LlavaNextProcessor.apply_chat_template(tokenize=True)`` puts there (not in the loss), and
    a tiny LLaVA-NeXT gives each document's logits alone."""
    from vlm_helpers import MISTRAL_TYPED_TEMPLATE, llama_tokenizer
    from vlm_models import llava_processor, tiny_llava

    from energon_pack_tools import synthetic_texts

    path = llama_tokenizer(tmp_path, synthetic_texts(40, seed=8), ["<image>"])
    processor = llava_processor(path)
    processor.chat_template = MISTRAL_TYPED_TEMPLATE  # llava-hf's processor template
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
        messages = [{"role": r, "content": typed(t)} for r, t in zip(roles, turns)]
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
