# SPDX-License-Identifier: Apache-2.0
"""Light media buffers: exact planned grids, packs equal to stock mode, resume and restore."""

from __future__ import annotations

import dataclasses
import io
import random
from typing import Any

import pytest
import torch
from megatron.energon import CaptioningSample, TaskEncoder, stateless
from PIL import Image
from vlm_helpers import VLM_PACK_SIZE

from energon_pack.encoding import kept_items
from energon_pack.encoding._light_media import MediaPlanner, header_size, row_map
from energon_pack.samples import LightMultimodalDocument, pack_documents
from energon_pack.task_encoders import (
    CaptioningPackingTaskEncoder,
    ConversationPackingTaskEncoder,
    VQAPackingTaskEncoder,
)
from energon_pack.testing import (
    assert_restore_sample_reproduces,
    assert_resume_identical,
    assert_same_item,
)
from energon_pack.training import make_loader
from energon_pack_tools import make_image_processor, random_png_bytes

CAPTION_PACK_SIZE = 48

#: (min_pixels, max_pixels, patch_size) settings the planner is checked under.
SETTINGS = [(28 * 28, 112 * 112, 14), (56 * 56, 200 * 200, 14), (4 * 4, 64 * 64, 16)]
#: Sizes: tiny, square, wide and tall (aspect ratios up to 1:60), large.
SIZES = [(5, 5), (28, 28), (64, 48), (131, 17), (17, 131), (300, 5), (999, 1000), (1920, 1080)]


@pytest.mark.parametrize("min_pixels, max_pixels, patch", SETTINGS)
def test_planned_grids_equal_the_processors(min_pixels: int, max_pixels: int, patch: int) -> None:
    proc = make_image_processor(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=patch)
    planner = MediaPlanner.for_processor(proc)
    assert planner is not None
    rng = random.Random(0)
    sizes = SIZES + [(rng.randint(1, 700), rng.randint(1, 700)) for _ in range(20)]
    images = [Image.new("RGB", s) for s in sizes]
    grids = torch.as_tensor(proc(images=images, return_tensors="pt")["image_grid_thw"])
    assert grids.tolist() == [list(planner.image_grid(w, h)) for w, h in sizes]


def test_a_processor_without_a_known_rule_is_not_planned() -> None:
    proc = make_image_processor()
    proc.do_resize = False  # the processor would keep sizes: the rule no longer applies
    assert MediaPlanner.for_processor(proc) is None


def jpeg_bytes(width: int, height: int, *, orientation: int | None = None) -> bytes:
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation  # 6: rotate 90 degrees on display (width <-> height)
    Image.new("RGB", (width, height), (200, 10, 10)).save(buf, format="JPEG", exif=exif)
    return buf.getvalue()


def test_header_sizes_without_decoding() -> None:
    assert header_size(random_png_bytes(64, 48)) == (64, 48)
    assert header_size(jpeg_bytes(30, 70)) == (30, 70)
    assert header_size(Image.new("RGB", (9, 4))) == (9, 4)
    assert header_size(torch.zeros(3, 4, 9)) == (9, 4)
    assert header_size(b"not an image") is None
    assert row_map(torch.tensor([[1, 1, 2], [1, 1, 1]])).view(-1).tolist() == [0, 0, 1]
    assert kept_items(torch.tensor([[0], [0], [2]])) == [0, 2]


def caption_encoder(tokenizer_dir: Any, image_processor: Any, cls: Any = None, **kw: Any) -> Any:
    kw.setdefault("pack_size", CAPTION_PACK_SIZE)
    return (cls or CaptioningPackingTaskEncoder)(tokenizer_dir, image_processor, **kw)


