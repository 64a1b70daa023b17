# SPDX-License-Identifier: Apache-2.0
"""Exact resume and restore_sample for every encoder, with random augmentations, at 0 and 2
workers (contract helpers from ``energon_pack.testing._contracts`` on real loaders)."""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from energon_pack.task_encoders import (
    CaptioningPackingTaskEncoder,
    LLMPackingTaskEncoder,
    SFTPackingTaskEncoder,
)
from energon_pack.testing import (
    assert_each_sample_once,
    assert_restore_sample_reproduces,
    assert_resume_identical,
)
from energon_pack.training import make_loader


# Module level: the encoders must be picklable-by-reference for worker processes.
class AugmentedCaptioning(CaptioningPackingTaskEncoder):
    """Random crop (``random``) and random flip (``torch``): both must replay on restore."""

    def augment_image(self, image: Image.Image) -> Image.Image:
        w, h = image.size
        left, top = random.randint(0, w // 4), random.randint(0, h // 4)
        image = image.crop((left, top, w - random.randint(0, w // 4), h))
        return ImageOps.mirror(image) if torch.rand(()) < 0.5 else image


class WordDropoutLLM(LLMPackingTaskEncoder):
    """Drops each word with probability 0.2 (NumPy): a random text augmentation."""

    def encode_document(self, sample: Any) -> Any:
        words = sample.text.split()
        keep = np.random.rand(len(words)) >= 0.2
        text = " ".join(w for w, k in zip(words, keep) if k) or sample.text
        return super().encode_document(type(sample).derive_from(sample, text=text))


ENCODERS = {
    "llm": lambda tok, proc: WordDropoutLLM(tok, pack_size=32, overlong="split"),
    "captioning": lambda tok, proc: AugmentedCaptioning(tok, proc, pack_size=48, mrope=True),
    "sft": lambda tok, proc: SFTPackingTaskEncoder(tok, pack_size=24, overlong="split"),
}


def dataset_for(name: str, request: pytest.FixtureRequest) -> Any:
    fixture = {"llm": "text_dataset", "captioning": "captioning_dataset", "sft": "sft_dataset"}
    return request.getfixturevalue(fixture[name])


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_resume_and_restore_sample_num_workers_0(
    name: str, request, tokenizer_dir, image_processor
) -> None:
    ds = dataset_for(name, request)
    enc = ENCODERS[name](tokenizer_dir, image_processor)
    mk = functools.partial(make_loader, ds.path, enc, packing_buffer_size=8, shuffle_buffer_size=4)
    reference, resumed = assert_resume_identical(mk, save_after=3)
    assert len(reference) >= 3  # a real continuation was compared
    assert_restore_sample_reproduces(mk, reference, order_seed=1)
    assert_restore_sample_reproduces(mk, resumed, order_seed=2)


def test_augmentations_are_random_but_reproduced(
    captioning_dataset, tokenizer_dir, image_processor
) -> None:
    """The augmentation really changes images (so the resume test can fail), yet replays."""
    plain = CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, pack_size=48)
    aug = AugmentedCaptioning(tokenizer_dir, image_processor, pack_size=48)

    def packs(enc: Any) -> dict[str, Any]:
        loader = make_loader(captioning_dataset.path, enc, packing_buffer_size=1)
        return {p.__key__: p.pixel_values for p in loader}

    a, b, c = packs(plain), packs(aug), packs(aug)
    assert a.keys() == b.keys() == c.keys()
    changed = sum(a[k].shape != b[k].shape or not torch.equal(a[k], b[k]) for k in a)
    assert changed > len(a) // 2
    assert all(torch.equal(b[k], c[k]) for k in b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["captioning", "llm"])
def test_resume_and_restore_sample_num_workers_2(
    name: str, request, tokenizer_dir, image_processor
) -> None:
    ds = dataset_for(name, request)
    enc = ENCODERS[name](tokenizer_dir, image_processor)
    buffers = {"llm": (6, 4, 2), "captioning": (3, None, None)}[name]
    mk = functools.partial(
        make_loader,
        ds.path,
        enc,
        num_workers=2,
        packing_buffer_size=buffers[0],
        shuffle_buffer_size=buffers[1],
        batch_size=buffers[2],
    )
    everything = list(mk())
    # Worker stats stay in the workers: the known drops are the corrupt image / the empty text.
    dropped = ["000003"] if name == "captioning" else ["000005"]
    assert_each_sample_once(everything, ds.keys, dropped=dropped)
    # Save while both workers still read (late saves: tests/task_encoders/test_crash_resume.py).
    last = {b.__restore_key__[1]: i for i, b in enumerate(everything)}
    assert set(last) == {0, 1}
    save_after = max(1, min(last.values()) // 3)
    reference, resumed = assert_resume_identical(mk, save_after=save_after)
    assert len(reference) >= 2
    # Batches of both workers, restored on a fresh loader in a shuffled order.
    assert {b.__restore_key__[1] for b in reference} == {0, 1}
    assert_restore_sample_reproduces(mk, reference, order_seed=2)
    assert_restore_sample_reproduces(mk, resumed, order_seed=3)
