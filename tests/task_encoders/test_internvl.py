# SPDX-License-Identifier: Apache-2.0
"""InternVL (tiles): real energon VQA and multi-image conversation datasets packed through the
loader equal, document by document, the same conversation run alone through InternVL's own
processor (tokens, pixels), with the loss on the answers only and 1-D positions restarting per
document; a tiny random InternVL gives the packed logits of each document alone (fp32, 1e-5);
light buffers give bit-identical packs and plan the tokens exactly from the headers."""

from __future__ import annotations

import dataclasses
import io
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from vlm_helpers import png
from vlm_models import INTERNVL_TOKENS, internvl_processor, tiny_internvl

from energon_pack.samples import collate_packs
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.testing import assert_same_item, synthetic_texts
from energon_pack.tools import make_conversation_dataset, make_loader, make_vqa_dataset, sample_key

#: Image sizes (width, height): 1 tile, 2-3 tiles + thumbnail, tall, tiny.
SIZES = [(56, 56), (150, 60), (40, 120), (112, 112), (9, 14), (200, 90)]
PACK_SIZE = 160


@pytest.fixture(scope="module")
def internvl_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """The session tokenizer plus InternVL's ``<img>``, ``</img>``, ``<IMG_CONTEXT>``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(list(INTERNVL_TOKENS.values()), special_tokens=True)
    path = tmp_path_factory.mktemp("internvl_tok")
    tok.save_pretrained(path)
    return path


def encoder(cls: Any, tok_dir: Path, **kw: Any) -> Any:
    return cls(
        tok_dir,
        internvl_processor(tok_dir),
        image_token="<IMG_CONTEXT>",
        video_token=None,
        vision_start_token="<img>",
        vision_end_token="</img>",
        pack_size=PACK_SIZE,
        **kw,
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A VQA dataset (one image a sample, weighted answers) and LLaVA conversations with 0..3
    images in several turns; per key the messages and the image bytes."""
    rng = random.Random(5)
    texts = synthetic_texts(60, seed=8, min_words=1, max_words=5)
    images = [png(*SIZES[i % len(SIZES)], seed=i) for i in range(8)]
    answers = [[texts[i]] for i in range(8)]
    vqa = make_vqa_dataset(
        tmp_path_factory.mktemp("ivl_vqa"), images, texts[10:18], answers, samples_per_shard=3
    )
    vqa_ref = {
        sample_key(i): ([("user", f"<image>\n{texts[10 + i]}"), ("assistant", texts[i])], [b])
        for i, b in enumerate(images)
    }
    root = tmp_path_factory.mktemp("ivl_media")
    records, conv_ref = [], {}
    for i in range(8):
        n = i % 4
        names = []
        for j in range(n):
            names.append(f"c{i}_{j}.png")
            (root / names[-1]).write_bytes(png(*rng.choice(SIZES), seed=100 + 10 * i + j))
        q, a, q2, a2 = texts[20 + 4 * i : 24 + 4 * i]
        first = "<image> " * (n - 1 if n > 1 else n) + q
        turns = [("user", first), ("assistant", a)]
        if n > 1:  # the last image in a later turn
            turns += [("user", f"<image> {q2}"), ("assistant", a2)]
        record = {"id": i, "conversations": [{"from": r, "value": t} for r, t in turns]}
        if names:
            record["image"] = names
        records.append(record)
        conv_ref[sample_key(i)] = (turns, [(root / n).read_bytes() for n in names])
    conv = make_conversation_dataset(
        tmp_path_factory.mktemp("ivl_conv"), records, media_root=root, samples_per_shard=3
    )
    return {"vqa": (vqa, vqa_ref), "conversation": (conv, conv_ref)}


def alone(processor: Any, turns: list[tuple[str, str]], images: list[bytes]) -> dict[str, Any]:
    """The conversation through InternVL's own processor: chat template, then the processor
    with the images (``<image>`` tags become its ``<IMG_CONTEXT>`` token)."""
    tok = processor.tokenizer
    messages = [{"role": r, "content": t.replace("<image>", "<IMG_CONTEXT>")} for r, t in turns]
    text = tok.apply_chat_template(messages, tokenize=False)
    pil = [Image.open(io.BytesIO(b)) for b in images]
    return processor(text=[text], images=pil or None, return_tensors="pt")


def targets(processor: Any, turns: list[tuple[str, str]]) -> list[int]:
    """The token ids the loss should see: each answer and its ``</s>``, in order."""
    tok = processor.tokenizer
    out: list[int] = []
    for role, text in turns:
        if role == "assistant":
            out += tok(text, add_special_tokens=False).input_ids + [tok.eos_token_id]
    return out