def test_exif_rotated_jpeg_counts_as_the_stock_encoder(tokenizer_dir, image_processor) -> None:
    """The encoders do not apply EXIF orientation: the header size is the decoded size."""
    sample = CaptioningSample(
        __key__="r", __restore_key__=(), image=jpeg_bytes(30, 90, orientation=6), caption="a seed"
    )
    light = caption_encoder(tokenizer_dir, image_processor)
    stock = caption_encoder(tokenizer_dir, image_processor, light_media=False)
    (planned,) = list(light.encode_sample(sample))
    (doc,) = list(stock.encode_sample(sample))
    assert isinstance(planned, LightMultimodalDocument)  # a one-image conversation
    assert planned.pixel_values.dtype == torch.int32 and planned.pixel_values.shape[1] == 1
    assert (
        planned.image_grid_thw.tolist() == doc.image_grid_thw.tolist() == [[1, 6, 2]]
    )  # 30x90 -> 28x84
    assert_same_item(light.materialize(planned), doc)


def same_packs(stock: list[Any], light: list[Any]) -> None:
    """Packs equal field by field (tokens, labels, pixels, grids, ...) but the restore key,
    whose shape differs (light packs go through the post-encoding packing dataset)."""
    assert len(stock) == len(light) > 0
    for a, b in zip(stock, light):
        assert_same_item(a, dataclasses.replace(b, __restore_key__=a.__restore_key__))


@pytest.mark.parametrize("overlong", ["drop", "split"])
def test_captioning_light_packs_equal_stock_packs(
    captioning_dataset, tokenizer_dir, image_processor, overlong: str
) -> None:
    packs = {}
    for light in (False, True):
        enc = caption_encoder(
            tokenizer_dir, image_processor, light_media=light, overlong=overlong, pack_size=24
        )
        assert enc.light_media is light
        packs[light] = list(make_loader(captioning_dataset.path, enc, packing_buffer_size=8))
    same_packs(packs[False], packs[True])
    assert any(len(p.image_grid_thw) for p in packs[True])


def test_vqa_and_conversation_light_packs_equal_stock_packs(
    vqa_dataset, conversation_dataset, vlm_tokenizer_dir, image_processor
) -> None:
    for cls, path in ((VQAPackingTaskEncoder, vqa_dataset[0]),
                      (ConversationPackingTaskEncoder, conversation_dataset[0])):  # fmt: skip
        packs = {}
        for light in (False, True):
            enc = cls(vlm_tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, mrope=True,
                      light_media=light)  # fmt: skip
            packs[light] = list(make_loader(path, enc, packing_buffer_size=6))
            assert enc.light_fallbacks == 0
        same_packs(packs[False], packs[True])
    assert sum(len(p.video_grid_thw) for p in packs[True]) == 4  # videos planned too


class AugmentingCaptions(CaptioningPackingTaskEncoder):
    """A random, size-preserving augmentation (seeded by the encoder)."""

    def augment_image(self, image: Any) -> Any:
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        shift = random.randint(0, 40)
        return Image.eval(image, lambda v: min(255, v + shift))


class ResizingCaptions(CaptioningPackingTaskEncoder):
    def augment_image(self, image: Any) -> Any:
        return image.resize((image.size[0] * 3, image.size[1] * 3))


def test_restore_sample_and_resume_exact_with_random_augmentation(
    captioning_dataset, tokenizer_dir, image_processor
) -> None:
    # An augment_image override may change sizes: light only when asked for.
    assert not caption_encoder(tokenizer_dir, image_processor, AugmentingCaptions).light_media
    enc = caption_encoder(
        tokenizer_dir, image_processor, AugmentingCaptions, light_media=True, overlong="drop"
    )

    def loader() -> Any:
        return make_loader(captioning_dataset.path, enc, packing_buffer_size=8)

    packs = list(loader())
    again = list(loader())
    for a, b in zip(packs, again):
        assert_same_item(a, b)  # seeded: the same draws every run
    stock = caption_encoder(tokenizer_dir, image_processor, overlong="drop", light_media=False)
    plain = list(make_loader(captioning_dataset.path, stock, packing_buffer_size=8))
    assert any(not torch.equal(a.pixel_values, b.pixel_values) for a, b in zip(packs, plain))
    assert_restore_sample_reproduces(loader, packs)
    assert_resume_identical(loader, save_after=3)


