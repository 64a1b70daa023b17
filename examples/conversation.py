# SPDX-License-Identifier: Apache-2.0
"""Conversations with several images, a video and text-only turns, from LLaVA JSON to packs.

Runs in a few seconds on a CPU, with no arguments: it writes LLaVA-style records (text-only,
one image, three images over two turns, a video stored as PNG frames) and their media files,
turns them into an energon dataset with ``make_conversation_dataset``, packs them with
``ConversationPackingTaskEncoder`` (Qwen2.5-VL style mRoPE, ``tokens_per_second=2``) and prints
the media and text tokens of each pack and what a training step receives.

    python examples/conversation.py
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoTokenizer  # noqa: E402

from energon_pack.task_encoders import ConversationPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import (
    make_conversation_dataset,
    make_image_processor,
    make_tokenizer,
    random_png_bytes,
    read_llava_records,
    synthetic_texts,
)

PACK_SIZE = 96


def write_llava(root: Path) -> Path:
    """``root/llava.json`` with its images and a video (a directory of frames)."""
    text = synthetic_texts(32, seed=3, min_words=1, max_words=6)
    records = []
    for i in range(8):
        q, a = text[2 * i], text[2 * i + 1]
        turns = [{"from": "human", "value": q}, {"from": "gpt", "value": a}]
        record = {"id": i, "conversations": turns}
        if i % 4 == 1:
            (root / f"{i}.png").write_bytes(random_png_bytes(56, 84, seed=i))
            record["image"], turns[0]["value"] = f"{i}.png", "<image>\n" + q
        elif i % 4 == 2:
            names = [f"{i}_{j}.png" for j in range(3)]
            for j, name in enumerate(names):
                (root / name).write_bytes(random_png_bytes(28 * (j + 1), 56, seed=10 * i + j))
            record["image"], turns[0]["value"] = names, "<image> <image> " + q
            turns += [{"from": "human", "value": "<image> " + text[16 + i]}]
            turns += [{"from": "gpt", "value": text[24 + i]}]
        elif i % 4 == 3:
            (root / f"v{i}").mkdir()
            for j in range(4):
                (root / f"v{i}" / f"{j:04d}.png").write_bytes(random_png_bytes(56, 56, seed=j))
            record["video"], record["fps"] = f"v{i}", 2.0
            turns[0]["value"] = "<video>\n" + q
        records.append(record)
    (root / "llava.json").write_text(json.dumps(records))
    return root / "llava.json"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        llava = write_llava(root)
        tok = AutoTokenizer.from_pretrained(make_tokenizer(root / "tok", synthetic_texts(64)))
        tok.add_tokens(["<|video_pad|>", "<|vision_start|>", "<|vision_end|>"], special_tokens=True)
        dataset = make_conversation_dataset(
            root / "data", read_llava_records(llava), media_root=root
        )
        encoder = ConversationPackingTaskEncoder(
            tok, make_image_processor(), pack_size=PACK_SIZE, mrope=True, tokens_per_second=2
        )
        loader = make_loader(dataset, encoder, packing_buffer_size=8, batch_size=2)
        for batch in loader:
            for row, keys in enumerate(batch.sample_keys):
                media = int(
                    sum(
                        (batch.tokens[row] == t).sum()
                        for t in (encoder.image_token_id, encoder.video_token_id)
                    )
                )
                text = sum(batch.doc_lengths[row]) - media
                print(f"pack {keys}: {media} media tokens, {text} text tokens")
        kwargs = batch.hf_kwargs("sdpa", config=None)  # no model here: full-attention masks
        print(f"model inputs         {sorted(kwargs)}")
        print(f"position_ids         {tuple(kwargs['position_ids'].shape)} (mRoPE)")
        print(f"packs={encoder.stats.packs} documents={encoder.stats.documents}")


if __name__ == "__main__":
    main()