def packs_of(task: str, path: Path, tok_dir: Path, light: bool) -> tuple[Any, list[Any]]:
    cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
    enc = encoder(cls, tok_dir, light_media=light)
    assert enc.light_media is light
    return enc, list(make_loader(path, enc, packing_buffer_size=5))


@pytest.mark.parametrize("task", ["vqa", "conversation"])
def test_packed_documents_equal_internvls_processor_alone(
    task: str, datasets: dict[str, Any], internvl_dir: Path
) -> None:
    path, ref = datasets[task]
    processor = internvl_processor(internvl_dir)
    enc, packs = packs_of(task, path, internvl_dir, light=True)
    _, stock = packs_of(task, path, internvl_dir, light=False)
    assert len(packs) == len(stock)
    for light_pack, stock_pack in zip(packs, stock):  # light buffers: the same packs, bit for bit
        # (restore keys name the post-encoding stage light buffers add)
        same_key = dataclasses.replace(light_pack, __restore_key__=stock_pack.__restore_key__)
        assert_same_item(same_key, stock_pack, what="light vs stock pack")
    image_id = processor.tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>")
    model = tiny_internvl(len(processor.tokenizer), image_id)
    seen = []
    for pack in packs:
        batch = collate_packs([pack], pad_to=pack.length + 3)
        assert set(batch.hf_kwargs("sdpa")) >= {"input_ids", "position_ids", "pixel_values"}
        assert "image_grid_thw" not in batch.hf_kwargs("sdpa")
        with torch.no_grad():
            logits = model(**batch.hf_kwargs("sdpa", with_labels=False)).logits[0]
        start, row = 0, 0
        for key, n in zip(pack.sample_keys, pack.doc_lengths):
            turns, images = ref[key]
            want = alone(processor, turns, images)
            assert pack.tokens[start : start + n].tolist() == want["input_ids"][0].tolist(), key
            tiles = int(pack.image_grid_thw[row : row + len(images), 0].sum())
            pixels = pack.pixel_values[int(pack.image_grid_thw[:row, 0].sum()) :][:tiles]
            if images:
                assert torch.equal(pixels, want["pixel_values"]), key
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


def test_light_buffers_plan_internvl_tokens_from_headers(internvl_dir: Path) -> None:
    """The planner's tokens per image equal the processor's ``_get_num_multimodal_tokens``
    (which also counts ``<img>`` and ``</img>``) and what the processor expands to."""
    processor = internvl_processor(internvl_dir)
    enc = encoder(ConversationPackingTaskEncoder, internvl_dir)
    assert enc.light_media and enc.media.family.name == "internvl"
    rng = random.Random(1)
    sizes = SIZES + [(rng.randint(1, 400), rng.randint(1, 400)) for _ in range(20)]
    planned = enc.media_planner.images([png(w, h, seed=0) for w, h in sizes], key="k")
    counted = processor._get_num_multimodal_tokens(image_sizes=[(h, w) for w, h in sizes])
    assert planned.num_tokens == [n - 2 for n in counted["num_image_tokens"]]
    processed = enc.media.images([Image.new("RGB", s) for s in sizes])
    assert processed.num_tokens == planned.num_tokens
    assert torch.equal(processed.grid_thw, planned.grid_thw)


def test_internvl_refuses_mrope_and_videos(internvl_dir: Path) -> None:
    with pytest.raises(ValueError, match="internvl models take 1-D positions"):
        encoder(ConversationPackingTaskEncoder, internvl_dir, mrope=True)
    enc = encoder(ConversationPackingTaskEncoder, internvl_dir)
    with pytest.raises(ValueError, match="videos are not supported for the internvl"):
        enc.media.videos([[Image.new("RGB", (56, 56))]])


def test_analyze_counts_internvl_media_tokens(
    tmp_path: Path, datasets: dict[str, Any], internvl_dir: Path
) -> None:
    """``energon-pack analyze --task conversation --processor DIR`` on an InternVL processor
    directory (what ``save_pretrained`` writes): the family's tokens and media counts."""
    import json

    from click.testing import CliRunner

    from energon_pack.cli import main

    processor = internvl_processor(internvl_dir)
    processor.save_pretrained(tmp_path / "internvl")
    path, ref = datasets["conversation"]
    args = [
        "analyze",
        str(path),
        "--task",
        "conversation",
        "--processor",
        str(tmp_path / "internvl"),
    ]
    res = CliRunner().invoke(
        main, [*args, "--pack-size", str(PACK_SIZE), "--buffer-size", "4", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    sizes = [Image.open(io.BytesIO(b)).size for _, images in ref.values() for b in images]
    counted = processor._get_num_multimodal_tokens(image_sizes=[(h, w) for w, h in sizes])
    assert out["media"]["media_tokens"] == sum(n - 2 for n in counted["num_image_tokens"])
    assert out["samples_in"] == len(ref)
