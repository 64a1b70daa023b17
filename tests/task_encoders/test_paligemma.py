# SPDX-License-Identifier: Apache-2.0
"""PaliGemma (stacked images, a bidirectional prefix) beyond the conformance suite
(tests/task_encoders/families/, VQA): single-turn conversations with 1..3 images (written by ``energon-pack make-dataset --task conversation``)
packed through the loader equal, document by document, ``PaliGemmaProcessor(text=prompt,
images=..., suffix=answer)`` alone (tokens, pixels, labels, ``token_type_ids``); a tiny random
``PaliGemmaForConditionalGeneration`` gives each document's logits alone within 1e-5 fp32 (its
positions from 1, the prefix attending both ways); light buffers give bit-identical packs."""

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
from vlm_helpers import png
from vlm_models import (
    PALIGEMMA_TOKENS_PER_IMAGE,
    gemma3_tokenizer,
    paligemma_processor,
    tiny_paligemma,
)

from energon_pack.samples import collate_packs
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import sample_key, synthetic_texts

SIZES = [(16, 16), (150, 60), (40, 120), (9, 14), (64, 64)]
PACK_SIZE = 64
TOKENS = dict(image_token="<image>", video_token=None, vision_start_token=None)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return synthetic_texts(40, seed=9, min_words=1, max_words=5)


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> Path:
    path = tmp_path_factory.mktemp("paligemma_tok")
    return gemma3_tokenizer(path, texts, {"image_token": "<image>"})


