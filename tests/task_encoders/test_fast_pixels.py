# SPDX-License-Identifier: Apache-2.0
"""FastPixels: the processor's pixel rows, bit for bit, written in place (light and stock mode)."""

from __future__ import annotations

import dataclasses
import io
import pickle
import random
import sys
from typing import Any

import numpy as np
import pytest
import torch
from megatron.energon import CaptioningSample, VQASample
from PIL import Image
from vlm_helpers import VLM_PACK_SIZE

from energon_pack.encoding import MediaProcessor
from energon_pack.encoding._pixels import FastPixels, PendingPixels
from energon_pack.samples import pack_documents
from energon_pack.task_encoders import (
    CaptioningPackingTaskEncoder,
    ConversationPackingTaskEncoder,
    VQAPackingTaskEncoder,
)
from energon_pack.testing import assert_same_item
from energon_pack.training import make_loader
from energon_pack_tools import make_image_processor

#: (min_pixels, max_pixels, patch_size) settings, as the planner's tests.
SETTINGS = [(28 * 28, 112 * 112, 14), (56 * 56, 200 * 200, 14), (4 * 4, 64 * 64, 16)]
SIZES = [(5, 5), (28, 28), (64, 48), (131, 17), (17, 131), (300, 5), (999, 1000)]


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def jpeg(image: Image.Image) -> Image.Image:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


@pytest.mark.parametrize("min_pixels, max_pixels, patch", SETTINGS)
def test_rows_and_grids_equal_the_processors(min_pixels: int, max_pixels: int, patch: int) -> None:
    proc = make_image_processor(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch)
    fast = FastPixels.for_processor(proc)
    assert fast is not None
    rng = random.Random(0)
    sizes = SIZES + [(rng.randint(1, 500), rng.randint(1, 500)) for _ in range(6)]
    images = [noise(w, h, i) for i, (w, h) in enumerate(sizes)] + [jpeg(noise(90, 70))]
    for image in images:
        expected = proc(images=[image], return_tensors="pt")
        pixels, grid = fast.process([image])
        assert pixels.dtype == torch.float32
        assert torch.equal(pixels, torch.as_tensor(expected["pixel_values"]))
        assert grid.tolist() == torch.as_tensor(expected["image_grid_thw"]).tolist()
    several = proc(images=images[:3], return_tensors="pt")["pixel_values"]
    assert torch.equal(fast.process(images[:3])[0], torch.as_tensor(several))


class FlippedProcessor(type(make_image_processor())):  # type: ignore[misc]
    """Rows in another order than Qwen2-VL's: the fast path must not claim it."""

    def patchify(self, image: Any, **kw: Any) -> Any:
        rows, gh, gw = super().patchify(image, **kw)
        return rows[::-1], gh, gw


def test_a_processor_that_differs_gets_no_fast_path() -> None:
    proc = make_image_processor()
    assert FastPixels.for_processor(proc) is not None
    proc.do_resize = False
    assert FastPixels.for_processor(proc) is None
    flipped = FlippedProcessor(min_pixels=28 * 28, max_pixels=112 * 112)
    assert FastPixels.for_processor(flipped) is None
    # for_processor finds no smart_resize in this test module; the probe rejects the rows too
    rule = sys.modules[type(proc).__module__].smart_resize
    assert not FastPixels(flipped, rule)._matches_processor()


def test_write_needs_a_contiguous_float32_tensor() -> None:
    fast = FastPixels.for_processor(make_image_processor())
    resized = fast.resize(noise(64, 48))
    out = torch.empty(fast.patch_dim, fast.rows(resized)).t()
    with pytest.raises(ValueError, match="contiguous float32"):
        fast.write(resized, out)


def test_pickles_small_and_the_same() -> None:
    """Workers get the encoder pickled: no image-sized state travels with it."""
    fast = FastPixels.for_processor(make_image_processor(max_pixels=1000 * 1000))
    fast.process([noise(900, 900)])
    copy = pickle.loads(pickle.dumps(fast))
    assert len(pickle.dumps(fast)) < 100_000
    image = noise(80, 60, 3)
    assert torch.equal(copy.process([image])[0], fast.process([image])[0])


def test_pending_pixels_are_written_into_the_pack(tokenizer_dir, image_processor) -> None:
    """Light mode's postencode leaves the rows to the pack; packs equal stock mode's."""
    samples = [
        CaptioningSample(
            __key__=f"s{i}",
            __restore_key__=(),
            image=noise(40 + 9 * i, 70 - 5 * i, i),
            caption=f"a seed {i}",
        )
        for i in range(3)
    ]
    light = CaptioningPackingTaskEncoder(tokenizer_dir, image_processor, pack_size=4096)
    stock = CaptioningPackingTaskEncoder(
        tokenizer_dir, image_processor, pack_size=4096, light_media=False
    )
    planned = [d for s in samples for d in light.encode_sample(s)]
    docs = [d for s in samples for d in stock.encode_sample(s)]
    for_pack = [light.materialize(d, into_pack=True) for d in planned]
    assert all(isinstance(d.pixel_values, PendingPixels) for d in for_pack)
    assert all(isinstance(light.materialize(d).pixel_values, torch.Tensor) for d in planned)
    assert_same_item(pack_documents(for_pack), pack_documents(docs))


