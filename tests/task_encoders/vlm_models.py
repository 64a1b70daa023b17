# SPDX-License-Identifier: Apache-2.0
"""Tiny random Qwen2-VL, Qwen2.5-VL, Qwen3-VL and InternVL models from configs (1 text layer, hidden 64,
a 1-block vision tower), for the packed-vs-alone proofs. No downloads."""

from __future__ import annotations

from typing import Any

import torch

#: Model families the proofs run on, and the vision patch size each expects.
FAMILIES = {"qwen2_vl": 14, "qwen2_5_vl": 14, "qwen3_vl": 16}
#: Qwen2.5-VL's temporal scale (tokens per second of video) in the tiny config.
TOKENS_PER_SECOND = 2


def _text(vocab_size: int, **extra: Any) -> dict[str, Any]:
    return dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
        **extra,
    )


def tiny_vlm(family: str, vocab_size: int, ids: dict[str, int]) -> torch.nn.Module:
    """A seeded fp32 ``*ForConditionalGeneration`` of ``family``; ``ids``: image/video/vision
    start/end token ids."""
    import transformers as tf

    tokens = dict(
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
    )
    mrope = {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}
    vision = dict(depth=1, num_heads=2, patch_size=FAMILIES[family], spatial_merge_size=2)
    if family == "qwen2_vl":
        config = tf.Qwen2VLConfig(
            text_config=_text(vocab_size, rope_parameters=mrope),
            vision_config=dict(vision, embed_dim=32, hidden_size=64, mlp_ratio=2),
            **tokens,
        )
        cls = tf.Qwen2VLForConditionalGeneration
    elif family == "qwen2_5_vl":
        config = tf.Qwen2_5_VLConfig(
            text_config=_text(vocab_size, rope_parameters=mrope),
            vision_config=dict(
                vision,
                hidden_size=32,
                intermediate_size=64,
                out_hidden_size=64,
                window_size=56,
                fullatt_block_indexes=[0],
                tokens_per_second=TOKENS_PER_SECOND,
            ),
            **tokens,
        )
        cls = tf.Qwen2_5_VLForConditionalGeneration
    else:
        config = tf.Qwen3VLConfig(
            text_config=_text(
                vocab_size, head_dim=16, rope_parameters={**mrope, "mrope_interleaved": True}
            ),
            vision_config=dict(
                vision,
                hidden_size=32,
                intermediate_size=64,
                out_hidden_size=64,
                num_position_embeddings=64,
                deepstack_visual_indexes=[0],
            ),
            **tokens,
        )
        cls = tf.Qwen3VLForConditionalGeneration
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cls(config).eval()


#: InternVL test tiles: 56 pixels, ViT patch 14, pixel shuffle 0.5 -> 4 tokens a tile.
INTERNVL_TILE, INTERNVL_TOKENS_PER_TILE = 56, 4


def tiny_internvl(vocab_size: int, image_token_id: int) -> torch.nn.Module:
    """A seeded fp32 ``InternVLForConditionalGeneration`` (1-layer ViT and Qwen2 text model)."""
    import transformers as tf

    config = tf.InternVLConfig(
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=[INTERNVL_TILE, INTERNVL_TILE],
            patch_size=[14, 14],
        ),
        text_config=dict(model_type="qwen2", **_text(vocab_size)),
        image_token_id=image_token_id,
        image_seq_length=INTERNVL_TOKENS_PER_TILE,
        downsample_ratio=0.5,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return tf.InternVLForConditionalGeneration(config).eval()


def internvl_processor(tokenizer_dir: Any, max_tiles: int = 4) -> Any:
    """An ``InternVLProcessor`` built offline: the GotOcr2 PIL image processor (56-pixel tiles,
    at most ``max_tiles`` plus a thumbnail) and the tokenizer of ``tokenizer_dir``, which must
    hold ``<img>``, ``</img>``, ``<IMG_CONTEXT>`` and ``<video>``."""
    from transformers import AutoTokenizer, InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import (
        GotOcr2ImageProcessorPil,
    )

    class ImagesOnly(InternVLProcessor):  # transformers 5.23 needs torchvision for the video one
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, extra_special_tokens=INTERNVL_TOKENS)
    image_processor = GotOcr2ImageProcessorPil(
        size={"height": INTERNVL_TILE, "width": INTERNVL_TILE},
        crop_to_patches=True,
        max_patches=max_tiles,
    )
    return ImagesOnly(image_processor, tokenizer, image_seq_length=INTERNVL_TOKENS_PER_TILE)


#: The InternVL tokenizer's named tokens.
INTERNVL_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}
