# SPDX-License-Identifier: Apache-2.0
"""LLaVA-NeXT and LLaVA-OneVision (anyres) beyond the conformance suite
(tests/task_encoders/families/): packs under carry-over equal each document alone through the
family's processor (tokens, pixels, ``image_sizes``, labels, positions, tiny-model logits at
B > 1), wrong ``image_sizes`` are caught, the refusals, and the BOS a Llama-style tokenizer
adds."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import chat_sample, png, vlm_datasets
from vlm_models import llava_processor, tiny_llava, typed, typed_template

from energon_pack.algorithms import CarryOver
from energon_pack.samples import collate_packs
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.training import make_loader

#: Image sizes (width, height): 2 to 17 patches, tall, wide, tiny, square.
SIZES = [(150, 60), (13, 77), (56, 56), (40, 120), (9, 14), (200, 90), (120, 119)]
PACK_SIZE = 192


@pytest.fixture(scope="module", params=["next", "onevision"])
def family(request: Any, tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Any:
    """``(name, tokenizer dir, processor)``: the session tokenizer plus ``<image>``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(["<image>", "<video>"], special_tokens=True)
    path = tmp_path_factory.mktemp(f"llava_{request.param}")
    tok.save_pretrained(path)
    return request.param, path, llava_processor(path, onevision=request.param == "onevision")


def encoder(cls: Any, family: Any, **kw: Any) -> Any:
    _, tok_dir, processor = family
    return cls(tok_dir, processor, **{"pack_size": PACK_SIZE, "image_token": "<image>", **kw})


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """VQA and LLaVA conversations with 0..3 images in several turns."""
    return vlm_datasets(tmp_path_factory, "llava", SIZES, seed=3, records=9)


def alone(processor: Any, turns: list[tuple[str, str]], images: list[bytes]) -> dict[str, Any]:
    """The conversation through the family's own processor: chat template, then the processor
    with the document's images (one sample of the batch)."""
    messages = [{"role": r, "content": t} for r, t in turns]
    text = processor.tokenizer.apply_chat_template(messages, tokenize=False)
    pil = [Image.open(io.BytesIO(b)) for b in images]
    return processor(text=[text], images=[pil] if pil else None, return_tensors="pt")


def model_inputs(want: dict[str, Any]) -> dict[str, Any]:
    names = ("input_ids", "pixel_values", "image_sizes", "batch_num_images")
    return {k: torch.as_tensor(want[k]) for k in names if k in want}


def targets(processor: Any, turns: list[tuple[str, str]]) -> list[int]:
    """The token ids the loss should see: each answer and its ``</s>``, in order."""
    tok = processor.tokenizer
    out: list[int] = []
    for role, text in turns:
        if role == "assistant":
            out += tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
    return out


def packs_of(task: str, path: Path, family: Any, light: bool, **kw: Any) -> list[Any]:
    cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
    enc = encoder(cls, family, light_media=light, **kw)
    assert enc.light_media is light and enc.media.family.name == f"llava-{family[0]}"
    return list(make_loader(path, enc, packing_buffer_size=5))


def check_document(pack: Any, doc: int, row: int, want: dict[str, Any], n_images: int) -> None:
    """Document ``doc`` of ``pack`` (its first image the pack's ``row``-th): token ids,
    pixels (the processor's patches, its padding zeros) and ``image_sizes`` as ``want``'s."""
    start, n = sum(pack.doc_lengths[:doc]), pack.doc_lengths[doc]
    key = pack.sample_keys[doc]
    assert pack.tokens[start : start + n].tolist() == want["input_ids"][0].tolist(), key
    assert pack.position_ids[start : start + n].tolist() == list(range(n)), key
    patches = pack.image_grid_thw[:, 0].tolist()
    first = sum(patches[:row])
    for i in range(n_images):
        rows = pack.pixel_values[first : first + patches[row + i]]
        first += len(rows)
        assert torch.equal(rows, want["pixel_values"][i, : len(rows)]), key
        assert not want["pixel_values"][i, len(rows) :].any(), key  # the processor's padding
    sizes = pack.image_sizes[row : row + n_images]
    assert torch.equal(sizes, want["image_sizes"].view(-1, 2)) if n_images else not len(sizes)


