# SPDX-License-Identifier: Apache-2.0
"""LLaVA records and media files as a user has them on disk (for make-dataset and analyze).

Media tokens with :func:`energon_pack_tools.make_image_processor` (patch 14, merge 2):
``a.png`` 56x56 -> grid (1, 4, 4) -> 4 tokens; ``sub/b.png`` 28x56 -> (1, 4, 2) -> 2 tokens;
``clip/`` 3 frames 56x56 (padded to 4) -> (2, 4, 4) -> 8 tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_llava_media(root: Path) -> dict[str, bytes]:
    """Two images and a 3-frame video folder under ``root``; name -> bytes."""
    from energon_pack_tools import random_png_bytes

    files = {
        "a.png": random_png_bytes(56, 56, seed=1),
        "sub/b.png": random_png_bytes(28, 56, seed=2),
        **{f"clip/{i:04d}.png": random_png_bytes(56, 56, seed=10 + i) for i in range(3)},
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


#: Text-only (LLaVA from/value), two images, a video (role/content), one untagged image.
LLAVA_RECORDS: list[dict[str, Any]] = [
    {"id": "t", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "a"}]},
    {
        "id": "i2",
        "image": ["a.png", "sub/b.png"],
        "conversations": [
            {"from": "human", "value": "<image> <image> which"},
            {"from": "gpt", "value": "the first"},
        ],
    },
    {
        "id": "v",
        "video": "clip",
        "fps": 2.0,
        "messages": [
            {"role": "user", "content": "<video> what"},
            {"role": "assistant", "content": "a cat"},
        ],
    },
    {
        "id": "u",
        "image": "a.png",
        "conversations": [{"from": "human", "value": "what"}, {"from": "gpt", "value": "b"}],
    },
]
