# SPDX-License-Identifier: Apache-2.0
"""The conformance suite's table: one :class:`Case` per registered VLM family (by its
``VisionFamily.name``), saying how to build its tiny processor (with a chat template that takes
typed content, modelled on the published one) and tiny model, and what differs. A new family
adds one entry here (docs/howto/add-a-family.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vlm_models as vm
import vlm_mrope_models as mm
from vlm_models import typed_template


@dataclass(frozen=True)
class Case:
    """How one family's tiny processor and model are built, and what differs."""

    #: ``processor(tokenizer_dir)``: the family's processor, built offline.
    processor: Callable[[Path], Any]
    #: ``model(processor)``: a seeded fp32 tiny model of the family.
    model: Callable[[Any], Any]
    #: Tokens the session tokenizer gets (None: the case builds a Gemma tokenizer instead).
    tokens: list[str] | None
    #: The processor's chat template (typed content); None: a prefix-LM processor without one.
    chat_template: str | None
    #: The processor's image token (what the model's ``image_token_id`` names).
    image_token: str
    #: Text after each answer that the loss also covers (the template's turn end).
    answer_end: str = " </s>"
    #: Image sizes ``(width, height)`` planned (besides random ones).
    sizes: list[tuple[int, int]] = field(
        default_factory=lambda: [(56, 56), (150, 60), (40, 120), (9, 14), (112, 84)]
    )
    #: The pack size.
    pack_size: int = 256
    #: The tasks it runs (a prefix-LM family has one turn: no multi-turn conversations).
    tasks: tuple[str, ...] = ("vqa", "conversation")


def _ids(processor: Any, token: str) -> int:
    return processor.tokenizer.convert_tokens_to_ids(token)


def _qwen2_vl_processor(tok_dir: Path) -> Any:
    from transformers import AutoTokenizer, Qwen2VLProcessor

    from energon_pack_tools import make_image_processor

    class ImagesOnly(Qwen2VLProcessor):  # the video processor needs torchvision
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    return ImagesOnly(make_image_processor(), AutoTokenizer.from_pretrained(tok_dir))


def _qwen2_vl_model(processor: Any) -> Any:
    ids = {
        n: _ids(processor, f"<|{t}|>")
        for n, t in (
            ("image", "image_pad"),
            ("video", "video_pad"),
            ("vision_start", "vision_start"),
            ("vision_end", "vision_end"),
        )
    }
    return vm.tiny_vlm("qwen2_vl", len(processor.tokenizer), ids)


def _gemma3_dir(tok_dir: Path, named: dict[str, str] | None = None) -> Path:
    from energon_pack_tools import synthetic_texts

    texts = synthetic_texts(60, seed=8, min_words=1, max_words=5)
    return vm.gemma3_tokenizer(tok_dir.parent / f"{tok_dir.name}_gemma", texts, named)


def _smolvlm_processor(tok_dir: Path) -> Any:
    """SmolVLM's processor without its video processor (torchvision); its
    ``apply_chat_template`` reads the frame defaults from it: none here (no videos)."""
    from types import SimpleNamespace

    processor = vm.smolvlm_processor(tok_dir)
    processor.video_processor = SimpleNamespace(num_frames=None, fps=None)
    return processor


def _mrope(name: str) -> dict[str, Any]:
    """The processor, model and tokens of the mRoPE family ``name`` (``vlm_mrope_models``): its
    processor is built on the tokenizer of ``tok_dir`` saved again with the family's named
    tokens (``tokenizer.image_token`` ...: its processor reads them by name)."""
    return dict(
        processor=lambda d: mm.processor(name, mm.named_tokenizer(name, d)),
        model=lambda p: mm.tiny_model(name, p.tokenizer),
        tokens=mm.SPECS[name].tokens,
    )


IDEFICS3 = typed_template("'<image>'")
#: Ernie-4.5-VL's published template numbers each image item of the conversation:
#: ``Picture 1:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>``.
ERNIE = "{% set ns = namespace(n=0) %}" + typed_template(
    "'Picture ' ~ ns.n ~ ':<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>'"
).replace("{% if c['type'] == 'image' %}", "{% if c['type'] == 'image' %}{% set ns.n = ns.n + 1 %}")

