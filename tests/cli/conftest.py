# SPDX-License-Identifier: Apache-2.0
"""CLI fixtures: a local Qwen2-VL-style processor directory, as a user would have one on disk."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def processor_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """The session tokenizer plus the video and vision start/end tokens, and the small
    Qwen2-VL image processor of :func:`energon_pack_tools.make_image_processor`, saved with
    ``save_pretrained`` in one directory (tokenizer files + ``preprocessor_config.json``)."""
    from transformers import AutoTokenizer

    from energon_pack_tools import make_image_processor

    path = tmp_path_factory.mktemp("processor")
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"], special_tokens=True)
    tok.save_pretrained(path)
    make_image_processor().save_pretrained(path)
    return path
