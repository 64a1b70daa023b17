# SPDX-License-Identifier: Apache-2.0
"""Does an encoded image hold the data its header promises? Light media buffers plan tokens from
the header size; a header that lies (a PNG whose IHDR says 64x64 with 8 rows of data, a JPEG
whose SOF says 4000x3000 around a 16x16 payload) decodes without an error in PIL (the missing
rows are filled), so it is checked before it is planned, and refused naming the sample.

- PNG: the image data is inflated (streamed, counted, not kept) and must hold every row the
  header implies: ``height * (1 + ceil(width * channels * bits / 8))`` bytes (Adam7: per pass).
  Example: IHDR 64x64 RGB 8-bit needs 64 * 193 = 12352 bytes; 8 rows give 1544.
- Baseline / extended JPEG (SOF0, SOF1): each 8x8 block takes at least 2 bits (a DC code and an
  end-of-block code), so the entropy-coded data must be at least ``blocks / 4`` bytes.
  Example: SOF 4000x3000, 4:2:0: 281250 blocks need >= 70313 bytes; a 16x16 payload has ~300.
  Progressive and arithmetic-coded JPEGs have no such bound and are not checked.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

__all__ = ["check_image_data"]

#: PNG channels per colour type (grey, RGB, palette, grey+alpha, RGBA).
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
#: Adam7 passes: (x0, y0, dx, dy).
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)
#: Inflated bytes held at once while counting.
_CHUNK = 1 << 20


def check_image_data(item: Any, *, key: str) -> None:
    """Raise ValueError naming ``key`` when encoded image bytes hold less data than their header
    promises (PNG, baseline JPEG); other items and formats pass."""
    if not isinstance(item, (bytes, bytearray, memoryview)):
        return
    data = bytes(item)
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        problem = _png_problem(data)
    elif data.startswith(b"\xff\xd8"):
        problem = _jpeg_problem(data)
    else:
        problem = None
    if problem:
        raise ValueError(
            f"sample {key!r}: {problem} (a truncated file or a header that does not match its "
            "data); light media buffers would plan tokens for a size the image does not have. "
            "Re-encode or remove this image from the dataset."
        )


def _png_problem(data: bytes) -> str | None:
    header, idat = None, []
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR" and len(body) == 13:
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        return "the PNG has no IHDR header"
    width, height, bits, colour, _, _, interlace = header
    bits_per_pixel = bits * _PNG_CHANNELS.get(colour, 1)
    if interlace:
        passes = [
            (math.ceil((width - x0) / dx), math.ceil((height - y0) / dy))
            for x0, y0, dx, dy in _ADAM7
            if width > x0 and height > y0
        ]
    else:
        passes = [(width, height)]
    needed = sum(h * (1 + math.ceil(w * bits_per_pixel / 8)) for w, h in passes)
    held = _inflated_size(idat, needed)
    if held >= needed:
        return None
    row = 1 + math.ceil(width * bits_per_pixel / 8)
    rows = f"{held // row} of {height} rows" if not interlace else f"{held} of {needed} bytes"
    return f"the PNG header says {width}x{height}, but its image data holds {rows}"


def _inflated_size(chunks: list[bytes], needed: int) -> int:
    """Bytes the zlib stream in ``chunks`` inflates to, counted up to ``needed``."""
    inflate = zlib.decompressobj()
    held = 0
    try:
        for chunk in chunks:
            out = inflate.decompress(chunk, _CHUNK)
            held += len(out)
            while inflate.unconsumed_tail and held < needed:
                out = inflate.decompress(inflate.unconsumed_tail, _CHUNK)
                held += len(out)
            if held >= needed:
                break
    except zlib.error:
        pass  # a broken stream holds what it inflated so far
    return held


def _jpeg_problem(data: bytes) -> str | None:
    pos, frame = 2, None
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None  # not a marker where one should be: leave it to the decoder
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in (0xC0, 0xC1):
            frame = data[pos + 4 : pos + 2 + length]
        elif 0xC2 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return None  # progressive, lossless or arithmetic: no cheap bound
        elif marker == 0xDA:  # start of scan: the entropy-coded data follows its header
            if frame is None or len(frame) < 6:
                return None
            return _jpeg_size_problem(frame, len(data) - (pos + 2 + length))
        pos += 2 + length
    return None


def _jpeg_size_problem(frame: bytes, coded: int) -> str | None:
    _, height, width, count = struct.unpack(">BHHB", frame[:6])
    factors = [(frame[7 + 3 * i] >> 4, frame[7 + 3 * i] & 15) for i in range(count)]
    if not factors or width == 0 or height == 0 or any(h == 0 or v == 0 for h, v in factors):
        return None
    if count == 1:
        blocks = math.ceil(width / 8) * math.ceil(height / 8)
    else:
        hmax, vmax = max(h for h, _ in factors), max(v for _, v in factors)
        mcus = math.ceil(width / (8 * hmax)) * math.ceil(height / (8 * vmax))
        blocks = mcus * sum(h * v for h, v in factors)
    least = math.ceil(blocks / 4)
    if coded >= least:
        return None
    return (
        f"the JPEG header says {width}x{height} ({blocks} blocks, at least {least} bytes of "
        f"image data), but the file holds {coded} bytes of image data"
    )