#: One entry per registered family (``VisionFamily.name``).
CASES: dict[str, Case] = {
    "qwen2-vl": Case(
        processor=_qwen2_vl_processor,
        model=_qwen2_vl_model,
        tokens=["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"],
        chat_template=typed_template("'<|vision_start|><|image_pad|><|vision_end|>'"),
        image_token="<|image_pad|>",
        pack_size=96,
    ),
    "internvl": Case(
        processor=vm.internvl_processor,
        model=lambda p: vm.tiny_internvl(len(p.tokenizer), _ids(p, "<IMG_CONTEXT>")),
        tokens=list(vm.INTERNVL_TOKENS.values()),
        chat_template=typed_template("'<IMG_CONTEXT>\\n'"),
        image_token="<IMG_CONTEXT>",
        pack_size=448,
    ),
    "gemma3": Case(
        processor=lambda d: vm.gemma3_processor(_gemma3_dir(d)),
        model=lambda p: vm.tiny_gemma3(p.tokenizer),
        tokens=None,
        chat_template=vm.GEMMA3_CHAT_TEMPLATE,
        image_token="<image_soft_token>",
        answer_end="<end_of_turn>\n",
        sizes=[(32, 32), (150, 60), (40, 120), (9, 14), (200, 90)],
        pack_size=128,
    ),
    "paligemma": Case(
        processor=lambda d: vm.paligemma_processor(_gemma3_dir(d, {"image_token": "<image>"})),
        model=lambda p: vm.tiny_paligemma(p.tokenizer),
        tokens=None,
        chat_template=None,
        image_token="<image>",
        answer_end="<eos>",
        sizes=[(16, 16), (40, 20), (9, 30)],
        pack_size=64,
        tasks=("vqa",),
    ),
    "idefics3": Case(
        processor=vm.idefics3_processor,
        model=lambda p: vm.tiny_idefics3(len(p.tokenizer), _ids(p, "<image>")),
        tokens=vm.IDEFICS3_TOKENS,
        chat_template=IDEFICS3,
        image_token="<image>",
        pack_size=448,
    ),
    "smolvlm": Case(
        processor=_smolvlm_processor,
        model=lambda p: vm.tiny_smolvlm(len(p.tokenizer), _ids(p, "<image>")),
        tokens=vm.IDEFICS3_TOKENS,
        chat_template=IDEFICS3,
        image_token="<image>",
        pack_size=448,
    ),
    "llava-next": Case(
        processor=vm.llava_processor,
        model=lambda p: vm.tiny_llava(len(p.tokenizer), _ids(p, "<image>")),
        tokens=["<image>", "<video>"],
        chat_template=typed_template("'<image>\\n'", images_first=True),
        image_token="<image>",
        pack_size=192,
    ),
    "llava-onevision": Case(
        processor=lambda d: vm.llava_processor(d, onevision=True),
        model=lambda p: vm.tiny_llava(len(p.tokenizer), _ids(p, "<image>"), onevision=True),
        tokens=["<image>", "<video>"],
        chat_template=typed_template("'<image>\\n'", images_first=True),
        image_token="<image>",
        pack_size=192,
    ),
    "glm-4v": Case(
        **_mrope("glm-4v"),
        chat_template=typed_template("'<|begin_of_image|><|image|><|end_of_image|>'"),
        image_token="<|image|>",
        pack_size=96,
    ),
    "glm-4.6v": Case(
        **_mrope("glm-4.6v"),
        chat_template=typed_template("'<|begin_of_image|><|image|><|end_of_image|>'"),
        image_token="<|image|>",
        pack_size=96,
    ),
    "ernie-4.5-vl": Case(
        **_mrope("ernie-4.5-vl"),
        chat_template=ERNIE,
        image_token="<|IMAGE_PLACEHOLDER|>",
        pack_size=96,
    ),
    "hunyuan-vl": Case(
        **_mrope("hunyuan-vl"),
        chat_template=typed_template("'<hy_image_start><hy_image><hy_image_end>'"),
        image_token="<hy_image>",
        pack_size=96,
    ),
    "paddleocr-vl": Case(
        **_mrope("paddleocr-vl"),
        # its published template writes a user turn's images first, then its text
        chat_template=typed_template(
            "'<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>'", images_first=True
        ),
        image_token="<|IMAGE_PLACEHOLDER|>",
        pack_size=96,
    ),
}
