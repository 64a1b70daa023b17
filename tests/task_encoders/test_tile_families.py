# SPDX-License-Identifier: Apache-2.0
"""InternVL (tiles), Idefics3 and SmolVLM (split tiles with markers): real energon VQA and multi-image
conversation datasets packed through the loader equal, document by document, the same
conversation run alone through the family's own processor (tokens, pixels), with the loss on the
answers only and 1-D positions restarting per document; a tiny random model of the family gives
the packed logits of each document alone (fp32, 1e-5); light buffers give bit-identical packs
and plan the tokens exactly from the headers."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import chat_sample, png, vlm_datasets
from vlm_models import (
    IDEFICS3_TOKENS,
    INTERNVL_TOKENS,
    idefics3_processor,
    internvl_processor,
    smolvlm_processor,
    tiny_idefics3,
    tiny_internvl,
    tiny_smolvlm,
)

from energon_pack.encoding import vision_family
from energon_pack.samples import collate_packs
from energon_pack.samples._batch import image_kwargs
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader

#: Image sizes (width, height): 1 tile, 2-3 tiles + thumbnail, tall, tiny.
SIZES = [(56, 56), (150, 60), (40, 120), (112, 112), (9, 14), (200, 90)]
PACK_SIZE = 448


#: Per family: processor builder, tiny model builder, tokens its tokenizer adds, and the token
#: its processor's text holds per image.
FAMILIES = {
    "internvl": (
        internvl_processor,
        tiny_internvl,
        list(INTERNVL_TOKENS.values()),
        "<IMG_CONTEXT>",
    ),
    "idefics3": (idefics3_processor, tiny_idefics3, IDEFICS3_TOKENS, "<image>"),
    "smolvlm": (smolvlm_processor, tiny_smolvlm, IDEFICS3_TOKENS, "<image>"),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: Any, tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Any:
    """``(name, tokenizer dir, processor)``: the session tokenizer plus the family's tokens."""
    from transformers import AutoTokenizer

    make_processor, _, tokens, _ = FAMILIES[request.param]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(tokens, special_tokens=True)
    path = tmp_path_factory.mktemp(request.param)
    tok.save_pretrained(path)
    return request.param, path, make_processor(path)


def encoder(cls: Any, family: Any, **kw: Any) -> Any:
    _, tok_dir, processor = family
    tokens = vision_family(processor).default_tokens
    return cls(tok_dir, processor, **{"pack_size": PACK_SIZE, **tokens, **kw})


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """VQA and LLaVA conversations (0..3 images, several turns), the JSONL outside the image
    folder: ``make-dataset --media-root``."""
    return vlm_datasets(tmp_path_factory, "ivl", SIZES, llava_roles=False, media_root_option=True)


def alone(
    processor: Any, tag: str, turns: list[tuple[str, str]], images: list[bytes]
) -> dict[str, Any]:
    """The conversation through the family's own processor: chat template, then the processor
    with the images (``<image>`` tags become its own image token ``tag``)."""
    tok = processor.tokenizer
    messages = [{"role": r, "content": t.replace("<image>", tag)} for r, t in turns]
    text = tok.apply_chat_template(messages, tokenize=False)
    pil = [Image.open(io.BytesIO(b)) for b in images]
    return processor(text=[text], images=[pil] if pil else None, return_tensors="pt")


def targets(processor: Any, turns: list[tuple[str, str]]) -> list[int]:
    """The token ids the loss should see: each answer and its ``</s>``, in order."""
    tok = processor.tokenizer
    out: list[int] = []
    for role, text in turns:
        if role == "assistant":
            out += tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
    return out


def packs_of(task: str, path: Path, family: Any, light: bool) -> tuple[Any, list[Any]]:
    cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
    enc = encoder(cls, family, light_media=light)
    assert enc.light_media is light
    return enc, list(make_loader(path, enc, packing_buffer_size=5))


