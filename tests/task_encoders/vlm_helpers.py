# SPDX-License-Identifier: Apache-2.0
"""Plain helpers of the VLM tests (importable by name: ``from vlm_helpers import png``; a
``from conftest import ...`` would pick whichever test folder's conftest was imported first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The tokens a Qwen2-VL-style tokenizer has besides the image placeholder.
VLM_TOKENS = ["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
#: Pack size of the VLM tests (a 56x84 image is 6 tokens, a 4-frame 56x56 video 8).
VLM_PACK_SIZE = 64


def png(width: int, height: int, seed: int) -> bytes:
    from energon_pack_tools import random_png_bytes

    return random_png_bytes(width, height, seed=seed)


def chat_sample(key: str, turns: list[str], **media: Any) -> Any:
    """A ``ConversationSample`` of ``turns`` alternating user, assistant:
    ``chat_sample("k", ["<image> is it", "a seed"], images=[png(28, 28, 1)])``."""
    from energon_pack.task_encoders import ConversationSample

    roles = ["user", "assistant"] * len(turns)
    return ConversationSample(
        __key__=key,
        __restore_key__=(),
        conversation=[{"role": r, "content": t} for r, t in zip(roles, turns)],
        **media,
    )


def write_frames(folder: Path, n: int, size: tuple[int, int], seed: int) -> Path:
    """``n`` PNG frames ``0000.png``... of ``size`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"{i:04d}.png").write_bytes(png(*size, seed=seed * 100 + i))
    return folder


def assert_wrappers_whole(tokens: Any, start: int, end: int) -> None:
    """The vision start/end tokens of a piece nest and balance: no cut parted an item (or a
    Qwen3-VL video's timestamps) from the start/end tokens around it."""
    depth = 0
    for t in tokens.tolist():
        depth += (t == start) - (t == end)
        assert depth >= 0, tokens.tolist()
    assert depth == 0, tokens.tolist()
