# SPDX-License-Identifier: Apache-2.0
"""Processor families: Qwen-VL image processors are patch grids, InternVL processors tiles,
Gemma 3 processors images; a Gemma 3 image processor without its processor's tokens per image
and unknown families are refused by the encoders with a message, never guessed token counts."""

from __future__ import annotations

import warnings

import pytest
from vlm_models import internvl_processor

from energon_pack.encoding import PatchGrids, vision_family
from energon_pack.encoding._families import Tiles
from energon_pack.task_encoders import ConversationPackingTaskEncoder, VQAPackingTaskEncoder
from energon_pack_tools import make_image_processor


def test_families_of_processors(tmp_path, tokenizer_dir) -> None:
    assert isinstance(vision_family(make_image_processor()), PatchGrids)
    from transformers import AutoTokenizer
    from vlm_models import INTERNVL_TOKENS

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(list(INTERNVL_TOKENS.values()), special_tokens=True)
    tok.save_pretrained(tmp_path)
    family = vision_family(internvl_processor(tmp_path))
    assert isinstance(family, Tiles) and family.tokens_per_tile == 4
    assert family.image_processor.crop_to_patches


def test_lone_gemma3_image_processor_and_unknown_families_are_refused(vlm_tokenizer_dir) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers.models.gemma3.image_processing_pil_gemma3 import (
            Gemma3ImageProcessorPil,
        )
        from transformers.models.idefics3.image_processing_pil_idefics3 import (
            Idefics3ImageProcessorPil,
        )
    for cls in (ConversationPackingTaskEncoder, VQAPackingTaskEncoder):
        with pytest.raises(ValueError, match="pass the whole Gemma3Processor"):
            cls(vlm_tokenizer_dir, Gemma3ImageProcessorPil(), pack_size=64)
        with pytest.raises(ValueError, match="not a supported VLM processor family"):
            cls(vlm_tokenizer_dir, Idefics3ImageProcessorPil(), pack_size=64)
