# SPDX-License-Identifier: Apache-2.0
"""VLM fixtures: a tokenizer with video and vision start/end tokens, and real VQA and
conversation datasets (tiny PNGs and PNG frame sequences) made with energon in tmp dirs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from vlm_helpers import VLM_PACK_SIZE, VLM_TOKENS, png, write_frames  # noqa: F401


@pytest.fixture(scope="session")
def vlm_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """The session tokenizer plus ``<|video_pad|>``, ``<|vision_start|>``, ``<|vision_end|>``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(VLM_TOKENS, special_tokens=True)
    path = tmp_path_factory.mktemp("vlm_tok")
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def vlm_tokenizer(vlm_tokenizer_dir: Path) -> Any:
    from energon_pack.encoding import load_tokenizer

    return load_tokenizer(vlm_tokenizer_dir)


@pytest.fixture(scope="session")
def vqa_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``VQASample`` webdataset of 12 samples (28..84 px images, 1..3 answers)."""
    from energon_pack_tools import make_vqa_dataset, sample_key, synthetic_texts

    rng = random.Random(3)
    n = 12
    images = [png(rng.choice([28, 56, 84]), rng.choice([28, 56]), seed=i) for i in range(n)]
    questions = synthetic_texts(n, seed=21, min_words=2, max_words=8)
    answers = [synthetic_texts(rng.randint(1, 3), seed=30 + i, max_words=4) for i in range(n)]
    path = make_vqa_dataset(tmp_path_factory.mktemp("vqa"), images, questions, answers)
    keys = [sample_key(i) for i in range(n)]
    return path, keys, dict(zip(keys, zip(questions, answers)))


def conversation_records(root: Path, n: int = 16) -> list[dict[str, Any]]:
    """LLaVA records: text-only, 1 image, 3 images (two turns), and a video, in turn."""
    from energon_pack_tools import synthetic_texts

    texts = synthetic_texts(4 * n, seed=41, min_words=1, max_words=6)
    records: list[dict[str, Any]] = []
    for i in range(n):
        q, a, q2, a2 = texts[4 * i : 4 * i + 4]
        kind = i % 4
        turns = [{"from": "human", "value": q}, {"from": "gpt", "value": a}]
        record: dict[str, Any] = {"id": i, "conversations": turns}
        if kind == 1:
            (root / f"i{i}.png").write_bytes(png(56, 84, seed=i))
            record["image"] = f"i{i}.png"
            turns[0]["value"] = "<image>\n" + q
        elif kind == 2:
            for j in range(3):
                (root / f"i{i}_{j}.png").write_bytes(png(28 + 28 * j, 56, seed=10 * i + j))
            record["image"] = [f"i{i}_{j}.png" for j in range(3)]
            turns[0]["value"] = "<image> <image> " + q
            turns += [
                {"from": "human", "value": "<image> " + q2},
                {"from": "gpt", "value": a2},
            ]
        elif kind == 3:
            write_frames(root / f"v{i}", 3 + i % 2, (56, 56), seed=i)
            record["video"] = f"v{i}"
            record["fps"] = 2.0
            turns[0]["value"] = "<video>\n" + q
        records.append(record)
    return records


@pytest.fixture(scope="session")
def conversation_dataset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Crude LLaVA conversation webdataset of 16 records (see :func:`conversation_records`)."""
    from energon_pack_tools import make_conversation_dataset, sample_key

    root = tmp_path_factory.mktemp("llava_media")
    records = conversation_records(root)
    path = make_conversation_dataset(
        tmp_path_factory.mktemp("conv"), records, media_root=root, samples_per_shard=5
    )
    keys = [sample_key(i) for i in range(len(records))]
    return path, keys, dict(zip(keys, records))


@pytest.fixture(scope="session")
def short_long_blend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make_short_long_blend``'s 1:1 blend of ``short`` (400 documents of 4..64 tokens) and
    ``long`` (100 of 300..1500), its datasets beside it."""
    from energon_pack_tools import make_short_long_blend

    return make_short_long_blend(tmp_path_factory.mktemp("blend"))


@pytest.fixture(scope="session")
def grouped_blend(short_long_blend: Path) -> Path:
    """The same 1:1 blend with ``short`` in packing group ``chat`` and ``long`` in ``docs``."""
    from energon_pack_tools import make_blend_metadataset

    datasets = [(short_long_blend.parent / n, 1.0) for n in ("short", "long")]
    return make_blend_metadataset(
        short_long_blend.parent / "grouped.yaml", datasets, ["chat", "docs"]
    )
