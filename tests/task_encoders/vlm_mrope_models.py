# SPDX-License-Identifier: Apache-2.0
"""Tiny processors and random models of the mRoPE families GLM-4.1V / GLM-4.6V, Ernie-4.5-VL,
HunYuan-VL and PaddleOCR-VL (built offline from configs and PIL image processors, 1-layer
towers), for their conformance cases (``families/family_cases.py``) and
``test_new_families.py``. No downloads; no torchvision (each processor is built
without its video processor)."""

from __future__ import annotations

from typing import Any

import torch
from vlm_models import _seeded, _text, _vit

#: GLM-4V's named tokens (its processor reads ``<|begin_of_video|>`` / ``<|end_of_video|>`` too).
GLM4V_TOKENS = [
    "<|image|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|video|>",
]
#: Images between one and nine merged 28-pixel patches.
GLM4V_PIXELS = {"shortest_edge": 28 * 28, "longest_edge": 9 * 28 * 28}


def glm4v_processor(tokenizer_dir: Any, glm46v: bool = False) -> Any:
    """A ``Glm4vProcessor`` (or ``Glm46VProcessor``) with its PIL image processor
    (:data:`GLM4V_PIXELS`) and the tokenizer of ``tokenizer_dir`` (holding
    :data:`GLM4V_TOKENS`)."""
    import transformers as tf

    from energon_pack.encoding import images_only_class

    if glm46v:
        from transformers.models.glm46v.image_processing_pil_glm46v import (
            Glm46VImageProcessorPil as Pil,
        )
    else:
        from transformers.models.glm4v.image_processing_pil_glm4v import (
            Glm4vImageProcessorPil as Pil,
        )
    cls = images_only_class(tf.Glm46VProcessor if glm46v else tf.Glm4vProcessor)
    return cls(Pil(size=GLM4V_PIXELS), tf.AutoTokenizer.from_pretrained(tokenizer_dir))


def tiny_glm4v(tokenizer: Any, glm46v: bool = False) -> torch.nn.Module:
    """A seeded fp32 ``Glm4vForConditionalGeneration`` (or ``Glm46V...``, whose text model is
    GLM-4.1V's): a 1-block vision tower and a 1-layer text model with mRoPE."""
    import transformers as tf

    ids = {n: tokenizer.convert_tokens_to_ids(t) for n, t in zip(
        ("image", "image_start", "image_end", "video_start", "video_end", "video"), GLM4V_TOKENS
    )}  # fmt: skip
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
    text = dict(model_type="glm4v_text", **_text(len(tokenizer), rope_parameters=rope))
    vision = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        out_hidden_size=64,
        patch_size=14,
        spatial_merge_size=2,
        image_size=56,
    )
    config = (tf.Glm46VConfig if glm46v else tf.Glm4vConfig)(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        image_start_token_id=ids["image_start"],
        image_end_token_id=ids["image_end"],
        video_start_token_id=ids["video_start"],
        video_end_token_id=ids["video_end"],
    )
    cls = tf.Glm46VForConditionalGeneration if glm46v else tf.Glm4vForConditionalGeneration
    return _seeded(cls, config)


#: Ernie-4.5-VL's named tokens (its processor reads them from the tokenizer by these names).
ERNIE_TOKENS = {
    "image_token": "<|IMAGE_PLACEHOLDER|>",
    "image_start_token": "<|IMAGE_START|>",
    "image_end_token": "<|IMAGE_END|>",
    "video_token": "<|VIDEO_PLACEHOLDER|>",
    "video_start_token": "<|VIDEO_START|>",
    "video_end_token": "<|VIDEO_END|>",
}


def ernie_processor(tokenizer_dir: Any) -> Any:
    """An ``Ernie4_5_VLMoeProcessor`` with its PIL image processor (:data:`GLM4V_PIXELS`) and
    the tokenizer of ``tokenizer_dir`` (saved with :data:`ERNIE_TOKENS` as named tokens)."""
    import transformers as tf
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil,
    )

    from energon_pack.encoding import images_only_class

    cls = images_only_class(tf.Ernie4_5_VLMoeProcessor)
    tokenizer = tf.AutoTokenizer.from_pretrained(tokenizer_dir)
    return cls(Ernie4_5_VLMoeImageProcessorPil(size=GLM4V_PIXELS), tokenizer)


