# SPDX-License-Identifier: Apache-2.0
"""``VQAPackingTaskEncoder``: energon's ``VQASample`` (image, question, answers) and
``VidQASample`` (video, question, answers) into packs: a one-turn conversation, the loss on the
answer only. ``answers="sample"`` (default) draws one answer per sample, weighted by
``answer_weights`` and seeded from the restore key; ``"first"`` takes the first; ``"all"`` makes
one document per answer (keys ``key#a0``, ``key#a1``, ...). See docs/howto/vqa.md.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable
from typing import Any

import torch
from megatron.energon import VidQASample, VQASample

from energon_pack.encoding import video_frames
from energon_pack.task_encoders._multimodal import Message, MultimodalPackingTaskEncoder

__all__ = ["VQAPackingTaskEncoder"]

#: How a sample with several answers becomes documents (see the module docstring).
ANSWER_MODES = ("sample", "first", "all")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def _json_field(sample: VQASample | VidQASample, name: str) -> Any:
    """A field as given, or parsed when it arrives as the raw bytes of a ``.json`` file (a
    webdataset read without a decoder)."""
    value = getattr(sample, name)
    if not isinstance(value, (bytes, bytearray)):
        return value
    try:
        return json.loads(value)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(
            f"sample {sample.__key__!r}: its {name} file is not valid JSON ({e}); write a JSON "
            "list (answers: strings, answer_weights: numbers)."
        ) from e


def _answers(sample: VQASample | VidQASample) -> list[str]:
    answers, key = _json_field(sample, "answers"), sample.__key__
    if answers is None:
        raise ValueError(f"sample {key!r} has no answers (a test split?); nothing to train on.")
    answers = [answers] if isinstance(answers, str) else answers
    ok = (str, bytes, bytearray, int, float)
    if not isinstance(answers, (list, tuple)) or not all(
        isinstance(a, ok) and not isinstance(a, bool) for a in answers
    ):
        raise ValueError(
            f"sample {key!r}: answers must be a string or a list of strings, got "
            f"{answers!r:.80}; write them as a JSON list of strings (VQAv2's "
            '[{"answer": ...}] dicts: keep only the "answer" values).'
        )
    return [_text(a) for a in answers]


def _weights(sample: VQASample | VidQASample, n: int) -> list[float] | None:
    """``answer_weights`` as ``n`` floats (None: uniform); raises naming the sample when they
    are not ``n`` finite non-negative numbers with a positive sum."""
    weights = _json_field(sample, "answer_weights")
    if weights is None:
        return None
    if isinstance(weights, torch.Tensor):
        weights = weights.reshape(-1).tolist()
    try:
        values = [float(w) for w in ([weights] if isinstance(weights, (int, float)) else weights)]
    except (TypeError, ValueError):
        values = []
    if len(values) != n or not all(math.isfinite(w) and w >= 0 for w in values) or sum(values) <= 0:
        raise ValueError(
            f"sample {sample.__key__!r}: answer_weights {weights!r:.80} are not {n} finite "
            f"non-negative numbers (one per answer, not all zero); fix the dataset's weights."
        )
    return values


def vqa_conversations(
    sample: VQASample | VidQASample, mode: str = "sample", image_tag: str = "<image>"
) -> list[tuple[str, list[Message]]]:
    """``(key, messages)`` per document of a VQA sample (one, or one per answer with ``"all"``);
    ``image_tag`` is the tag of the sample's medium (``"<video>"`` for a ``VidQASample``).

    ``VQASample(context="what colour", answers=["red"])`` ->
    ``[(key, [{"role": "user", "content": "<image>\\nwhat colour"},
    {"role": "assistant", "content": "red"}])]``.
    """
    if mode not in ANSWER_MODES:
        raise ValueError(f"answers={mode!r}: choose one of {ANSWER_MODES}.")
    answers = _answers(sample)
    if not answers:
        raise ValueError(f"sample {sample.__key__!r} has an empty answer list.")
    if mode == "first":
        chosen = [(sample.__key__, answers[0])]
    elif mode == "all":
        chosen = [(f"{sample.__key__}#a{i}", a) for i, a in enumerate(answers)]
    else:
        chosen = [
            (sample.__key__, random.choices(answers, weights=_weights(sample, len(answers)))[0])
        ]
    question = f"{image_tag}\n{_text(sample.context)}"
    return [
        (key, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
        for key, answer in chosen
    ]


def vqa_media(
    sample: VQASample | VidQASample,
) -> tuple[list[Any], list[list[Any]], list[float | None]]:
    """``(images, videos, fps)`` of a VQA sample: its image, or its video's frames and fps."""
    if isinstance(sample, VidQASample):
        frames, fps = video_frames(sample.video, key=sample.__key__)
        return [], [frames], [fps]
    return [sample.image], [], []


class VQAPackingTaskEncoder(MultimodalPackingTaskEncoder[VQASample | VidQASample]):
    """Packs VQA (image) and VidQA (video) documents with the loss on the answer only.

    Args:
        answers: ``"sample"`` (default), ``"first"`` or ``"all"`` (see the module docstring).
        The rest as in :class:`~energon_pack.task_encoders.MultimodalPackingTaskEncoder`.
    """

    def __init__(self, *args: Any, answers: str = "sample", **kwargs: Any) -> None:
        if answers not in ANSWER_MODES:
            raise ValueError(f"answers={answers!r}: choose one of {ANSWER_MODES}.")
        self.answers = answers
        super().__init__(*args, **kwargs)

    def to_conversation(
        self, sample: VQASample | VidQASample
    ) -> Iterable[tuple[str, list[Message]]]:
        tag = self.video_tag if isinstance(sample, VidQASample) else self.image_tag
        return vqa_conversations(sample, self.answers, tag)

    def media_of(
        self, sample: VQASample | VidQASample
    ) -> tuple[list[Any], list[list[Any]], list[float | None]]:
        return vqa_media(sample)
