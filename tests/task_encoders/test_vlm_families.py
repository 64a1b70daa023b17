# SPDX-License-Identifier: Apache-2.0
"""The family registry: every family is found by the exact transformers classes it lists (fast
and slow image processors, its processors); a processor or image processor class no family
lists is refused by the encoders naming its class and the page on adding a family, never packed
as a family guessed from its attributes (ShieldGemma 2,
Ovis2, VideoLLaMA3, LLaVA, Gemma 4 image processors all carry Qwen- or Gemma-like
attributes). The fast (torchvision) classes cannot be built here: they are checked by name."""

from __future__ import annotations

import importlib
import warnings
from types import SimpleNamespace

import pytest
import transformers
from vlm_models import GEMMA3_CHAT_TEMPLATE, gemma3_tokenizer, internvl_processor

from energon_pack.encoding import PatchGrids, vision_family
from energon_pack.encoding._families import (
    ADD_A_FAMILY,
    FAMILIES,
    Images,
    PrefixImages,
    Tiles,
    VisionFamily,
    family_for,
)
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack_tools import make_image_processor

#: Real transformers image processors (PIL backend, built from defaults) of unverified families.
UNREGISTERED = [
    ("ovis2", "Ovis2ImageProcessorPil"),
    ("video_llama_3", "VideoLlama3ImageProcessorPil"),
    ("llava", "LlavaImageProcessorPil"),
    ("gemma4", "Gemma4ImageProcessorPil"),
]


def _pil_image_processor(model: str, name: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module(
            f"transformers.models.{model}.image_processing_pil_{model}"
        )
        return getattr(module, name)(**kwargs)


def test_registered_names_are_transformers_classes_listed_once() -> None:
    names = [n for f in FAMILIES for n in (*f.processors, *f.image_processors)]
    assert len(names) == len(set(names))
    assert [n for n in names if not hasattr(transformers, n)] == []
    for family in FAMILIES:  # fast and slow variants of every image processor
        assert {n.removesuffix("Pil") for n in family.image_processors} == {
            family.image_processors[0]
        }, family.name


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_registered_class_finds_its_family(family) -> None:
    for image_processor in family.image_processors:
        for processor in family.processors:
            assert family_for(processor, image_processor) is family
        if family.needs_processor:
            with pytest.raises(ValueError, match=f"pass the whole {family.processors[0]}"):
                family_for(None, image_processor)
        else:
            assert family_for(None, image_processor) is family


def test_pairs_no_family_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="Gemma3Processor with a SiglipImageProcessorPil"):
        family_for("Gemma3Processor", "SiglipImageProcessorPil")
    with pytest.raises(ValueError, match="Qwen2VLProcessor with a GotOcr2ImageProcessor"):
        family_for("Qwen2VLProcessor", "GotOcr2ImageProcessor")


def test_registered_instances_are_accepted(tmp_path, tokenizer_dir) -> None:
    assert isinstance(vision_family(make_image_processor()), PatchGrids)
    user_subclass = type("MyQwen", (type(make_image_processor()),), {})  # served as its base
    assert isinstance(vision_family(user_subclass(max_pixels=112 * 112)), PatchGrids)
    from transformers import AutoTokenizer
    from vlm_models import INTERNVL_TOKENS

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(list(INTERNVL_TOKENS.values()), special_tokens=True)
    tok.save_pretrained(tmp_path)
    family = vision_family(internvl_processor(tmp_path))
    assert isinstance(family, Tiles) and family.tokens_per_tile == 4
    assert family.image_processor.crop_to_patches
    # what `energon-pack analyze` loads from a processor directory
    gemma = _pil_image_processor("gemma3", "Gemma3ImageProcessorPil")
    siglip = _pil_image_processor("siglip", "SiglipImageProcessorPil")
    for ip, name, cls in (
        (gemma, "Gemma3Processor", Images),
        (siglip, "PaliGemmaProcessor", PrefixImages),
    ):
        loaded = SimpleNamespace(image_processor=ip, image_seq_length=5, processor_class=name)
        family = vision_family(loaded)
        assert type(family) is cls and family.tokens_per_tile == 5
        assert isinstance(family, VisionFamily)  # every declared member is there


def test_remote_code_subclasses_are_refused_by_their_own_name() -> None:
    """A class loaded with ``trust_remote_code`` lives in ``transformers_modules``: it may change
    anything of the registered class it derives from, so it is refused by its own name."""
    base = type(make_image_processor())
    remote = type("RemoteQwenImageProcessor", (base,), {"__module__": "transformers_modules.x.y"})
    with pytest.raises(ValueError, match="^RemoteQwenImageProcessor .*not a registered"):
        vision_family(remote(max_pixels=112 * 112))


@pytest.mark.parametrize(("model", "name"), UNREGISTERED, ids=[n for _, n in UNREGISTERED])
def test_unregistered_image_processors_are_refused_by_class(model: str, name: str) -> None:
    image_processor = _pil_image_processor(model, name)
    with pytest.raises(ValueError, match=f"^{name} .*not a registered.*{ADD_A_FAMILY}"):
        vision_family(image_processor)


def test_unregistered_processors_are_refused_by_the_encoders(tmp_path, vlm_tokenizer_dir) -> None:
    """ShieldGemma 2 runs Gemma 3's image processor, but not Gemma 3's prompt: its whole
    processor (and its directory as analyze loads it) is refused by its own class."""
    path = gemma3_tokenizer(tmp_path, ["a policy prompt"])
    gemma = _pil_image_processor("gemma3", "Gemma3ImageProcessorPil")
    shield = transformers.ShieldGemma2Processor(
        gemma,
        transformers.AutoTokenizer.from_pretrained(path),
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=4,
    )
    loaded = SimpleNamespace(
        image_processor=gemma, image_seq_length=4, processor_class="ShieldGemma2Processor"
    )
    ovis2 = _pil_image_processor("ovis2", "Ovis2ImageProcessorPil")
    for cls in (ConversationPackingTaskEncoder, VQAPackingTaskEncoder):
        for processor in (shield, loaded):
            with pytest.raises(ValueError, match="^ShieldGemma2Processor is not a registered"):
                cls(path, processor, pack_size=64)
        with pytest.raises(ValueError, match="^Ovis2ImageProcessorPil .*not a registered"):
            cls(vlm_tokenizer_dir, ovis2, pack_size=64)
        with pytest.raises(ValueError, match="pass the whole Gemma3Processor"):
            cls(vlm_tokenizer_dir, gemma, pack_size=64)
        idefics = _pil_image_processor("idefics3", "Idefics3ImageProcessorPil")
        with pytest.raises(ValueError, match="pass the whole Idefics3Processor"):
            cls(vlm_tokenizer_dir, idefics, pack_size=64)