class PlainEnergonLight(CaptioningPackingTaskEncoder):
    """Light buffers through energon's own ``postencode_sample`` path (its PackingDataset)."""

    @stateless
    def postencode_sample(self, sample: Any) -> Any:
        return self._postencode(sample)

    def build_batch(self, dataset: Any, **kwargs: Any) -> Any:
        return TaskEncoder.build_batch(self, dataset, **kwargs)


def test_restore_sample_fails_on_plain_energon_and_works_here(
    captioning_dataset, tokenizer_dir, image_processor
) -> None:
    """megatron-energon 7.4.1 unpacks a post-encoded member's key twice: restore fails."""
    plain = caption_encoder(tokenizer_dir, image_processor, PlainEnergonLight, overlong="drop")
    ours = caption_encoder(tokenizer_dir, image_processor, overlong="drop")
    loaders = {
        name: (lambda enc=enc: make_loader(captioning_dataset.path, enc, packing_buffer_size=8))
        for name, enc in (("plain", plain), ("ours", ours))
    }
    plain_packs = list(loaders["plain"]())
    with pytest.raises(AssertionError):
        loaders["plain"]().restore_sample(plain_packs[0].__restore_key__)
    packs = list(loaders["ours"]())
    same_packs(plain_packs, packs)  # the same packs; only ours can rebuild them
    assert_restore_sample_reproduces(loaders["ours"], packs[:3])


@pytest.mark.slow  # 2 workers
def test_two_workers_resume_and_restore_sample_exact(
    conversation_dataset, vlm_tokenizer_dir, image_processor
) -> None:
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, image_processor, pack_size=VLM_PACK_SIZE, mrope=True
    )
    assert enc.light_media

    def loader() -> Any:
        return make_loader(conversation_dataset[0], enc, packing_buffer_size=4, num_workers=2)

    packs = list(loader())
    assert all(not isinstance(p, LightMultimodalDocument) for p in packs)
    assert_resume_identical(loader, save_after=2)
    assert_restore_sample_reproduces(loader, packs[:4])


def test_size_changing_augmentation_is_a_clear_error(tokenizer_dir, image_processor) -> None:
    enc = caption_encoder(tokenizer_dir, image_processor, ResizingCaptions, light_media=True)
    sample = CaptioningSample(
        __key__="k", __restore_key__=(), image=random_png_bytes(40, 30), caption="a seed"
    )
    (doc,) = list(enc.encode_sample(sample))
    with pytest.raises(ValueError, match="'k'.*changed the image size.*light_media=False"):
        enc.materialize(doc)


def test_a_header_without_a_size_is_decoded_in_the_buffer_and_counted(
    tokenizer_dir, image_processor
) -> None:
    """Bytes without a readable header fall back to decoding (counted), which reports them as
    the stock encoder does; a decoded PIL image is planned from its size."""
    enc = caption_encoder(tokenizer_dir, image_processor)
    pil = Image.new("RGB", (40, 30))
    sample = CaptioningSample(__key__="p", __restore_key__=(), image=pil, caption="a seed")
    (doc,) = list(enc.encode_sample(sample))
    assert isinstance(doc, LightMultimodalDocument) and enc.light_fallbacks == 0
    bad = CaptioningSample(__key__="b", __restore_key__=(), image=b"junk", caption="a seed")
    with pytest.raises(ValueError, match="'b': the image bytes cannot be decoded"):
        list(enc.encode_sample(bad))
    assert enc.light_fallbacks == 1


def test_packing_a_planned_document_by_hand_is_an_error(tokenizer_dir, image_processor) -> None:
    """A light document's pixel fields are a row map: packing it unmaterialized would train on
    indices as pixels, so the pack type refuses it and names the fix."""
    sample = CaptioningSample(
        __key__="p", __restore_key__=(), image=jpeg_bytes(30, 90), caption="a seed"
    )
    light = caption_encoder(tokenizer_dir, image_processor)
    (planned,) = list(light.encode_sample(sample))
    with pytest.raises(ValueError, match=r"'p' is a LightMultimodalDocument.*materialize"):
        pack_documents([planned])
    assert pack_documents([light.materialize(planned)]).pixel_values.dtype == torch.float32
