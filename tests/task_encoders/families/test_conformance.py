# SPDX-License-Identifier: Apache-2.0
"""One conformance suite over every registered VLM family (``_families.FAMILIES``), each run
from its row of :data:`family_cases.CASES`: real energon VQA and multi-turn, multi-image
conversation datasets packed through the loader give, document by document, exactly
``processor.apply_chat_template(typed messages, tokenize=True, return_dict=True)`` (a prefix-LM
family: ``processor(text, images, suffix)``) on every field the processor returns (tokens,
pixels, grids, ``token_type_ids``, ``moe_mm_token_type_ids``, ``image_sizes``; the
``mm_token_type_ids`` a model reads for its mRoPE positions through the logits), the loss on
the answers and 1-D positions restarting per document; on the conversations (a prefix-LM family: VQA) a tiny random model of
the family gives each document's logits alone within 1e-5 (fp32, all packs in one batch) and
light buffers give the stock packs bit for bit; the tokens planned from image headers are the
processor's; an over-long cut never splits an image; a captioning sample is the one-image
conversation; ``megatron_batch`` takes the layout the family declares or refuses it by name. A family adds one entry to ``family_cases.CASES``."""

from __future__ import annotations

import dataclasses
import io
import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from family_cases import CASES
from PIL import Image
from vlm_helpers import chat_sample, png, vlm_datasets
from vlm_models import typed, typed_template

from energon_pack.encoding import vision_family
from energon_pack.encoding._families import FAMILIES
from energon_pack.samples import (
    MEGATRON_VLM_LAYOUTS,
    MediaFamily,
    MegatronVLMBatch,
    collate_packs,
    megatron_batch,
)
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader

NAMES = [f.name for f in FAMILIES]


def test_every_registered_family_has_a_case() -> None:
    assert sorted(CASES) == sorted(NAMES)


