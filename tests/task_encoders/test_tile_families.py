# SPDX-License-Identifier: Apache-2.0
"""InternVL (tiles), Idefics3 and SmolVLM (split tiles with markers) beyond the conformance
suite (tests/task_encoders/families/: documents, logits, light buffers, planned tokens, cuts):
their refusals, and ``energon-pack analyze`` on a saved processor (slow tier)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from vlm_helpers import vlm_datasets
from vlm_models import (
    IDEFICS3_TOKENS,
    INTERNVL_TOKENS,
    idefics3_processor,
    internvl_processor,
    smolvlm_processor,
    tiny_idefics3,
    tiny_internvl,
    tiny_smolvlm,
    typed_template,
)

from energon_pack.encoding import vision_family
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
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


def packs_of(task: str, path: Path, family: Any, light: bool) -> tuple[Any, list[Any]]:
    cls = VQAPackingTaskEncoder if task == "vqa" else ConversationPackingTaskEncoder
    enc = encoder(cls, family, light_media=light)
    assert enc.light_media is light
    return enc, list(make_loader(path, enc, packing_buffer_size=5))


def test_tile_families_refuse_mrope_and_videos(family: Any) -> None:
    name = family[0]
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
    processor = copy.copy(processor)  # saved with a template for typed content, as published
    processor.chat_template = typed_template(repr(FAMILIES[name][3]))
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