@pytest.mark.parametrize("task", [pytest.param("vqa", marks=pytest.mark.slow), "conversation"])
def test_packed_documents_equal_the_processor_alone(
    task: str, datasets: dict[str, Any], family: Any
) -> None:
    path, ref = datasets[task]
    name, _, processor = family
    _, make_model, _, tag = FAMILIES[name]
    enc, packs = packs_of(task, path, family, light=True)
    _, stock = packs_of(task, path, family, light=False)
    assert len(packs) == len(stock)
    for light_pack, stock_pack in zip(packs, stock):  # light buffers: the same packs, bit for bit
        # (restore keys name the post-encoding stage light buffers add)
        same_key = dataclasses.replace(light_pack, __restore_key__=stock_pack.__restore_key__)
        assert_same_item(same_key, stock_pack, what="light vs stock pack")
    model = make_model(len(processor.tokenizer), processor.tokenizer.convert_tokens_to_ids(tag))
    assert encoder(ConversationPackingTaskEncoder, family).media.family.name == name
    seen = []
    for pack in packs:
        batch = collate_packs([pack], pad_to=pack.length + 3)
        image_id = processor.tokenizer.convert_tokens_to_ids(tag)  # media tokens: only these
        assert pack.num_media_tokens == int((pack.tokens == image_id).sum())
        names = set(batch.hf_kwargs("sdpa", config=model))
        assert names >= {"input_ids", "position_ids"} and "image_grid_thw" not in names
        assert ("pixel_values" in names) == bool(len(pack.image_grid_thw))
        with torch.no_grad():
            logits = model(**batch.hf_kwargs("sdpa", config=model, with_labels=False)).logits[0]
        start, row = 0, 0
        for key, n in zip(pack.sample_keys, pack.doc_lengths):
            turns, images = ref[key]
            want = alone(processor, tag, turns, images)
            assert pack.tokens[start : start + n].tolist() == want["input_ids"][0].tolist(), (
                key,
                n,
                pack.doc_lengths,
                pack.sample_keys,
                len(want["input_ids"][0]),
                pack.counts,
            )
            tiles = int(pack.image_grid_thw[row : row + len(images), 0].sum())
            pixels = pack.pixel_values[int(pack.image_grid_thw[:row, 0].sum()) :][:tiles]
            if images:  # in the model's layout, as the batch gives it
                model_pixels = image_kwargs(pixels, pack.image_grid_thw)["pixel_values"]
                assert torch.equal(model_pixels, want["pixel_values"]), key
            labels = pack.labels[start : start + n]
            assert labels[labels != -100].tolist() == targets(processor, turns), key
            assert pack.position_ids[start : start + n].tolist() == list(range(n)), key
            kwargs = {"input_ids": want["input_ids"]}
            if images:
                kwargs["pixel_values"] = want["pixel_values"]
            with torch.no_grad():
                ref_logits = model(**kwargs).logits[0]
            torch.testing.assert_close(logits[start : start + n], ref_logits, atol=1e-5, rtol=0)
            start, row = start + n, row + len(images)
            seen.append(key)
    assert sorted(seen) == sorted(ref)
    assert max(len(p.sample_keys) for p in packs) > 1  # documents really share packs
    tiles = torch.cat([p.image_grid_thw[:, 0] for p in packs]).tolist()
    assert len(tiles) == sum(len(images) for _, images in ref.values()) and max(tiles) > 2
    # all packs in one batch (B > 1): each row's logits are its pack's alone
    length = max(p.length for p in packs)
    with torch.no_grad():
        rows = model(
            **collate_packs(packs, pad_to=length).hf_kwargs("sdpa", config=model, with_labels=False)
        )
        for r, pack in enumerate(packs):
            one = model(
                **collate_packs([pack], pad_to=length).hf_kwargs(
                    "sdpa", config=model, with_labels=False
                )
            )
            n = pack.length
            torch.testing.assert_close(rows.logits[r, :n], one.logits[0, :n], atol=1e-5, rtol=0)


def test_light_buffers_plan_tokens_from_headers(family: Any) -> None:
    """The planner's tokens per image (from the header) are what the processor makes of that
    image alone: the number of image tokens, and for Idefics3 the whole layout with markers.
    InternVL's ``_get_num_multimodal_tokens`` agrees once its ``<img>``, ``</img>`` are taken
    off; Idefics3's counts a newline per tile row that this tokenizer drops, so it is not used."""
    name, _, processor = family
    tag = FAMILIES[name][3]
    enc = encoder(ConversationPackingTaskEncoder, family)
    assert enc.light_media and enc.media.family.name == name
    rng = random.Random(1)
    sizes = SIZES + [(rng.randint(1, 400), rng.randint(1, 400)) for _ in range(20)]
    planned = enc.media_planner.images([png(w, h, seed=0) for w, h in sizes], key="k")
    image_id = processor.tokenizer.convert_tokens_to_ids(tag)
    for i, size in enumerate(sizes):
        ids = processor(text=[tag], images=[[Image.new("RGB", size)]])["input_ids"][0]
        assert planned.num_tokens[i] == sum(t == image_id for t in ids), size
        if planned.expansions is not None:
            assert planned.expansions[i] == list(ids), size
    if name == "internvl":
        counted = processor._get_num_multimodal_tokens(image_sizes=[(h, w) for w, h in sizes])
        assert planned.num_tokens == [n - 2 for n in counted["num_image_tokens"]]
    processed = enc.media.images([Image.new("RGB", s) for s in sizes])
    assert processed.num_tokens == planned.num_tokens
    assert processed.expansions == planned.expansions
    assert torch.equal(processed.grid_thw, planned.grid_thw)