class OwnProcessing(CaptioningPackingTaskEncoder):
    def process_image(self, image: Any) -> tuple[torch.Tensor, torch.Tensor]:
        pixels, grid = super().process_image(image)
        return pixels + 1, grid


def test_an_overridden_process_image_is_used(tokenizer_dir, image_processor) -> None:
    sample = CaptioningSample(__key__="o", __restore_key__=(), image=noise(50, 50), caption="a")
    enc = OwnProcessing(tokenizer_dir, image_processor, pack_size=4096)
    (planned,) = list(enc.encode_sample(sample))
    doc = enc.materialize(planned, into_pack=True)
    expected = torch.as_tensor(image_processor(images=[noise(50, 50)])["pixel_values"]) + 1
    assert torch.equal(doc.pixel_values, expected)


def test_media_processor_images_are_the_processors_rows(image_processor) -> None:
    """Several images of different sizes: rows and grids as the processor's, pending or not."""
    media = MediaProcessor(image_processor)
    assert media.fast is not None
    images = [noise(64, 48, 1), noise(37, 90, 2), noise(131, 17, 3)]
    expected = image_processor(images=images, return_tensors="pt")
    for pending in (False, True):
        got = media.images(images, pending=pending)
        rows = got.pixel_values
        assert isinstance(rows, PendingPixels if pending else torch.Tensor)
        assert torch.equal(rows.tensor() if pending else rows, expected["pixel_values"])
        assert torch.equal(got.grid_thw, expected["image_grid_thw"])
        assert got.num_tokens == media.tokens(expected["image_grid_thw"])


class CountingConversations(ConversationPackingTaskEncoder):
    """Counts the members whose image rows postencode left for the pack to write."""

    pending = 0

    def materialize(self, doc: Any, *, into_pack: bool = False) -> Any:
        out = super().materialize(doc, into_pack=into_pack)
        self.pending += isinstance(out.pixel_values, PendingPixels)
        return out


def test_light_conversation_packs_equal_stock_and_processor_only_packs(
    conversation_dataset, vlm_tokenizer_dir, image_processor, monkeypatch
) -> None:
    """Light mode (rows written into the pack), stock mode (FastPixels tensors) and the
    processor alone (no FastPixels) give the same packs, images (several per document) and
    videos (the processor's path in every mode) included."""

    def packs(cls: Any, light: bool) -> tuple[Any, list[Any]]:
        enc = cls(vlm_tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, light_media=light)
        return enc, list(make_loader(conversation_dataset[0], enc, packing_buffer_size=6))

    light_enc, light = packs(CountingConversations, True)
    stock_enc, stock = packs(ConversationPackingTaskEncoder, False)
    assert light_enc.fast_pixels is not None and stock_enc.fast_pixels is not None
    assert light_enc.light_media and light_enc.pending > 0
    monkeypatch.setattr(FastPixels, "for_processor", classmethod(lambda cls, p: None))
    processor_enc, processor_only = packs(ConversationPackingTaskEncoder, False)
    assert processor_enc.fast_pixels is None
    assert sum(len(p.image_grid_thw) for p in light) > len(light)  # several images per pack
    assert sum(len(p.video_grid_thw) for p in light) > 0
    for reference in (stock, processor_only):
        assert len(reference) == len(light)
        for a, b in zip(reference, light):
            assert_same_item(a, dataclasses.replace(b, __restore_key__=a.__restore_key__))


def test_vqa_materialize_gives_a_tensor_and_for_pack_pending_rows(
    vlm_tokenizer_dir, image_processor
) -> None:
    """``materialize`` (the public hook) returns a pixel tensor; postencode's rows are pending;
    both equal the stock document's and pack as it does."""
    buf = io.BytesIO()
    noise(90, 61, 5).save(buf, format="PNG")
    sample = VQASample(
        __key__="q",
        __restore_key__=("Webdataset", 7),
        image=buf.getvalue(),
        context="which is the seed",
        answers=["a cat"],
        answer_weights=None,
    )
    light = VQAPackingTaskEncoder(vlm_tokenizer_dir, image_processor, pack_size=4096)
    stock = VQAPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=4096, light_media=False
    )
    (planned,) = list(light.encode_sample(sample))
    (doc,) = list(stock.encode_sample(sample))
    for_pack = light.materialize(planned, into_pack=True)
    assert isinstance(for_pack.pixel_values, PendingPixels)
    assert isinstance(light.materialize(planned).pixel_values, torch.Tensor)
    assert_same_item(light.materialize(planned), doc)
    assert_same_item(pack_documents([for_pack]), pack_documents([doc]))
