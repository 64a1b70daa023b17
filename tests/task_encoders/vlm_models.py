# SPDX-License-Identifier: Apache-2.0
"""Tiny random Qwen2-VL, Qwen2.5-VL, Qwen3-VL, InternVL and Gemma 3 models from configs (small
text models, 1-block vision towers) and their processors, for the packed-vs-alone proofs. No
downloads."""

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


def _vit(image_size: Any, patch_size: Any, width: int = 32, **extra: Any) -> dict[str, Any]:
    """A 1-layer, 2-head vision tower config of ``width`` (MLP twice as wide)."""
    return dict(
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch_size,
        **extra,
    )


def _seeded(cls: Any, config: Any, attn_implementation: str | None = None) -> torch.nn.Module:
    """``cls`` built from ``config`` with seed 0 in eval mode: sdpa throughout, or with
    ``attn_implementation`` for the text model (vision sdpa; fp32 through ``_from_config``)."""
    torch.manual_seed(0)
    if attn_implementation is None:
        config._attn_implementation = "sdpa"
        return cls(config).eval()
    impl = {"text_config": attn_implementation, "vision_config": "sdpa", "": attn_implementation}
    return cls._from_config(config, attn_implementation=impl, dtype=torch.float32).eval()


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
    return _seeded(cls, config)


def tiny_qwen3_5_vl(
    vocab_size: int, ids: dict[str, int], *, moe: bool = False, attn_implementation: str = "sdpa"
) -> Any:
    """A seeded fp32 Qwen3.5-VL (``Qwen3_5ForConditionalGeneration``; ``moe``: the MoE one):
    a gated delta-net layer then a full-attention layer (``attn_implementation``), a 1-block
    sdpa vision tower (patch 16)."""
    import transformers as tf

    text = dict(
        _text(vocab_size, head_dim=16),
        layer_types=["linear_attention", "full_attention"],
        num_hidden_layers=2,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2],
                         "mrope_interleaved": True, "partial_rotary_factor": 0.5},
    )  # fmt: skip
    if moe:
        text |= dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                     shared_expert_intermediate_size=32)  # fmt: skip
    config = (tf.Qwen3_5MoeConfig if moe else tf.Qwen3_5Config)(
        text_config=text,
        vision_config=dict(
            depth=1,
            num_heads=2,
            patch_size=16,
            spatial_merge_size=2,
            hidden_size=32,
            intermediate_size=64,
            out_hidden_size=64,
            num_position_embeddings=64,
        ),
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
    )
    cls = tf.Qwen3_5MoeForConditionalGeneration if moe else tf.Qwen3_5ForConditionalGeneration
    return _seeded(cls, config, None if attn_implementation == "sdpa" else attn_implementation)


#: InternVL test tiles: 56 pixels, ViT patch 14, pixel shuffle 0.5 -> 4 tokens a tile.
INTERNVL_TILE, INTERNVL_TOKENS_PER_TILE = 56, 4


def tiny_internvl(vocab_size: int, image_token_id: int) -> torch.nn.Module:
    """A seeded fp32 ``InternVLForConditionalGeneration`` (1-layer ViT and Qwen2 text model)."""
    import transformers as tf

    config = tf.InternVLConfig(
        vision_config=_vit([INTERNVL_TILE, INTERNVL_TILE], [14, 14]),
        text_config=dict(model_type="qwen2", **_text(vocab_size)),
        image_token_id=image_token_id,
        image_seq_length=INTERNVL_TOKENS_PER_TILE,
        downsample_ratio=0.5,
    )
    return _seeded(tf.InternVLForConditionalGeneration, config)


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


#: Gemma 3 test images: 32 pixels, SigLIP patch 8 -> 4x4 patches pooled to 4 tokens an image.
GEMMA3_IMAGE, GEMMA3_TOKENS_PER_IMAGE = 32, 4
#: The Gemma 3 tokenizer's named image tokens.
GEMMA3_TOKENS = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}
#: google/gemma-3-*-it's chat template (string contents trimmed, system text before the first
#: user turn, ``model`` for the assistant), as published with the checkpoints.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    '    {%- set first_user_prefix = "" -%}\n'
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    '        {{ raise_exception("Conversation roles must alternate user/assistant/...") }}\n'
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    '        {%- set role = "model" -%}\n'
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)


