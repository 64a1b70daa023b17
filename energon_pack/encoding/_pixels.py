# SPDX-License-Identifier: Apache-2.0
"""Pixel rows of an image written in place, bit-identical to a Qwen2-VL-style processor.

Rescale and normalize are elementwise on uint8 values, so they are a 256-entry table per channel:
:class:`FastPixels` resizes with the processor's rule and filter (PIL) and looks the table up
straight into the patch layout of a caller's ``(rows, patch_dim)`` float32 tensor, without the
processor's intermediate arrays. It is checked against the processor on probe images at
construction and is ``None`` on any difference. Memory figures: docs/benchmarks/media-buffer.md.

    fast = FastPixels.for_processor(make_image_processor())
    resized = fast.resize(pil)                # (56, 56, 3) uint8
    out = torch.empty(fast.rows(resized), fast.patch_dim)
    fast.write(resized, out)                  # == processor(images=[pil])["pixel_values"]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from energon_pack.samples import empty_rows

__all__ = ["FastPixels", "PendingPixels", "to_rgb"]

#: Probe image sizes (width, height) the fast path must match the processor on, bit for bit.
PROBE_SIZES: tuple[tuple[int, int], ...] = ((64, 48), (37, 53), (211, 29), (5, 7), (300, 2000))


def to_rgb(image: Any) -> Any:
    """A PIL ``image`` in RGB by the processors' own rule, transformers' ``convert_to_rgb``:
    transparency (an alpha band, or a palette / colour-key ``transparency``) composited onto
    white; other modes through PIL's ``convert("RGB")`` (16-bit and float values clip to 255).
    An RGBA pixel ``(0, 0, 0, 0)`` becomes ``(255, 255, 255)``, not black."""
    from PIL import Image

    if image.mode == "RGB" and "transparency" not in image.info:
        return image
    from transformers.image_transforms import convert_to_rgb

    return Image.fromarray(convert_to_rgb(image, return_numpy=True))


class FastPixels:
    """A Qwen2-VL-style processor's pixel rows without its intermediate arrays.

    Build it with :meth:`for_processor` (None where it is not bit-identical to the processor).
    """

    def __init__(self, image_processor: Any, rule: Any) -> None:
        #: The processor this reproduces.
        self.image_processor = image_processor
        #: Its module's ``smart_resize(height, width, factor, min_pixels, max_pixels)``.
        self.rule = rule
        p = image_processor
        self.patch_size = int(p.patch_size)
        self.merge_size = int(p.merge_size)
        self.temporal_patch_size = int(p.temporal_patch_size)
        self.min_pixels = int(p.size["shortest_edge"])
        self.max_pixels = int(p.size["longest_edge"])
        self.resample = p.resample
        #: (3, 256) float32: the processor's rescale + normalize of each uint8 value.
        self.table = self._table()

    @property
    def patch_dim(self) -> int:
        """Floats per row: ``3 * temporal_patch_size * patch_size**2`` (1176)."""
        return 3 * self.temporal_patch_size * self.patch_size**2

    @classmethod
    def for_processor(cls, image_processor: Any) -> FastPixels | None:
        """The fast path of ``image_processor``, or None if it differs on the probe images."""
        module = sys.modules.get(type(image_processor).__module__)
        rule = getattr(module, "smart_resize", None)
        p = image_processor
        wanted = ("patchify", "rescale", "normalize", "resample", "merge_size", "size")
        if rule is None or not all(hasattr(p, a) for a in wanted):
            return None
        if not getattr(p, "do_resize", False) or getattr(p, "do_center_crop", False):
            return None
        try:
            fast = cls(image_processor, rule)
            return fast if fast._matches_processor() else None
        except Exception:
            return None

    def _table(self) -> np.ndarray:
        p = self.image_processor
        values = np.tile(np.arange(256, dtype=np.uint8), (3, 1))[:, None, :]  # (C, 1, 256)
        if getattr(p, "do_rescale", False):
            values = p.rescale(values, p.rescale_factor)
        if getattr(p, "do_normalize", False):
            values = p.normalize(values, p.image_mean, p.image_std)
        return np.ascontiguousarray(np.asarray(values, dtype=np.float32)[:, 0, :])

    def _matches_processor(self) -> bool:
        from PIL import Image

        rng = np.random.default_rng(0)
        for i, (w, h) in enumerate(PROBE_SIZES):  # the first one transparent (RGBA)
            pil = Image.fromarray(rng.integers(0, 256, (h, w, 4 if i == 0 else 3), dtype=np.uint8))
            expected = self.image_processor(images=[pil], return_tensors="pt")
            resized = self.resize(pil)
            out = torch.empty(self.rows(resized), self.patch_dim)
            self.write(resized, out)
            grid = torch.as_tensor(expected["image_grid_thw"]).view(-1, 3)
            if not torch.equal(torch.as_tensor(expected["pixel_values"]), out):
                return False
            if grid.tolist() != [list(self.grid(resized))]:
                return False
        return True

    def resize(self, image: Any) -> np.ndarray:
        """The PIL ``image`` in RGB (:func:`to_rgb`) resized by the processor's rule:
        ``(H, W, 3)`` uint8."""
        width, height = image.size
        factor = self.patch_size * self.merge_size
        rh, rw = self.rule(
            height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return np.asarray(to_rgb(image).resize((rw, rh), resample=self.resample))

    def grid(self, resized: np.ndarray) -> tuple[int, int, int]:
        """``(1, h, w)`` patch grid of a resized image."""
        return 1, resized.shape[0] // self.patch_size, resized.shape[1] // self.patch_size

    def rows(self, resized: np.ndarray) -> int:
        """Pixel rows of a resized image: ``h * w`` of its grid."""
        _, gh, gw = self.grid(resized)
        return gh * gw

    def write(self, resized: np.ndarray, out: torch.Tensor) -> None:
        """Write the rows of ``resized`` into ``out`` (``(rows, patch_dim)`` float32, contiguous).

        Row layout as the processor's ``patchify``: ``(h/m, w/m, m, m)`` patches, each
        ``(C, T, p, p)`` with the image repeated ``T`` times. ``out`` is only written, one band
        of ``m * p`` pixel rows (one row of merged patches) at a time.
        """
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        _, gh, gw = self.grid(resized)
        if not out.is_contiguous() or out.dtype != torch.float32:
            raise ValueError("FastPixels.write needs a contiguous float32 tensor")
        band = m * p
        index = np.empty((band, resized.shape[1]), dtype=np.intp)
        planes = np.empty((3, band, resized.shape[1]), dtype=np.float32)
        # (C, m*p, W) -> (1, w/m, m, m, C, p, p), the processor's patchify order
        patches = planes.reshape(3, 1, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
        dst = out.numpy().reshape(gh // m, gw // m, m, m, 3, t, p, p)
        for b in range(gh // m):
            pixels = resized[b * band : (b + 1) * band]
            for c in range(3):  # contiguous take: a strided ``out`` is buffered (read + write)
                np.copyto(index, pixels[:, :, c])
                np.take(self.table[c], index, out=planes[c], mode="clip")
            for k in range(t):
                dst[b : b + 1, :, :, :, :, k] = patches

    def process(self, images: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pixel_values, image_grid_thw)`` of PIL images, as the processor returns them."""
        pending = PendingPixels(self, [self.resize(im) for im in images])
        return pending.tensor(), pending.grid_thw


