# SPDX-License-Identifier: Apache-2.0
"""Every image mode PIL opens gives the processor's own pixels: transparency composited onto
white as transformers' ``convert_to_rgb`` does (not dropped), in the fast and the processor
path, stock and light buffers, through a real energon conversation dataset."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from energon_pack.encoding import MediaProcessor, to_pil_image
from energon_pack.encoding._pixels import FastPixels
from energon_pack.task_encoders import ConversationPackingTaskEncoder
from energon_pack.training import make_loader
from energon_pack_tools import make_conversation_dataset, make_image_processor, sample_key

#: Every mode, and the format its file is written in (PNG where PIL writes the mode).
MODES = {
    "RGBA": "PNG",
    "LA": "PNG",
    "P+transparency": "PNG",
    "PA": "TIFF",
    "CMYK": "TIFF",
    "I;16": "PNG",
    "I": "TIFF",
    "F": "TIFF",
    "1": "PNG",
    "L": "PNG",
    "RGB": "PNG",
    "RGB+transparency": "PNG",
}


def mode_image(mode: str, width: int = 61, height: int = 45, seed: int = 0) -> Image.Image:
    """A ``width x height`` image of random pixels in ``mode`` (random alpha where it has one)."""
    rng = np.random.default_rng(seed)
    rgba = Image.fromarray(rng.integers(0, 256, (height, width, 4), dtype=np.uint8), "RGBA")
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (height, width), dtype=np.uint16))
    if mode == "I":
        return Image.fromarray(rng.integers(0, 70000, (height, width), dtype=np.int32))
    if mode == "F":
        return Image.fromarray(rng.random((height, width), dtype=np.float32) * 300)
    if mode.endswith("+transparency"):  # a palette index / colour key that is transparent
        image = rgba.convert("RGB").quantize(8) if mode.startswith("P") else rgba.convert("RGB")
        if mode.startswith("RGB"):  # make the colour key occur
            image.putpixel((0, 0), (1, 2, 3))
        image.info["transparency"] = 3 if mode.startswith("P") else (1, 2, 3)
        return image
    return rgba.convert(mode)


def encoded(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def reference(processor: Any, images: list[Any]) -> torch.Tensor:
    """What the processor makes of the images as PIL opens them."""
    opened = [Image.open(io.BytesIO(b)) if isinstance(b, bytes) else b for b in images]
    return torch.as_tensor(processor(images=opened, return_tensors="pt")["pixel_values"])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_mode_gives_the_processors_pixels(mode: str) -> None:
    processor = make_image_processor()
    data = encoded(mode_image(mode), MODES[mode])
    opened = Image.open(io.BytesIO(data))
    assert opened.mode == mode.split("+")[0]  # the file really holds the mode
    if mode.endswith("+transparency"):
        assert "transparency" in opened.info
    expected = reference(processor, [data])
    fast = FastPixels.for_processor(processor)
    assert fast is not None
    slow = MediaProcessor(processor)
    slow.fast = None  # the processor's own path on the converted image
    for image in (data, Image.open(io.BytesIO(data))):
        rgb = to_pil_image(image, key="k")
        assert rgb.mode == "RGB"
        assert torch.equal(fast.process([rgb])[0], expected), mode
        assert torch.equal(slow.images([rgb]).pixel_values, expected), mode
    assert torch.equal(fast.process([Image.open(io.BytesIO(data))])[0], expected), mode


def test_transparency_is_composited_onto_white() -> None:
    clear = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    assert to_pil_image(clear, key="k").getpixel((0, 0)) == (255, 255, 255)
    half = Image.new("LA", (4, 4), (0, 128))  # black at half opacity: half-way to white
    assert to_pil_image(half, key="k").getpixel((0, 0)) == (127, 127, 127)


@pytest.fixture(scope="module")
def modes_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list]]:
    """A conversation dataset: one record per mode (one image), and one of three modes."""
    root = tmp_path_factory.mktemp("modes_media")
    names = sorted(MODES)
    files: dict[str, bytes] = {}
    for i, mode in enumerate(names):
        suffix = ".png" if MODES[mode] == "PNG" else ".tif"
        files[f"m{i}{suffix}"] = encoded(mode_image(mode, 40 + 7 * i, 90 - 5 * i, i), MODES[mode])
    for name, data in files.items():
        (root / name).write_bytes(data)
    records: list[dict[str, Any]] = []
    for i, name in enumerate(files):
        turns = [{"from": "human", "value": "<image> what"}, {"from": "gpt", "value": "a mode"}]
        records.append({"id": i, "image": name, "conversations": turns})
    several = [list(files)[names.index(m)] for m in ("RGBA", "I;16", "LA")]
    turns = [{"from": "human", "value": "<image><image><image> and"}, {"from": "gpt", "value": "x"}]
    records.append({"id": len(records), "image": several, "conversations": turns})
    path = make_conversation_dataset(tmp_path_factory.mktemp("modes"), records, media_root=root)
    media = {sample_key(i): [files[n] for n in _names(r)] for i, r in enumerate(records)}
    return path, media


def _names(record: dict[str, Any]) -> list[str]:
    return [record["image"]] if isinstance(record["image"], str) else record["image"]


@pytest.mark.parametrize("light", [False, True])
def test_dataset_of_every_mode_packs_the_processors_pixels(
    light: bool, modes_dataset: Any, vlm_tokenizer_dir: Path
) -> None:
    path, media = modes_dataset
    processor = make_image_processor()
    enc = ConversationPackingTaskEncoder(
        vlm_tokenizer_dir, processor, pack_size=256, light_media=light
    )
    assert enc.light_media is light
    seen = []
    for pack in make_loader(path, enc, packing_buffer_size=4):
        expected = [reference(processor, media[k]) for k in pack.sample_keys]
        assert torch.equal(pack.pixel_values, torch.cat(expected)), pack.sample_keys
        seen += pack.sample_keys
    assert sorted(seen) == sorted(media)


def test_high_bit_depth_images_are_counted_by_key(
    modes_dataset: Any, vlm_tokenizer_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """16-bit, 32-bit and float images keep the processor's pixels (clipped: mostly white) but
    are counted, logged with key, mode and fix, and reported by ``analyze``."""
    path, media = modes_dataset
    enc = ConversationPackingTaskEncoder(vlm_tokenizer_dir, make_image_processor(), pack_size=256)
    with caplog.at_level("WARNING", logger="energon_pack.stats"):
        packs = list(make_loader(path, enc, packing_buffer_size=20))
    high = {"F", "I", "I;16"}
    names = sorted(MODES)
    expected = [(sample_key(names.index(m)), m) for m in sorted(high)]
    expected.append((sample_key(len(names)), "I;16"))  # the record of three images
    assert sum(p.counts.high_bit_depth_images for p in packs) == 4
    assert sorted(enc.stats.high_bit_depth_samples) == sorted(expected)
    warned = [r.getMessage() for r in caplog.records if "bits per value" in r.getMessage()]
    assert len(warned) == 1 and "convert the dataset's images to 8 bits" in warned[0]
    assert any(f"{k!r} has a {m} image" in warned[0] for k, m in expected)
    white = Image.open(io.BytesIO(media[sample_key(names.index("I;16"))][0])).convert("RGB")
    assert np.mean(np.asarray(white) == 255) > 0.99  # what the processor makes of it too

    from energon_pack_tools import analyze_dataset

    enc = ConversationPackingTaskEncoder(vlm_tokenizer_dir, make_image_processor(), pack_size=256)
    result = analyze_dataset(path, encoder=enc, buffer_size=20)
    assert result.high_bit_depth_images == 4
    assert sorted(result.high_bit_depth_samples) == sorted(expected)
    row = next(r for r in result.lines() if r.startswith("high bit depth"))
    assert "4 image(s) with more than 8 bits per value" in row and "to 8 bits" in row