def gemma3_tokenizer(path: Any, texts: list[str], named: dict[str, str] | None = None) -> Any:
    """A transformers ``GemmaTokenizer`` (Gemma's byte-fallback BPE, spaces as ``▁``) trained
    here on ``texts`` and runs of 1..6 newlines (so ``\\n\\n\\n`` is one token, as in Gemma's
    vocabulary), with Gemma 3's turn tokens and chat template and the ``named`` tokens (default:
    Gemma 3's image tokens), saved to ``path``."""
    import json
    import string

    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.normalizer = normalizers.Replace(" ", "▁")
    bpe.pre_tokenizer = pre_tokenizers.Split(Regex("\n+|[^\n]+"), behavior="isolated")
    alphabet = list(string.ascii_letters + string.digits + string.punctuation + "▁\n")
    trainer = trainers.BpeTrainer(
        special_tokens=specials, vocab_size=600, initial_alphabet=alphabet, show_progress=False
    )
    newlines = ["x" + "\n" * k + "y" for k in range(1, 7)] * 20
    bpe.train_from_iterator([*texts, *newlines] * 3, trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    tok = GemmaTokenizer(
        vocab=model["vocab"],
        merges=[tuple(m) for m in model["merges"]],
        extra_special_tokens=GEMMA3_TOKENS if named is None else named,
    )
    tok.add_tokens(["<start_of_turn>", "<end_of_turn>"], special_tokens=True)
    tok.chat_template = GEMMA3_CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path


def gemma3_processor(tokenizer_dir: Any) -> Any:
    """A ``Gemma3Processor`` built offline: the PIL Gemma 3 image processor (32-pixel images, no
    pan-and-scan) and the tokenizer of ``tokenizer_dir`` (:func:`gemma3_tokenizer`)."""
    from transformers import AutoTokenizer, Gemma3Processor
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    image_processor = Gemma3ImageProcessorPil(size={"height": GEMMA3_IMAGE, "width": GEMMA3_IMAGE})
    return Gemma3Processor(
        image_processor,
        tokenizer,
        chat_template=GEMMA3_CHAT_TEMPLATE,
        image_seq_length=GEMMA3_TOKENS_PER_IMAGE,
    )


def tiny_gemma3(tokenizer: Any, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """A seeded fp32 ``Gemma3ForConditionalGeneration``: a 1-layer SigLIP and a 2-layer Gemma 3
    text model, sliding window 3 (shorter than an image's 4 tokens) then full attention; the
    vision tower runs sdpa (its attention is not packed)."""
    import transformers as tf

    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config = tf.Gemma3Config(
        text_config=text,
        vision_config=_vit(GEMMA3_IMAGE, 8, width=16),
        mm_tokens_per_image=GEMMA3_TOKENS_PER_IMAGE,
        image_token_id=tokenizer.image_token_id,
        boi_token_id=tokenizer.boi_token_id,
        eoi_token_id=tokenizer.eoi_token_id,
    )
    return _seeded(tf.Gemma3ForConditionalGeneration, config, attn_implementation)


#: PaliGemma test images: 16 pixels, SigLIP patch 8 -> 4 tokens an image (no pooling).
PALIGEMMA_IMAGE, PALIGEMMA_TOKENS_PER_IMAGE = 16, 4


def paligemma_processor(tokenizer_dir: Any) -> Any:
    """A ``PaliGemmaProcessor`` built offline: a SigLIP image processor (16-pixel images,
    ``image_seq_length`` 4) and the tokenizer of ``tokenizer_dir`` (:func:`gemma3_tokenizer`
    with ``{"image_token": "<image>"}``); the processor adds its ``<loc>``/``<seg>`` tokens."""
    from transformers import AutoTokenizer, PaliGemmaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    image_processor = SiglipImageProcessorPil(
        size={"height": PALIGEMMA_IMAGE, "width": PALIGEMMA_IMAGE}
    )
    image_processor.image_seq_length = PALIGEMMA_TOKENS_PER_IMAGE
    return PaliGemmaProcessor(image_processor, AutoTokenizer.from_pretrained(tokenizer_dir))


def tiny_paligemma(tokenizer: Any, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """A seeded fp32 ``PaliGemmaForConditionalGeneration`` (1-layer SigLIP, 2-layer Gemma)."""
    import transformers as tf

    config = tf.PaliGemmaConfig(
        text_config=dict(
            model_type="gemma",
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=_vit(PALIGEMMA_IMAGE, 8, width=16),
        image_token_id=tokenizer.image_token_id,
        projection_dim=32,
    )
    return _seeded(tf.PaliGemmaForConditionalGeneration, config, attn_implementation)


#: Idefics3 test tiles: 28 pixels, ViT patch 7, scale factor 2 -> 4 tokens a tile; images are
#: first resized to a longest edge of 112 (at most 4 x 4 tiles and the global one).
IDEFICS3_TILE, IDEFICS3_TOKENS_PER_TILE = 28, 4
#: The Idefics3 tokenizer's added tokens (its processor adds the first three itself).
IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)
]


def tiny_idefics3(vocab_size: int, image_token_id: int, smolvlm: bool = False) -> torch.nn.Module:
    """A seeded fp32 ``Idefics3ForConditionalGeneration`` (or ``SmolVLM...``; 1-layer SigLIP
    ViT, Llama text)."""
    import transformers as tf

    config = (tf.SmolVLMConfig if smolvlm else tf.Idefics3Config)(
        vision_config=_vit(IDEFICS3_TILE, 7),
        text_config=dict(model_type="llama", **_text(vocab_size)),
        image_token_id=image_token_id,
        scale_factor=2,
    )
    cls = tf.SmolVLMForConditionalGeneration if smolvlm else tf.Idefics3ForConditionalGeneration
    return _seeded(cls, config)


def idefics3_processor(tokenizer_dir: Any, smolvlm: bool = False) -> Any:
    """An ``Idefics3Processor`` (or a ``SmolVLMProcessor`` without its video processor, which
    needs torchvision; its own needs ``num2words``) built offline: the PIL image processor
    (112-pixel longest edge, 28-pixel tiles) and the tokenizer of ``tokenizer_dir`` (with
    :data:`IDEFICS3_TOKENS`)."""
    import transformers as tf
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil

    class ImagesOnly(tf.SmolVLMProcessor):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    image_processor = (SmolVLMImageProcessorPil if smolvlm else Idefics3ImageProcessorPil)(
        size={"longest_edge": 4 * IDEFICS3_TILE},
        max_image_size={"longest_edge": IDEFICS3_TILE},
        do_image_splitting=True,
    )
    tokenizer = tf.AutoTokenizer.from_pretrained(tokenizer_dir)
    if smolvlm:
        return ImagesOnly(image_processor, tokenizer, None, image_seq_len=IDEFICS3_TOKENS_PER_TILE)
    return tf.Idefics3Processor(image_processor, tokenizer, image_seq_len=IDEFICS3_TOKENS_PER_TILE)


def smolvlm_processor(tokenizer_dir: Any) -> Any:
    return idefics3_processor(tokenizer_dir, smolvlm=True)


def tiny_smolvlm(vocab_size: int, image_token_id: int) -> torch.nn.Module:
    return tiny_idefics3(vocab_size, image_token_id, smolvlm=True)


#: LLaVA test images: 28-pixel patches (CLIP / SigLIP patch 14 -> 4 features a patch) and
#: pinpoints up to 4x4 patches (OneVision's anyres_max_9 then shrinks the largest).
LLAVA_SIDE = 28
LLAVA_PINPOINTS = [[a * LLAVA_SIDE, b * LLAVA_SIDE] for a in (1, 2, 4) for b in (1, 2, 4)]


def llava_processor(tokenizer_dir: Any, onevision: bool = False) -> Any:
    """A ``LlavaNextProcessor`` (CLIP-style: shortest edge + center crop, CLS dropped) or a
    ``LlavaOnevisionProcessor`` (SigLIP-style: square resize, 4 tokens a patch) built offline
    with PIL image processors and the tokenizer of ``tokenizer_dir`` (which holds ``<image>``)."""
    import transformers as tf
    from transformers.models.llava_next.image_processing_pil_llava_next import (
        LlavaNextImageProcessorPil,
    )
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    tokenizer = tf.AutoTokenizer.from_pretrained(tokenizer_dir)
    if not onevision:
        side = {"height": LLAVA_SIDE, "width": LLAVA_SIDE}
        image_processor = LlavaNextImageProcessorPil(
            size={"shortest_edge": LLAVA_SIDE}, crop_size=side, image_grid_pinpoints=LLAVA_PINPOINTS
        )
        return tf.LlavaNextProcessor(
            image_processor,
            tokenizer,
            patch_size=14,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
        )

    class ImagesOnly(tf.LlavaOnevisionProcessor):  # the video processor needs torchvision
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    image_processor = LlavaOnevisionImageProcessorPil(
        size={"height": LLAVA_SIDE, "width": LLAVA_SIDE}, image_grid_pinpoints=LLAVA_PINPOINTS
    )
    return ImagesOnly(
        image_processor, tokenizer, num_image_tokens=4, vision_feature_select_strategy="full"
    )


def tiny_llava(vocab_size: int, image_token_id: int, onevision: bool = False) -> torch.nn.Module:
    """A seeded fp32 ``LlavaNextForConditionalGeneration`` (1-layer CLIP, Llama text) or
    ``LlavaOnevisionForConditionalGeneration`` (1-layer SigLIP, Qwen2 text)."""
    import transformers as tf

    vision = _vit(LLAVA_SIDE, 14)
    common = dict(
        image_token_id=image_token_id,
        image_grid_pinpoints=LLAVA_PINPOINTS,
        vision_feature_layer=-1,
    )
    if onevision:
        config = tf.LlavaOnevisionConfig(
            vision_config=dict(model_type="siglip_vision_model", **vision),
            text_config=dict(model_type="qwen2", **_text(vocab_size)),
            vision_feature_select_strategy="full",
            video_token_id=image_token_id + 1,
            **common,
        )
        cls = tf.LlavaOnevisionForConditionalGeneration
    else:
        config = tf.LlavaNextConfig(
            vision_config=dict(model_type="clip_vision_model", **vision),
            text_config=dict(model_type="llama", **_text(vocab_size)),
            vision_feature_select_strategy="default",
            **common,
        )
        cls = tf.LlavaNextForConditionalGeneration
    return _seeded(cls, config)


#: The session tokenizer's minimal template for typed content: ``<|role|> `` then the items,
#: ``MEDIA`` for each image item (images first with ``images_first``, as LLaVA's template).
_TYPED = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}ITEMS{% endif %}"
    "{% if m['role'] == 'assistant' %}{{ ' </s>' }}{% endif %}{{ ' ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)
_INLINE = (
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}{{ MEDIA }}"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}"
)
_IMAGES_FIRST = (
    "{% for c in m['content'] | selectattr('type', 'equalto', 'image') %}{{ MEDIA }}{% endfor %}"
    "{% for c in m['content'] | selectattr('type', 'equalto', 'text') %}{{ c['text'] }}{% endfor %}"
)


def typed_template(media: str, images_first: bool = False) -> str:
    """The minimal template with ``media`` (a Jinja string literal) for each image item."""
    items = (_IMAGES_FIRST if images_first else _INLINE).replace("MEDIA", media)
    return _TYPED.replace("ITEMS", items)


def typed(text: str) -> list[dict[str, Any]]:
    """Message text as typed content split at its tags, as a processor's template takes it:
    ``"<image> hi"`` -> ``[{"type": "image"}, {"type": "text", "text": " hi"}]``."""
    import re

    return [
        {"type": "image"} if p == "<image>" else {"type": "text", "text": p}
        for p in re.split("(<image>)", text)
        if p
    ]