class PendingPixels:
    """Pixel rows not written yet: resized images and the :class:`FastPixels` that writes them.

    A light document's ``pixel_values`` after materialize: the pack writes the rows straight
    into its own array (``concat_rows``), with no per-document tensor. ``shape`` and ``dtype``
    are those of the rows: ``(sum of h * w, patch_dim)`` float32.
    """

    def __init__(self, fast: FastPixels, resized: list[np.ndarray]) -> None:
        #: Writes the rows.
        self.fast = fast
        #: The resized ``(H, W, 3)`` uint8 images, in order.
        self.resized = resized
        self.shape = torch.Size((sum(fast.rows(r) for r in resized), fast.patch_dim))
        self.dtype = torch.float32

    @property
    def grid_thw(self) -> torch.Tensor:
        """``(images, 3)`` int64 patch grids."""
        return torch.tensor([self.fast.grid(r) for r in self.resized], dtype=torch.int64).view(
            -1, 3
        )

    def write_into(self, out: torch.Tensor) -> None:
        """Write all rows into ``out`` (``shape``, float32, contiguous)."""
        start = 0
        for r in self.resized:
            end = start + self.fast.rows(r)
            self.fast.write(r, out[start:end])
            start = end

    def tensor(self) -> torch.Tensor:
        """The rows as a new tensor (in NumPy-allocated memory, as a pack's: ``empty_rows``)."""
        out = empty_rows(tuple(self.shape), self.dtype)
        self.write_into(out)
        return out
