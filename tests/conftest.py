# SPDX-License-Identifier: Apache-2.0
"""Session fixtures: a tiny tokenizer, an image processor and real energon datasets in tmp dirs.

Everything is built offline (``HF_HUB_OFFLINE=1``) with ``energon prepare`` once per session.
Fixtures are lazy: a test run that needs none of them builds none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# check_model's per-version verdict cache: one fresh folder per test session, never the user's
if "ENERGON_PACK_CACHE" not in os.environ:
    import tempfile

    os.environ["ENERGON_PACK_CACHE"] = tempfile.mkdtemp(prefix="energon-pack-cache-")

import pytest  # noqa: E402

#: Pack size the energon tests use for text (the corpora below have samples longer than this).
TEXT_PACK_SIZE = 32
#: Pack size for captioning (an image is at most 16 placeholder tokens with the test processor).
CAPTION_PACK_SIZE = 48


@pytest.fixture(autouse=True)
def _frozen_heap() -> None:
    """What is alive when a test starts is left out of the garbage collector's scans.

    energon runs ``gc.collect()`` when it builds a loader and again when iteration starts (then
    ``gc.freeze()`` until it ends, as it does for training). In this process the heap holds
    torch, transformers and every session fixture, and those full scans took about 40% of the
    CLI tests' time. ``gc.freeze()`` (O(1)) moves the heap as it is to the permanent
    generation, so energon's scans see only what the test made; energon's own
    ``gc.unfreeze()`` at the end of an iteration puts everything back, so nothing frozen stays
    uncollected for long. Nothing is frozen where a forked loader worker could be handed an
    object energon's ``gc_init_worker`` cannot see (it walks ``gc.get_objects()``, which leaves
    the permanent generation out): with live child processes (a loader's workers) the heap is
    collected first, and with CUDA initialised nothing is frozen."""
    import gc
    import multiprocessing

    import torch

    if torch.cuda.is_initialized():
        return
    if multiprocessing.active_children():
        gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class Dataset:
    """A prepared dataset: its path and the source texts/records by sample key."""

    path: Path
    keys: list[str]
    records: dict[str, Any]


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    """80 texts of 0..40 words: some are longer than TEXT_PACK_SIZE tokens, sample 5 is empty."""
    from energon_pack_tools import synthetic_texts

    texts = synthetic_texts(80, seed=7, min_words=1, max_words=40)
    texts[5] = ""
    return texts


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory, corpus: list[str]) -> Path:
    from energon_pack_tools import WORDS, make_tokenizer

    return make_tokenizer(tmp_path_factory.mktemp("tok"), [*corpus, " ".join(WORDS)])


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Any:
    from energon_pack.encoding import load_tokenizer

    return load_tokenizer(tokenizer_dir)


@pytest.fixture(scope="session")
def image_processor() -> Any:
    from energon_pack_tools import make_image_processor

    return make_image_processor()


@pytest.fixture(scope="session")
def text_dataset(tmp_path_factory: pytest.TempPathFactory, corpus: list[str]) -> Dataset:
    """``TextSample`` webdataset of :func:`corpus` in 5 shards."""
    from energon_pack_tools import make_text_dataset, sample_key

    path = make_text_dataset(tmp_path_factory.mktemp("text"), corpus, samples_per_shard=16)
    keys = [sample_key(i) for i in range(len(corpus))]
    return Dataset(path, keys, dict(zip(keys, corpus)))


@pytest.fixture(scope="session")
def jsonl_text_dataset(tmp_path_factory: pytest.TempPathFactory, corpus: list[str]) -> Dataset:
    """Crude JSONL dataset ``{"text": ...}`` of the first 30 texts (cooked by ``cook_text``)."""
    from energon_pack_tools import make_jsonl_dataset

    records = [{"text": t, "id": i} for i, t in enumerate(corpus[:30])]
    path = make_jsonl_dataset(tmp_path_factory.mktemp("jsonl") / "text.jsonl", records)
    return Dataset(path, [], {str(i): r for i, r in enumerate(records)})


@pytest.fixture(scope="session")
def sft_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """Crude JSONL ``{"prompt", "response"}`` dataset of 30 records (some over-long)."""
    from energon_pack_tools import make_jsonl_dataset, synthetic_texts

    prompts = synthetic_texts(30, seed=11, min_words=1, max_words=12)
    responses = synthetic_texts(30, seed=12, min_words=1, max_words=24)
    records = [{"prompt": p, "response": r} for p, r in zip(prompts, responses)]
    path = make_jsonl_dataset(tmp_path_factory.mktemp("sft") / "sft.jsonl", records)
    return Dataset(path, [], {str(i): r for i, r in enumerate(records)})


#: Index of the corrupt image in :func:`captioning_dataset`.
CORRUPT_IMAGE_INDEX = 3


@pytest.fixture(scope="session")
def captioning_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """``CaptioningSample`` webdataset: 24 random PNGs of 20..130 px, sample 3 corrupt."""
    import random

    from energon_pack_tools import (
        corrupt_png_bytes,
        make_captioning_dataset,
        random_png_bytes,
        sample_key,
        synthetic_texts,
    )

    rng = random.Random(5)
    n = 24
    images = [
        random_png_bytes(rng.randint(20, 130), rng.randint(20, 130), seed=i) for i in range(n)
    ]
    images[CORRUPT_IMAGE_INDEX] = corrupt_png_bytes()
    captions = synthetic_texts(n, seed=13, min_words=1, max_words=20)
    path = make_captioning_dataset(tmp_path_factory.mktemp("cap"), images, captions)
    keys = [sample_key(i) for i in range(n)]
    return Dataset(path, keys, {k: (im, c) for k, im, c in zip(keys, images, captions)})
