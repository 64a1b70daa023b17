# SPDX-License-Identifier: Apache-2.0
"""VLM packing: image + caption samples into packs, with image spans and mRoPE positions.

Runs in a few seconds on a CPU, with no arguments: it writes 12 random PNGs with captions as an
energon ``CaptioningSample`` dataset in a temp dir, packs them with
``CaptioningPackingTaskEncoder`` (a Qwen2-VL image processor built offline, ``mrope=True``) and
prints what a VLM training step receives:

* ``tokens`` / ``labels`` ``(B, L)``: image placeholder tokens carry no loss;
* ``pixel_values`` ``(patches, patch_dim)`` and ``image_grid_thw`` ``(images, 3)``;
* ``image_spans`` ``(images, 2)``: ``[start, end)`` of each image's placeholders in the
  flattened ``(B * L,)`` batch;
* ``mrope_position_ids`` ``(3, B, L)``: temporal / height / width positions, restarting at each
  document (``batch.hf_kwargs()`` passes them as ``position_ids``).

    python examples/captioning.py
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from energon_pack.task_encoders import CaptioningPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import (
    IMAGE_TOKEN,
    make_captioning_dataset,
    make_image_processor,
    make_tokenizer,
    random_png_bytes,
    synthetic_texts,
)

PACK_SIZE = 64


def main() -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        captions = synthetic_texts(12, seed=1, min_words=3, max_words=20)
        images = [
            random_png_bytes(rng.randint(28, 120), rng.randint(28, 120), seed=i)
            for i in range(len(captions))
        ]
        tokenizer = make_tokenizer(Path(tmp) / "tokenizer", captions)
        dataset = make_captioning_dataset(Path(tmp) / "captions", images, captions)
        encoder = CaptioningPackingTaskEncoder(
            str(tokenizer),
            make_image_processor(),  # Qwen2-VL: patch 14, merge 2 -> grid / 4 image tokens
            image_token=IMAGE_TOKEN,
            pack_size=PACK_SIZE,
            mrope=True,
        )
        loader = make_loader(dataset, encoder, packing_buffer_size=8, batch_size=2)
        batch = next(iter(loader))
        print(f"packs in batch       {batch.__key__}")
        print(f"tokens / labels      {tuple(batch.tokens.shape)} / {tuple(batch.labels.shape)}")
        print(f"pixel_values         {tuple(batch.pixel_values.shape)}")
        print(f"image_grid_thw       {batch.image_grid_thw.tolist()}")
        print(f"image_spans          {batch.image_spans.tolist()}  (flattened B * L offsets)")
        print(f"doc_lengths per row  {batch.doc_lengths}")
        print(f"mrope_position_ids   {tuple(batch.mrope_position_ids.shape)}")
        # The first document of row 0: BOS, its image tokens, then the caption.
        start, end = batch.image_spans[0].tolist()
        first = batch.doc_lengths[0][0]
        for name, row in zip(("t", "h", "w"), batch.mrope_position_ids[:, 0, :first]):
            print(f"  mrope {name} (doc 0)   {row.tolist()}")
        placeholder = (batch.tokens.flatten()[start:end] == encoder.image_token_id).all()
        no_loss = (batch.labels.flatten()[start - 1 : end - 1] == -100).all()
        print(
            f"image span {start}:{end} is all placeholders: {bool(placeholder)}; "
            f"no loss predicting them: {bool(no_loss)}"
        )
        kwargs = batch.hf_kwargs("sdpa", config=None)  # no model here: full-attention masks
        print(f"hf_kwargs keys       {sorted(kwargs)}")
        print(f"packing              {encoder.stats.summary()}")


if __name__ == "__main__":
    main()