def equal_alone(
    packs: list[Any], ref: dict[str, Any], processor: Any, model: Any, what: str
) -> Any:
    """All ``packs`` in one batch (B > 1): every document equals the processor's output for it
    alone (tokens, pixels, sizes, images per document, labels, positions) and its logits the
    model's on that output within 1e-5; returns the batch's model kwargs and logits."""
    seen, worst = [], 0.0
    length = max(p.length for p in packs)
    batch = collate_packs(packs, pad_to=length)  # all packs in one batch (B > 1)
    kwargs = batch.hf_kwargs("sdpa", config=model, with_labels=False)
    assert ("batch_num_images" in kwargs) == what.startswith("onevision")
    with torch.no_grad():
        logits = model(**kwargs).logits
    for r, pack in enumerate(packs):
        row, start = 0, 0
        assert pack.num_media_tokens == int((pack.tokens == processor.image_token_id).sum())
        for d, (key, n) in enumerate(zip(pack.sample_keys, pack.doc_lengths)):
            turns, images = ref[key]
            want = alone(processor, turns, images)
            check_document(pack, d, row, want, len(images))
            if pack.batch_num_images is not None:
                assert pack.batch_num_images[d] == len(images)
            labels = pack.labels[start : start + n]
            assert labels[labels != -100].tolist() == targets(processor, turns), key
            with torch.no_grad():
                ref_logits = model(**model_inputs(want)).logits[0]
            diff = (logits[r, start : start + n] - ref_logits).abs().max().item()
            assert diff <= 1e-5, (key, diff)
            worst = max(worst, diff)
            start, row = start + n, row + len(images)
            seen.append(key)
    print(f"{what}: {len(packs)} packs, max |logits - alone| {worst:.2e}")
    assert sorted(seen) == sorted(ref)
    assert max(len(p.sample_keys) for p in packs) > 1  # documents really share packs
    return kwargs, logits


def test_carried_llava_packs_equal_alone_and_wrong_inputs_are_caught(
    datasets: dict[str, Any], family: Any
) -> None:
    """Beyond the conformance suite (stock and light packs): packs made under carry-over equal
    each document alone too, and the model notices wrong ``image_sizes`` (and, for OneVision,
    documents of several images read as single images: no ``batch_num_images``)."""
    task = "conversation"
    path, ref = datasets[task]
    name, _, processor = family
    packs = packs_of(task, path, family, light=True)
    model = tiny_llava(len(processor.tokenizer), processor.image_token_id, name == "onevision")
    carried = packs_of(task, path, family, light=True, carry_over=CarryOver(min_fill=0.9))
    kwargs, logits = equal_alone(carried, ref, processor, model, f"{name} {task} carry-over")
    assert [p.sample_keys for p in carried] != [p.sample_keys for p in packs]  # carried
    flipped = {**kwargs, "image_sizes": kwargs["image_sizes"].flip(0)}
    unnumbered = {k: v for k, v in kwargs.items() if k != "batch_num_images"}
    for wrong in [flipped] + [unnumbered] * (name == "onevision"):
        try:
            with torch.no_grad():
                diff = (model(**wrong).logits - logits).abs().max().item()
        except (ValueError, RuntimeError) as e:
            print("mutation:", type(e).__name__, str(e)[:80])
            continue
        print(f"mutation: max |diff| {diff:.3f}")
        assert diff > 1e-3


