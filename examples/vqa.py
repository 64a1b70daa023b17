# SPDX-License-Identifier: Apache-2.0
"""VQA packing: energon ``VQASample`` (image, question, answers) into packs, loss on the answer.

Runs in a few seconds on a CPU, with no arguments: it writes 12 random PNGs with questions and
1-3 answers each as an energon ``VQASample`` dataset in a temp dir, packs them with
``VQAPackingTaskEncoder`` (one document per sample, the answer drawn by ``answer_weights``,
seeded) and prints one pack: the document keys, the image grids, and the tokens trained on.

    python examples/vqa.py
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from energon_pack.task_encoders import VQAPackingTaskEncoder  # noqa: E402
from energon_pack.training import make_loader
from energon_pack_tools import (
    make_image_processor,
    make_tokenizer,
    make_vqa_dataset,
    random_png_bytes,
    synthetic_texts,
)

PACK_SIZE = 64


def main() -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        questions = synthetic_texts(12, seed=1, min_words=2, max_words=8)
        answers = [synthetic_texts(rng.randint(1, 3), seed=10 + i, max_words=3) for i in range(12)]
        images = [random_png_bytes(rng.choice([28, 56]), 56, seed=i) for i in range(12)]
        tokenizer = make_tokenizer(Path(tmp) / "tok", [*questions, *sum(answers, [])])
        dataset = make_vqa_dataset(Path(tmp) / "vqa", images, questions, answers)
        encoder = VQAPackingTaskEncoder(
            str(tokenizer), make_image_processor(), pack_size=PACK_SIZE, mrope=True
        )
        pack = next(iter(make_loader(dataset, encoder, packing_buffer_size=8)))
        tok = encoder.tokenizer.tokenizer
        print(f"documents            {pack.sample_keys}  lengths {pack.doc_lengths}")
        print(f"image_grid_thw       {pack.image_grid_thw.tolist()}")
        targets = pack.labels[pack.labels != -100]
        print(f"trained on           {tok.decode(targets)!r}")
        image_target = bool((targets == encoder.image_token_id).any())
        print(f"an image token is a target: {image_target}")


if __name__ == "__main__":
    main()
