# SPDX-License-Identifier: Apache-2.0
"""Tiny processors and random models of the mRoPE families GLM-4.1V / GLM-4.6V, Ernie-4.5-VL,
HunYuan-VL and PaddleOCR-VL (built offline from configs and PIL image processors, 1-layer
towers), for their conformance cases (``families/family_cases.py``) and
``test_new_families.py``. One :class:`Spec` per family in :data:`SPECS` (keyed by
``VisionFamily.name``); :func:`named_tokenizer`, :func:`processor` and :func:`tiny_model` build
any of them. No downloads; no torchvision (a processor with a video processor is built without
it)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from vlm_models import _seeded, _text, _vit

#: Images between one and nine merged 28-pixel patches.
GLM4V_PIXELS = {"shortest_edge": 28 * 28, "longest_edge": 9 * 28 * 28}
#: A 1-block, 2-head vision tower of width 32 with 2x2 merging (GLM-4V's and Ernie's keys).
_TOWER = dict(
    depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14, spatial_merge_size=2
)
#: Ernie-4.5-VL's named tokens (its processor reads them from the tokenizer by these names;
#: PaddleOCR-VL's, whose text model is Ernie-4.5, too).
_ERNIE = {
    "image_token": "<|IMAGE_PLACEHOLDER|>",
    "image_start_token": "<|IMAGE_START|>",
    "image_end_token": "<|IMAGE_END|>",
    "video_token": "<|VIDEO_PLACEHOLDER|>",
    "video_start_token": "<|VIDEO_START|>",
    "video_end_token": "<|VIDEO_END|>",
}


@dataclass(frozen=True)
class Spec:
    """How one family's tiny processor and seeded fp32 model are built."""

    #: Named tokens its tokenizer gets (``tokenizer.image_token`` ...), in the order they are
    #: added; the processors read them by these names.
    named: dict[str, str]
    #: ``transformers`` processor class, and whether it is built without its video processor.
    processor: str
    images_only: bool
    #: The PIL image processor: ``(module under transformers.models, class)``, its ``size``.
    image_processor: tuple[str, str]
    pixels: dict[str, int]
    #: ``transformers`` config and model classes.
    config: str
    model: str
    #: The text model's mRoPE section, and what it sets besides :func:`vlm_models._text`'s.
    mrope_section: list[int]
    text: dict[str, Any]
    #: The vision tower's config.
    vision: dict[str, Any]
    #: Config keyword -> the name in :attr:`named` of the token whose id it takes.
    ids: dict[str, str] = field(default_factory=dict)

    @property
    def tokens(self) -> list[str]:
        """The named tokens, in order."""
        return list(self.named.values())


_GLM4V = Spec(
    # its processor reads ``image_token`` by name, the others as text
    named=dict(
        image_token="<|image|>",
        boi="<|begin_of_image|>",
        eoi="<|end_of_image|>",
        bov="<|begin_of_video|>",
        eov="<|end_of_video|>",
        video_token="<|video|>",
    ),
    processor="Glm4vProcessor",
    images_only=True,
    image_processor=("glm4v.image_processing_pil_glm4v", "Glm4vImageProcessorPil"),
    pixels=GLM4V_PIXELS,
    config="Glm4vConfig",
    model="Glm4vForConditionalGeneration",
    mrope_section=[2, 3, 3],
    text=dict(model_type="glm4v_text"),
    vision=dict(_TOWER, out_hidden_size=64, image_size=56),
    ids=dict(
        image_token_id="image_token",
        video_token_id="video_token",
        image_start_token_id="boi",
        image_end_token_id="eoi",
        video_start_token_id="bov",
        video_end_token_id="eov",
    ),
)

