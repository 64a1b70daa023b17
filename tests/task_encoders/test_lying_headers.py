# SPDX-License-Identifier: Apache-2.0
"""Light media buffers plan from headers but never trust one alone: a real PNG whose IHDR says
64x64 over 8 rows of data, and a real JPEG whose SOF says 4000x3000 around a 16x16 payload, are
refused by key and counted as skipped, at 0 and 2 workers; good images still pack."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from energon_pack.encoding._image_data import check_image_data
from energon_pack.samples import PackingCounts
from energon_pack.task_encoders import CaptioningPackingTaskEncoder
from energon_pack.training import make_loader
from energon_pack_tools import make_captioning_dataset, random_png_bytes, synthetic_texts

LYING = {"000002": "PNG header says 64x64", "000005": "JPEG header says 4000x3000"}


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def lying_png(width: int = 64, height: int = 64, rows: int = 8) -> bytes:
    """A well-formed PNG (valid CRCs, a complete zlib stream, IEND) with ``rows`` rows of data
    under an IHDR of ``width x height``: PIL decodes it without an error."""
    raw = b"".join(
        b"\x00" + bytes((x * 7 + y) % 256 for x in range(width * 3)) for y in range(rows)
    )
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )


def lying_jpeg(width: int = 4000, height: int = 3000) -> bytes:
    """A 16x16 baseline JPEG whose SOF0 is rewritten to say ``width x height``."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    pos = 2
    while data[pos + 1] != 0xC0:
        pos += 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
    data[pos + 5 : pos + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def good_jpeg(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (20, 90, 200)).save(buf, format="JPEG")
    return buf.getvalue()


def test_pil_decodes_the_lying_files_at_their_header_size() -> None:
    """What makes them dangerous: no error, the header's size, the missing data made up."""
    for data, size in ((lying_png(), (64, 64)), (lying_jpeg(), (4000, 3000))):
        image = Image.open(io.BytesIO(data))
        image.load()
        assert image.size == size


def test_the_check_refuses_lying_headers_and_passes_good_images() -> None:
    with pytest.raises(ValueError, match=r"sample 'p': the PNG header says 64x64, but its image "
                       r"data holds 8 of 64 rows"):  # fmt: skip
        check_image_data(lying_png(), key="p")
    with pytest.raises(ValueError, match=r"sample 'j': the JPEG header says 4000x3000"):
        check_image_data(lying_jpeg(), key="j")
    with pytest.raises(ValueError, match="holds 47 of 48 rows"):  # a truncated PNG
        check_image_data(random_png_bytes(64, 48)[:-60], key="t")
    interlaced = io.BytesIO()
    Image.new("L", (33, 17), 7).save(interlaced, format="PNG", interlace=1)
    for good in (random_png_bytes(64, 48), good_jpeg(30, 70), good_jpeg(4000, 3000),
                 lying_png(rows=64), interlaced.getvalue()):  # fmt: skip
        check_image_data(good, key="good")


@pytest.fixture(scope="module")
def lying_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images = [random_png_bytes(20 + 9 * i, 30 + 5 * i, seed=i) for i in range(8)]
    images[2], images[5] = lying_png(), lying_jpeg()
    captions = synthetic_texts(8, seed=4, min_words=2, max_words=8)
    return make_captioning_dataset(tmp_path_factory.mktemp("lying"), images, captions)


def _run(path: Path, tokenizer_dir: Any, image_processor: Any, num_workers: int) -> dict:
    encoder = CaptioningPackingTaskEncoder(
        tokenizer_dir, image_processor, pack_size=48, light_media=True
    )
    assert encoder.light_media
    packs = list(make_loader(path, encoder, packing_buffer_size=8, num_workers=num_workers))
    counts = PackingCounts.total(p.counts for p in packs)
    keys = sorted(k for p in packs for k in p.__key__.split(","))
    skipped = dict(encoder.stats.skipped_samples) if num_workers == 0 else {}
    return {"samples": counts.samples, "skipped": counts.skipped, "keys": keys, "why": skipped}


def _check(result: dict) -> None:
    assert result["skipped"] == 2 and result["samples"] == 8, result  # read 8, skipped 2
    assert result["keys"] == [f"{i:06d}" for i in range(8) if f"{i:06d}" not in LYING]


def test_lying_headers_are_skipped_and_counted_at_0_workers(
    lying_dataset: Path, tokenizer_dir: Path, image_processor: Any
) -> None:
    result = _run(lying_dataset, tokenizer_dir, image_processor, num_workers=0)
    _check(result)
    for key, said in LYING.items():
        assert said in result["why"][key]


@pytest.mark.slow  # a 2-worker loader, in a subprocess
def test_lying_headers_are_skipped_and_counted_at_2_workers(
    lying_dataset: Path, tokenizer_dir: Path
) -> None:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from test_lying_headers import _run; from energon_pack_tools import make_image_processor;"
        "print(json.dumps(_run(sys.argv[2], sys.argv[3], make_image_processor(), 2)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(lying_dataset),
         str(tokenizer_dir)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    _check(json.loads(out.stdout.strip().splitlines()[-1]))
