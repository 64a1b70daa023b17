# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what light media's header check (``check_image_data``) costs per image, next to
the header read it guards and the PIL decode that ``materialize`` does anyway.

Images are smooth gradients with noise (they compress like photos), PNG and JPEG quality 90,
at 0.3 and 1 MP. Each cell is the best of ``--repeats`` timings of ``--n`` calls (the machine is
shared: the minimum is the least disturbed). Run::

    python tests/benchmarks/image_data_check.py [--n 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from energon_pack.encoding._image_data import check_image_data
from energon_pack.encoding._light_media import header_size


def _image(width: int, height: int, fmt: str) -> bytes:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], -1)
    pixels = np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _best_ms(call: Callable[[], object], n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| image | bytes | header read ms | check ms | PIL decode ms | check / decode |")
    print("|---|---:|---:|---:|---:|---:|")
    for fmt in ("PNG", "JPEG"):
        for width, height in ((640, 480), (1280, 800)):
            data = _image(width, height, fmt)
            header = _best_ms(lambda d=data: header_size(d), args.n, args.repeats)
            check = _best_ms(lambda d=data: check_image_data(d, key="k"), args.n, args.repeats)
            decode = _best_ms(lambda d=data: Image.open(io.BytesIO(d)).load(), args.n, args.repeats)
            print(
                f"| {fmt} {width}x{height} | {len(data)} | {header:.3f} | {check:.3f} | "
                f"{decode:.2f} | {check / decode:.0%} |"
            )


if __name__ == "__main__":
    main()