@pytest.mark.parametrize("overlong", ["split", "truncate"])
@pytest.mark.parametrize("size", [(56, 56), (150, 60)])  # one tile; tiles and a global one
def test_overlong_cuts_keep_each_images_markers_with_it(
    family: Any, overlong: str, size: tuple[int, int]
) -> None:
    """A cut that falls between an image's leading markers (``<fake_token_around_image>
    <row_1_col_1>``, ``<global-img>``; InternVL's ``<img>``) and its first image token moves
    before the markers: each piece holds an image's whole layout (InternVL: ``<img> ... </img>``),
    as the processor makes it for that image, or none of it."""
    name, _, processor = family
    tag = FAMILIES[name][3]
    expansion = list(processor(text=[tag], images=[[Image.new("RGB", size)]])["input_ids"][0])
    image_id = processor.tokenizer.convert_tokens_to_ids(tag)
    enc = encoder(ConversationPackingTaskEncoder, family)
    sample = chat_sample("k", ["<image> one", "two", "<image> three", "four"])
    sample = dataclasses.replace(sample, images=[png(*size, seed=1), png(*size, seed=2)])
    (doc,) = enc.encode_document(sample)
    tokens = doc.tokens.tolist()
    second = [i for i, t in enumerate(tokens) if t == image_id][expansion.count(image_id)]
    assert expansion.index(image_id) > 0 and tokens[second - 1] != image_id  # markers before
    cut = encoder(ConversationPackingTaskEncoder, family, pack_size=second, overlong=overlong)
    pieces = list(cut.encode_sample(sample))
    assert len(pieces) == (2 if overlong == "split" else 1)
    for piece in pieces:
        rest, ids = piece.tokens.tolist(), set(expansion)
        whole = 0
        while any(rest[i : i + len(expansion)] == expansion for i in range(len(rest))):
            i = next(i for i in range(len(rest)) if rest[i : i + len(expansion)] == expansion)
            rest, whole = rest[:i] + rest[i + len(expansion) :], whole + 1
        assert not ids & set(rest), (piece.__key__, piece.tokens.tolist())
        assert whole == len(piece.image_spans) == len(piece.image_grid_thw)
        assert piece.num_media_tokens == int((piece.tokens == image_id).sum())


def test_tile_families_refuse_mrope_videos_and_captioning(family: Any) -> None:
    from energon_pack.task_encoders import CaptioningPackingTaskEncoder

    name = family[0]
    with pytest.raises(ValueError, match=f"for {name} use ConversationPackingTaskEncoder"):
        CaptioningPackingTaskEncoder(family[1], family[2], pack_size=PACK_SIZE)
    with pytest.raises(ValueError, match=f"{name} models take 1-D positions"):
        encoder(ConversationPackingTaskEncoder, family, mrope=True)
    enc = encoder(ConversationPackingTaskEncoder, family)
    with pytest.raises(ValueError, match=f"videos are not supported for the {name}"):
        enc.media.videos([[Image.new("RGB", (56, 56))]])


@pytest.mark.slow  # analyze counting media: test_analyze_vlm (fast)
def test_analyze_counts_the_familys_media_tokens(
    tmp_path: Path, datasets: dict[str, Any], family: Any
) -> None:
    """``energon-pack analyze --task conversation --processor DIR`` on the family's processor
    directory (what ``save_pretrained`` writes): its tokens, and media tokens as packed."""

    from click.testing import CliRunner

    from energon_pack.encoding import transformers_class
    from energon_pack_tools.cli import main

    name, _, processor = family
    processor.save_pretrained(tmp_path / name)
    # the class a checkpoint names (the test's is a subclass without the video processor)
    saved = tmp_path / name / "processor_config.json"
    config = {**json.loads(saved.read_text()), "processor_class": transformers_class(processor)}
    saved.write_text(json.dumps(config))
    path, ref = datasets["conversation"]
    args = ["analyze", str(path), "--task", "conversation", "--processor", str(tmp_path / name)]
    args += ["--pack-size", str(PACK_SIZE), "--buffer-size", "4", "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    _, packs = packs_of("conversation", path, family, light=True)
    assert out["media"]["media_tokens"] == sum(p.num_media_tokens for p in packs) > 0
    assert out["samples_in"] == len(ref)
