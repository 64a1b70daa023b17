# SPDX-License-Identifier: Apache-2.0
"""``ConversationPackingTaskEncoder``: multi-turn conversations with any number of images and
videos (LLaVA-style data), text-only ones mixed in; loss on assistant turns only. A crude
dataset of LLaVA records is cooked by :func:`cook_conversation` (the sample's ``json`` plus
``imgN.<ext>`` images and ``vidN.fM.<ext>`` frames). energon's ``VQASample``, ``VidQASample``
and ``InterleavedSample`` (one *text* document, loss on its text) blend in the same loader.
See docs/howto/conversations.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from megatron.energon import (
    Cooker,
    InterleavedSample,
    Sample,
    VidQASample,
    VQASample,
    basic_sample_keys,
    edataclass,
    stateless,
)

from energon_pack.task_encoders._multimodal import TEXT_ROLE, Message, MultimodalPackingTaskEncoder
from energon_pack.task_encoders._vqa import vqa_conversations, vqa_media

__all__ = [
    "ConversationPackingTaskEncoder",
    "ConversationSample",
    "cook_conversation",
    "normalize_conversation",
]

#: LLaVA's speaker names -> chat roles.
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "system": "system",
}

_MEDIA_FILE = re.compile(r"^(img|vid)(\d+)(?:\.f(\d+))?\.[A-Za-z0-9]+$")


@edataclass
class ConversationSample(Sample):
    """One conversation with its media."""

    #: Messages ``{"role": "system" | "user" | "assistant", "content": str}``, in order.
    conversation: list[dict[str, str]]
    #: Images (encoded bytes, PIL images or (C, H, W) tensors), in ``<image>`` tag order.
    images: list[Any] | None = None
    #: Videos, each a list of frames (as images), in ``<video>`` tag order.
    videos: list[list[Any]] | None = None
    #: Frames per second of each video (None: the encoder's ``default_fps``).
    video_fps: list[float | None] | None = None


def normalize_conversation(record: dict[str, Any], *, key: str = "?") -> list[Message]:
    """LLaVA ``conversations`` (``from``/``value``) or ``messages`` (``role``/``content``) as
    messages: ``[{"from": "gpt", "value": "hi"}]`` -> ``[{"role": "assistant", "content": "hi"}]``.
    """
    turns = record.get("conversations", record.get("messages"))
    if not isinstance(turns, list) or not turns:
        raise ValueError(
            f"sample {key!r}: needs a non-empty list 'conversations' (LLaVA: from/value) or "
            f"'messages' (role/content); got fields {sorted(record)}."
        )
    out = []
    for i, turn in enumerate(turns):
        role = turn.get("from", turn.get("role")) if isinstance(turn, dict) else None
        text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
        if role not in ROLES or not isinstance(text, str):
            raise ValueError(
                f"sample {key!r}: turn {i} needs a role in {sorted(ROLES)} and string text "
                f"(got {turn!r:.80})."
            )
        out.append({"role": ROLES[role], "content": text})
    return out


def interleaved_conversation(
    sample: InterleavedSample, *, image_tag: str = "<image>", separator: str = "\n"
) -> tuple[list[Message], list[Any]]:
    """An ``InterleavedSample`` as one text message and its images, in order:
    ``["a cat", img, "on a mat"]`` -> ``[{"role": "text", "content": "a cat\\n<image>\\non a
    mat"}]``, ``[img]``. A text containing ``image_tag`` itself is a ``ValueError``."""
    parts: list[str] = []
    images: list[Any] = []
    for item in sample.sequence:
        if not isinstance(item, str):
            images.append(item)
            parts.append(image_tag)
        elif image_tag in item:
            raise ValueError(
                f"sample {sample.__key__!r}: a text of the sequence contains {image_tag!r}, "
                "which would be read as an image; remove it from the text."
            )
        else:
            parts.append(item)
    if not any(isinstance(i, str) and i.strip() for i in sample.sequence):
        raise ValueError(f"sample {sample.__key__!r}: the sequence has no text to learn.")
    return [{"role": TEXT_ROLE, "content": separator.join(parts)}], images


@stateless
def cook_conversation(sample: dict) -> ConversationSample:
    """Cook a crude sample: its ``json`` record plus ``imgN.*`` and ``vidN.fM.*`` media files."""
    key = sample.get("__key__", "?")
    record = sample.get("json")
    if isinstance(record, (bytes, bytearray)):
        record = json.loads(record)
    if not isinstance(record, dict):
        raise ValueError(f"sample {key!r}: the 'json' field must be a JSON object.")
    images: dict[int, Any] = {}
    frames: dict[int, dict[int, Any]] = {}
    for name, data in sample.items():
        m = _MEDIA_FILE.match(name)
        if m and m.group(1) == "img":
            images[int(m.group(2))] = data
        elif m:
            frames.setdefault(int(m.group(2)), {})[int(m.group(3) or 0)] = data
    fps = record.get("video_fps", record.get("fps"))
    videos = [[f[j] for j in sorted(f)] for _, f in sorted(frames.items())]
    return ConversationSample(
        **basic_sample_keys(sample),
        conversation=normalize_conversation(record, key=key),
        images=[images[i] for i in sorted(images)],
        videos=videos,
        video_fps=fps if isinstance(fps, list) else [fps] * len(videos),
    )


class ConversationPackingTaskEncoder(MultimodalPackingTaskEncoder[Any]):
    """Packs conversations (and energon's VQA, VidQA and interleaved samples) with their images
    and videos.

    Arguments as in :class:`~energon_pack.task_encoders.MultimodalPackingTaskEncoder`, plus
    ``vqa_answers`` (``"sample"``, ``"first"`` or ``"all"``) for VQA samples in the blend.
    """

    cookers = (Cooker(cook_conversation),)
    #: What joins the items of an ``InterleavedSample`` (texts and image tags).
    interleaved_separator: str = "\n"

    def __init__(self, *args: Any, vqa_answers: str = "sample", **kwargs: Any) -> None:
        self.vqa_answers = vqa_answers
        super().__init__(*args, **kwargs)

    def to_conversation(self, sample: Any) -> Iterable[tuple[str, list[Message]]]:
        if isinstance(sample, (VQASample, VidQASample)):
            tag = self.video_tag if isinstance(sample, VidQASample) else self.image_tag
            return vqa_conversations(sample, self.vqa_answers, tag)
        if isinstance(sample, InterleavedSample):
            return [(sample.__key__, self._interleaved(sample)[0])]
        return [(sample.__key__, list(sample.conversation))]

    def media_of(self, sample: Any) -> tuple[list[Any], list[list[Any]], list[float | None]]:
        if isinstance(sample, (VQASample, VidQASample)):
            return vqa_media(sample)
        if isinstance(sample, InterleavedSample):
            return self._interleaved(sample)[1], [], []
        videos = list(sample.videos or [])
        fps = list(sample.video_fps or [None] * len(videos))
        if len(fps) != len(videos):
            raise ValueError(
                f"sample {sample.__key__!r}: {len(videos)} videos but {len(fps)} fps values."
            )
        return list(sample.images or []), videos, fps

    def _interleaved(self, sample: InterleavedSample) -> tuple[list[Message], list[Any]]:
        return interleaved_conversation(
            sample, image_tag=self.image_tag, separator=self.interleaved_separator
        )