def encoder(cls: Any, tok_dir: Path, **kw: Any) -> Any:
    return cls(
        tok_dir,
        paligemma_processor(tok_dir),
        pack_size=PACK_SIZE,
        vision_end_token=None,
        **TOKENS,
        **kw,
    )


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> dict[str, Any]:
    """Single-turn conversations with 1..3 images, tagged first or untagged (the processor then
    puts the images first); per key the prompt, the answer and the image bytes (VQA: the
    conformance suite, tests/task_encoders/families/)."""
    from click.testing import CliRunner

    from energon_pack_tools.cli import main

    root = tmp_path_factory.mktemp("pg_media")
    rng = random.Random(2)
    records, conv_ref = [], {}
    for i in range(6):
        names = [f"p{i}_{j}.png" for j in range(1 + i % 3)]
        for j, name in enumerate(names):
            (root / name).write_bytes(png(*rng.choice(SIZES), seed=50 + 10 * i + j))
        prompt = ("<image>" * len(names) if i % 2 else "") + texts[20 + i]
        turns = [{"from": "human", "value": prompt}, {"from": "gpt", "value": texts[30 + i]}]
        records.append({"id": i, "conversations": turns, "image": names})
        conv_ref[sample_key(i)] = (prompt, texts[30 + i], [(root / n).read_bytes() for n in names])
    (root / "llava.json").write_text(json.dumps(records))
    out = tmp_path_factory.mktemp("pg_conv") / "data"
    args = ["make-dataset", str(out), str(root / "llava.json"), "--task", "conversation"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return {"conversation": (out, conv_ref)}


def alone(processor: Any, prompt: str, answer: str, images: list[bytes]) -> dict[str, Any]:
    pil = [[Image.open(io.BytesIO(b)) for b in images]]
    return processor(text=[prompt], images=pil, suffix=[answer], return_tensors="pt")


@pytest.fixture(scope="module")
def packs(datasets: dict[str, Any], tok_dir: Path) -> dict[str, list[Any]]:
    """Each dataset's packs with light buffers, checked bit-identical to stock buffers'."""
    out = {}
    for task, (path, _) in datasets.items():
        cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
        runs = []
        for light in (True, False):
            enc = encoder(cls, tok_dir, light_media=light)
            assert enc.light_media is light and enc.media.family.name == "paligemma"
            runs.append(list(make_loader(path, enc, packing_buffer_size=8)))
        assert len(runs[0]) == len(runs[1])
        for a, b in zip(*runs):
            assert_same_item(dataclasses.replace(a, __restore_key__=b.__restore_key__), b)
        out[task] = runs[0]
    return out


@pytest.mark.parametrize("impl", ["sdpa", pytest.param("eager", marks=pytest.mark.slow)])
def test_packed_paligemma_documents_equal_processor_alone(
    impl: str, datasets: dict[str, Any], packs: dict[str, list[Any]], tok_dir: Path
) -> None:
    processor = paligemma_processor(tok_dir)
    model = tiny_paligemma(processor.tokenizer, impl)
    seen, worst = [], 0.0
    for task, (_, ref) in datasets.items():
        for pack in packs[task]:
            batch = collate_packs([pack], pad_to=PACK_SIZE)
            kwargs = batch.hf_kwargs(impl, config=model.config, with_labels=False)
            with torch.no_grad():
                logits = model(**kwargs).logits[0]
            start = image = 0
            for key, n in zip(pack.sample_keys, pack.doc_lengths):
                prompt, answer, images = ref[key]
                want = alone(processor, prompt, answer, images)
                doc = slice(start, start + n)
                assert pack.tokens[doc].tolist() == want["input_ids"][0].tolist(), key
                assert pack.token_type_ids[doc].tolist() == want["token_type_ids"][0].tolist()
                pixels = pack.pixel_values[image : image + len(images)]
                assert torch.equal(pixels, want["pixel_values"]), key
                labels, ref_labels = pack.labels[doc], want["labels"][0]
                assert labels[labels != -100].tolist() == ref_labels[ref_labels != -100].tolist()
                assert kwargs["position_ids"][0, doc].tolist() == list(range(1, n + 1)), key
                with torch.no_grad():
                    single = model(**{k: v for k, v in want.items() if k != "labels"}).logits[0]
                worst = max(worst, float((logits[doc] - single).abs().max()))
                torch.testing.assert_close(logits[doc], single, atol=1e-5, rtol=0)
                start, image = start + n, image + len(images)
                seen.append((task, key))
    assert len(seen) == sum(len(r) for _, r in datasets.values())
    assert max(len(p.sample_keys) for ps in packs.values() for p in ps) > 1
    print(f"paligemma {impl}: max |packed - alone| logit difference {worst:.2e}")
    # the check can fail: with every token type 1 (a causal prefix) the last pack differs
    ones = torch.ones_like(batch.token_type_ids)
    causal = batch.hf_kwargs(impl, config=model.config, with_labels=False, token_type_ids=ones)
    with torch.no_grad():
        assert float((model(**causal).logits[0] - logits).abs().max()) > 1e-3


def test_paligemma_refuses_turns_and_plans_tokens(tok_dir: Path) -> None:
    """A multi-turn conversation is not a PaliGemma document (it names the sample); the
    planner's tokens per image equal the processor's ``_get_num_multimodal_tokens``."""
    from vlm_helpers import chat_sample

    enc = encoder(ConversationPackingTaskEncoder, tok_dir)
    sample = chat_sample("k1", ["<image> a", "b", "c", "d"], images=[png(16, 16, 1)])
    with pytest.raises(ValueError, match="'k1'.*one user prompt and one answer"):
        list(enc.encode_document(sample))
    sizes = [(16, 16), (300, 20), (1, 1)]
    planned = enc.media_planner.images([png(w, h, seed=0) for w, h in sizes], key="k")
    counted = paligemma_processor(tok_dir)._get_num_multimodal_tokens(image_sizes=sizes)
    assert planned.num_tokens == counted["num_image_tokens"] == [PALIGEMMA_TOKENS_PER_IMAGE] * 3


def test_analyze_counts_paligemma_media_tokens(
    tmp_path: Path, datasets: dict[str, Any], tok_dir: Path
) -> None:
    """``energon-pack analyze --task conversation --processor DIR`` on a saved PaliGemma
    processor (its ``image_seq_length`` is on the image processor)."""
    from click.testing import CliRunner

    from energon_pack_tools.cli import main

    paligemma_processor(tok_dir).save_pretrained(tmp_path / "pg")
    path, ref = datasets["conversation"]
    args = ["analyze", str(path), "--task", "conversation", "--processor", str(tmp_path / "pg")]
    res = CliRunner().invoke(
        main, [*args, "--pack-size", str(PACK_SIZE), "--buffer-size", "8", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    n_images = sum(len(images) for _, _, images in ref.values())
    assert out["media"]["media_tokens"] == PALIGEMMA_TOKENS_PER_IMAGE * n_images
    assert out["samples_in"] == len(ref)