#: One per family (``VisionFamily.name``).
SPECS: dict[str, Spec] = {
    "glm-4v": _GLM4V,
    # GLM-4.6V's text model is GLM-4.1V's
    "glm-4.6v": dataclasses.replace(
        _GLM4V,
        processor="Glm46VProcessor",
        image_processor=("glm46v.image_processing_pil_glm46v", "Glm46VImageProcessorPil"),
        config="Glm46VConfig",
        model="Glm46VForConditionalGeneration",
    ),
    # 2 text layers: dense, then 4 experts of which 2 per token, text and vision apart
    "ernie-4.5-vl": Spec(
        named=_ERNIE,
        processor="Ernie4_5_VLMoeProcessor",
        images_only=True,
        image_processor=(
            "ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe",
            "Ernie4_5_VLMoeImageProcessorPil",
        ),
        pixels=GLM4V_PIXELS,
        config="Ernie4_5_VLMoeConfig",
        model="Ernie4_5_VLMoeForConditionalGeneration",
        mrope_section=[2, 2, 4],
        text=dict(
            num_hidden_layers=2,
            moe_num_experts=4,
            moe_k=2,
            moe_intermediate_size=[32, 16],
            moe_num_shared_experts=1,
        ),
        vision=dict(_TOWER, temporal_merge_size=2),
        ids={f"{name}_id": name for name in _ERNIE},
    ),
    # XD-RoPE over 3 axes (width, height, image index); 4 with ``mrope_section=[2, 2, 2, 2]``
    # (position first). Its processor refuses a tokenizer without the first three tokens.
    "hunyuan-vl": Spec(
        named={
            "image_token": "<hy_image>",
            "image_start_token": "<hy_image_start>",
            "image_end_token": "<hy_image_end>",
            "image_newline_token": "<hy_image_newline>",
        },
        processor="HunYuanVLProcessor",
        images_only=False,
        image_processor=(
            "hunyuan_vl.image_processing_pil_hunyuan_vl",
            "HunYuanVLImageProcessorPil",
        ),
        pixels={"shortest_edge": 32**2, "longest_edge": 9 * 32**2},
        config="HunYuanVLConfig",
        model="HunYuanVLForConditionalGeneration",
        mrope_section=[2, 3, 3],
        text=dict(head_dim=16),
        vision=dict(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            num_hidden_layers=1,
            out_hidden_size=64,
            text_hidden_size=64,
            patch_size=16,
            spatial_merge_size=2,
        ),
        ids=dict(
            image_token_id="image_token",
            im_start_id="image_start_token",
            im_end_id="image_end_token",
            im_newline_id="image_newline_token",
        ),
    ),
    # a SigLIP-style vision tower and Ernie-4.5's text model (and tokens)
    "paddleocr-vl": Spec(
        named=_ERNIE,
        processor="PaddleOCRVLProcessor",
        images_only=False,
        image_processor=(
            "paddleocr_vl.image_processing_pil_paddleocr_vl",
            "PaddleOCRVLImageProcessorPil",
        ),
        pixels=GLM4V_PIXELS,
        config="PaddleOCRVLConfig",
        model="PaddleOCRVLForConditionalGeneration",
        mrope_section=[2, 3, 3],
        text=dict(head_dim=16),
        vision=_vit(56, 14, spatial_merge_size=2),
        ids=dict(
            image_token_id="image_token",
            video_token_id="video_token",
            vision_start_token_id="image_start_token",
            vision_end_token_id="image_end_token",
        ),
    ),
}


def named_tokenizer(name: str, source: Path, path: Path | None = None) -> Path:
    """The tokenizer of ``source`` saved to ``path`` (default: ``source`` itself) with family
    ``name``'s named tokens (:attr:`Spec.named`); returns where it was saved."""
    from transformers import AutoTokenizer

    path = source if path is None else path
    tokenizer = AutoTokenizer.from_pretrained(source, extra_special_tokens=SPECS[name].named)
    tokenizer.save_pretrained(path)
    return path


def processor(name: str, tokenizer_dir: Path) -> Any:
    """Family ``name``'s processor with its PIL image processor (:attr:`Spec.pixels`) and the
    tokenizer of ``tokenizer_dir`` (holding the named tokens: :func:`named_tokenizer`)."""
    import transformers as tf

    from energon_pack.encoding import images_only_class

    spec = SPECS[name]
    module, image_cls = spec.image_processor
    image_processor = getattr(importlib.import_module(f"transformers.models.{module}"), image_cls)
    cls = getattr(tf, spec.processor)
    cls = images_only_class(cls) if spec.images_only else cls
    return cls(image_processor(size=spec.pixels), tf.AutoTokenizer.from_pretrained(tokenizer_dir))


def tiny_model(
    name: str, tokenizer: Any, mrope_section: list[int] | None = None
) -> torch.nn.Module:
    """A seeded fp32 model of family ``name`` for ``tokenizer``'s vocabulary and named tokens:
    a 1-block vision tower and a 1-layer text model with mRoPE (``mrope_section``: the spec's
    unless given)."""
    import transformers as tf

    spec = SPECS[name]
    rope = {
        "rope_type": "default",
        "mrope_section": mrope_section or spec.mrope_section,
        "rope_theta": 10000.0,
    }
    text = {**_text(len(tokenizer), rope_parameters=rope), **copy.deepcopy(spec.text)}
    vision = copy.deepcopy(spec.vision)
    ids = {k: tokenizer.convert_tokens_to_ids(spec.named[v]) for k, v in spec.ids.items()}
    config = getattr(tf, spec.config)(text_config=text, vision_config=vision, **ids)
    return _seeded(getattr(tf, spec.model), config)