def tiny_ernie(tokenizer: Any) -> torch.nn.Module:
    """A seeded fp32 ``Ernie4_5_VLMoeForConditionalGeneration``: a 1-block vision tower and a
    2-layer text model (dense, then 4 experts of which 2 per token, text and vision apart)."""
    import transformers as tf

    ids = {f"{k}_id": tokenizer.convert_tokens_to_ids(v) for k, v in ERNIE_TOKENS.items()}
    rope = {"rope_type": "default", "mrope_section": [2, 2, 4], "rope_theta": 10000.0}
    text = _text(len(tokenizer), rope_parameters=rope)
    text.update(
        num_hidden_layers=2,
        moe_num_experts=4,
        moe_k=2,
        moe_intermediate_size=[32, 16],
        moe_num_shared_experts=1,
    )
    vision = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_merge_size=2,
    )
    config = tf.Ernie4_5_VLMoeConfig(text_config=text, vision_config=vision, **ids)
    return _seeded(tf.Ernie4_5_VLMoeForConditionalGeneration, config)


#: HunYuan-VL's named tokens (its processor refuses a tokenizer without the first three).
HUNYUAN_TOKENS = {
    "image_token": "<hy_image>",
    "image_start_token": "<hy_image_start>",
    "image_end_token": "<hy_image_end>",
    "image_newline_token": "<hy_image_newline>",
}


def hunyuan_processor(tokenizer_dir: Any) -> Any:
    """A ``HunYuanVLProcessor`` with its PIL image processor (patch 16, 1024..9216 pixels) and
    the tokenizer of ``tokenizer_dir`` (saved with :data:`HUNYUAN_TOKENS` as named tokens)."""
    import transformers as tf
    from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import (
        HunYuanVLImageProcessorPil,
    )

    image_processor = HunYuanVLImageProcessorPil(
        size={"shortest_edge": 32**2, "longest_edge": 9 * 32**2}
    )
    return tf.HunYuanVLProcessor(image_processor, tf.AutoTokenizer.from_pretrained(tokenizer_dir))


def tiny_hunyuan(tokenizer: Any, axes: int = 3) -> torch.nn.Module:
    """A seeded fp32 ``HunYuanVLForConditionalGeneration`` (1-layer vision tower and text model)
    with ``axes`` XD-RoPE axes (3: width, height, image index; 4: position first)."""
    import transformers as tf

    ids = {n: tokenizer.convert_tokens_to_ids(t) for n, t in HUNYUAN_TOKENS.items()}
    section = [2, 3, 3] if axes == 3 else [2, 2, 2, 2]
    rope = {"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0}
    config = tf.HunYuanVLConfig(
        text_config=_text(len(tokenizer), head_dim=16, rope_parameters=rope),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            num_hidden_layers=1,
            out_hidden_size=64,
            text_hidden_size=64,
            patch_size=16,
            spatial_merge_size=2,
        ),
        image_token_id=ids["image_token"],
        im_start_id=ids["image_start_token"],
        im_end_id=ids["image_end_token"],
        im_newline_id=ids["image_newline_token"],
    )
    return _seeded(tf.HunYuanVLForConditionalGeneration, config)


def paddleocr_processor(tokenizer_dir: Any) -> Any:
    """A ``PaddleOCRVLProcessor`` with its PIL image processor (:data:`GLM4V_PIXELS`) and the
    tokenizer of ``tokenizer_dir`` (saved with :data:`ERNIE_TOKENS`, Ernie-4.5's, as named
    tokens)."""
    import transformers as tf
    from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
        PaddleOCRVLImageProcessorPil,
    )

    image_processor = PaddleOCRVLImageProcessorPil(size=GLM4V_PIXELS)
    return tf.PaddleOCRVLProcessor(image_processor, tf.AutoTokenizer.from_pretrained(tokenizer_dir))


def tiny_paddleocr(tokenizer: Any) -> torch.nn.Module:
    """A seeded fp32 ``PaddleOCRVLForConditionalGeneration`` (1-layer SigLIP-style vision tower
    and Ernie-4.5 text model with mRoPE)."""
    import transformers as tf

    ids = {n: tokenizer.convert_tokens_to_ids(t) for n, t in ERNIE_TOKENS.items()}
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
    config = tf.PaddleOCRVLConfig(
        text_config=_text(len(tokenizer), head_dim=16, rope_parameters=rope),
        vision_config=_vit(56, 14, spatial_merge_size=2),
        image_token_id=ids["image_token"],
        video_token_id=ids["video_token"],
        vision_start_token_id=ids["image_start_token"],
        vision_end_token_id=ids["image_end_token"],
    )
    return _seeded(tf.PaddleOCRVLForConditionalGeneration, config)
