# SPDX-License-Identifier: Apache-2.0
"""``energon_pack.encoding.load_processor``: each family's processor, saved with
``save_pretrained`` and loaded back offline without torchvision (no video processor), makes the
same tokens and pixels as the processor that was saved; and ``analyze --processor`` reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from vlm_helpers import VLM_TOKENS
from vlm_models import (
    IDEFICS3_TOKENS,
    INTERNVL_TOKENS,
    idefics3_processor,
    internvl_processor,
    llava_processor,
    smolvlm_processor,
    typed_template,
)

from energon_pack.encoding import images_only_class, load_processor


def _qwen2_vl(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer, Qwen2VLProcessor

    from energon_pack_tools import make_image_processor

    cls = images_only_class(Qwen2VLProcessor)
    return cls(make_image_processor(), AutoTokenizer.from_pretrained(tokenizer_dir))


#: family -> (processor builder of the tests, tokens its tokenizer adds, transformers class).
#: The tests' builders for InternVL, SmolVLM and LLaVA-OneVision subclass the processor as
#: ``ImagesOnly`` (what a user copied), so the directory they save names no transformers class.
FAMILIES = {
    "qwen2_vl": (_qwen2_vl, [*VLM_TOKENS, "<|image_pad|>"], "Qwen2VLProcessor"),
    "llava_next": (llava_processor, ["<image>"], "LlavaNextProcessor"),
    "llava_onevision": (
        lambda d: llava_processor(d, onevision=True),
        ["<image>", "<video>"],
        "LlavaOnevisionProcessor",
    ),
    "internvl": (internvl_processor, list(INTERNVL_TOKENS.values()), "InternVLProcessor"),
    "idefics3": (idefics3_processor, IDEFICS3_TOKENS, "Idefics3Processor"),
    "smolvlm": (smolvlm_processor, IDEFICS3_TOKENS, "SmolVLMProcessor"),
}


@pytest.fixture(params=sorted(FAMILIES))
def saved(request: Any, tmp_path: Path, tokenizer_dir: Path) -> tuple[str, Any, Path]:
    """``(transformers class name, the processor, the directory it was saved to)``."""
    from transformers import AutoTokenizer

    build, tokens, name = FAMILIES[request.param]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(tokens, special_tokens=True)
    tok.save_pretrained(tmp_path / "tok")
    processor = build(tmp_path / "tok")
    processor.save_pretrained(tmp_path / "saved")
    return name, processor, tmp_path / "saved"


def _outputs(processor: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for w, h in SIZES]
    text = f"look {processor.image_token} and {processor.image_token} here"
    out = processor(images=[images], text=[text], return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}


SIZES = [(150, 60), (56, 56)]


def test_a_saved_processor_loads_back_without_torchvision(saved: tuple[str, Any, Path]) -> None:
    name, processor, path = saved
    if name == "InternVLProcessor":  # its image processor also serves QianfanOCRProcessor
        with pytest.raises(ValueError, match="serves InternVLProcessor, QianfanOCRProcessor"):
            load_processor(path)
        loaded = load_processor(path, processor_class=name)
    else:
        loaded = load_processor(path)
    assert type(loaded).__name__ == name
    assert getattr(loaded, "video_processor", None) is None
    assert "video_processor" not in type(loaded).get_attributes()
    want, got = _outputs(processor), _outputs(loaded)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # What it saves names the transformers class, so the next load needs no guessing.
    loaded.save_pretrained(path.parent / "again")
    config = json.loads((path.parent / "again" / "processor_config.json").read_text())
    assert config["processor_class"] == name


def test_a_class_the_image_processor_cannot_tell_is_refused_naming_the_choices(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    # LLaVA-NeXT's image processor also serves LlavaNextVideoProcessor (and Granite4Vision).
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(["<image>"], special_tokens=True)
    tok.save_pretrained(tmp_path / "tok")
    llava_processor(tmp_path / "tok").save_pretrained(tmp_path / "saved")
    config_file = tmp_path / "saved" / "processor_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "processor_class": "MyLlava"}))
    with pytest.raises(ValueError, match="processor_class 'MyLlava' is not a transformers") as e:
        load_processor(tmp_path / "saved")
    assert "LlavaNextProcessor, LlavaNextVideoProcessor" in str(e.value)
    loaded = load_processor(tmp_path / "saved", processor_class="LlavaNextProcessor")
    assert type(loaded).__name__ == "LlavaNextProcessor"


def test_an_image_processor_directory_gives_the_image_processor(tmp_path: Path) -> None:
    from energon_pack_tools import make_image_processor

    make_image_processor().save_pretrained(tmp_path)
    loaded = load_processor(tmp_path)
    assert type(loaded).__name__.startswith("Qwen2VLImageProcessor")
    with pytest.raises(ValueError, match="no processor_config.json or preprocessor_config"):
        load_processor(tmp_path / "missing")


@pytest.mark.parametrize("family", ["llava_onevision", "smolvlm"])
def test_analyze_reads_the_directory_the_tests_subclass_saved(
    family: str, tmp_path: Path, tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The directory names ``ImagesOnly`` (what a user copied from these tests): ``analyze
    --processor`` reads it as is, and counts the media tokens the saved processor makes."""
    import io

    from click.testing import CliRunner
    from transformers import AutoTokenizer
    from vlm_helpers import vlm_datasets

    from energon_pack_tools.cli import main

    build, tokens, _ = FAMILIES[family]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(tokens, special_tokens=True)
    tok.save_pretrained(tmp_path / "tok")
    processor = build(tmp_path / "tok")
    # saved with a template for typed content, as published (the reference analyze renders)
    onevision = family == "llava_onevision"
    processor.chat_template = typed_template(
        "'<image>\\n'" if onevision else "'<image>'", images_first=onevision
    )
    processor.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "processor_config.json").read_text())
    assert saved["processor_class"] == "ImagesOnly"
    data = vlm_datasets(tmp_path_factory, family, SIZES)
    vqa, ref = data["vqa"]
    args = ["analyze", str(vqa), "--task", "vqa", "--processor", str(tmp_path / "saved")]
    res = CliRunner().invoke(main, [*args, "--pack-size", "512", "--buffer-size", "4", "--json"])
    assert res.exit_code == 0, res.output
    image_id = tok.convert_tokens_to_ids(processor.image_token)
    want = 0
    for _, (image,) in ref.values():
        pil = Image.open(io.BytesIO(image)).convert("RGB")
        ids = processor(images=[[pil]], text=[processor.image_token])["input_ids"][0]
        want += list(ids).count(image_id)
    assert json.loads(res.stdout)["media"]["media_tokens"] == want > 0