@pytest.fixture(scope="module", params=NAMES)
def family(request: Any, tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Any:
    """``(name, case, tokenizer dir, processor)``."""
    from transformers import AutoTokenizer

    name, case = request.param, CASES[request.param]
    path = tmp_path_factory.mktemp(name)
    if case.tokens is not None:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        tok.add_tokens(case.tokens, special_tokens=True)
        tok.save_pretrained(path)
    processor = case.processor(path)
    processor.chat_template = case.chat_template
    return name, case, Path(processor.tokenizer.name_or_path), processor


def encoder(cls: Any, family: Any, **kw: Any) -> Any:
    _, case, tok_dir, processor = family
    family_ = vision_family(processor)
    options = {"pack_size": case.pack_size, "mrope": family_.mrope, **family_.default_tokens}
    return cls(tok_dir, processor, **{**options, **kw})


def alone(processor: Any, turns: list[tuple[str, str]], images: list[bytes]) -> dict[str, Any]:
    """The conversation through the family's processor alone (the reference)."""
    pil = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    if processor.chat_template is None:  # prefix-LM: one prompt, one answer
        (_, prompt), (_, answer) = turns
        return processor(text=[prompt], images=[pil], suffix=[answer], return_tensors="pt")
    messages = [{"role": r, "content": typed(t)} for r, t in turns]
    return processor.apply_chat_template(
        messages,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        processor_kwargs={"images": pil} if pil else {},
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """VQA (``<image>\\nquestion``) and LLaVA conversations with 0..3 images in several turns
    (some with a system turn), shared by every family."""
    sizes = [(56, 56), (150, 60), (40, 120), (9, 14), (112, 84), (32, 32)]
    return vlm_datasets(tmp_path_factory, "families", sizes, records=8, system=True)


@pytest.fixture(scope="module")
def runs(family: Any, datasets: dict[str, Any]) -> dict[str, Any]:
    """Per task: ``(reference conversations by key, packs)`` with light buffers; the last task's
    (the multi-turn one where the family has it) checked bit-identical to stock buffers'."""
    name, case, _, _ = family
    data = datasets
    out = {}
    for task in case.tasks:
        path, ref = data[task]
        cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
        packs = {}
        for light in (True, False) if task == case.tasks[-1] else (True,):
            enc = encoder(cls, family, light_media=light)
            assert enc.light_media is light and enc.media.family.name == name
            packs[light] = list(make_loader(path, enc, packing_buffer_size=8))
        assert len(packs[True]) == len(packs.get(False, packs[True]))
        for a, b in zip(packs[True], packs.get(False, ())):  # restore keys name the light stage
            assert_same_item(dataclasses.replace(a, __restore_key__=b.__restore_key__), b)
        out[task] = (ref, packs[True])
    return out


def _model_inputs(want: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.as_tensor(v) for k, v in want.items() if k not in ("attention_mask", "labels")}


def _items(pack: Any) -> list[int]:
    """Pixel items per image of ``pack``: its grid's product (patch rows or whole patches:
    ``t * h * w``; stacked items: ``(items, 1, 1)``)."""
    return pack.image_grid_thw.prod(dim=1).tolist()


def _same_pixels(rows: torch.Tensor, want: torch.Tensor, items: list[int]) -> bool:
    """Pack rows (items concatenated) equal the processor's pixels, whose per-image padding
    (LLaVA's patches to the longest) is zeros."""
    if want.numel() == rows.numel():
        return torch.equal(rows.reshape(want.shape), want)
    got = list(torch.split(rows, items))  # padded per image
    return all(torch.equal(g, w[: len(g)]) and not w[len(g) :].any() for g, w in zip(got, want))


def test_documents_equal_the_processor_and_logits_each_alone(family: Any, runs: Any) -> None:
    name, case, _, processor = family
    tok = processor.tokenizer
    model = case.model(processor)
    image_id = tok.convert_tokens_to_ids(case.image_token)
    worst = 0.0
    for task, (ref, packs) in runs.items():
        seen = []
        length = max(p.length for p in packs)
        batch = collate_packs(packs, pad_to=length)  # all packs in one batch (B > 1)
        logits = None  # the last task's (the multi-turn one where the family has it)
        if task == case.tasks[-1]:
            with torch.no_grad():
                logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits
        for r, pack in enumerate(packs):
            start = image = 0
            assert pack.num_media_tokens == int((pack.tokens == image_id).sum())
            items = _items(pack)
            for d, (key, n) in enumerate(zip(pack.sample_keys, pack.doc_lengths)):
                turns, images = ref[key]
                want = alone(processor, turns, images)
                doc = slice(start, start + n)
                assert pack.tokens[doc].tolist() == want["input_ids"][0].tolist(), (name, key)
                if "token_type_ids" in want:
                    assert pack.token_type_ids[doc].tolist() == want["token_type_ids"][0].tolist()
                if "moe_mm_token_type_ids" in want:  # the MoE routing (Ernie-4.5-VL)
                    moe = want["moe_mm_token_type_ids"][0].tolist()
                    assert pack.moe_mm_token_type_ids[doc].tolist() == moe, (name, key)
                if images:
                    mine = items[image : image + len(images)]
                    rows = pack.pixel_values[sum(items[:image]) :][: sum(mine)]
                    assert _same_pixels(rows, want["pixel_values"], mine), (name, key)
                    if "image_grid_thw" in want:
                        grid = pack.image_grid_thw[image : image + len(images)]
                        assert torch.equal(grid, want["image_grid_thw"]), key
                    if "image_sizes" in want:
                        sizes = pack.image_sizes[image : image + len(images)]
                        assert torch.equal(sizes, torch.as_tensor(want["image_sizes"]).view(-1, 2))
                if pack.batch_num_images is not None:
                    assert pack.batch_num_images[d] == len(images)
                labels = pack.labels[doc]
                answers = [t + case.answer_end for r, t in turns if r == "assistant"]
                expect = [i for a in answers for i in tok(a, add_special_tokens=False).input_ids]
                assert labels[labels != -100].tolist() == expect, (name, key)
                assert pack.position_ids[doc].tolist() == list(range(n)), key
                if logits is not None:
                    with torch.no_grad():
                        single = model(**_model_inputs(want)).logits[0]
                    diff = float((logits[r, doc] - single).abs().max())
                    assert diff <= 1e-5, (name, key, diff)
                    worst = max(worst, diff)
                start, image = start + n, image + len(images)
                seen.append(key)
        assert sorted(seen) == sorted(ref), task
        assert max(len(p.sample_keys) for p in packs) > 1  # documents really share packs
    print(f"{name}: max |packed - alone| logit difference {worst:.2e}")


def test_megatron_batch_takes_the_layout_the_family_declares(family: Any, runs: Any) -> None:
    """Each family declares ``megatron_layout`` in its own class body (a family built on
    another's pixels inherits no Megatron support), its packs carry the declaration, and
    ``megatron_batch`` builds that layout's micro-batch or refuses the batch naming the family
    (a family whose model attends both ways: naming its ``token_type_ids``)."""
    name, case, _, _ = family
    cls = next(f for f in FAMILIES if f.name == name)
    assert "megatron_layout" in vars(cls), f"{cls.__name__} must declare megatron_layout"
    assert cls.megatron_layout is None or cls.megatron_layout in MEGATRON_VLM_LAYOUTS
    batch = collate_packs(runs[case.tasks[-1]][1])
    assert batch.family == MediaFamily(name, cls.megatron_layout)
    if cls.megatron_layout is not None:
        mb = megatron_batch(batch)
        assert isinstance(mb, MegatronVLMBatch)
        assert mb.position_ids.shape == (3, 1, batch.tokens.numel())
        assert torch.equal(mb.image_grid_thw, batch.image_grid_thw)
        return
    why = "token_type_ids" if cls.token_types else f"{name} family, which declares no Megatron"
    with pytest.raises(ValueError, match=rf"^megatron_batch\(\): .*{re.escape(why)}"):
        megatron_batch(batch)


def test_planned_tokens_are_the_processors(family: Any) -> None:
    """Tokens per image planned from the header (light buffers) and processed are what the
    processor puts in the text for that image alone."""
    name, case, _, processor = family
    enc = encoder(ConversationPackingTaskEncoder, family)
    assert enc.light_media
    rng = random.Random(1)
    sizes = case.sizes + [(rng.randint(1, 300), rng.randint(1, 300)) for _ in range(6)]
    image_id = processor.tokenizer.convert_tokens_to_ids(case.image_token)
    for w, h in sizes:  # each image alone: a document of one image
        planned = enc.media_planner.images([png(w, h, seed=0)], key="k")
        processed = enc.media.images([Image.new("RGB", (w, h))])
        assert processed.num_tokens == planned.num_tokens, (name, (w, h))
        assert torch.equal(processed.grid_thw, planned.grid_thw)
        turns = [("user", "<image>"), ("assistant", "a")]
        want = alone(processor, turns, [png(w, h, seed=0)])["input_ids"][0]
        assert planned.num_tokens == [int((want == image_id).sum())], (name, (w, h))
    # several images of one document, planned together (per-document layouts)
    images = [png(w, h, seed=0) for w, h in sizes[:3]]
    planned = enc.media_planner.images(images, key="k")
    want = alone(processor, [("user", "<image>" * 3), ("assistant", "a")], images)["input_ids"]
    if not vision_family(processor).prefix_lm:
        assert sum(planned.num_tokens) == int((want == image_id).sum()), name


def test_overlong_cuts_never_split_an_image(family: Any) -> None:
    """Cut at the second image's first token: every piece holds each image's whole run of
    media tokens (placeholders and the family's markers around them) or none of it."""
    name, case, _, processor = family
    tok = processor.tokenizer
    image_id = tok.convert_tokens_to_ids(case.image_token)
    sample = chat_sample("k", ["<image> one", "two", "<image> three", "four"])
    sample = dataclasses.replace(sample, images=[png(150, 60, seed=1), png(150, 60, seed=2)])
    if vision_family(processor).prefix_lm:  # one prompt (images first) and one answer
        with pytest.raises(ValueError, match="one user prompt and one answer"):
            list(encoder(ConversationPackingTaskEncoder, family).encode_document(sample))
        return
    (doc,) = encoder(ConversationPackingTaskEncoder, family).encode_document(sample)
    second = int(doc.image_spans[1, 0])
    # one image's media tokens (placeholders and markers): the added tokens it brings
    turns = [("user", "<image> one"), ("assistant", "two"), ("user", "<image> three")]
    both = alone(processor, turns, [png(150, 60, 1), png(150, 60, 2)])["input_ids"][0].tolist()
    text = [(r, t.replace("<image> ", "")) for r, t in turns]
    none = set(alone(processor, text, [])["input_ids"][0].tolist())
    added = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    media = [t for t in both if t in added and t not in none]
    run = media[: len(media) // 2]
    assert image_id in run and media == run * 2
    assert [t for t in doc.tokens.tolist() if t in set(run)] == media
    cut = encoder(ConversationPackingTaskEncoder, family, pack_size=second, overlong="split")
    pieces = list(cut.encode_sample(sample))
    if vision_family(processor).per_document:  # a lone image would be laid out otherwise
        assert pieces == [] and list(cut.stats.dropped_keys) == ["k"]
        return
    assert len(pieces) == 2
    for piece in pieces:
        got = [t for t in piece.tokens.tolist() if t in set(run)]
        assert got == run * len(piece.image_spans), (name, piece.tokens.tolist())
        assert len(piece.image_spans) == len(piece.image_grid_thw)
        assert piece.num_media_tokens == int((piece.tokens == image_id).sum())


def test_captioning_is_a_one_image_conversation(family: Any) -> None:
    """A captioning sample through the chat template is the conversation ``user: <image>``,
    ``assistant: caption`` as the processor makes it (tokens, pixels, token types, loss)."""
    from megatron.energon import CaptioningSample

    from energon_pack.task_encoders import CaptioningPackingTaskEncoder

    name, case, _, processor = family
    enc = encoder(CaptioningPackingTaskEncoder, family, use_chat_template=True, light_media=False)
    tok = processor.tokenizer
    for i, (w, h) in enumerate(case.sizes[:3]):
        image, caption = png(w, h, seed=i), f"a seed {i}"
        sample = CaptioningSample(__key__=f"c{i}", __restore_key__=(), image=image, caption=caption)
        (doc,) = enc.encode_sample(sample)
        want = alone(processor, [("user", "<image>"), ("assistant", caption)], [image])
        assert doc.tokens.tolist() == want["input_ids"][0].tolist(), (name, (w, h))
        items = _items(doc)
        assert _same_pixels(doc.pixel_values, want["pixel_values"], items), (name, (w, h))
        if "token_type_ids" in want:
            assert doc.token_type_ids.tolist() == want["token_type_ids"][0].tolist()
        expect = tok(caption + case.answer_end, add_special_tokens=False).input_ids
        assert doc.tokens[doc.loss_mask].tolist() == expect, name


def test_images_anywhere_in_the_text(family: Any) -> None:
    """Tags mid-text, at the end and next to newlines and double spaces, in several turns (a
    prefix-LM family: one prompt, images first): the processor's document exactly."""
    name, case, _, processor = family
    enc = encoder(ConversationPackingTaskEncoder, family, light_media=False)
    if vision_family(processor).prefix_lm:
        turns = ["<image><image>what is  this\n", "a seed"]
    else:
        turns = ["what <image>\n is  this <image>", "a seed", "and\n\n<image>", "\nit is "]
    images = [png(*case.sizes[i % len(case.sizes)], seed=i) for i in range(turns[0].count("<"))]
    images += [png(40, 30, seed=9)] * ("<image>" in "".join(turns[1:]))
    (doc,) = enc.encode_sample(chat_sample("k", turns, images=images))
    roles = ["user", "assistant"] * len(turns)
    want = alone(processor, list(zip(roles, turns)), images)
    assert doc.tokens.tolist() == want["input_ids"][0].tolist(), name
    if "token_type_ids" in want:
        assert doc.token_type_ids.tolist() == want["token_type_ids"][0].tolist(), name


def test_templates_that_cannot_express_the_conversation_are_refused(vlm_tokenizer_dir) -> None:
    """A processor template that drops an image item, or takes strings only, is refused naming
    the sample and why (never packed as text the processor would not produce)."""
    from energon_pack_tools._tokenizers import CHAT_TEMPLATE  # strings only

    processor = CASES["qwen2-vl"].processor(vlm_tokenizer_dir)
    sample = chat_sample("k", ["<image> hi", "a seed"], images=[png(28, 28, 1)])
    refusals = {
        typed_template("''"): r"'k'.*wrote '<\|vision_start\|><\|image_pad\|><\|vision_end\|>' "
        r"0 time\(s\) for 1 image\(s\).*cannot express",
        CHAT_TEMPLATE: r"'k'.*fails on typed content.*TypeError",
    }
    for template, message in refusals.items():
        processor.chat_template = template
        enc = ConversationPackingTaskEncoder(vlm_tokenizer_dir, processor, pack_size=64)
        with pytest.raises(ValueError, match=message):
            list(enc.encode_sample(sample))