def test_llava_refusals_and_onevision_cuts(family: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Videos and mRoPE are refused; an over-long OneVision document whose cut would leave
    one of its images alone in a piece is dropped and counted."""
    name, tok_dir, processor = family
    with pytest.raises(ValueError, match="take 1-D positions"):
        encoder(ConversationPackingTaskEncoder, family, mrope=True)
    enc = encoder(ConversationPackingTaskEncoder, family, pack_size=32, overlong="split")
    with pytest.raises(ValueError, match=f"videos are not supported for the llava-{name}"):
        enc.media.videos([[Image.new("RGB", (56, 56))]])
    from vlm_helpers import chat_sample

    # two images (5 tokens each as a OneVision pair), the second after a long answer
    words = " ".join(["red"] * 40)
    sample = chat_sample(
        "two", ["<image> a", words, "<image> b", "c"], images=[png(56, 56, 1), png(56, 56, 2)]
    )
    docs = list(enc.encode_sample(sample))
    if name == "onevision":
        assert docs == [] and list(enc.stats.dropped_keys) == ["two"]
        assert "one of its several images" in caplog.text
    else:  # LLaVA-NeXT reads each image alone: the pieces are fine
        assert [len(d.image_sizes) for d in docs if len(d.image_sizes)] == [1, 1]


@pytest.mark.slow  # analyze counting media: test_analyze_vlm (fast)
def test_analyze_counts_llava_media_tokens(
    tmp_path: Path, datasets: dict[str, Any], family: Any
) -> None:
    """``energon-pack analyze --task conversation --processor DIR`` on the saved processor."""
    from click.testing import CliRunner

    from energon_pack_tools.cli import main

    name, _, processor = family
    processor = copy.copy(processor)  # saved with a template for typed content, as published
    processor.chat_template = typed_template("'<image>\\n'", images_first=True)
    processor.save_pretrained(tmp_path / name)
    saved = tmp_path / name / "processor_config.json"  # as a checkpoint names it
    cls = type(processor).__mro__[1 if name == "onevision" else 0].__name__
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "processor_class": cls}))
    path, ref = datasets["conversation"]
    args = ["analyze", str(path), "--task", "conversation", "--processor", str(tmp_path / name)]
    args += ["--pack-size", str(PACK_SIZE), "--buffer-size", "4", "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    packs = packs_of("conversation", path, family, light=True)
    assert out["media"]["media_tokens"] == sum(p.num_media_tokens for p in packs) > 0
    assert out["samples_in"] == len(ref)


def test_documents_keep_the_bos_a_llama_style_tokenizer_adds(tmp_path, tokenizer_dir) -> None:
    """A tokenizer whose post-processor adds BOS (Llama, Mistral) with a chat template that does
    not write it: ``LlavaNextProcessor.apply_chat_template(tokenize=True)`` puts BOS first, and
    so does every document (a VQA turn, a conversation with images mid-text and in a later
    turn); BOS is not in the loss."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(["<image>", "<video>"], special_tokens=True)
    bos, bos_id = tok.bos_token, tok.bos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
    )
    tok.save_pretrained(tmp_path)
    processor = llava_processor(tmp_path)
    processor.chat_template = typed_template("'<image>\\n'", images_first=True)
    assert (
        processor.tokenizer("a").input_ids[:1]
        == [bos_id]
        != processor.tokenizer.apply_chat_template([{"role": "user", "content": "a"}])[:1]
    )
    enc = ConversationPackingTaskEncoder(tmp_path, processor, pack_size=512, image_token="<image>")
    conversations = [
        (["<image>\nwhat is it", "a seed"], [png(150, 60, 1)]),
        (
            ["hi", "hello", "and <image> here, or <image>?", "both"],
            [png(13, 77, 2), png(56, 56, 3)],
        ),
    ]
    for i, (turns, images) in enumerate(conversations):
        (doc,) = enc.encode_sample(chat_sample(f"k{i}", turns, images=images))
        roles = ["user", "assistant"] * len(turns)
        messages = [{"role": r, "content": typed(t)} for r, t in zip(roles, turns)]
        pil = [Image.open(io.BytesIO(b)) for b in images]
        want = processor.apply_chat_template(
            messages, tokenize=True, return_dict=True, processor_kwargs={"images": pil}
        )
        assert doc.tokens.tolist() == list(want["input_ids"][0]), turns
        assert doc.tokens[0] == bos_id and not doc.loss_mask[0]
        assert doc.image_sizes.tolist() == [list(s) for s in want["image_sizes"]]
